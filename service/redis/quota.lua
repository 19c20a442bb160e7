-- quota.lua - stores or deletes a key's quota and tells every instance.
--
-- KEYS: the quota hash (its name is also the channel). ARGV: the key, the quota as JSON ('' to
-- delete). Returns 1 when the hash changed a field's existence (added or deleted), else 0.

local r
if ARGV[2] == '' then
    r = redis.call('HDEL', KEYS[1], ARGV[1])
else
    r = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return r
