-- decide.lua - one decision, atomically: phase 1 asks every rule of every level how long until
-- its amount fits; phase 2 takes from every rule only when all answered 0, and records the
-- reservation. Then every rule reports its status.
--
-- KEYS: the state keys the items name, then (with a reservation id) the reservation's key and
--       the reservation index.
-- ARGV: now ('' = Redis TIME), dry run ('1'/'0'), the request's cost, reservation TTL (ns),
--       least TTL of a key (ms), TTL of a reservation and of held slots (ms), reservation id
--       ('' = none), the number of items, then 8 fields an item: type tag ('' for a rule decided
--       by the caller), key index (0 for none), need, cost, 2 parameters, the caller's wait
--       (for a rule without state), the item's reservation record ('' when it keeps none).
-- Returns {'ok', then per item: wait, limit, remaining, reset_after, window, next} (statuses
-- are '' for rules decided by the caller), or {'dup'} when the reservation id is taken. next is
-- rl_status_next: the wait for one whole unit more than remains (0 when full).

local now = clock(ARGV[1])
local dry = ARGV[2] == '1'
local floor_ms, hold_ms = tonumber(ARGV[5]), tonumber(ARGV[6])
local id = ARGV[7]
local n = tonumber(ARGV[8])
local items = {}
local allowed = true

for i = 1, n do
    local o = 8 + (i - 1) * 8
    local it = {tag = ARGV[o + 1], k = tonumber(ARGV[o + 2]), rec = ARGV[o + 8]}
    if it.k > 0 then
        local T = R[it.tag]
        it.T = T
        it.p = T.params(N(ARGV[o + 5]), N(ARGV[o + 6]))
        it.cost = N(ARGV[o + 4])
        it.st = load_state(T, it.tag, KEYS[it.k])
        if not it.st then it.st = T.zero() end
        it.wait = T.wait(it.p, it.st, now, N(ARGV[o + 3]))
    else
        it.wait = N(ARGV[o + 7])
    end
    if not iszero(it.wait) then allowed = false end
    items[i] = it
end

if allowed and not dry then
    local rk, ik = KEYS[#KEYS - 1], KEYS[#KEYS]
    if id ~= '' and redis.call('EXISTS', rk) == 1 then return {'dup'} end
    for i = 1, n do
        local it = items[i]
        if it.T then
            it.T.take(it.p, it.st, now, it.cost)
            save_state(it.T, it.p, it.st, now, KEYS[it.k], floor_ms, hold_ms)
        end
    end
    if id ~= '' then
        local exp = add_sat(now, N(ARGV[4]))
        local cmd = {'HSET', rk, 'cost', ARGV[3], 'at', S(now), 'exp', S(exp), 'settled', '0'}
        local m = 0
        for i = 1, n do
            if items[i].rec ~= '' then
                m = m + 1
                cmd[#cmd + 1] = 'i' .. m
                cmd[#cmd + 1] = items[i].rec
            end
        end
        cmd[#cmd + 1] = 'n'
        cmd[#cmd + 1] = tostring(m)
        redis.call(unpack(cmd))
        redis.call('PEXPIRE', rk, hold_ms)
        redis.call('ZADD', ik, S(exp), id)
        if redis.call('PTTL', ik) < hold_ms then redis.call('PEXPIRE', ik, hold_ms) end
    end
end

local out = {'ok'}
for i = 1, n do
    local it = items[i]
    out[#out + 1] = S(it.wait)
    if it.T then
        local limit, remaining, reset, window = it.T.status(it.p, it.st, now)
        local nxt = 0
        if cmp(remaining, limit) < 0 then
            local whole = 0
            if ispos(remaining) then whole = mul((divmod(remaining, ONE)), ONE) end
            nxt = it.T.wait(it.p, it.st, now, min(add(whole, ONE), limit))
        end
        out[#out + 1] = S(limit)
        out[#out + 1] = S(remaining)
        out[#out + 1] = S(reset)
        out[#out + 1] = S(window)
        out[#out + 1] = S(nxt)
    else
        for _ = 1, 5 do out[#out + 1] = '' end
    end
end
return out
