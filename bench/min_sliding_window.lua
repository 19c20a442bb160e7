-- min_sliding_window.lua - the least a sliding-window (log) decision can cost Redis, for
-- bench/lua_cost.sh: every key's takes older than the window dropped and the rest summed, then
-- one more take logged for all or none, each key a sorted set of takes ("time:cost:n" by time).
--
-- KEYS: one per rule. ARGV: cost, then per key its limit (millionths of a unit) and window (ns).
-- Returns {allowed, remaining...}.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local cost = tonumber(ARGV[1])
local sum, ok, out = {}, 1, {0}
for i = 1, #KEYS do
    local limit, win = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]) / 1e9
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. (now - win))
    local s = 0
    for _, m in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
        s = s + tonumber(string.match(m, '^[^:]*:([^:]*)'))
    end
    sum[i] = s
    if s + cost > limit then ok = 0 end
end
for i = 1, #KEYS do
    local limit, win = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]) / 1e9
    if ok == 1 then
        local n = redis.call('ZCARD', KEYS[i])
        redis.call('ZADD', KEYS[i], now, now .. ':' .. cost .. ':' .. n)
        redis.call('PEXPIRE', KEYS[i], math.ceil(win * 1000) + 1)
        sum[i] = sum[i] + cost
    end
    out[i + 1] = limit - sum[i]
end
out[1] = ok
return out
