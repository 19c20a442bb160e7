-- lib.lua - exact integers and the built-in rule types, shared by the scripts of the Redis store.
--
-- Redis runs Lua 5.1, whose numbers are doubles: exact only below 2^53, while the rules count
-- nanoseconds since 1970 (about 2^61) and multiply them by rates into 128-bit intermediates.
-- So a value here is either a Lua number, when its magnitude is below 2^53 (where every
-- operation below is exact: a sum, difference or product that would leave that range is
-- detected and redone in big integers), or a big integer: a table of limbs in base 10^7, least
-- significant first, sign in field s. Results are normalised: a table always holds a magnitude
-- of 2^53 or more, so the two never hold the same value. Values cross into and out of Redis as
-- decimal strings. Division truncates toward zero, as in C.
--
-- The rule functions below are ported line by line from service/core/rules/*.c and must stay in
-- step with them: a differential test replays random traces through both and compares.
-- Functions never modify their arguments; tables are shared freely.

local floor = math.floor
local BASE = 10000000
local LIM = 9007199254740992 -- 2^53

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

local function N(str)
    if #str <= 15 then return tonumber(str) end
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

local function S(a)
    if type(a) == 'number' then
        if a == 0 then return '0' end
        return string.format('%.0f', a)
    end
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

local function add(a, b) return addsub(a, b, 1) end
local function sub(a, b) return addsub(a, b, -1) end

local function mul(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local r = a * b
        if r < LIM and r > -LIM then return r end
        return mulnum(a, b)
    end
    return norm(bmul(big(a), big(b)))
end

local function cmp(a, b)
    local na, nb = type(a) == 'number', type(b) == 'number'
    if na and nb then
        if a < b then return -1 end
        if a > b then return 1 end
        return 0
    end
    if na then return b.s > 0 and -1 or 1 end -- |b| >= 2^53 > |a|
    if nb then return a.s > 0 and 1 or -1 end
    if a.s ~= b.s then return a.s < b.s and -1 or 1 end
    local c = cmpmag(a, b)
    if a.s < 0 then return 0 - c end
    return c
end

local function trunc(x)
    if x >= 0 then return floor(x) end
    return -floor(-x)
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

-- C's a / b and a % b. For numbers the double quotient cannot cross an integer (its error is
-- below 1/|b| while a non-integer quotient is at least 1/|b| from one), so truncating it is exact.
-- A table divided by a number: quotients estimated in doubles are taken off until what is left
-- is a number, and the rest is divided exactly.
local divmod
function divmod(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local q = trunc(a / b)
        return q, a - q * b
    end
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

local NS = 1000000000
local MS = 1000000
local ONE = 1000000 -- RL_FP_ONE
local NEVER = N('9223372036854775807')
local USED_MAX = N('4000000000000000000')

-- rl__ceil_div: ceil(a / b) saturated at NEVER; a >= 0, b > 0.
local function ceil_div(a, b)
    local q, r = divmod(a, b)
    if r ~= 0 then q = add(q, 1) end
    if type(q) ~= 'number' and cmp(q, NEVER) >= 0 then return NEVER end
    return q
end

local NEVER_SAFE = sub(NEVER, LIM)
local USED_SAFE = sub(USED_MAX, LIM)

-- rl__add_sat: a + b saturated at NEVER, b >= 0. Adding a number to anything up to NEVER - 2^53
-- cannot reach it.
local function add_sat(a, b)
    if type(b) == 'number' and (type(a) == 'number' or cmp(a, NEVER_SAFE) <= 0) then
        return add(a, b)
    end
    if cmp(a, sub(NEVER, b)) > 0 then return NEVER end
    return add(a, b)
end

-- rl__used_add: used + a saturated at USED_MAX, likewise.
local function used_add(used, a)
    if type(a) == 'number' and (type(used) == 'number' or cmp(used, USED_SAFE) <= 0) then
        return add(used, a)
    end
    if cmp(used, sub(USED_MAX, a)) > 0 then return USED_MAX end
    return add(used, a)
end

-- The current time: the caller's when given (manual clock), else Redis's own.
local function clock(arg)
    if arg ~= '' then return N(arg) end
    local t = redis.call('TIME')
    return add(mul(N(t[1]), NS), mul(N(t[2]), 1000))
end

-- t - t % window (t >= 0), remembered per time value: the same now and last recur.
local STARTS = {}
local function start_of(p, t)
    local c = STARTS[t]
    if c and c[1] == p.window then return c[2] end
    local _, r = divmod(t, p.window)
    local v = sub(t, r)
    if type(t) == 'table' then STARTS[t] = {p.window, v} end
    return v
end

-- ---- rule types -----------------------------------------------------------------------------
-- Each type: params(p1, p2) -> table; zero() -> a new key's state; load(words) -> state from
-- the words after the type tag; dump(state) -> string; wait, take, refund, release, idle_at,
-- status as in C (status returns limit, remaining, reset_after, window). A type is defined on
-- first use (R.tb, ...), since a script's top level runs on every call.

local function split(raw)
    local w = {}
    for x in string.gmatch(raw, '%S+') do w[#w + 1] = x end
    return w
end

local DEF = {}

-- token_bucket {capacity, per_second}: state used, last, frac
function DEF.tb()
    local T = {refundable = true}
    function T.params(a, b) return {cap = a, rate = b} end
    function T.zero() return {used = 0, last = 0, frac = 0} end
    function T.load(w) return {used = N(w[2]), last = N(w[3]), frac = N(w[4])} end
    function T.dump(s) return 'tb ' .. S(s.used) .. ' ' .. S(s.last) .. ' ' .. S(s.frac) end
    local function copy(s) return {used = s.used, last = s.last, frac = s.frac} end
    local function refill(p, s, now)
        if cmp(now, s.last) <= 0 then return end
        if ispos(s.used) then
            local num = add(mul(sub(now, s.last), p.rate), s.frac)
            local gain, rem = divmod(num, NS)
            if cmp(gain, s.used) >= 0 then
                s.used = 0
                s.frac = 0
            else
                s.used = sub(s.used, gain)
                s.frac = rem
            end
        else
            s.frac = 0
        end
        s.last = now
    end
    local function time_to(p, s, target)
        if cmp(s.used, target) <= 0 then return 0 end
        local need = sub(mul(sub(s.used, target), NS), s.frac)
        return ceil_div(need, p.rate)
    end
    function T.wait(p, st, now, cost)
        if cmp(cost, p.cap) > 0 then return NEVER end
        local s = copy(st)
        refill(p, s, now)
        local dt = time_to(p, s, sub(p.cap, cost))
        if iszero(dt) then return 0 end
        return add_sat(sub(s.last, now), dt)
    end
    function T.take(p, s, now, cost)
        refill(p, s, now)
        s.used = used_add(s.used, cost)
    end
    function T.refund(p, s, now, taken_at, amount)
        refill(p, s, now)
        if isneg(amount) then
            s.used = used_add(s.used, sub(0, amount))
        elseif cmp(amount, s.used) >= 0 then
            s.used = 0
            s.frac = 0
        else
            s.used = sub(s.used, amount)
        end
    end
    function T.idle_at(p, s)
        if iszero(s.used) then return 0 end
        return add_sat(s.last, time_to(p, s, 0))
    end
    function T.status(p, st, now)
        local s = copy(st)
        refill(p, s, now)
        local full = time_to(p, s, 0)
        local reset = 0
        if not iszero(full) then reset = add_sat(sub(s.last, now), full) end
        return p.cap, sub(p.cap, s.used), reset, ceil_div(mul(p.cap, NS), p.rate)
    end
    return T
end

-- gcra {per_second, burst}: state tat, rem, last
function DEF.gcra()
    local T = {refundable = true}
    function T.params(a, b) return {rate = a, burst = b} end
    function T.zero() return {tat = 0, rem = 0, last = 0} end
    function T.load(w) return {tat = N(w[2]), rem = N(w[3]), last = N(w[4])} end
    function T.dump(s) return 'gcra ' .. S(s.tat) .. ' ' .. S(s.rem) .. ' ' .. S(s.last) end
    local function ahead(p, s, t)
        local c = cmp(s.tat, t)
        if c < 0 or (c == 0 and iszero(s.rem)) then return 0 end
        return add(mul(sub(s.tat, t), p.rate), s.rem)
    end
    local function set_ahead(p, s, t, scaled)
        local q, r = divmod(scaled, p.rate)
        s.rem = r
        if cmp(q, sub(NEVER, t)) >= 0 then
            s.tat = NEVER
        else
            s.tat = add(t, q)
        end
    end
    local function scaled(amount) return mul(amount, NS) end
    function T.wait(p, s, now, cost)
        if cmp(cost, p.burst) > 0 then return NEVER end
        local t = max(now, s.last)
        local d, b = add(ahead(p, s, t), scaled(cost)), scaled(p.burst)
        if cmp(d, b) <= 0 then return 0 end
        return add_sat(sub(t, now), ceil_div(sub(d, b), p.rate))
    end
    function T.take(p, s, now, cost)
        local t = max(now, s.last)
        set_ahead(p, s, t, add(ahead(p, s, t), scaled(cost)))
        s.last = t
    end
    function T.refund(p, s, now, taken_at, amount)
        local t = max(now, s.last)
        local a = ahead(p, s, t)
        if isneg(amount) then
            a = add(a, scaled(sub(0, amount)))
        elseif cmp(a, scaled(amount)) > 0 then
            a = sub(a, scaled(amount))
        else
            a = 0
        end
        set_ahead(p, s, t, a)
        s.last = t
    end
    function T.idle_at(p, s)
        if not iszero(s.rem) then return add_sat(s.tat, 1) end
        return s.tat
    end
    function T.status(p, s, now)
        local t = max(now, s.last)
        local a = ahead(p, s, t)
        local used, r = divmod(a, NS)
        if r ~= 0 then used = add(used, 1) end
        local remaining
        if cmp(used, USED_MAX) >= 0 then
            remaining = sub(p.burst, USED_MAX)
        else
            remaining = sub(p.burst, used)
        end
        local reset = 0
        if not iszero(a) then reset = add_sat(sub(t, now), ceil_div(a, p.rate)) end
        return p.burst, remaining, reset, ceil_div(scaled(p.burst), p.rate)
    end
    return T
end

-- fixed_window {limit, window}: state last, count
function DEF.fw()
    local T = {refundable = true}
    function T.params(a, b) return {limit = a, window = b} end
    function T.zero() return {last = 0, count = 0} end
    function T.load(w) return {last = N(w[2]), count = N(w[3])} end
    function T.dump(s) return 'fw ' .. S(s.last) .. ' ' .. S(s.count) end
    local function count_at(p, s, t)
        if cmp(start_of(p, t), start_of(p, s.last)) == 0 then return s.count end
        return 0
    end
    function T.wait(p, s, now, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        local t = max(now, s.last)
        if cmp(count_at(p, s, t), sub(p.limit, cost)) <= 0 then return 0 end
        return add_sat(sub(start_of(p, t), now), p.window)
    end
    function T.take(p, s, now, cost)
        local t = max(now, s.last)
        s.count = used_add(count_at(p, s, t), cost)
        s.last = t
    end
    function T.refund(p, s, now, taken_at, amount)
        local t = max(now, s.last)
        s.count = count_at(p, s, t)
        s.last = t
        if isneg(amount) then
            s.count = used_add(s.count, sub(0, amount))
        elseif cmp(start_of(p, taken_at), start_of(p, t)) == 0 then
            if cmp(amount, s.count) >= 0 then
                s.count = 0
            else
                s.count = sub(s.count, amount)
            end
        end
    end
    function T.idle_at(p, s)
        if iszero(s.count) then return 0 end
        return add_sat(start_of(p, s.last), p.window)
    end
    function T.status(p, s, now)
        local t = max(now, s.last)
        local c = count_at(p, s, t)
        local reset = 0
        if not iszero(c) then reset = add_sat(sub(start_of(p, t), now), p.window) end
        return p.limit, sub(p.limit, c), reset, p.window
    end
    return T
end

-- sliding_window {limit, window}: state sum, last, then the log as pairs ts, cost (oldest first)
function DEF.sw()
    local T = {refundable = true}
    function T.params(a, b) return {limit = a, window = b} end
    function T.zero() return {sum = 0, last = 0, ts = {}, c = {}} end
    function T.load(w)
        local s = {sum = N(w[2]), last = N(w[3]), ts = {}, c = {}}
        for i = 4, #w - 1, 2 do
            s.ts[#s.ts + 1] = N(w[i])
            s.c[#s.c + 1] = N(w[i + 1])
        end
        return s
    end
    function T.dump(s)
        local out = {'sw', S(s.sum), S(s.last)}
        for i = 1, #s.ts do
            out[#out + 1] = S(s.ts[i])
            out[#out + 1] = S(s.c[i])
        end
        return table.concat(out, ' ')
    end
    function T.wait(p, s, now, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        local t = max(now, s.last)
        local live, room = s.sum, sub(p.limit, cost)
        local edge = sub(t, p.window)
        local i, n = 1, #s.ts
        while i <= n and cmp(s.ts[i], edge) <= 0 do
            live = sub(live, s.c[i])
            i = i + 1
        end
        if cmp(live, room) <= 0 then return 0 end
        while i <= n do
            live = sub(live, s.c[i])
            if cmp(live, room) <= 0 then return add_sat(sub(s.ts[i], now), p.window) end
            i = i + 1
        end
        return NEVER
    end
    local function expire(p, s, t)
        local edge = sub(t, p.window)
        local k = 0
        while k < #s.ts and cmp(s.ts[k + 1], edge) <= 0 do
            s.sum = sub(s.sum, s.c[k + 1])
            k = k + 1
        end
        if k > 0 then
            local ts, c = {}, {}
            for i = k + 1, #s.ts do
                ts[#ts + 1] = s.ts[i]
                c[#c + 1] = s.c[i]
            end
            s.ts, s.c = ts, c
        end
    end
    local function append(s, t, amount)
        local n = #s.ts
        if n > 0 and cmp(s.ts[n], t) == 0 then
            s.c[n] = used_add(s.c[n], amount)
        else
            s.ts[n + 1] = t
            s.c[n + 1] = amount
        end
        s.sum = used_add(s.sum, amount)
    end
    function T.take(p, s, now, cost)
        local t = max(now, s.last)
        expire(p, s, t)
        append(s, t, cost)
        s.last = t
    end
    function T.refund(p, s, now, taken_at, amount)
        local t = max(now, s.last)
        expire(p, s, t)
        s.last = t
        if isneg(amount) then
            append(s, t, sub(0, amount))
            return
        end
        for i = #s.ts, 1, -1 do
            local c = cmp(s.ts[i], taken_at)
            if c < 0 then break end
            if c == 0 then
                local back = min(amount, s.c[i])
                s.c[i] = sub(s.c[i], back)
                s.sum = sub(s.sum, back)
                break
            end
        end
    end
    function T.idle_at(p, s)
        if #s.ts == 0 then return 0 end
        return add_sat(s.last, p.window)
    end
    function T.status(p, s, now)
        local t = max(now, s.last)
        local live = s.sum
        local edge = sub(t, p.window)
        local i = 1
        while i <= #s.ts and cmp(s.ts[i], edge) <= 0 do
            live = sub(live, s.c[i])
            i = i + 1
        end
        local reset = 0
        if ispos(live) then reset = add_sat(sub(s.last, now), p.window) end
        return p.limit, sub(p.limit, live), reset, p.window
    end
    return T
end

-- sliding_window_counter {limit, window}: state last, cur, prev
function DEF.swc()
    local T = {refundable = true}
    function T.params(a, b) return {limit = a, window = b} end
    function T.zero() return {last = 0, cur = 0, prev = 0} end
    function T.load(w) return {last = N(w[2]), cur = N(w[3]), prev = N(w[4])} end
    function T.dump(s) return 'swc ' .. S(s.last) .. ' ' .. S(s.cur) .. ' ' .. S(s.prev) end
    local function copy(s) return {last = s.last, cur = s.cur, prev = s.prev} end
    local function roll(p, s, t)
        local ws, ls = start_of(p, t), start_of(p, s.last)
        if cmp(ws, ls) == 0 then return end
        if cmp(sub(ws, ls), p.window) == 0 then
            s.prev = s.cur
        else
            s.prev = 0
        end
        s.cur = 0
    end
    local function fits(p, s, t, cost)
        local w = p.window
        local e = sub(t, start_of(p, t))
        local lhs = add(mul(s.prev, sub(w, e)), mul(add(s.cur, cost), w))
        return cmp(lhs, mul(p.limit, w)) <= 0
    end
    local function first_fit(p, prev, cur, cost)
        if cmp(cur, sub(p.limit, cost)) > 0 then return p.window end
        if iszero(prev) then return 0 end
        local room = mul(sub(sub(p.limit, cost), cur), p.window)
        local k = divmod(room, prev)
        if cmp(k, p.window) >= 0 then return 0 end
        return sub(p.window, k)
    end
    function T.wait(p, st, now, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        local s = copy(st)
        local t = max(now, s.last)
        roll(p, s, t)
        if fits(p, s, t, cost) then return 0 end
        local ws = start_of(p, t)
        local e = first_fit(p, s.prev, s.cur, cost)
        if cmp(e, p.window) < 0 then return add_sat(sub(ws, now), e) end
        e = first_fit(p, s.cur, 0, cost)
        return add_sat(add_sat(sub(ws, now), p.window), e)
    end
    function T.take(p, s, now, cost)
        local t = max(now, s.last)
        roll(p, s, t)
        s.cur = used_add(s.cur, cost)
        s.last = t
    end
    function T.refund(p, s, now, taken_at, amount)
        local t = max(now, s.last)
        roll(p, s, t)
        s.last = t
        if isneg(amount) then
            s.cur = used_add(s.cur, sub(0, amount))
            return
        end
        local ws, ts = start_of(p, t), start_of(p, taken_at)
        local field
        if cmp(ts, ws) == 0 then
            field = 'cur'
        elseif cmp(ts, sub(ws, p.window)) == 0 then
            field = 'prev'
        end
        if field then
            if cmp(amount, s[field]) >= 0 then
                s[field] = 0
            else
                s[field] = sub(s[field], amount)
            end
        end
    end
    function T.idle_at(p, s)
        local ls = start_of(p, s.last)
        if not iszero(s.cur) then return add_sat(ls, mul(2, p.window)) end
        if not iszero(s.prev) then return add_sat(ls, p.window) end
        return 0
    end
    function T.status(p, st, now)
        local s = copy(st)
        local t = max(now, s.last)
        roll(p, s, t)
        local w = p.window
        local e = sub(t, start_of(p, t))
        local weighted = mul(s.prev, sub(w, e))
        local q, r = divmod(weighted, w)
        if r ~= 0 then q = add(q, 1) end
        local est = add(s.cur, q)
        local ws = start_of(p, t)
        local reset = 0
        if not iszero(s.cur) then
            reset = sub(add(ws, mul(2, w)), now)
        elseif not iszero(s.prev) then
            reset = sub(add(ws, w), now)
        end
        return p.limit, sub(p.limit, est), reset, w
    end
    return T
end

-- concurrency {limit, retry}: state held
function DEF.cc()
    local T = {holds = true}
    function T.params(a, b) return {limit = a, retry = b} end
    function T.zero() return {held = 0} end
    function T.load(w) return {held = N(w[2])} end
    function T.dump(s) return 'cc ' .. S(s.held) end
    function T.wait(p, s, now, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        if cmp(s.held, sub(p.limit, cost)) <= 0 then return 0 end
        return p.retry
    end
    function T.take(p, s, now, cost) s.held = used_add(s.held, cost) end
    function T.release(p, s, now, amount)
        if cmp(amount, s.held) >= 0 then
            s.held = 0
        else
            s.held = sub(s.held, amount)
        end
    end
    function T.idle_at(p, s)
        if iszero(s.held) then return 0 end
        return NEVER
    end
    function T.status(p, s, now) return p.limit, sub(p.limit, s.held), 0, 0 end
    return T
end

local R = setmetatable({}, {__index = function(t, tag)
    local def = DEF[tag]
    if not def then return nil end
    local T = def()
    rawset(t, tag, T)
    return T
end})

-- ---- state keys -------------------------------------------------------------------------------

-- The state of type T stored at key, or nil when the key is missing or holds another type.
local function load_state(T, tag, key)
    local raw = redis.call('GET', key)
    if not raw then return nil end
    local w = split(raw)
    if w[1] ~= tag then return nil end
    return T.load(w)
end

-- TTL in ms for a state written at now: until it is idle (no sooner than floor_ms); a state that
-- holds slots lives as long as a reservation can (hold_ms) and never shorter than it already
-- had to, since earlier holders may still be waiting for their release.
local TTL_CAP = 10000000000000
local function ttl_ms(T, p, s, now, key, floor_ms, hold_ms)
    local idle = T.idle_at(p, s)
    local ms
    if T.holds and cmp(idle, NEVER) >= 0 then
        ms = hold_ms
        local cur = redis.call('PTTL', key)
        if cur > ms then ms = cur end
    elseif cmp(idle, now) > 0 then
        ms = ceil_div(sub(idle, now), MS)
        if cmp(ms, TTL_CAP) > 0 then ms = TTL_CAP end
    else
        ms = 1
    end
    if ms < floor_ms then ms = floor_ms end
    return S(ms)
end

local function save_state(T, p, s, now, key, floor_ms, hold_ms)
    redis.call('SET', key, T.dump(s), 'PX', ttl_ms(T, p, s, now, key, floor_ms, hold_ms))
end
