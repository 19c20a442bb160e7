-- token_bucket.fast.lua - the token bucket's step of the decision script's fast path (service/redis/fast.lua,
-- whose head states the contract and the bounds that make every step exact). The build
-- splices each section into that path's dispatch on this tag (tools/fast_path.awk):
--   prelude: locals of this type, made once per call;
--   check:   the item's stored value `raw` (or nil) and its numbers need, cost, p1, p2 into its
--            state v[b + 4..6] (and v[b + 9]) and `wait` (0: it fits), or `go = false; break`
--            to decline;
--   after:   from p1, p2, used (v[b + 4]), v[b + 5..6] (and v[b + 9]), cost and `allowed`,
--            the item's limit, remaining, reset, window and nxt, and when allowed its value and
--            TTL in ms (w[2i - 1], w[2i]: a number, or its decimal), or `go = false; break` to
--            decline.
--@fast tb
--@prelude
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
--@check capacity p1, rate p2 (token_bucket.lua)
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
v[b + 4], v[b + 5], v[b + 6] = used, frac, last
--@after
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
    w[2 * i] = ttl_ms(used ~= 0 and last + full or 0, floor_ms)
end
