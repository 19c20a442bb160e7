-- sliding_window_counter.fast.lua - the sliding window counter's step of the decision script's
-- fast path (service/redis/fast.lua, whose head states the contract and the bounds that make
-- every step exact, now_mod among them). The build splices each section into that path's
-- dispatch on this tag (tools/fast_path.awk); token_bucket.fast.lua says what each section gets
-- and gives. Its state: v[b + 4] cur, v[b + 5] prev, v[b + 6] last, v[b + 9] the start of
-- last's window (ws).
--
-- Bounds, beyond fast.lua's: the products prev * (w - e) and room * w (below 2^48 * 2^50 and
-- 2^50 * 2^50) are compared exactly as lib.lua's cmp_prod does (rounding is monotonic, so
-- differing rounded products order the exact ones; on a tie the TwoProduct errors decide), and
-- divided by mdm (products below 2^99, quotients below prev or w, so below 2^51); a time is a
-- window's start (below 2^51 + 2^32) plus at most 2w plus an offset below w: below 2^53.
--@fast swc
--@prelude
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
-- the earliest offset into a window with counts prev and cur where cost fits (w: none), nil
-- beyond the bounds (sliding_window_counter.lua's first_fit)
local function swc_first_fit(limit, w, prev, cur, cost)
    local room = limit - cost - cur
    if room < 0 then return w end
    if prev == 0 or room >= prev then return 0 end
    local k = mdm(room, w, 0, prev)
    return k and w - k
end
-- the wait for cost (<= limit) at last, in the window starting at ws; nil beyond the bounds
local function swc_wait(limit, w, cur, prev, ws, last, cost)
    -- fits: room >= 0 and prev * (w - e) <= room * w (lib.lua's cmp_prod)
    local room = limit - cur - cost
    if room >= 0 then
        local a = w - (last - ws)
        local x, y = prev * a, room * w
        if x < y or (x == y and prod_err(prev, a, x) <= prod_err(room, w, y)) then return 0 end
    end
    local e = swc_first_fit(limit, w, prev, cur, cost)
    if not e then return nil end
    if e < w then return ws + e end
    e = swc_first_fit(limit, w, cur, 0, cost)
    return e and ws + w + e
end
--@check limit p1, window p2 (sliding_window_counter.lua)
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
    -- prep (roll): now's window starts at -m, last's at ls; the window right after last's keeps
    -- its cur as prev, a later one nothing
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
v[b + 4], v[b + 5], v[b + 6], v[b + 9] = cur, prev, last, ws
--@after cur in used
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
    w[2 * i - 1] = pack('>BI4I4I4I4' .. varfmt(prev), 87, NOW_HI + c, lo - c * P32, uh,
        used - uh * P32, prev)
    w[2 * i] = ttl_ms(idle, floor_ms)
end
