-- due.lua - reservations whose time is up, for housekeeping to expire.
--
-- KEYS: the reservation index. ARGV (args.def): now ('' = Redis TIME), most ids to return.
-- Returns {now, reservations in the index, ids...}.

clock(ARGV[A_NOW])
local now = now_str()
local out = {now, tostring(redis.call('ZCARD', KEYS[1]))}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[A_BATCH]))
for i = 1, #ids do out[#out + 1] = ids[i] end
return out
