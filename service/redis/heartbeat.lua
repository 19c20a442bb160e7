-- heartbeat.lua - this instance is alive; counts the instances that are.
--
-- KEYS: the fleet (a sorted set of instance ids by the Redis time of their last heartbeat).
-- ARGV: this instance's id, ms after which a silent instance counts as gone, the set's TTL (ms).
-- Returns the number of live instances, this one included.

local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('ZCARD', KEYS[1])
