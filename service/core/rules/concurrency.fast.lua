-- concurrency.fast.lua - the concurrency limit's step of the decision script's fast path
-- (service/redis/fast.lua, whose head states the contract and the bounds that make every step
-- exact). The build splices each section into that path's dispatch on this tag
-- (tools/fast_path.awk); token_bucket.fast.lua says what each section gets and gives. Its state:
-- v[b + 4] the amount held, v[b + 5] 1 when the key held a value (else it has no TTL to
-- keep: no PTTL is asked). The slots themselves are the reservation's (fast.lua's phase 3
-- records it, as decide.lua does): its release gives them back, its expiry too.
--
-- Bounds, beyond fast.lua's: the amount held is stored as a decimal of at most 15 digits
-- (below 1e15 < 2^50), so held plus a cost stays below 2^51.
--@fast cc
--@prelude
local cc_hold_s = argv[A_HOLD_MS]
local cc_hold = tonumber(cc_hold_s)
local find = string.find
--@check limit p1, retry p2 (concurrency.lua)
if need > p1 then
    go = false -- a wait of never
    break
end
local held = 0
if raw then
    if #raw > 15 or not find(raw, '^%d+$') then
        go = false
        break
    end
    held = tonumber(raw)
end
wait = held <= p1 - need and 0 or p2
v[b + 4], v[b + 5] = held, raw and 1 or 0
--@after held in used
if allowed then used = used + cost end
remaining = p1 - used
if remaining < limit then
    local want = (remaining > 0 and remaining - remaining % ONE or 0) + ONE
    if want > limit then want = limit end
    nxt = used <= p1 - want and 0 or p2
end
if allowed then
    -- the value (concurrency.lua's dump) and the TTL (lib.lua's ttl_ms): a state holding slots
    -- lives as long as a reservation can, and no shorter than it had to already
    local ms = 1
    if used ~= 0 then
        ms = cc_hold
        if v[b + 5] == 1 then
            local cur = call('PTTL', keys[i])
            if cur > ms then ms = cur end
        end
    end
    w[2 * i - 1] = fmt('%d', used)
    -- (the TTL as the decimal the caller sent when it is that: no formatting)
    w[2 * i] = ms < floor_ms and floor_ms or ms == cc_hold and cc_hold_s or ms
end
