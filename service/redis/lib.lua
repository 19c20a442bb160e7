-- lib.lua - times, binary state values and the rule type registry, shared by the scripts of the
-- Redis store. It follows bigint.lua (exact integers: N, S, add, sub, mul, cmp, divmod and the
-- values they take, numbers or big integers), and the rule types' ports follow it
-- (service/core/rules/*.lua); the build puts the three together (the Makefile's rld_lua_lib and
-- service/redis/lua.c).
--
-- The rule types' ports are ported line by line from their C files and must stay in step with
-- them: a differential test replays random traces through both. Functions never modify their
-- arguments; tables are shared freely.

local NS = 1000000000
local MS = 1000000
local ONE = 1000000 -- RL_FP_ONE
local NEVER = {s = 1, 4775807, 7203685, 92233} -- INT64_MAX
local USED_MAX = {s = 1, 0, 0, 40000} -- 4e18

-- rl__ceil_div: ceil(a / b) saturated at NEVER; a >= 0, b > 0.
local function ceil_div(a, b)
    local q, r = divmod(a, b)
    if r ~= 0 then q = add(q, 1) end
    if type(q) ~= 'number' and cmp(q, NEVER) >= 0 then return NEVER end
    return q
end

local NEVER_SAFE = {s = 1, 34815, 6483760, 92143} -- NEVER - 2^53
local USED_SAFE = {s = 1, 5259008, 9280074, 39909} -- USED_MAX - 2^53

-- a + b saturated at top, b >= 0; safe is top - 2^53: adding a number to anything up to it
-- cannot reach top.
local function sat_add(a, b, top, safe)
    if type(b) == 'number' and (type(a) == 'number' or cmp(a, safe) <= 0) then
        return add(a, b)
    end
    if cmp(a, sub(top, b)) > 0 then return top end
    return add(a, b)
end

-- rl__add_sat: a + b saturated at NEVER. rl__used_add: used + a saturated at USED_MAX.
local function add_sat(a, b) return sat_add(a, b, NEVER, NEVER_SAFE) end
local function used_add(used, a) return sat_add(used, a, USED_MAX, USED_SAFE) end

-- ---- exact products and quotients in doubles ------------------------------------------------
-- The rules multiply values below 2^53 into products of up to 2^106 and divide those. Where
-- the operands are numbers, the helpers below do that exactly in doubles, without tables, and
-- leave the rest (operands or quotients out of their ranges) to bigint.lua's big integers.

local P32 = 4294967296 -- 2^32
local P50 = 1125899906842624 -- 2^50
local P51 = 2251799813685248 -- 2^51
local P52 = 4503599627370496 -- 2^52
local P99 = 2 ^ 99
local SPLIT = 134217729 -- 2^27 + 1

-- a * b = p + e exactly, p being the double nearest a * b: Dekker's TwoProduct with Veltkamp's
-- split, exact in IEEE doubles rounding to nearest (Lua's numbers; Redis builds Lua for SSE2,
-- and every Lua operation rounds on its own) for any a, b whose product does not overflow.
-- For whole a, b below 2^53, p and e are whole too.
local function two_prod(a, b)
    local p = a * b
    local c = SPLIT * a
    local ah = c - (c - a)
    local al = a - ah
    c = SPLIT * b
    local bh = c - (c - b)
    local bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl
end

-- The sign of a * b - c * d (-1, 0, 1). For numbers: rounding is monotonic, so when the
-- rounded products differ they order the exact ones; when they are equal the difference of the
-- exact products is that of the rounding errors, e - f.
local function cmp_prod(a, b, c, d)
    if type(a) == 'number' and type(b) == 'number' and type(c) == 'number' and
        type(d) == 'number' then
        local p, q = a * b, c * d
        if p ~= q then return p < q and -1 or 1 end
        local _, e = two_prod(a, b)
        local _, f = two_prod(c, d)
        if e == f then return 0 end
        return e < f and -1 or 1
    end
    return cmp(mul(a, b), mul(c, d))
end

-- floor((a * b + c) / d) and the remainder, for a, b >= 0, d > 0 and a * b + c >= 0.
--
-- Numbers with d < 2^50, |c| < 2^50: when p = a * b and p + c stay below 2^53 they are exact,
-- and so is floor(x / d) for any whole 0 <= x < 2^53 (a quotient that is not whole is at least
-- 1/d from the next whole number, more than half its ulp, which is below 2/d). Otherwise, with
-- p < 2^99 (so |e| <= 2^46 in a * b = p + e) and p >= 2^53 - 2^50 (p is below 2^53 only when
-- p + c is not), X = a * b + c: the estimate q of floor(X / d), taken from doubles with a
-- relative error below 2^-51.3, is off by at most 1 while below 2^51; then r = X - q * d is in
-- (-d, 2d), and with q * d = p3 + e3: p3 is within 2^52 of p, so p - p3 is exact (Sterbenz:
-- p3 is in [p / 2, 2p]), e + c is exact (both below 2^50 + 2^46), their sum r + e3 is below
-- 2^53, and so r = (p - p3) + (e + c) - e3 is exact; one step of d at most corrects q.
local function mdm(a, b, c, d)
    if type(a) == 'number' and type(b) == 'number' and type(c) == 'number' and
        type(d) == 'number' and d < P50 and c < P50 and c > -P50 then
        local p = a * b
        local x = p + c
        if p < LIM and x < LIM then
            local q = floor(x / d)
            return q, x - q * d
        end
        if p < P99 then
            local q = floor(x / d)
            if q < P51 then
                local _, e = two_prod(a, b)
                local p3, e3 = two_prod(q, d)
                local r = ((p - p3) + (e + c)) - e3
                if r < 0 then
                    q, r = q - 1, r + d
                elseif r >= d then
                    q, r = q + 1, r - d
                end
                return q, r
            end
        end
    end
    return divmod(add(mul(a, b), c), d)
end

-- ceil((a * b + c) / d) saturated at NEVER, likewise.
local function ceil_mdm(a, b, c, d)
    local q, r = mdm(a, b, c, d)
    if r ~= 0 then q = add(q, 1) end
    if type(q) ~= 'number' and cmp(q, NEVER) >= 0 then return NEVER end
    return q
end

-- ---- the clock, and times relative to it ------------------------------------------------------
-- A script reads the time once (clock). Inside it, every time is held relative to that now, as
-- t - now in ns: a number for any time within 2^53 ns (104 days) of now, which is nearly every
-- time a script meets, so that times cost no tables; a big integer beyond. now itself is held as
-- a decimal string (NOW_STR), as seconds and nanoseconds (NOW_S, NOW_F), and, while below
-- 4e18 ns (the year 2096: FASTNOW), as two 32-bit halves (NOW_HI, NOW_LO) for the binary state
-- values. Before 2096, NEVER - now > 5e18 > 2^53, so a time that is a number is below NEVER.

local NOW_STR, NOW_S, NOW_F, NOW_HI, NOW_LO, NOW_BIG, NEVER_REL, FASTNOW, MODS

-- now as a decimal.
local function now_str()
    if not NOW_STR then
        NOW_STR = NOW_S > 0 and string.format('%d%09d', NOW_S, NOW_F) or string.format('%d', NOW_F)
    end
    return NOW_STR
end

local function now_big()
    if not NOW_BIG then NOW_BIG = N(now_str()) end
    return NOW_BIG
end

-- NEVER as a relative time.
local function never_rel()
    if not NEVER_REL then NEVER_REL = sub(NEVER, now_big()) end
    return NEVER_REL
end

-- Reads the time: the caller's when given (manual clock, a canonical decimal >= 0), else
-- Redis's own.
local function clock(arg)
    if arg ~= '' then
        NOW_STR = arg
        if #arg <= 9 then
            NOW_S, NOW_F = 0, tonumber(arg)
        else
            NOW_S, NOW_F = tonumber(string.sub(arg, 1, -10)), tonumber(string.sub(arg, -9))
        end
    else
        local t = redis.call('TIME')
        NOW_S, NOW_F = tonumber(t[1]), tonumber(t[2]) * 1000
        NOW_STR = nil
    end
    NOW_BIG, NEVER_REL, MODS = nil, nil, nil
    FASTNOW = NOW_S < 4000000000
    if FASTNOW then
        -- now = m * 2^9 + NOW_F with m = NOW_S * 1953125 < 2^53
        local m = NOW_S * 1953125
        local hi = floor(m / 8388608)
        local lo = (m - hi * 8388608) * 512 + NOW_F
        if lo >= P32 then hi, lo = hi + 1, lo - P32 end
        NOW_HI, NOW_LO = hi, lo
    end
end

-- A time given as its absolute value's two 32-bit halves, relative to now. With the halves
-- less than 2^20 apart the result is below 2^52 + 2^32 and every step exact.
local function rel_of_halves(hi, lo)
    if FASTNOW then
        local dh = hi - NOW_HI
        if dh < 1048576 and dh > -1048576 then return dh * P32 + (lo - NOW_LO) end
    end
    return sub(add(mul(hi, P32), lo), now_big())
end

-- The two 32-bit halves of the absolute value of a relative time t (>= -now).
local function halves_of_rel(t)
    if FASTNOW and type(t) == 'number' and t < P52 and t > -P52 then
        local lo = NOW_LO + t
        local c = floor(lo / P32)
        return NOW_HI + c, lo - c * P32
    end
    return divmod(add(now_big(), t), P32)
end

-- The absolute value of a relative time t (>= -now) as a decimal.
local function dec_of_rel(t)
    if t == 0 then return now_str() end
    if FASTNOW and type(t) == 'number' and t < P52 and t > -P52 then
        local f = NOW_F + t
        local c = floor(f / NS)
        local s = NOW_S + c
        f = f - c * NS
        if s > 0 then return string.format('%d%09d', s, f) end
        return string.format('%d', f)
    end
    return S(add(now_big(), t))
end

-- A time given as a decimal (>= 0), relative to now.
local function rel_of_dec(str)
    if FASTNOW and #str <= 19 then
        local s, f
        if #str <= 9 then
            s, f = 0, tonumber(str)
        else
            s, f = tonumber(string.sub(str, 1, -10)), tonumber(string.sub(str, -9))
        end
        local ds = s - NOW_S
        if ds < 4000000 and ds > -4000000 then return ds * NS + (f - NOW_F) end
    end
    return sub(N(str), now_big())
end

-- min(t, NEVER) for a relative time t.
local function sat_time(t)
    if FASTNOW and type(t) == 'number' then return t end
    local nr = never_rel()
    if cmp(t, nr) > 0 then return nr end
    return t
end

-- rl__add_sat for a relative time t and a duration d >= 0: the absolute t + d saturated at NEVER.
local function add_sat_t(t, d) return sat_time(add(t, d)) end

-- now % w for a window w (ns), or nil when w is out of the range below (remembered per call).
-- now = P + NOW_F with P = NOW_S * 1e9 exact (NOW_S * 1953125 < 2^53). Below 2^53 that is the
-- remainder of a number. Beyond, with 1e6 <= w < 2^50: q, from doubles, is within 1 of now / w
-- (the error of P + NOW_F, below 2^9, is under 1/1000 of w, and q < 2^43 is off by less than
-- 1/1000 from rounding), so r = now - q * w is in (-w, 2w); with q * w = p3 + e3, p3 is within
-- 2^52 of P (>= 2^53 - 1e9), so P - p3 is exact (Sterbenz), and so are the sums after it.
local function now_mod(w)
    if not FASTNOW or type(w) ~= 'number' or w >= P50 or w < MS then return nil end
    if not MODS then MODS = {} end
    local m = MODS[w]
    if m then return m end
    local P = NOW_S * NS
    local x = P + NOW_F
    if x < LIM then
        m = x % w
    else
        local q = floor(x / w)
        local p3, e3 = two_prod(q, w)
        m = ((P - p3) + NOW_F) - e3
        if m < 0 then
            m = m + w
        elseif m >= w then
            m = m - w
        end
    end
    MODS[w] = m
    return m
end

-- The start of the window of length w holding the relative time t, relative too: t - t % w
-- for the absolute t (>= 0), as in C. With m = now % w, (m + t) % w is that remainder; for
-- |m + t| < 2^52 Lua's % (a - floor(a / b) * b) is exact and lands in [0, w).
local function start_of(w, t)
    local m = now_mod(w)
    if m and type(t) == 'number' then
        local x = m + t
        if x < P52 and x > -P52 then return t - x % w end
    end
    local _, r = divmod(add(now_big(), t), w)
    return sub(t, r)
end

-- The start of the window (of length p.window) that holds s.last, kept in s.ws: a windowed
-- rule's state does not change last again before it is saved.
local function window_start(p, s)
    local ws = s.ws
    if not ws then
        ws = start_of(p.window, s.last)
        s.ws = ws
    end
    return ws
end

-- ---- binary state values ------------------------------------------------------------------------
-- A state is stored as a type byte followed by big-endian unsigned integers: times as their
-- absolute values in 8 bytes, other fields in 8 bytes, or in as few bytes as they take (none
-- for 0) when the field is the value's last. See docs/redis.md.

local byte, char = string.byte, string.char
local pack, unpack_ = struct.pack, struct.unpack

-- Bytes i..j (at most 8) of v as an unsigned big-endian integer.
local function uint(v, i, j)
    local n = j - i + 1
    if n <= 6 then
        if n <= 0 then return 0 end
        return (unpack_('>I' .. n, v, i))
    end
    local hi = 0
    for k = i, j - 4 do hi = hi * 256 + byte(v, k) end
    local lo = unpack_('>I4', v, j - 3)
    if hi < 2097152 then return hi * P32 + lo end
    return add(mul(hi, P32), lo)
end

-- The time stored in bytes i..i+7 of v, relative to now.
local function dec_time(v, i)
    local hi, lo = unpack_('>I4I4', v, i)
    return rel_of_halves(hi, lo)
end

-- x >= 0 (below 2^64) in 8 bytes.
local function enc_u8(x)
    if type(x) == 'number' then
        local hi = floor(x / P32)
        return pack('>I4I4', hi, x - hi * P32)
    end
    return pack('>I4I4', divmod(x, P32))
end

-- x >= 0 in as few bytes as it takes.
local function enc_var(x)
    if type(x) == 'number' then
        if x < 65536 then
            if x == 0 then return '' end
            return pack(x < 256 and '>I1' or '>I2', x)
        end
        if x < 281474976710656 then -- 2^48
            if x < 4294967296 then return pack(x < 16777216 and '>I3' or '>I4', x) end
            return pack(x < 1099511627776 and '>I5' or '>I6', x)
        end
    end
    local v = enc_u8(x)
    local k = 1
    while byte(v, k) == 0 do k = k + 1 end
    return string.sub(v, k)
end

-- A relative time in 8 bytes, as its absolute value.
local function enc_time(t) return pack('>I4I4', halves_of_rel(t)) end

-- ---- rule types -----------------------------------------------------------------------------
-- Each rule type's port is a file of its own beside its C file (service/core/rules/<type>.lua,
-- or a plug-in's text), which registers it by its tag: register_rule(tag, make), make()
-- returning the type's table T. The scripts put those files after this one, inside functions
-- of port_loaders (the built-in ports in one, each behind its tag, the plug-ins' in another:
-- Lua 5.1 lets a function reach at most 60 locals of the functions around it), so they see
-- every local above; rule_type runs them for a tag it does not know yet and makes a type on
-- its first use, since a script's top level runs on every call (and a closure made there
-- costs a lookup of each of its upvalues). T holds:
--   params   the names of the parameters the store sends, in the order the C side declares
--            them (rl_rule_redis.params); read_params puts each in the item's table by name
--   layout   the version of the state's binary layout (rl_rule_redis.layout)
--   zero(t) -> a new key's state in t; load(value, t) -> t, or nil when the value is not of
--   this type; dump(s) -> value; prep(p, s) brings s to now where every C function starts by
--   doing so (a token bucket's refill, a window's roll: doing it once lets wait, take, status
--   and refund all start from it, which in C each redo on a copy); then wait(p, s, cost),
--   take(p, s, cost), refund(p, s, taken_at, amount), release(p, s, amount) as in C (refund and
--   release may be absent; learn(p, s, taken_at, kind, latency) for a type that learns from
--   how a call went, C's release_outcome: kind 0 not said, 1 ok, 2 error, 3 timeout,
--   4 dropped, latency in ns or -1); idle(p, s) -> C's idle_at relative to now (false: a new key's
--   already; true: never, for a state holding slots); status(p, s) -> limit, remaining,
--   reset_after, window.
-- Every time is relative to now (above). A zero() state holds times of 0 relative to now for
-- the absolute 0 of C's zeroed state: each type treats both alike once prepared (nothing is
-- used, nothing counted: only max(now, last) = now matters). p and s are the same table (the
-- item's, below), so parameter and state field names must not collide.

local function noop() end
local MAKE, R = {}, {}
-- functions calling every port's register_rule, set after this file (lua.c), run once
local port_loaders = {}

-- Registers a rule type's port under its tag (a later registration of the same tag wins).
local function register_rule(tag, make) MAKE[tag] = make end

-- The rule type of a tag (made on first use), or nil for an unknown tag.
local function rule_type(tag)
    local T = R[tag]
    if T then return T end
    local make = MAKE[tag]
    for i = 1, #port_loaders do
        if make then break end
        port_loaders[i](tag)
        make = MAKE[tag]
    end
    if not make then return nil end
    T = make()
    R[tag] = T
    return T
end

-- Reads T's parameters, ARGV[o + 1] on, into t by name (N(x) with the usual case, up to 15
-- digits, inline). Returns the offset of the last one.
local function read_params(T, t, argv, o)
    local names = T.params
    for j = 1, #names do
        local v = argv[o + j]
        t[names[j]] = #v <= 15 and tonumber(v) or N(v)
    end
    return o + #names
end


-- ---- state keys -------------------------------------------------------------------------------

-- A table for an item, its state and its rule's parameters: a constructor with 9 fields makes
-- Lua size it for 16 at once (a table that grows is rehashed at each power of two).
local function new_item()
    return {T = false, k = 0, rec = false, cost = 0, wait = 0, full = false, win = false,
        mode = false, x2 = false}
end

-- The state of type T stored at key, in t (a new item when nil); a new key's state when the key
-- is missing or holds another type (or a value of an earlier format). Returns t and whether the
-- key held a state.
local function load_state(T, key, t)
    t = t or new_item()
    local raw = redis.call('GET', key)
    if raw and T.load(raw, t) then return t, true end
    return T.zero(t), false
end

-- TTL in ms for a state written now: until it is idle (no sooner than floor_ms); a state that
-- holds slots lives as long as a reservation can (hold_ms) and never shorter than it already
-- had to, since earlier holders may still be waiting for their release.
local TTL_CAP = 10000000000000
local function ttl_ms(T, p, s, key, floor_ms, hold_ms)
    local idle = T.idle(p, s)
    local ms
    if idle == true then
        ms = hold_ms
        local cur = redis.call('PTTL', key)
        if cur > ms then ms = cur end
    elseif type(idle) == 'number' then
        if idle > 0 then
            ms = floor(idle / MS)
            if ms * MS < idle then ms = ms + 1 end
        else
            ms = 1
        end
    elseif idle and ispos(idle) then
        ms = ceil_mdm(idle, 1, 0, MS)
        if cmp(ms, TTL_CAP) > 0 then ms = TTL_CAP end
    else
        ms = 1
    end
    if ms < floor_ms then ms = floor_ms end
    return S(ms)
end

local function save_state(T, p, s, key, floor_ms, hold_ms)
    redis.call('SET', key, T.dump(s), 'PX', ttl_ms(T, p, s, key, floor_ms, hold_ms))
end

-- Tells every instance that the states named keys[from..] have given capacity back (a refund,
-- a release, an undo), so that their caches of denials forget them (store.c, denycache.h):
-- one message on channel, each key as its length, ':' and the key. Nothing when none changed.
local function announce(channel, keys, from)
    if from > #keys then return end
    local parts = {}
    for i = from, #keys do parts[#parts + 1] = #keys[i] .. ':' .. keys[i] end
    redis.call('PUBLISH', channel, table.concat(parts))
end

-- A reservation (decide.lua and fast.lua write it; store.c's read_resv reads it too): one
-- string of fields separated by newlines: its settled flag ('0' or '1'), the cost
-- it took, when it was taken (decimal ns), when it expires (decimal ns), its amounts by unit (''
-- or ab_usage's), then each remembered rule's record (none holds a control character: a key
-- cannot, rl__key_problem, and a level's name is a plain name). Its id is in the index of
-- reservations by its expiry, which due.lua keeps alive. Returns exp, settled, cost, at, and
-- whether it is a hash as older builds wrote it (fields of those names); nil when there is none.
local function read_resv(key)
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
        local h = redis.call('HMGET', key, 'exp', 'settled', 'cost', 'at')
        return h[1], h[2], h[3], h[4], true
    end
    if not v then return nil end
    local cost, at, exp = string.match(v, '^.\n([^\n]*)\n([^\n]*)\n([^\n]*)')
    return exp, string.sub(v, 1, 1), cost, at, false
end

-- Marks a reservation read by read_resv settled, keeping its TTL.
local function settle_resv(key, hash)
    if hash then
        redis.call('HSET', key, 'settled', '1')
    else
        redis.call('SETRANGE', key, 0, '1')
    end
end
