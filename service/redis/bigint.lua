-- bigint.lua - exact integers for the Redis store's scripts: values that are Lua numbers or big
-- integers, and the arithmetic on them. The build puts it in front of lib.lua (the Makefile's
-- rld_lua_lib), so lib.lua and the rule types' ports see its locals and functions.
--
-- Redis runs Lua 5.1, whose numbers are doubles: exact only below 2^53, while the rules count
-- nanoseconds since 1970 (about 2^61) and multiply them by rates into 128-bit intermediates.
-- So a value here is either a Lua number, when its magnitude is below 2^53 (where every
-- operation below is exact: a sum, difference or product that would leave that range is
-- detected and redone in big integers), or a big integer: a table of limbs in base 10^7, least
-- significant first, sign in field s. Results are normalised: a table always holds a magnitude
-- of 2^53 or more, so the two never hold the same value. Values cross into and out of Redis as
-- decimal strings. Division truncates toward zero, as in C. Functions never modify their
-- arguments; tables are shared freely.

local floor = math.floor
local BASE = 10000000
local LIM = 9007199254740992 -- 2^53

-- ---- big integers (tables) ------------------------------------------------------------------
-- Made on first use: a script's top level runs on every call, and creating these closures costs
-- more than most decisions (which never meet a big integer).

local N, S, add, sub, mul, cmp, divmod, trunc
local BIG

