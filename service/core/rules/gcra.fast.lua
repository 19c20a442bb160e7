-- gcra.fast.lua - the GCRA's step of the decision script's fast path (service/redis/fast.lua,
-- whose head states the contract and the bounds that make every step exact). The build
-- splices each section into that path's dispatch on this tag (tools/fast_path.awk):
--   prelude: locals of this type, made once per call;
--   check:   the item's stored value `raw` (or nil) and its numbers need, cost, p1, p2 into its
--            state v[b + 4..6] and `wait` (0: it fits), or `go = false; break` to decline;
--   after:   from p1, p2, used (v[b + 4]), v[b + 5..6], cost and `allowed`, the item's limit,
--            remaining, reset, window and nxt, and when allowed its value and TTL (w[2i - 1],
--            w[2i]), or `go = false; break` to decline.
--@fast gcra
--@check rate p1, burst p2 (gcra.lua); its state tat, rem, last
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
v[b + 4], v[b + 5], v[b + 6] = tat, rem, last
--@after
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
    w[2 * i] = ttl_ms(rem ~= 0 and tat + 1 or tat, floor_ms)
end
