-- min_token_bucket.lua - the least a token-bucket decision can cost Redis, for bench/lua_cost.sh
-- to compare the decision script with: refill, check and take on every key, all or nothing,
-- in plain double arithmetic (not exact), each bucket a hash {v = tokens, t = last refill}.
--
-- KEYS: one bucket per rule. ARGV: cost, then per key its capacity and rate a second (all in
-- millionths of a unit, as the decision script gets them). Returns {allowed, remaining...}.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local cost = tonumber(ARGV[1]) / 1e6
local v, ok, out = {}, 1, {0}
for i = 1, #KEYS do
    local cap, rate = tonumber(ARGV[2 * i]) / 1e6, tonumber(ARGV[2 * i + 1]) / 1e6
    local s = redis.call('HMGET', KEYS[i], 'v', 't')
    local have = tonumber(s[1])
    have = have and math.min(cap, have + (now - tonumber(s[2])) * rate) or cap
    v[i] = have
    if have < cost then ok = 0 end
end
for i = 1, #KEYS do
    local cap, rate = tonumber(ARGV[2 * i]) / 1e6, tonumber(ARGV[2 * i + 1]) / 1e6
    if ok == 1 then
        v[i] = v[i] - cost
        redis.call('HSET', KEYS[i], 'v', v[i], 't', now)
        redis.call('PEXPIRE', KEYS[i], math.ceil((cap - v[i]) / rate * 1000) + 1)
    end
    out[i + 1] = math.floor(v[i])
end
out[1] = ok
return out
