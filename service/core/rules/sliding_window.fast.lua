-- sliding_window.fast.lua - the sliding window's (log's) step of the decision script's fast path
-- (service/redis/fast.lua, whose head states the contract and the bounds that make every step
-- exact). The build splices each section into that path's dispatch on this tag
-- (tools/fast_path.awk); token_bucket.fast.lua says what each section gets and gives. Its
-- state: v[b + 4] the live sum (the stored sum less the takes at or before t - window, t the
-- later of now and last), v[b + 5] the stored value (false: none), v[b + 6] last, v[b + 9] the
-- byte of the value where the live takes start. Those live takes are copied into the new value
-- as they are stored (their absolute times and amounts do not change).
--
-- Bounds, beyond fast.lua's: the sum and every take's amount are below 2^48 (8 bytes whose top
-- two are 0), so a sum less takes, or plus a cost, stays exact; every stored time is within
-- 2^19 of NOW_HI (below 2^51 + 2^32 relative to now), the window below 1e15 < 2^50, so a time
-- plus or minus the window is below 2^53.
--@fast sw
--@prelude
-- the wait until live (after the takes before byte i of raw are gone) fits room: the time each
-- live take leaves the window, the first after which it does; then a take xc at xt (not stored
-- yet); nil for never (sliding_window.lua's wait after its first loop)
local function sw_wait(raw, i, live, room, win, xt, xc)
    if live <= room then return 0 end
    local n = raw and #raw or 0
    while i <= n do
        local hi, lo, ch, cl = unpack_('>I4I4I4I4', raw, i)
        live = live - (ch * P32 + cl)
        if live <= room then return (hi - NOW_HI) * P32 + (lo - NOW_LO) + win end
        i = i + 16
    end
    if xc then
        live = live - xc
        if live <= room then return xt + win end
    end
    return nil
end
--@check limit p1, window p2 (sliding_window.lua)
if need > p1 then
    go = false -- a wait of never
    break
end
local live, last, i0 = 0, 0, 18
if raw then
    local n = #raw
    if n < 17 or (n - 17) % 16 ~= 0 or byte(raw, 1) ~= 83 then
        go = false
        break
    end
    local _, hi, lo, sh, sl = unpack_('>BI4I4I4I4', raw)
    local dh = hi - NOW_HI
    if dh >= 524288 or dh <= -524288 or sh >= 65536 then
        go = false
        break
    end
    last, live = dh * P32 + (lo - NOW_LO), sh * P32 + sl
    -- every take within the bounds; those at or before t - window leave the live sum
    local edge = (last > 0 and last or 0) - p2
    local gone = true
    for k = 18, n, 16 do
        local th, tl, ch, cl = unpack_('>I4I4I4I4', raw, k)
        local d = th - NOW_HI
        if d >= 524288 or d <= -524288 or ch >= 65536 then
            go = false
            break
        end
        if gone and d * P32 + (tl - NOW_LO) <= edge then
            live, i0 = live - (ch * P32 + cl), k + 16
        else
            gone = false
        end
    end
    if not go then break end
end
wait = sw_wait(raw, i0, live, p1 - need, p2)
if not wait or wait >= LIM then
    go = false
    break
end
v[b + 4], v[b + 5], v[b + 6], v[b + 9] = live, raw or false, last, i0
--@after live in used
local raw, last, i0 = v[b + 5], v[b + 6], v[b + 9]
local t = last > 0 and last or 0
if allowed then
    used = used + cost -- below 2^49: no saturation at 4e18
    last = t
end
window, remaining = p2, p1 - used
if used > 0 then reset = last + p2 end
if remaining < limit then
    local want = (remaining > 0 and remaining - remaining % ONE or 0) + ONE
    if want > limit then want = limit end
    nxt = sw_wait(raw or nil, i0, used, p1 - want, p2, t, allowed and cost or nil)
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
    -- the value (sliding_window.lua's dump: its live takes, cost added to the last when it was
    -- taken at t, else a take of its own) and the TTL: until the last take leaves the window
    local lo = NOW_LO + t
    local c = floor(lo / P32)
    local th, tl = NOW_HI + c, lo - c * P32
    local uh = floor(used / P32)
    local head = pack('>BI4I4I4I4', 83, th, tl, uh, used - uh * P32)
    local n = raw and #raw or 0
    local tail
    if n >= i0 then
        local eh, el, ch, cl = unpack_('>I4I4I4I4', raw, n - 15)
        if eh == th and el == tl then
            local x = ch * P32 + cl + cost
            local xh = floor(x / P32)
            tail = sub(raw, i0, n - 8) .. pack('>I4I4', xh, x - xh * P32)
        else
            local xh = floor(cost / P32)
            tail = sub(raw, i0, n) .. pack('>I4I4I4I4', th, tl, xh, cost - xh * P32)
        end
    else
        local xh = floor(cost / P32)
        tail = pack('>I4I4I4I4', th, tl, xh, cost - xh * P32)
    end
    w[2 * i - 1] = head .. tail
    w[2 * i] = ttl_ms(t + p2, floor_ms)
end
