-- min_gcra.lua - the least a GCRA decision can cost Redis, for bench/lua_cost.sh: the
-- theoretical arrival time of every key checked, then moved on for all or none, in plain double
-- arithmetic (not exact), each key a string holding its arrival time (s).
--
-- KEYS: one per rule. ARGV: cost, then per key its rate a second and burst (millionths of a
-- unit). Returns {allowed, remaining...}.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local cost = tonumber(ARGV[1]) / 1e6
local tat, ok, out = {}, 1, {0}
for i = 1, #KEYS do
    local rate, burst = tonumber(ARGV[2 * i]) / 1e6, tonumber(ARGV[2 * i + 1]) / 1e6
    local at = math.max(tonumber(redis.call('GET', KEYS[i])) or now, now)
    tat[i] = at
    if at + cost / rate - now > burst / rate then ok = 0 end
end
for i = 1, #KEYS do
    local rate, burst = tonumber(ARGV[2 * i]) / 1e6, tonumber(ARGV[2 * i + 1]) / 1e6
    if ok == 1 then
        tat[i] = tat[i] + cost / rate
        redis.call('SET', KEYS[i], tat[i], 'PX', math.ceil((tat[i] - now) * 1000) + 1)
    end
    out[i + 1] = math.floor(burst - (tat[i] - now) * rate)
end
out[1] = ok
return out
