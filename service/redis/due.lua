-- due.lua - reservations whose time is up, for housekeeping to expire; and the index's life.
--
-- KEYS: the reservation index. ARGV (args.def): now ('' = Redis TIME), most ids to return, TTL
-- of a reservation (ms).
-- Returns {now, reservations in the index, ids...}.
--
-- A decision adds its reservation to the index without touching the index's TTL (a command
-- less on the hot path); the housekeeping that runs this keeps it alive for twice a
-- reservation's TTL instead, so that an index left behind by a fleet that is gone expires after
-- every reservation in it, and one in use never does.

clock(ARGV[A_NOW])
local now = now_str()
local out = {now, tostring(redis.call('ZCARD', KEYS[1]))}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[A_BATCH]))
for i = 1, #ids do out[#out + 1] = ids[i] end
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[A_HOLD_MS]))
return out
