-- min_concurrency.lua - the least a concurrency decision can cost Redis, for
-- bench/lua_cost.sh: every key's slots held checked, then taken for all or none, each key a
-- string holding the amount held.
--
-- KEYS: one per rule. ARGV: cost, then per key its limit (millionths of a unit) and retry (ns),
-- and last how long held slots live (ms). Returns {allowed, remaining...}.

local cost = tonumber(ARGV[1])
local held, ok, out = {}, 1, {0}
local hold = ARGV[2 * #KEYS + 2]
for i = 1, #KEYS do
    held[i] = tonumber(redis.call('GET', KEYS[i])) or 0
    if held[i] + cost > tonumber(ARGV[2 * i]) then ok = 0 end
end
for i = 1, #KEYS do
    if ok == 1 then
        held[i] = redis.call('INCRBY', KEYS[i], cost)
        redis.call('PEXPIRE', KEYS[i], hold)
    end
    out[i + 1] = tonumber(ARGV[2 * i]) - held[i]
end
out[1] = ok
return out
