-- min_concurrency.lua - the least a concurrency decision can cost Redis, for bench/lua_cost.sh:
-- what any correct concurrency limiter must do per key. A slot is held until its client
-- releases it (ZREM of its member) or, when that client is gone, until it expires on its own:
-- so each key is a sorted set of the slots held, by the time each expires. Every key's expired
-- slots dropped and the rest counted, then a slot taken on every key or on none, each key's
-- life extended to the slot's. Every slot is of the request's cost (the one cost the benchmark
-- sends), so that counting the slots is enough: a limiter of mixed costs would sum them.
--
-- KEYS: one per rule. ARGV: cost, then per key its limit (millionths of a unit) and retry (ns),
-- then how long a slot lives (ms) and the request's id. Returns {allowed, remaining...}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cost = tonumber(ARGV[1])
local n = #KEYS
local hold, id = tonumber(ARGV[2 * n + 2]), ARGV[2 * n + 3]
local held, ok, out = {}, 1, {0}
for i = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    held[i] = redis.call('ZCARD', KEYS[i]) * cost
    if held[i] + cost > tonumber(ARGV[2 * i]) then ok = 0 end
end
for i = 1, n do
    if ok == 1 then
        redis.call('ZADD', KEYS[i], now + hold, id)
        redis.call('PEXPIRE', KEYS[i], hold)
        held[i] = held[i] + cost
    end
    out[i + 1] = tonumber(ARGV[2 * i]) - held[i]
end
out[1] = ok
return out
