-- fast.lua - the decision script's fast path: the common decision (not dry, no modes, nothing
-- kept, every item of a type with a fast step: service/core/rules/*.fast.lua, today token
-- buckets, GCRA, fixed windows, sliding windows, sliding window counters and concurrency
-- limits, the default configuration's shape among them; a reservation recorded as decide.lua
-- records it) worked out in plain Lua numbers, with no tables of the general path
-- (lib.lua, bigint.lua) made.
-- The build puts it in front of decide.lua's body (service/redis/lua.c): as a script, in front
-- of the lib too, which is then made only when this path declines, so that a decision it
-- answers pays neither for the lib's closures nor for its generality.
--
-- It answers exactly as the general path does, or declines before writing anything (the
-- general path then decides from scratch): every value it meets is checked once to lie where
-- the arithmetic below is exact in doubles, and anything else (a parameter, state or time out
-- of those bounds, an unknown state value, a wait of never) goes the general way.
--
-- The bounds, and why they make every step exact (doubles hold every whole number below 2^53,
-- and a sum, difference or product of such numbers that stays below 2^53 is exact):
--   * amounts (need, cost, parameters) come as at most 15 decimal digits (< 1e15 < 2^50), and
--     a state's amount from at most 6 bytes (< 2^48); a sum of two of them is below 2^51;
--   * now is held as seconds and nanoseconds (from TIME or a manual decimal) and, below 4e18 ns,
--     as two 32-bit halves (NOW_HI, NOW_LO) built exactly as lib.lua's clock does; a stored time
--     (8 bytes, two halves) whose high half is within 2^19 of NOW_HI becomes t - now =
--     (hi - NOW_HI) * 2^32 + (lo - NOW_LO), below 2^51 + 2^32 < 2^52 in magnitude, exactly;
--     back to halves, NOW_LO + t stays below 2^53;
--   * a product a * b (a, b < 2^53) divided by d < 2^50, plus c (|c| < 2^50): mdm below, the
--     same argument as lib.lua's mdm (exact quotient and remainder while a * b < 2^99 and the
--     quotient is below 2^51), declining beyond;
--   * a wait or reset (a time relative to now) is a sum of two such numbers and declines at
--     2^53; before 2096 (now < 4e18) NEVER - now > 5e18, so no number here saturates;
--   * a window w (ns) lies in [1e6, 2^50), else a step declines; m = now % w is worked out by
--     now_mod below as lib.lua's now_mod does (whose comment has the proof: exact for
--     now < 4e18); a time t relative to now (|t| < 2^51 + 2^32) starts its window at
--     t - (m + t) % w, the absolute t - t % w as in C: m + t is congruent to the absolute t
--     modulo w and |m + t| < 2^52, so Lua's % (a - floor(a / b) * b) is exact there and lands
--     in [0, w) (lib.lua's start_of); that start plus w is below 2^52 + 2^50.
do
local argv, keys = ARGV, KEYS
local nitems = tonumber(argv[A_ITEMS])
local id = argv[A_ID]
if argv[A_GENERAL] ~= '1' and argv[A_DRY] == '0' and argv[A_MODES] == '' and
    argv[A_KEEP] == '0' and nitems and nitems >= 1 and
    #keys == (id == '' and nitems or nitems + 2) and #argv[A_RESERVATION_TTL] <= 15 then
    local floor, tonumber, sub, byte = math.floor, tonumber, string.sub, string.byte
    local unpack_, pack = struct.unpack, struct.pack
    local call, fmt, concat = redis.call, string.format, table.concat -- (a global's lookup
    -- costs more in a library)
    local LIM, P32, P50, P51, P99 = 9007199254740992, 4294967296, 1125899906842624,
        2251799813685248, 2 ^ 99
    local NS, MS, ONE = 1000000000, 1000000, 1000000
    local KEYNO = {'1', '2', '3', '4', '5', '6', '7', '8'}
    local go = true

    -- now: seconds, nanoseconds and halves (lib.lua's clock)
    local nows, nowf
    local nowstr = argv[A_NOW]
    if nowstr == '' then
        -- (seconds and microseconds as decimals: now's decimal is theirs joined, the
        -- microseconds to six digits, then 000; Redis's clock is after 1970, so seconds > 0)
        local t = call('TIME')
        local us = t[2]
        nows, nowf = tonumber(t[1]), tonumber(us) * 1000
        nowstr = t[1] .. (#us < 6 and sub('00000' .. us, -6) or us) .. '000'
    elseif #nowstr <= 9 then
        nows, nowf = 0, tonumber(nowstr)
    elseif #nowstr <= 19 then
        nows, nowf = tonumber(sub(nowstr, 1, -10)), tonumber(sub(nowstr, -9))
    else
        go = false
    end
    local NOW_HI, NOW_LO
    if go and nows < 4000000000 then
        local m = nows * 1953125 -- now = m * 2^9 + nowf, m < 2^53
        local hi = floor(m / 8388608)
        local lo = (m - hi * 8388608) * 512 + nowf
        if lo >= P32 then hi, lo = hi + 1, lo - P32 end
        NOW_HI, NOW_LO = hi, lo
    else
        go = false
    end

    -- floor((a * b + c) / d) and the remainder for whole a, b >= 0 below 2^53, 0 < d < 2^50,
    -- |c| < 2^50, a * b + c >= 0 (lib.lua's mdm, whose comment has the proof); nil beyond
    local function mdm(a, b, c, d)
        local p = a * b
        local x = p + c
        if p < LIM and x < LIM then
            local q = floor(x / d)
            return q, x - q * d
        end
        if p >= P99 or d >= P50 then return nil end
        local q = floor(x / d)
        if q >= P51 then return nil end
        -- a * b = p + e and q * d = p3 + e3 exactly (Dekker's TwoProduct, Veltkamp's split)
        local s = 134217729 * a
        local ah = s - (s - a)
        local al = a - ah
        s = 134217729 * b
        local bh = s - (s - b)
        local bl = b - bh
        local e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        local p3 = q * d
        s = 134217729 * q
        local qh = s - (s - q)
        local ql = q - qh
        s = 134217729 * d
        local dh = s - (s - d)
        local dl = d - dh
        local e3 = ((qh * dh - p3) + qh * dl + ql * dh) + ql * dl
        local r = ((p - p3) + (e + c)) - e3
        if r < 0 then
            q, r = q - 1, r + d
        elseif r >= d then
            q, r = q + 1, r - d
        end
        return q, r
    end

    -- now % w for a window w in [1e6, 2^50) (lib.lua's now_mod, whose comment has the proof)
    local function now_mod(w)
        local P = nows * NS -- exact: nows * 1953125 < 2^53, times 2^9
        local x = P + nowf
        if x < LIM then return x % w end
        local q = floor(x / w)
        -- q * w = p3 + e3 exactly (Dekker's TwoProduct, Veltkamp's split)
        local p3 = q * w
        local s = 134217729 * q
        local qh = s - (s - q)
        local ql = q - qh
        s = 134217729 * w
        local wh = s - (s - w)
        local wl = w - wh
        local e3 = ((qh * wh - p3) + qh * wl + ql * wh) + ql * wl
        local m = ((P - p3) + nowf) - e3
        if m < 0 then
            m = m + w
        elseif m >= w then
            m = m - w
        end
        return m
    end

-- @FAST_PRELUDE@

    -- a stored amount: bytes i..j (at most 6) of v, big-endian
    local function uint(v, i, j)
        local m = j - i + 1
        if m <= 0 then return 0 end
        if m <= 3 then return (unpack_(m == 1 and '>I1' or m == 2 and '>I2' or '>I3', v, i)) end
        return (unpack_(m == 4 and '>I4' or m == 5 and '>I5' or '>I6', v, i))
    end
    -- the fewest bytes of x (< 2^48) as a struct format suffix
    local function varfmt(x)
        if x == 0 then return '' end
        if x < 65536 then return x < 256 and 'I1' or 'I2' end
        if x < 4294967296 then return x < 16777216 and 'I3' or 'I4' end
        return x < 1099511627776 and 'I5' or 'I6'
    end
    -- a state's TTL (lib.lua's ttl_ms): idle ns from now in whole ms rounded up, at least 1
    -- and at least floor_ms
    local function ttl_ms(idle, floor_ms)
        local ms = 1
        if idle > 0 then
            ms = floor(idle / MS)
            if ms * MS < idle then ms = ms + 1 end
        end
        return ms < floor_ms and floor_ms or ms
    end

    -- Phase 1: every item's parameters and state (prepared), and its wait. Per item i, at
    -- base b = (i - 1) * 9 of v: its type's number in the dispatch, its two parameters, its
    -- state (v[b + 4..6] and v[b + 9]: up to four numbers, its type's own), cost and wait.
    -- (tables made by a constructor of their size for three items: one allocation, no growth)
    local v = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
    local allowed = true
    local o = A_FIELDS
    -- with a reservation id: the items' records (every item takes here), and whether a rule
    -- that holds slots is among them (decide.lua's reserves)
    local recs, holds = nil, false
    for i = 1, nitems do
        if not go then break end
        local need, cost, p1, p2 = argv[o + I_NEED], argv[o + I_COST], argv[o + I_FIELDS + 1],
            argv[o + I_FIELDS + 2]
        local tag = argv[o + I_TAG]
        if id ~= '' then
            local rec = argv[o + I_RECORD]
            if rec ~= '' then
                recs = recs or {}
                recs[#recs + 1] = rec
                if byte(rec, 2) == 49 then holds = true end
            end
        end
        local kn = KEYNO[i] -- (item i's key is KEYS[i]: its index as a decimal)
        if not (FAST_TAGS) or (kn and argv[o + I_KEY] ~= kn or
            not kn and tonumber(argv[o + I_KEY]) ~= i) or #need > 15 or
            #cost > 15 or not p1 or #p1 > 15 or not p2 or #p2 > 15 then
            go = false
            break
        end
        -- (Lua's strings are interned: equal ones compare at once; a cost is mostly its need)
        if need == cost then
            need = tonumber(need)
            cost = need
        else
            need, cost = tonumber(need), tonumber(cost)
        end
        p1, p2 = tonumber(p1), tonumber(p2)
        o = o + I_FIELDS + 2
        local b = (i - 1) * 9
        local raw = call('GET', keys[i])
        local wait
-- @FAST_CHECK@
        v[b + 2], v[b + 3], v[b + 7], v[b + 8] = p1, p2, cost, wait
        if wait ~= 0 then allowed = false end
    end

    -- Phase 2: each item's state after its take (when allowed), its value, TTL and status; all
    -- worked out before anything is written, so that declining still leaves Redis untouched.
    local out = {'ok', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
    local w = {0, 0, 0, 0, 0, 0}
    if go then
        local floor_ms = tonumber(argv[A_FLOOR_MS])
        for i = 1, nitems do
            local b = (i - 1) * 9
            local p1, p2, used, cost = v[b + 2], v[b + 3], v[b + 4], v[b + 7]
            local j = (i - 1) * 6 + 1
            local limit, remaining, reset, window, nxt = p1, 0, 0, 0, 0
-- @FAST_AFTER@
            out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] =
                v[b + 8], limit, remaining, reset, window, nxt
        end
        if go then
            -- Phase 3: the writes
            if not nowstr then
                nowstr = nows > 0 and fmt('%d%09d', nows, nowf) or
                             fmt('%d', nowf)
            end
            local resv = allowed and id ~= '' and (holds or argv[A_RESERVE] == '1')
            if resv then
                -- the reservation, as decide.lua records it (lib.lua's read_resv has the
                -- format), written first: an id already taken leaves Redis untouched. It
                -- expires reservation_ttl from now (below 1e15 ns: seconds and nanoseconds
                -- stay exact).
                local f = nowf + tonumber(argv[A_RESERVATION_TTL])
                local c = floor(f / NS)
                local s = nows + c
                f = f - c * NS
                local exp = s > 0 and fmt('%d%09d', s, f) or fmt('%d', f)
                local rec = '0\n' .. argv[A_COST] .. '\n' .. nowstr .. '\n' .. exp .. '\n' ..
                    argv[A_USAGE]
                if recs then rec = rec .. '\n' .. concat(recs, '\n') end
                if not call('SET', keys[nitems + 1], rec, 'PX', argv[A_HOLD_MS], 'NX') then
                    return {'dup'}
                end
                call('ZADD', keys[nitems + 2], exp, id)
            end
            if allowed then
                for i = 1, nitems do
                    local px = w[2 * i]
                    call('SET', keys[i], w[2 * i - 1], 'PX', type(px) == 'string' and px or
                        fmt('%d', px))
                end
            end
            out[nitems * 6 + 2] = nowstr
            for j = nitems * 6 + 3, 20 do out[j] = nil end -- the reply ends at the first nil
            return out
        end
    end
end
-- (tests: '2' asks for the fast path only, and an error where it declines)
if argv[A_GENERAL] == '2' then return redis.error_reply('the fast path declined') end
end
