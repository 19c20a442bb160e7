-- duty.lua - the fleet's housekeeping (expiring reservations, counting state keys) is done by
-- one instance at a time: the holder of this claim, which renews it with every heartbeat and
-- publishes what it counted; the others read that. A claim not renewed within its TTL (its
-- holder died) is taken by the next instance to ask.
--
-- KEYS: the claim (a hash: holder = the holding instance's id, figures = what it published).
-- ARGV: this instance's id, the claim's TTL (ms), 'claim' or 'release' (give it up at once),
-- the figures to publish when this instance holds the claim ('' = none yet).
-- Returns {1 when this instance holds the claim, else 0; the figures published, or ''; the
-- claim's ms left}.

local k, me = KEYS[1], ARGV[1]
local h = redis.call('HGET', k, 'holder')
if ARGV[3] == 'release' then
    if h == me then redis.call('HDEL', k, 'holder') end
    return {0, '', 0}
end
if not h then
    redis.call('HSET', k, 'holder', me)
    h = me
end
if h == me then
    redis.call('PEXPIRE', k, ARGV[2])
    if ARGV[4] ~= '' then redis.call('HSET', k, 'figures', ARGV[4]) end
end
return {h == me and 1 or 0, redis.call('HGET', k, 'figures') or '', redis.call('PTTL', k)}
