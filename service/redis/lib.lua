-- lib.lua - exact integers and the built-in rule types, shared by every script of the Redis store.
--
-- Redis runs Lua 5.1, whose numbers are doubles: exact only below 2^53, while the rules count
-- nanoseconds since 1970 (about 2^61) and multiply them by rates into 128-bit intermediates. So
-- every value here is a signed big integer: a table of limbs in base 10^7, least significant
-- first, with the sign in field s (1 or -1; zero has no limbs and s = 1). A limb product is below
-- 10^14, so sums of a few of them stay exact. Values cross into and out of Redis as decimal
-- strings. Division truncates toward zero, as in C.
--
-- The rule functions below are ported line by line from service/core/rules/*.c and must stay in
-- step with them: a differential test replays random traces through both and compares.
-- Functions never modify their arguments; constants are shared.

local floor, fmod = math.floor, math.fmod
local BASE = 10000000

local function N(str)
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
    return t
end

local function S(a)
    local n = #a
    if n == 0 then return '0' end
    local out = {a.s < 0 and '-' or '', string.format('%d', a[n])}
    for i = n - 1, 1, -1 do out[#out + 1] = string.format('%07d', a[i]) end
    return table.concat(out)
end

-- An integer given as a Lua number below 2^53.
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

local function cmp(a, b)
    if a.s ~= b.s then
        if #a == 0 and #b == 0 then return 0 end
        return a.s < b.s and -1 or 1
    end
    local c = cmpmag(a, b)
    if a.s < 0 then return 0 - c end
    return c
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
local function addsigned(a, b, sb)
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

local function add(a, b) return addsigned(a, b, 1) end
local function sub(a, b) return addsigned(a, b, -1) end

local function mul(a, b)
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

local ZERO, ONE = I(0), I(1)

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

local POW10 = {[0] = ONE}
local function pow10(k)
    if not POW10[k] then POW10[k] = mul(pow10(k - 1), I(10)) end
    return POW10[k]
end

-- A big integer no larger than x (x >= 0, whole), within a relative 1e-14 of it.
local function fromdouble(x)
    local k = 0
    while x >= 1e15 do
        x = x / 10
        k = k + 1
    end
    local t = I(floor(x))
    if k > 0 then t = mul(t, pow10(k)) end
    return t
end

-- |a| / |b| (b not zero): quotient and remainder magnitudes. Quotients are estimated from
-- doubles a little low, so that the remainder never goes negative, and refined until exact.
local function divmag(a, b)
    if cmpmag(a, b) < 0 then return {s = 1}, addmag(a, ZERO) end
    if #b == 1 then
        local q, r = divsmall(a, b[1])
        return q, I(r)
    end
    local q, r = {s = 1}, addmag(a, ZERO)
    local db = todouble(b)
    while cmpmag(r, b) >= 0 do
        local est = floor(todouble(r) / db * (1 - 1e-12))
        local e, p
        while true do
            e = est >= 1 and fromdouble(est) or ONE
            p = mul(e, b)
            p.s = 1
            if cmpmag(p, r) <= 0 then break end
            est = floor(est / 2)
        end
        q = addmag(q, e)
        r = submag(r, p)
    end
    return q, r
end

-- C's a / b and a % b.
local function divmod(a, b)
    local q, r = divmag(a, b)
    if #q > 0 then q.s = a.s * b.s end
    if #r > 0 then r.s = a.s end
    return q, r
end

local function iszero(a) return #a == 0 end
local function ispos(a) return #a > 0 and a.s > 0 end
local function max(a, b) return cmp(a, b) > 0 and a or b end
local function min(a, b) return cmp(a, b) < 0 and a or b end

local NS = I(1000000000)
local MS = I(1000000)
local NEVER = N('9223372036854775807')
local USED_MAX = N('4000000000000000000')
local TWO = I(2)

-- rl__ceil_div: ceil(a / b) saturated at NEVER; a >= 0, b > 0.
local function ceil_div(a, b)
    local q, r = divmag(a, b)
    if #r > 0 then q = addmag(q, ONE) end
    if cmpmag(q, NEVER) >= 0 then return NEVER end
    return q
end

-- rl__add_sat: a + b saturated at NEVER, b >= 0.
local function add_sat(a, b)
    if cmp(a, sub(NEVER, b)) > 0 then return NEVER end
    return add(a, b)
end

-- rl__used_add: used + a saturated at USED_MAX.
local function used_add(used, a)
    if cmp(used, sub(USED_MAX, a)) > 0 then return USED_MAX end
    return add(used, a)
end

-- The current time: the caller's when given (manual clock), else Redis's own.
local function clock(arg)
    if arg ~= '' then return N(arg) end
    local t = redis.call('TIME')
    return add(mul(N(t[1]), NS), mul(N(t[2]), I(1000)))
end

-- ---- rule types -------------------------------------------------------------------------------
-- Each type: params(p1, p2) -> table; zero() -> a new key's state; load(fields) -> state from
-- the words after the type tag; dump(state) -> string; wait, take, refund, release, idle_at,
-- status as in C (status returns limit, remaining, reset_after, window).

local R = {}

local function split(raw)
    local w = {}
    for x in string.gmatch(raw, '%S+') do w[#w + 1] = x end
    return w
end

-- token_bucket {capacity, per_second}: state used, last, frac
local tb = {refundable = true}
R.tb = tb
function tb.params(a, b) return {cap = a, rate = b} end
function tb.zero() return {used = ZERO, last = ZERO, frac = ZERO} end
function tb.load(w) return {used = N(w[2]), last = N(w[3]), frac = N(w[4])} end
function tb.dump(s) return 'tb ' .. S(s.used) .. ' ' .. S(s.last) .. ' ' .. S(s.frac) end
local function tb_copy(s) return {used = s.used, last = s.last, frac = s.frac} end
local function tb_refill(p, s, now)
    if cmp(now, s.last) <= 0 then return end
    if ispos(s.used) then
        local num = add(mul(sub(now, s.last), p.rate), s.frac)
        local gain, rem = divmag(num, NS)
        if cmp(gain, s.used) >= 0 then
            s.used = ZERO
            s.frac = ZERO
        else
            s.used = sub(s.used, gain)
            s.frac = rem
        end
    else
        s.frac = ZERO
    end
    s.last = now
end
local function tb_time_to(p, s, target)
    if cmp(s.used, target) <= 0 then return ZERO end
    local need = sub(mul(sub(s.used, target), NS), s.frac)
    return ceil_div(need, p.rate)
end
function tb.wait(p, st, now, cost)
    if cmp(cost, p.cap) > 0 then return NEVER end
    local s = tb_copy(st)
    tb_refill(p, s, now)
    local dt = tb_time_to(p, s, sub(p.cap, cost))
    if iszero(dt) then return ZERO end
    return add_sat(sub(s.last, now), dt)
end
function tb.take(p, s, now, cost)
    tb_refill(p, s, now)
    s.used = used_add(s.used, cost)
end
function tb.refund(p, s, now, taken_at, amount)
    tb_refill(p, s, now)
    if amount.s < 0 and #amount > 0 then
        s.used = used_add(s.used, sub(ZERO, amount))
    elseif cmp(amount, s.used) >= 0 then
        s.used = ZERO
        s.frac = ZERO
    else
        s.used = sub(s.used, amount)
    end
end
function tb.idle_at(p, s)
    if iszero(s.used) then return ZERO end
    return add_sat(s.last, tb_time_to(p, s, ZERO))
end
function tb.status(p, st, now)
    local s = tb_copy(st)
    tb_refill(p, s, now)
    local full = tb_time_to(p, s, ZERO)
    local reset = ZERO
    if not iszero(full) then reset = add_sat(sub(s.last, now), full) end
    return p.cap, sub(p.cap, s.used), reset, ceil_div(mul(p.cap, NS), p.rate)
end

-- gcra {per_second, burst}: state tat, rem, last
local gc = {refundable = true}
R.gcra = gc
function gc.params(a, b) return {rate = a, burst = b} end
function gc.zero() return {tat = ZERO, rem = ZERO, last = ZERO} end
function gc.load(w) return {tat = N(w[2]), rem = N(w[3]), last = N(w[4])} end
function gc.dump(s) return 'gcra ' .. S(s.tat) .. ' ' .. S(s.rem) .. ' ' .. S(s.last) end
local function gc_ahead(p, s, t)
    local c = cmp(s.tat, t)
    if c < 0 or (c == 0 and iszero(s.rem)) then return ZERO end
    return add(mul(sub(s.tat, t), p.rate), s.rem)
end
local function gc_set_ahead(p, s, t, scaled)
    local q, r = divmag(scaled, p.rate)
    s.rem = r
    if cmp(q, sub(NEVER, t)) >= 0 then
        s.tat = NEVER
    else
        s.tat = add(t, q)
    end
end
local function gc_scaled(amount) return mul(amount, NS) end
function gc.wait(p, s, now, cost)
    if cmp(cost, p.burst) > 0 then return NEVER end
    local t = max(now, s.last)
    local d, b = add(gc_ahead(p, s, t), gc_scaled(cost)), gc_scaled(p.burst)
    if cmp(d, b) <= 0 then return ZERO end
    return add_sat(sub(t, now), ceil_div(sub(d, b), p.rate))
end
function gc.take(p, s, now, cost)
    local t = max(now, s.last)
    gc_set_ahead(p, s, t, add(gc_ahead(p, s, t), gc_scaled(cost)))
    s.last = t
end
function gc.refund(p, s, now, taken_at, amount)
    local t = max(now, s.last)
    local a = gc_ahead(p, s, t)
    if amount.s < 0 and #amount > 0 then
        a = add(a, gc_scaled(sub(ZERO, amount)))
    elseif cmp(a, gc_scaled(amount)) > 0 then
        a = sub(a, gc_scaled(amount))
    else
        a = ZERO
    end
    gc_set_ahead(p, s, t, a)
    s.last = t
end
function gc.idle_at(p, s)
    if not iszero(s.rem) then return add_sat(s.tat, ONE) end
    return s.tat
end
function gc.status(p, s, now)
    local t = max(now, s.last)
    local a = gc_ahead(p, s, t)
    local used, r = divmag(a, NS)
    if #r > 0 then used = add(used, ONE) end
    local remaining
    if cmp(used, USED_MAX) >= 0 then
        remaining = sub(p.burst, USED_MAX)
    else
        remaining = sub(p.burst, used)
    end
    local reset = ZERO
    if not iszero(a) then reset = add_sat(sub(t, now), ceil_div(a, p.rate)) end
    return p.burst, remaining, reset, ceil_div(gc_scaled(p.burst), p.rate)
end

-- fixed_window {limit, window}: state last, count
local fw = {refundable = true}
R.fw = fw
function fw.params(a, b) return {limit = a, window = b} end
function fw.zero() return {last = ZERO, count = ZERO} end
function fw.load(w) return {last = N(w[2]), count = N(w[3])} end
function fw.dump(s) return 'fw ' .. S(s.last) .. ' ' .. S(s.count) end
local function start_of(p, t)
    local _, r = divmod(t, p.window)
    return sub(t, r)
end
local function fw_count_at(p, s, t)
    if cmp(start_of(p, t), start_of(p, s.last)) == 0 then return s.count end
    return ZERO
end
function fw.wait(p, s, now, cost)
    if cmp(cost, p.limit) > 0 then return NEVER end
    local t = max(now, s.last)
    if cmp(fw_count_at(p, s, t), sub(p.limit, cost)) <= 0 then return ZERO end
    return add_sat(sub(start_of(p, t), now), p.window)
end
function fw.take(p, s, now, cost)
    local t = max(now, s.last)
    s.count = used_add(fw_count_at(p, s, t), cost)
    s.last = t
end
function fw.refund(p, s, now, taken_at, amount)
    local t = max(now, s.last)
    s.count = fw_count_at(p, s, t)
    s.last = t
    if amount.s < 0 and #amount > 0 then
        s.count = used_add(s.count, sub(ZERO, amount))
    elseif cmp(start_of(p, taken_at), start_of(p, t)) == 0 then
        if cmp(amount, s.count) >= 0 then
            s.count = ZERO
        else
            s.count = sub(s.count, amount)
        end
    end
end
function fw.idle_at(p, s)
    if iszero(s.count) then return ZERO end
    return add_sat(start_of(p, s.last), p.window)
end
function fw.status(p, s, now)
    local t = max(now, s.last)
    local c = fw_count_at(p, s, t)
    local reset = ZERO
    if not iszero(c) then reset = add_sat(sub(start_of(p, t), now), p.window) end
    return p.limit, sub(p.limit, c), reset, p.window
end

-- sliding_window {limit, window}: state sum, last, then the log as pairs ts, cost (oldest first)
local sw = {refundable = true}
R.sw = sw
function sw.params(a, b) return {limit = a, window = b} end
function sw.zero() return {sum = ZERO, last = ZERO, ts = {}, c = {}} end
function sw.load(w)
    local s = {sum = N(w[2]), last = N(w[3]), ts = {}, c = {}}
    for i = 4, #w - 1, 2 do
        s.ts[#s.ts + 1] = N(w[i])
        s.c[#s.c + 1] = N(w[i + 1])
    end
    return s
end
function sw.dump(s)
    local out = {'sw', S(s.sum), S(s.last)}
    for i = 1, #s.ts do
        out[#out + 1] = S(s.ts[i])
        out[#out + 1] = S(s.c[i])
    end
    return table.concat(out, ' ')
end
function sw.wait(p, s, now, cost)
    if cmp(cost, p.limit) > 0 then return NEVER end
    local t = max(now, s.last)
    local live, room = s.sum, sub(p.limit, cost)
    local edge = sub(t, p.window)
    local i, n = 1, #s.ts
    while i <= n and cmp(s.ts[i], edge) <= 0 do
        live = sub(live, s.c[i])
        i = i + 1
    end
    if cmp(live, room) <= 0 then return ZERO end
    while i <= n do
        live = sub(live, s.c[i])
        if cmp(live, room) <= 0 then return add_sat(sub(s.ts[i], now), p.window) end
        i = i + 1
    end
    return NEVER
end
local function sw_expire(p, s, t)
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
local function sw_append(s, t, amount)
    local n = #s.ts
    if n > 0 and cmp(s.ts[n], t) == 0 then
        s.c[n] = used_add(s.c[n], amount)
    else
        s.ts[n + 1] = t
        s.c[n + 1] = amount
    end
    s.sum = used_add(s.sum, amount)
end
function sw.take(p, s, now, cost)
    local t = max(now, s.last)
    sw_expire(p, s, t)
    sw_append(s, t, cost)
    s.last = t
end
function sw.refund(p, s, now, taken_at, amount)
    local t = max(now, s.last)
    sw_expire(p, s, t)
    s.last = t
    if amount.s < 0 and #amount > 0 then
        sw_append(s, t, sub(ZERO, amount))
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
function sw.idle_at(p, s)
    if #s.ts == 0 then return ZERO end
    return add_sat(s.last, p.window)
end
function sw.status(p, s, now)
    local t = max(now, s.last)
    local live = s.sum
    local edge = sub(t, p.window)
    local i = 1
    while i <= #s.ts and cmp(s.ts[i], edge) <= 0 do
        live = sub(live, s.c[i])
        i = i + 1
    end
    local reset = ZERO
    if ispos(live) then reset = add_sat(sub(s.last, now), p.window) end
    return p.limit, sub(p.limit, live), reset, p.window
end

-- sliding_window_counter {limit, window}: state last, cur, prev
local swc = {refundable = true}
R.swc = swc
function swc.params(a, b) return {limit = a, window = b} end
function swc.zero() return {last = ZERO, cur = ZERO, prev = ZERO} end
function swc.load(w) return {last = N(w[2]), cur = N(w[3]), prev = N(w[4])} end
function swc.dump(s) return 'swc ' .. S(s.last) .. ' ' .. S(s.cur) .. ' ' .. S(s.prev) end
local function swc_copy(s) return {last = s.last, cur = s.cur, prev = s.prev} end
local function swc_roll(p, s, t)
    local ws, ls = start_of(p, t), start_of(p, s.last)
    if cmp(ws, ls) == 0 then return end
    if cmp(sub(ws, ls), p.window) == 0 then
        s.prev = s.cur
    else
        s.prev = ZERO
    end
    s.cur = ZERO
end
local function swc_fits(p, s, t, cost)
    local w = p.window
    local e = sub(t, start_of(p, t))
    local lhs = add(mul(s.prev, sub(w, e)), mul(add(s.cur, cost), w))
    return cmp(lhs, mul(p.limit, w)) <= 0
end
local function swc_first_fit(p, prev, cur, cost)
    if cmp(cur, sub(p.limit, cost)) > 0 then return p.window end
    if iszero(prev) then return ZERO end
    local room = mul(sub(sub(p.limit, cost), cur), p.window)
    local k = divmag(room, prev)
    if cmp(k, p.window) >= 0 then return ZERO end
    return sub(p.window, k)
end
function swc.wait(p, st, now, cost)
    if cmp(cost, p.limit) > 0 then return NEVER end
    local s = swc_copy(st)
    local t = max(now, s.last)
    swc_roll(p, s, t)
    if swc_fits(p, s, t, cost) then return ZERO end
    local ws = start_of(p, t)
    local e = swc_first_fit(p, s.prev, s.cur, cost)
    if cmp(e, p.window) < 0 then return add_sat(sub(ws, now), e) end
    e = swc_first_fit(p, s.cur, ZERO, cost)
    return add_sat(add_sat(sub(ws, now), p.window), e)
end
function swc.take(p, s, now, cost)
    local t = max(now, s.last)
    swc_roll(p, s, t)
    s.cur = used_add(s.cur, cost)
    s.last = t
end
function swc.refund(p, s, now, taken_at, amount)
    local t = max(now, s.last)
    swc_roll(p, s, t)
    s.last = t
    if amount.s < 0 and #amount > 0 then
        s.cur = used_add(s.cur, sub(ZERO, amount))
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
            s[field] = ZERO
        else
            s[field] = sub(s[field], amount)
        end
    end
end
function swc.idle_at(p, s)
    local ls = start_of(p, s.last)
    if not iszero(s.cur) then return add_sat(ls, mul(TWO, p.window)) end
    if not iszero(s.prev) then return add_sat(ls, p.window) end
    return ZERO
end
function swc.status(p, st, now)
    local s = swc_copy(st)
    local t = max(now, s.last)
    swc_roll(p, s, t)
    local w = p.window
    local e = sub(t, start_of(p, t))
    local weighted = mul(s.prev, sub(w, e))
    local q, r = divmag(weighted, w)
    if #r > 0 then q = add(q, ONE) end
    local est = add(s.cur, q)
    local ws = start_of(p, t)
    local reset = ZERO
    if not iszero(s.cur) then
        reset = sub(add(ws, mul(TWO, w)), now)
    elseif not iszero(s.prev) then
        reset = sub(add(ws, w), now)
    end
    return p.limit, sub(p.limit, est), reset, w
end

-- concurrency {limit, retry}: state held
local cc = {holds = true}
R.cc = cc
function cc.params(a, b) return {limit = a, retry = b} end
function cc.zero() return {held = ZERO} end
function cc.load(w) return {held = N(w[2])} end
function cc.dump(s) return 'cc ' .. S(s.held) end
function cc.wait(p, s, now, cost)
    if cmp(cost, p.limit) > 0 then return NEVER end
    if cmp(s.held, sub(p.limit, cost)) <= 0 then return ZERO end
    return p.retry
end
function cc.take(p, s, now, cost) s.held = used_add(s.held, cost) end
function cc.release(p, s, now, amount)
    if cmp(amount, s.held) >= 0 then
        s.held = ZERO
    else
        s.held = sub(s.held, amount)
    end
end
function cc.idle_at(p, s)
    if iszero(s.held) then return ZERO end
    return NEVER
end
function cc.status(p, s, now) return p.limit, sub(p.limit, s.held), ZERO, ZERO end

-- ---- state keys -------------------------------------------------------------------------------

-- The state of type T stored at key, or nil when the key is missing or holds another type.
local function load_state(T, tag, key)
    local raw = redis.call('GET', key)
    if not raw then return nil, false end
    local w = split(raw)
    if w[1] ~= tag then return nil, true end
    return T.load(w), true
end

-- TTL in ms for a state written at now: until it is idle (no sooner than floor_ms); a state that
-- holds slots lives as long as a reservation can (hold_ms) and never shorter than it already
-- had to, since earlier holders may still be waiting for their release.
local TTL_CAP = N('10000000000000')
local function ttl_ms(T, p, s, now, key, floor_ms, hold_ms)
    local idle = T.idle_at(p, s)
    local ms
    if cmp(idle, NEVER) >= 0 and T.holds then
        ms = I(hold_ms)
        local cur = redis.call('PTTL', key)
        if cur > hold_ms then ms = I(cur) end
    elseif cmp(idle, now) > 0 then
        ms = ceil_div(sub(idle, now), MS)
        if cmp(ms, TTL_CAP) > 0 then ms = TTL_CAP end
    else
        ms = ONE
    end
    if cmp(ms, I(floor_ms)) < 0 then ms = I(floor_ms) end
    return S(ms)
end

local function save_state(T, p, s, now, key, floor_ms, hold_ms)
    redis.call('SET', key, T.dump(s), 'PX', ttl_ms(T, p, s, now, key, floor_ms, hold_ms))
end
