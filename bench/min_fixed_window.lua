-- min_fixed_window.lua - the least a fixed-window decision can cost Redis, for
-- bench/lua_cost.sh: every key's count in the current window checked, then raised for all or
-- none, each key a hash {w = window start, c = count}.
--
-- KEYS: one per rule. ARGV: cost, then per key its limit (millionths of a unit) and window (ns).
-- Returns {allowed, remaining...}.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local cost = tonumber(ARGV[1])
local c, w, ok, out = {}, {}, 1, {0}
for i = 1, #KEYS do
    local limit, win = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]) / 1e9
    local start = math.floor(now / win) * win
    local s = redis.call('HMGET', KEYS[i], 'w', 'c')
    c[i] = tonumber(s[1]) == start and tonumber(s[2]) or 0
    w[i] = start
    if c[i] + cost > limit then ok = 0 end
end
for i = 1, #KEYS do
    local limit, win = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]) / 1e9
    if ok == 1 then
        c[i] = c[i] + cost
        redis.call('HSET', KEYS[i], 'w', w[i], 'c', c[i])
        redis.call('PEXPIRE', KEYS[i], math.ceil((w[i] + win - now) * 1000) + 1)
    end
    out[i + 1] = limit - c[i]
end
out[1] = ok
return out