local function make_big()
    -- ---- big integers (tables) ------------------------------------------------------------------

    -- A table for a number below 2^53 in magnitude.
    local function I(x)
        local t = {s = 1}
        if x < 0 then
            t.s = -1
            x = -x
        end
        local i = 0
        while x > 0 do
            local q = floor(x / BASE)
            local r = x - q * BASE
            if r < 0 then
                q, r = q - 1, r + BASE
            elseif r >= BASE then
                q, r = q + 1, r - BASE
            end
            i = i + 1
            t[i] = r
            x = q
        end
        return t
    end

    local function cmpmag(a, b)
        local na, nb = #a, #b
        if na ~= nb then return na < nb and -1 or 1 end
        for i = na, 1, -1 do
            local x, y = a[i], b[i]
            if x ~= y then return x < y and -1 or 1 end
        end
        return 0
    end

    local function addmag(a, b)
        local r = {s = 1}
        local na, nb = #a, #b
        local n = na > nb and na or nb
        local c = 0
        for i = 1, n do
            local v = (a[i] or 0) + (b[i] or 0) + c
            if v >= BASE then
                r[i] = v - BASE
                c = 1
            else
                r[i] = v
                c = 0
            end
        end
        if c > 0 then r[n + 1] = c end
        return r
    end

    -- |a| - |b| for |a| >= |b|.
    local function submag(a, b)
        local r = {s = 1}
        local n = #a
        local c = 0
        for i = 1, n do
            local v = a[i] - (b[i] or 0) - c
            if v < 0 then
                r[i] = v + BASE
                c = 1
            else
                r[i] = v
                c = 0
            end
        end
        while n > 0 and r[n] == 0 do
            r[n] = nil
            n = n - 1
        end
        return r
    end

    -- a + sb * b, sb being 1 or -1.
    local function baddsigned(a, b, sb)
        local bs = b.s * sb
        local r
        if a.s == bs then
            r = addmag(a, b)
            r.s = a.s
        elseif cmpmag(a, b) >= 0 then
            r = submag(a, b)
            r.s = a.s
        else
            r = submag(b, a)
            r.s = bs
        end
        if #r == 0 then r.s = 1 end
        return r
    end

    local function bmul(a, b)
        local na, nb = #a, #b
        local r = {s = 1}
        if na == 0 or nb == 0 then return r end
        for i = 1, na + nb do r[i] = 0 end
        for i = 1, na do
            local ai = a[i]
            if ai ~= 0 then
                local c = 0
                for j = 1, nb do
                    local v = r[i + j - 1] + ai * b[j] + c
                    c = floor(v / BASE)
                    r[i + j - 1] = v - c * BASE
                end
                local k = i + nb
                while c > 0 do
                    local v = r[k] + c
                    c = floor(v / BASE)
                    r[k] = v - c * BASE
                    k = k + 1
                end
            end
        end
        local n = na + nb
        while n > 0 and r[n] == 0 do
            r[n] = nil
            n = n - 1
        end
        if n > 0 then r.s = a.s * b.s end
        return r
    end

    local BONE = I(1)

    -- |a| / d for a divisor d below BASE: quotient magnitude and remainder (a number).
    local function divsmall(a, d)
        local q = {s = 1}
        local r = 0
        local n = #a
        for i = n, 1, -1 do
            local cur = r * BASE + a[i]
            local qi = floor(cur / d)
            q[i] = qi
            r = cur - qi * d
        end
        while n > 0 and q[n] == 0 do
            q[n] = nil
            n = n - 1
        end
        return q, r
    end

    local function todouble(a)
        local x = 0
        for i = #a, 1, -1 do x = x * BASE + a[i] end
        return x
    end

    local POW10 = {[0] = BONE}
    local function pow10(k)
        if not POW10[k] then POW10[k] = bmul(pow10(k - 1), I(10)) end
        return POW10[k]
    end

    -- A table no larger than x (x >= 0, whole), within a relative 1e-14 of it.
    local function fromdouble(x)
        local k = 0
        while x >= 1e15 do
            x = x / 10
            k = k + 1
        end
        local t = I(floor(x))
        if k > 0 then t = bmul(t, pow10(k)) end
        return t
    end

    -- |a| / |b| (b not zero): quotient and remainder magnitudes. Quotients are estimated from
    -- doubles a little low, so that the remainder never goes negative, and refined until exact.
    local function divmag(a, b)
        if cmpmag(a, b) < 0 then return {s = 1}, addmag(a, {}) end
        if #b == 1 then
            local q, r = divsmall(a, b[1])
            return q, I(r)
        end
        local q, r = {s = 1}, addmag(a, {})
        local db = todouble(b)
        while cmpmag(r, b) >= 0 do
            local est = floor(todouble(r) / db * (1 - 1e-12))
            local e, p
            while true do
                e = est >= 1 and fromdouble(est) or BONE
                p = bmul(e, b)
                p.s = 1
                if cmpmag(p, r) <= 0 then break end
                est = floor(est / 2)
            end
            q = addmag(q, e)
            r = submag(r, p)
        end
        return q, r
    end

    local BLIM = I(LIM)

    -- A table result as a number when it is below 2^53 in magnitude.
    local function norm(t)
        if #t <= 3 and cmpmag(t, BLIM) < 0 then
            local v = (t[1] or 0) + (t[2] or 0) * BASE + (t[3] or 0) * BASE * BASE
            return t.s < 0 and -v or v
        end
        return t
    end

    local function big(x)
        if type(x) == 'number' then return I(x) end
        return x
    end

    local function isneg_t(t) return t.s < 0 end

    -- Splits a number x (0 <= x < 2^53) into three limbs.
    local function limbs3(x)
        local x3 = floor(x / 100000000000000)
        local x2r = x - x3 * 100000000000000
        local x2 = floor(x2r / BASE)
        return x2r - x2 * BASE, x2, x3
    end

    -- A table of sign ts * t.s and magnitude |t| + sx * x, for a number 0 <= x < 2^53 (so at most
    -- |t|), with its limbs carried in place; normalised.
    local function addnum(t, ts, x, sx)
        local x1, x2, x3 = limbs3(x)
        local r = {s = ts * t.s}
        local n = #t
        local c = 0
        for i = 1, n do
            local xi = 0
            if i == 1 then
                xi = x1
            elseif i == 2 then
                xi = x2
            elseif i == 3 then
                xi = x3
            end
            local v = t[i] + sx * xi + c
            if v >= BASE then
                r[i], c = v - BASE, 1
            elseif v < 0 then
                r[i], c = v + BASE, -1
            else
                r[i], c = v, 0
            end
        end
        if c > 0 then
            n = n + 1
            r[n] = c
        end
        while n > 0 and r[n] == 0 do
            r[n] = nil
            n = n - 1
        end
        return norm(r)
    end

    -- The product of two numbers as a table (it is 2^53 or more in magnitude).
    local function mulnum(a, b)
        local a1, a2, a3 = limbs3(a < 0 and -a or a)
        local b1, b2, b3 = limbs3(b < 0 and -b or b)
        local p = {a1 * b1, a1 * b2 + a2 * b1, a1 * b3 + a2 * b2 + a3 * b1, a2 * b3 + a3 * b2, a3 * b3}
        local c = 0
        for i = 1, 5 do
            local v = p[i] + c
            c = floor(v / BASE)
            p[i] = v - c * BASE
        end
        local n = 5
        while c > 0 do
            n = n + 1
            local v = c
            c = floor(v / BASE)
            p[n] = v - c * BASE
        end
        while n > 0 and p[n] == 0 do
            p[n] = nil
            n = n - 1
        end
        p.s = (a < 0) ~= (b < 0) and -1 or 1
        return p
    end

    -- A value as a double (signed, inexact beyond 2^53).
    local function todouble_s(x)
        if type(x) == 'number' then return x end
        local v = todouble(x)
        return x.s < 0 and -v or v
    end

    -- ---- values (numbers or tables) -------------------------------------------------------------

    local function parse(str)
        local t = {s = 1}
        local first = 1
        if string.byte(str, 1) == 45 then -- '-'
            t.s = -1
            first = 2
        end
        local e, i = #str, 0
        while e >= first do
            local b = e - 6
            if b < first then b = first end
            i = i + 1
            t[i] = tonumber(string.sub(str, b, e))
            e = b - 1
        end
        while i > 0 and t[i] == 0 do
            t[i] = nil
            i = i - 1
        end
        if i == 0 then t.s = 1 end
        return norm(t)
    end

    local function str(a)
        local n = #a
        local out = {a.s < 0 and '-' or '', string.format('%d', a[n])}
        for i = n - 1, 1, -1 do out[#out + 1] = string.format('%07d', a[i]) end
        return table.concat(out)
    end

    -- A sum, difference or product of numbers is exact when it is below 2^53 in magnitude, and
    -- otherwise lands at or beyond 2^53 itself, so the range check tells which case it is.
    local function addsub(a, b, sb)
        local na, nb = type(a) == 'number', type(b) == 'number'
        if na and nb then
            local r = a + sb * b
            if r < LIM and r > -LIM then return r end
        elseif sb < 0 and not na and not nb and a.s == b.s and #a == #b and #a >= 3 then
            -- two close times: equal above their two lowest limbs, the difference is a number
            local same = true
            for i = #a, 3, -1 do
                if a[i] ~= b[i] then
                    same = false
                    break
                end
            end
            if same then return a.s * ((a[2] - b[2]) * BASE + (a[1] - b[1])) end
        elseif nb then -- table + sb * number
            local bs = b < 0 and -1 or 1
            return addnum(a, 1, b * bs, sb * bs * a.s)
        elseif na then -- number + sb * table = sb * table + number
            local as = a < 0 and -1 or 1
            return addnum(b, sb, a * as, as * sb * b.s)
        end
        return norm(baddsigned(big(a), big(b), sb))
    end

    local function bigmul(a, b)
        if type(a) == 'number' and type(b) == 'number' then return mulnum(a, b) end
        return norm(bmul(big(a), big(b)))
    end

    -- Two tables.
    local function bigcmp(a, b)
        if a.s ~= b.s then return a.s < b.s and -1 or 1 end
        local c = cmpmag(a, b)
        if a.s < 0 then return 0 - c end
        return c
    end

    -- A table no larger than x in magnitude (x whole), within a relative 1e-14 of it.
    local function approx(x)
        if x < LIM and x > -LIM then return x end
        local t = fromdouble(x < 0 and -x or x)
        if x < 0 then t.s = -1 end
        return t
    end

    -- |a| / d for a table a of at most 4 limbs and a number 0 < d < 2^50, when the quotient is
    -- below 2^52: quotient and remainder as numbers, or nil outside those bounds. The quotient is
    -- estimated in doubles (off by at most a few units), the remainder a - q * d is worked out
    -- exactly in limbs (every product and carry stays below 2^53), then both are corrected.
    local function divnum(a, d)
        if #a > 4 or d >= 1125899906842624 then return nil end
        local a1, a2, a3, a4 = a[1] or 0, a[2] or 0, a[3] or 0, a[4] or 0
        local q = floor(todouble(a) / d)
        if q >= 4503599627370496 then return nil end
        local q1, q2, q3 = limbs3(q)
        local d1, d2, d3 = limbs3(d)
        local r1 = a1 - q1 * d1
        local r2 = a2 - (q1 * d2 + q2 * d1)
        local r3 = a3 - (q1 * d3 + q2 * d2 + q3 * d1)
        local r4 = a4 - (q2 * d3 + q3 * d2)
        local r5 = 0 - q3 * d3
        local c = floor(r1 / BASE)
        r1, r2 = r1 - c * BASE, r2 + c
        c = floor(r2 / BASE)
        r2, r3 = r2 - c * BASE, r3 + c
        c = floor(r3 / BASE)
        r3, r4 = r3 - c * BASE, r4 + c
        c = floor(r4 / BASE)
        r4, r5 = r4 - c * BASE, r5 + c
        -- |a - q * d| < 5 d < 2^53, so Horner's rule from the top stays exact
        local r = r1 + BASE * (r2 + BASE * (r3 + BASE * (r4 + BASE * r5)))
        while r < 0 do
            r, q = r + d, q - 1
        end
        while r >= d do
            r, q = r - d, q + 1
        end
        return q, r
    end

    -- divmod (below) beyond numbers. A table divided by a number: quotients estimated in doubles
    -- are taken off until what is left is a number, and the rest is divided exactly.
    local function bigdivmod(a, b)
        if type(b) == 'number' then
            local neg = isneg_t(a)
            local d = b < 0 and -b or b
            local q, r = divnum(a, d)
            if not q then
                q, r = 0, neg and baddsigned({s = 1}, a, -1) or a -- |a|
            end
            while type(r) ~= 'number' do
                local e = approx(trunc(todouble_s(r) / d))
                q = add(q, e)
                r = sub(r, mul(e, d))
            end
            local q2 = trunc(r / d)
            q, r = add(q, q2), r - q2 * d
            if r < 0 then
                q, r = sub(q, 1), r + d
            end
            -- |a| = q * d + r with 0 <= r < d; now the signs, as C has them
            if (b < 0) ~= neg then q = sub(0, q) end
            if neg then r = -r end
            return q, r
        end
        local ta, tb = big(a), big(b)
        local q, r = divmag(ta, tb)
        if #q > 0 then q.s = ta.s * tb.s end
        if #r > 0 then r.s = ta.s end
        return norm(q), norm(r)
    end

    return {parse = parse, str = str, addsub = addsub, mul = bigmul, cmp = bigcmp,
        divmod = bigdivmod}
end

local function big_ops()
    if not BIG then BIG = make_big() end
    return BIG
end

-- ---- values (numbers or tables) -------------------------------------------------------------

function N(str)
    if #str <= 15 then return tonumber(str) end
    return big_ops().parse(str)
end

function S(a)
    if type(a) == 'number' then
        if a == 0 then return '0' end
        return string.format('%.0f', a)
    end
    return big_ops().str(a)
end

-- A sum, difference or product of numbers is exact when it is below 2^53 in magnitude, and
-- otherwise lands at or beyond 2^53 itself, so the range check tells which case it is.
function add(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local r = a + b
        if r < LIM and r > -LIM then return r end
    end
    return big_ops().addsub(a, b, 1)
end

function sub(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local r = a - b
        if r < LIM and r > -LIM then return r end
    end
    return big_ops().addsub(a, b, -1)
end

function mul(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local r = a * b
        if r < LIM and r > -LIM then return r end
    end
    return big_ops().mul(a, b)
end

function cmp(a, b)
    local na, nb = type(a) == 'number', type(b) == 'number'
    if na and nb then
        if a < b then return -1 end
        if a > b then return 1 end
        return 0
    end
    if na then return b.s > 0 and -1 or 1 end -- |b| >= 2^53 > |a|
    if nb then return a.s > 0 and 1 or -1 end
    return big_ops().cmp(a, b)
end

function trunc(x)
    if x >= 0 then return floor(x) end
    return -floor(-x)
end

-- C's a / b and a % b. For numbers the double quotient cannot cross an integer (its error is
-- below 1/|b| while a non-integer quotient is at least 1/|b| from one), so truncating it is exact.
function divmod(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local q = trunc(a / b)
        return q, a - q * b
    end
    return big_ops().divmod(a, b)
end

local function iszero(a) return a == 0 end
local function isneg(a)
    if type(a) == 'number' then return a < 0 end
    return a.s < 0
end
local function ispos(a)
    if type(a) == 'number' then return a > 0 end
    return a.s > 0
end
local function max(a, b) return cmp(a, b) > 0 and a or b end
local function min(a, b) return cmp(a, b) < 0 and a or b end
