-- fixed_window.fast.lua - the fixed window's step of the decision script's fast path
-- (service/redis/fast.lua, whose head states the contract and the bounds that make every step
-- exact, now_mod among them). The build splices each section into that path's dispatch on this
-- tag (tools/fast_path.awk); token_bucket.fast.lua says what each section gets and gives.
-- Its state: v[b + 4] count, v[b + 5] the start of last's window (ws), v[b + 6] last.
--@fast fw
--@prelude
--@check limit p1, window p2 (fixed_window.lua)
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
-- prep: a last before now becomes now; its count stays only when both lie in the same window,
-- i.e. when the absolute last is at least now - now % w (m + last >= 0)
if last < 0 then
    if m + last < 0 then count = 0 end
    last = 0
end
local ws = last - (m + last) % p2 -- the start of last's window (fast.lua's head)
wait = count <= p1 - need and 0 or ws + p2
if wait >= LIM then
    go = false
    break
end
v[b + 4], v[b + 5], v[b + 6] = count, ws, last
--@after count in used
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
    w[2 * i - 1] = pack('>BI4I4' .. varfmt(used), 70, NOW_HI + c, lo - c * P32, used)
    w[2 * i] = ttl_ms(used ~= 0 and ws + p2 or 0, floor_ms)
end
