-- min_sliding_window_counter.lua - the least a sliding-window-counter decision can cost Redis,
-- for bench/lua_cost.sh: every key's estimate (the previous window's count weighed by how much
-- of it is still in the window, plus the current one's) checked, then raised for all or none,
-- in plain double arithmetic (not exact), each key a hash {w = window start, c = current,
-- p = previous}.
--
-- KEYS: one per rule. ARGV: cost, then per key its limit (millionths of a unit) and window (ns).
-- Returns {allowed, remaining...}.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local cost = tonumber(ARGV[1])
local c, p, w, est, ok, out = {}, {}, {}, {}, 1, {0}
for i = 1, #KEYS do
    local limit, win = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]) / 1e9
    local start = math.floor(now / win) * win
    local s = redis.call('HMGET', KEYS[i], 'w', 'c', 'p')
    local at = tonumber(s[1])
    if at == start then
        c[i], p[i] = tonumber(s[2]), tonumber(s[3])
    elseif at and math.abs(at + win - start) < win / 2 then
        c[i], p[i] = 0, tonumber(s[2])
    else
        c[i], p[i] = 0, 0
    end
    w[i] = start
    est[i] = p[i] * (1 - (now - start) / win) + c[i]
    if est[i] + cost > limit then ok = 0 end
end
for i = 1, #KEYS do
    local limit, win = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]) / 1e9
    if ok == 1 then
        c[i] = c[i] + cost
        est[i] = est[i] + cost
        redis.call('HSET', KEYS[i], 'w', w[i], 'c', c[i], 'p', p[i])
        redis.call('PEXPIRE', KEYS[i], math.ceil((w[i] + 2 * win - now) * 1000) + 1)
    end
    out[i + 1] = math.floor(limit - est[i])
end
out[1] = ok
return out
