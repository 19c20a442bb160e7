-- fast.lua - the decision script's fast path: the common decision (not dry, no reservation, no
-- modes, nothing kept, every item a token bucket, GCRA, fixed window or sliding window counter:
-- the default configuration's shape) worked out in plain Lua numbers, with no tables of the
-- general path (lib.lua, bigint.lua) made.
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
--   * a window w (ns) lies in [1e6, 2^50), else the path declines; m = now % w is worked out as
--     lib.lua's now_mod does (whose comment has the proof: exact for now < 4e18); a time t
--     relative to now (|t| < 2^51 + 2^32) starts its window at t - (m + t) % w, the absolute
--     t - t % w as in C: m + t is congruent to the absolute t modulo w, |m + t| < 2^52, so
--     Lua's % (a - floor(a / b) * b) is exact there and lands in [0, w) (lib.lua's start_of);
--     that start plus w is below 2^52 + 2^50; a time is at most a start plus 2w plus an
--     offset below w: below 2^51 + 2^32 + 3 * 2^50 < 2^53;
--   * a sliding window counter's products (prev * (w - e), room * w: below 2^48 * 2^50 and
--     2^50 * 2^50) are compared exactly as lib.lua's cmp_prod does (rounding is monotonic; on
--     a tie the TwoProduct errors decide), and divided by mdm (products below 2^99, quotients
--     below prev or w, so below 2^51).
do
local argv, keys = ARGV, KEYS
local nitems = tonumber(argv[A_ITEMS])
if argv[A_GENERAL] == '' and argv[A_DRY] == '0' and argv[A_ID] == '' and argv[A_MODES] == '' and
    argv[A_KEEP] == '0' and nitems and nitems >= 1 and #keys == nitems then
    local floor, tonumber, sub, byte = math.floor, tonumber, string.sub, string.byte
    local unpack_, pack = struct.unpack, struct.pack
    local call, fmt = redis.call, string.format -- (a global's lookup costs more in a library)
    local LIM, P32, P50, P51, P99 = 9007199254740992, 4294967296, 1125899906842624,
        2251799813685248, 2 ^ 99
    local NS, MS, ONE = 1000000000, 1000000, 1000000
    local go = true

    -- now: seconds, nanoseconds and halves (lib.lua's clock)
    local nows, nowf
    local nowstr = argv[A_NOW]
    if nowstr == '' then
        local t = call('TIME')
        nows, nowf, nowstr = tonumber(t[1]), tonumber(t[2]) * 1000, nil
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

    -- token bucket: ceil(((used - target) * 1e9 - frac) / rate), nil beyond the bounds
    local function tb_time_to(used, frac, rate, target)
        if used <= target then return 0 end
        local d = (used - target) * NS
        if d < LIM then
            local x = d - frac
            local q = floor(x / rate)
            if q * rate < x then q = q + 1 end
            return q
        end
        if rate >= P50 then return nil end
        local q, r = mdm(used - target, NS, -frac, rate)
        if q and r ~= 0 then q = q + 1 end
        return q
    end

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

    -- the error e of a * b = p + e, p = a * b rounded (Dekker's TwoProduct, Veltkamp's split)
    local function prod_err(a, b, p)
        local s = 134217729 * a
        local ah = s - (s - a)
        local al = a - ah
        s = 134217729 * b
        local bh = s - (s - b)
        local bl = b - bh
        return ((ah * bh - p) + ah * bl + al * bh) + al * bl
    end

    -- sliding window counter (sliding_window_counter.lua): the earliest offset into a window
    -- with counts prev and cur where cost fits (w: none), nil beyond the bounds
    local function swc_first_fit(limit, w, prev, cur, cost)
        local room = limit - cost - cur
        if room < 0 then return w end
        if prev == 0 or room >= prev then return 0 end
        local k = mdm(room, w, 0, prev)
        return k and w - k
    end
    -- its wait for cost (<= limit) at last, in the window starting at ws; nil beyond the bounds
    local function swc_wait(limit, w, cur, prev, ws, last, cost)
        -- fits: room >= 0 and prev * (w - e) <= room * w (lib.lua's cmp_prod)
        local room = limit - cur - cost
        if room >= 0 then
            local a = w - (last - ws)
            local x, y = prev * a, room * w
            if x < y or (x == y and prod_err(prev, a, x) <= prod_err(room, w, y)) then
                return 0
            end
        end
        local e = swc_first_fit(limit, w, prev, cur, cost)
        if not e then return nil end
        if e < w then return ws + e end
        e = swc_first_fit(limit, w, cur, 0, cost)
        return e and ws + w + e
    end

    -- Phase 1: every item's parameters and state (prepared), and its wait. Per item i, at
    -- base b = (i - 1) * 9 of v: its kind (1: token bucket, 2: GCRA, 3: fixed window, 4:
    -- sliding window counter), its two parameters, its state (a token bucket's used, frac,
    -- last; GCRA's tat, rem, last; a fixed window's count, the start of its window, last; a
    -- sliding window counter's cur, prev, last, and at b + 9 the start of its window), cost
    -- and wait.
    -- (tables made by a constructor of their size for three items: one allocation, no growth)
    local v = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
    local allowed = true
    local o = A_FIELDS
    for i = 1, nitems do
        if not go then break end
        local need, cost, p1, p2 = argv[o + I_NEED], argv[o + I_COST], argv[o + I_FIELDS + 1],
            argv[o + I_FIELDS + 2]
        local tag = argv[o + I_TAG]
        if (tag ~= 'tb' and tag ~= 'gcra' and tag ~= 'fw' and tag ~= 'swc') or
            tonumber(argv[o + I_KEY]) ~= i or #need > 15 or #cost > 15 or not p1 or #p1 > 15 or
            not p2 or #p2 > 15 then
            go = false
            break
        end
        need, cost, p1, p2 = tonumber(need), tonumber(cost), tonumber(p1), tonumber(p2)
        o = o + I_FIELDS + 2
        local b = (i - 1) * 9
        local raw = call('GET', keys[i])
        local wait
        if tag == 'tb' then -- a token bucket: capacity p1, rate p2
            local used, frac, last = 0, 0, 0
            if raw then
                local n = #raw
                if n < 9 then
                    go = false
                    break
                end
                local k, hi, lo = unpack_('>BI4I4', raw)
                local dh = hi - NOW_HI
                if dh >= 524288 or dh <= -524288 then
                    go = false
                    break
                end
                last = dh * P32 + (lo - NOW_LO)
                if k == 84 and n <= 15 then
                    used = uint(raw, 10, n)
                elseif k == 85 and n >= 13 and n <= 19 then
                    frac, used = uint(raw, 10, 13), uint(raw, 14, n)
                else
                    go = false
                    break
                end
            end
            -- refill to now (token_bucket.lua's prep)
            if last < 0 then
                if used == 0 then
                    frac = 0
                elseif -last * p2 > used * NS then
                    used, frac = 0, 0
                else
                    local gain, rem = mdm(-last, p2, frac, NS)
                    if not gain then
                        go = false
                        break
                    end
                    if gain >= used then
                        used, frac = 0, 0
                    else
                        used, frac = used - gain, rem
                    end
                end
                last = 0
            end
            if need > p1 then
                go = false -- a wait of never
                break
            end
            local dt = tb_time_to(used, frac, p2, p1 - need)
            if not dt then
                go = false
                break
            end
            wait = dt == 0 and 0 or last + dt
            if wait >= LIM then
                go = false
                break
            end
            v[b + 1], v[b + 4], v[b + 5], v[b + 6] = 1, used, frac, last
        elseif tag == 'fw' then -- a fixed window (fixed_window.lua): limit p1, window p2
            if p2 < MS or p2 >= P50 or need > p1 then
                go = false -- a window out of now_mod's range, or a wait of never
                break
            end
            local m = now_mod(p2)
            local count, last = 0, 0
            if raw then
                local n = #raw
                if n < 9 or n > 15 or byte(raw, 1) ~= 70 then
                    go = false
                    break
                end
                local _, hi, lo = unpack_('>BI4I4', raw)
                local dh = hi - NOW_HI
                if dh >= 524288 or dh <= -524288 then
                    go = false
                    break
                end
                last = dh * P32 + (lo - NOW_LO)
                count = uint(raw, 10, n)
            end
            -- prep: a last before now becomes now; its count stays only when both lie in the
            -- same window, i.e. when the absolute last is at least now - now % w (m + last >= 0)
            if last < 0 then
                if m + last < 0 then count = 0 end
                last = 0
            end
            local ws = last - (m + last) % p2 -- the start of last's window
            wait = count <= p1 - need and 0 or ws + p2
            if wait >= LIM then
                go = false
                break
            end
            v[b + 1], v[b + 4], v[b + 5], v[b + 6] = 3, count, ws, last
        elseif tag == 'swc' then -- a sliding window counter: limit p1, window p2
            if p2 < MS or p2 >= P50 or need > p1 then
                go = false -- a window out of now_mod's range, or a wait of never
                break
            end
            local m = now_mod(p2)
            local cur, prev, last = 0, 0, 0
            if raw then
                local n = #raw
                if n < 17 or n > 23 or byte(raw, 1) ~= 87 then
                    go = false
                    break
                end
                local _, hi, lo, ch, cl = unpack_('>BI4I4I2I6', raw)
                local dh = hi - NOW_HI
                if ch ~= 0 or dh >= 524288 or dh <= -524288 then
                    go = false
                    break
                end
                last, cur, prev = dh * P32 + (lo - NOW_LO), cl, uint(raw, 18, n)
            end
            local ws
            if last < 0 then
                -- prep (roll): now's window is ws = -m; last's starts at ls; the window right
                -- after last's keeps its cur as prev, a later one nothing
                ws = -m
                local ls = last - (m + last) % p2
                if ws ~= ls then
                    prev = ws - ls == p2 and cur or 0
                    cur = 0
                end
                last = 0
            else
                ws = last - (m + last) % p2
            end
            wait = swc_wait(p1, p2, cur, prev, ws, last, need)
            if not wait or wait >= LIM then
                go = false
                break
            end
            v[b + 1], v[b + 4], v[b + 5], v[b + 6], v[b + 9] = 4, cur, prev, last, ws
        else -- GCRA (gcra.lua): rate p1, burst p2; its state tat, last, rem
            local tat, last, rem = 0, 0, 0
            if raw then
                local n = #raw
                if n < 17 or n > 23 or byte(raw, 1) ~= 71 then
                    go = false
                    break
                end
                local _, th, tl, lh, ll = unpack_('>BI4I4I4I4', raw)
                local dt, dl = th - NOW_HI, lh - NOW_HI
                if dt >= 524288 or dt <= -524288 or dl >= 524288 or dl <= -524288 then
                    go = false
                    break
                end
                tat, last = dt * P32 + (tl - NOW_LO), dl * P32 + (ll - NOW_LO)
                rem = uint(raw, 18, n)
            end
            -- prep: last = max(now, last); a TAT not ahead of it becomes it, with rem 0
            if last < 0 then last = 0 end
            if tat < last or (tat == last and rem == 0) then tat, rem = last, 0 end
            -- ahead of last, scaled: (tat - last) * rate + rem = qa * 1e9 + ra; fits when that
            -- is at most (burst - need) * 1e9, else waits ceil((A - k * 1e9) / rate)
            local qa, ra = mdm(tat - last, p1, rem, NS)
            if not qa or need > p2 then
                go = false
                break
            end
            local k = p2 - need
            if qa < k or (qa == k and ra == 0) then
                wait = 0
            else
                local q, r = mdm(qa - k, NS, ra, p1)
                if not q then
                    go = false
                    break
                end
                wait = last + (r ~= 0 and q + 1 or q)
                if wait >= LIM then
                    go = false
                    break
                end
            end
            v[b + 1], v[b + 4], v[b + 5], v[b + 6] = 2, tat, rem, last
        end
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
            if v[b + 1] == 2 then
                -- GCRA: rate p1, burst p2, tat (in used), rem, last
                local tat, rem, last = used, v[b + 5], v[b + 6]
                if allowed then
                    -- take: TAT moves on by floor((rem + cost * 1e9) / rate), rem keeps the rest
                    local q, r = mdm(cost, NS, rem, p1)
                    if not q or tat + q >= P51 then
                        go = false
                        break
                    end
                    tat, rem = tat + q, r
                end
                local qa, ra = mdm(tat - last, p1, rem, NS)
                local wq, wr = mdm(p2, NS, 0, p1)
                if not qa or not wq then
                    go = false
                    break
                end
                limit, window = p2, wr ~= 0 and wq + 1 or wq
                remaining = p2 - (ra ~= 0 and qa + 1 or qa)
                if tat ~= last or rem ~= 0 then
                    -- ceil(A / rate) = (tat - last) + ceil(rem / rate)
                    local c = floor(rem / p1)
                    if c * p1 < rem then c = c + 1 end
                    reset = tat + c
                end
                if remaining < limit then
                    local want = (remaining > 0 and remaining - remaining % ONE or 0) + ONE
                    if want > limit then want = limit end
                    local k = p2 - want
                    if not (qa < k or (qa == k and ra == 0)) then
                        local q, r = mdm(qa - k, NS, ra, p1)
                        if not q then
                            go = false
                            break
                        end
                        nxt = last + (r ~= 0 and q + 1 or q)
                    end
                end
                if reset >= LIM or nxt >= LIM then
                    go = false
                    break
                end
                if allowed then
                    -- the value (gcra.lua's dump) and the TTL: until the TAT (one more ns with a
                    -- remainder)
                    local lo = NOW_LO + tat
                    local c = floor(lo / P32)
                    local th, tl = NOW_HI + c, lo - c * P32
                    lo = NOW_LO + last
                    c = floor(lo / P32)
                    w[2 * i - 1] = pack('>BI4I4I4I4' .. varfmt(rem), 71, th, tl, NOW_HI + c,
                        lo - c * P32, rem)
                    local idle = rem ~= 0 and tat + 1 or tat
                    local ms = 1
                    if idle > 0 then
                        ms = floor(idle / MS)
                        if ms * MS < idle then ms = ms + 1 end
                    end
                    if ms < floor_ms then ms = floor_ms end
                    w[2 * i] = ms
                end
            elseif v[b + 1] == 4 then
                -- a sliding window counter: limit p1, window p2, cur (in used), prev, last, ws
                local prev, last, ws = v[b + 5], v[b + 6], v[b + 9]
                if allowed then
                    used = used + cost -- below 2^51: no saturation at 4e18
                    if used >= 281474976710656 then
                        go = false
                        break
                    end
                end
                -- the estimate: cur + ceil(prev * (w - e) / w)
                local q, r = mdm(prev, p2 - (last - ws), 0, p2)
                if not q then
                    go = false
                    break
                end
                window, remaining = p2, p1 - (used + (r ~= 0 and q + 1 or q))
                local idle = 0
                if used ~= 0 then
                    idle = ws + 2 * p2
                elseif prev ~= 0 then
                    idle = ws + p2
                end
                reset = idle
                if remaining < limit then
                    local want = (remaining > 0 and remaining - remaining % ONE or 0) + ONE
                    if want > limit then want = limit end
                    nxt = swc_wait(p1, p2, used, prev, ws, last, want)
                    if not nxt then
                        go = false
                        break
                    end
                end
                if reset >= LIM or nxt >= LIM then
                    go = false
                    break
                end
                if allowed then
                    -- the value (sliding_window_counter.lua's dump) and the TTL: until idle
                    local lo = NOW_LO + last
                    local c = floor(lo / P32)
                    local uh = floor(used / P32)
                    w[2 * i - 1] = pack('>BI4I4I4I4' .. varfmt(prev), 87, NOW_HI + c,
                        lo - c * P32, uh, used - uh * P32, prev)
                    local ms = 1
                    if idle > 0 then
                        ms = floor(idle / MS)
                        if ms * MS < idle then ms = ms + 1 end
                    end
                    if ms < floor_ms then ms = floor_ms end
                    w[2 * i] = ms
                end
            elseif v[b + 1] == 3 then
                -- a fixed window: limit p1, window p2, count (in used), ws, last
                local ws, last = v[b + 5], v[b + 6]
                if allowed then
                    used = used + cost -- below 2^51: no saturation at 4e18
                    if used >= 281474976710656 then
                        go = false
                        break
                    end
                end
                window, remaining = p2, p1 - used
                if used ~= 0 then reset = ws + p2 end
                if remaining < limit then
                    local want = (remaining > 0 and remaining - remaining % ONE or 0) + ONE
                    if want > limit then want = limit end
                    nxt = used <= p1 - want and 0 or ws + p2
                end
                if allowed then
                    -- the value (fixed_window.lua's dump) and the TTL: until the window ends
                    local lo = NOW_LO + last
                    local c = floor(lo / P32)
                    w[2 * i - 1] = pack('>BI4I4' .. varfmt(used), 70, NOW_HI + c, lo - c * P32,
                        used)
                    local ms = 1
                    if used ~= 0 then
                        local idle = ws + p2
                        if idle > 0 then
                            ms = floor(idle / MS)
                            if ms * MS < idle then ms = ms + 1 end
                        end
                    end
                    if ms < floor_ms then ms = floor_ms end
                    w[2 * i] = ms
                end
            else -- a token bucket
                local frac, last = v[b + 5], v[b + 6]
                if allowed then
                    used = used + cost -- below 2^51: no saturation at 4e18
                    if used >= 281474976710656 then
                        go = false
                        break
                    end
                end
                local full = tb_time_to(used, frac, p2, 0)
                local q, r = mdm(p1, NS, 0, p2)
                if not full or not q then
                    go = false
                    break
                end
                window = r ~= 0 and q + 1 or q
                if full ~= 0 then reset = last + full end
                remaining = p1 - used
                if remaining < limit then
                    local want = (remaining > 0 and remaining - remaining % ONE or 0) + ONE
                    if want > limit then want = limit end
                    local dt = tb_time_to(used, frac, p2, p1 - want)
                    if not dt then
                        go = false
                        break
                    end
                    nxt = dt == 0 and 0 or last + dt
                end
                if reset >= LIM or nxt >= LIM then
                    go = false
                    break
                end
                if allowed then
                    -- the value (token_bucket.lua's dump) and the TTL (lib.lua's ttl_ms)
                    local lo = NOW_LO + last
                    local c = floor(lo / P32)
                    local hi = NOW_HI + c
                    lo = lo - c * P32
                    if frac == 0 then
                        w[2 * i - 1] = pack('>BI4I4' .. varfmt(used), 84, hi, lo, used)
                    else
                        w[2 * i - 1] = pack('>BI4I4I4' .. varfmt(used), 85, hi, lo, frac, used)
                    end
                    local ms = 1
                    if used ~= 0 then
                        local idle = last + full
                        if idle > 0 then
                            ms = floor(idle / MS)
                            if ms * MS < idle then ms = ms + 1 end
                        end
                    end
                    if ms < floor_ms then ms = floor_ms end
                    w[2 * i] = ms
                end
            end
            out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] =
                v[b + 8], limit, remaining, reset, window, nxt
        end
        if go then
            -- Phase 3: the writes
            if allowed then
                for i = 1, nitems do
                    call('SET', keys[i], w[2 * i - 1], 'PX', fmt('%d', w[2 * i]))
                end
            end
            if not nowstr then
                nowstr = nows > 0 and fmt('%d%09d', nows, nowf) or
                             fmt('%d', nowf)
            end
            out[nitems * 6 + 2] = nowstr
            for j = nitems * 6 + 3, 20 do out[j] = nil end -- the reply ends at the first nil
            return out
        end
    end
end
end
