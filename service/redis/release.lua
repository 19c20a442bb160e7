-- release.lua - ends a reservation and gives back the slots it holds; also expires one whose
-- time has come (mode 'expire', run by every instance's housekeeping).
--
-- KEYS: the reservation, the reservation index, then the state keys of the held items.
-- ARGV: now ('' = Redis TIME), mode ('release' or 'expire'), the reservation id, least TTL
--       (ms), TTL of held slots (ms), then 4 fields per state key: type tag, 2 parameters and
--       the amount held.
-- Returns {'ok', settled ('1'/'0')}, {'notfound'}, or {'early'} when it is not yet due.

clock(ARGV[1])
local expire = ARGV[2] == 'expire'
local h = redis.call('HMGET', KEYS[1], 'exp', 'settled')
if not h[1] then
    if expire then redis.call('ZREM', KEYS[2], ARGV[3]) end
    return {'notfound'}
end
local due = not ispos(rel_of_dec(h[1]))
if due and not expire then return {'notfound'} end
if expire and not due then return {'early'} end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[3])
local floor_ms, hold_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
for i = 3, #KEYS do
    local o = 5 + (i - 3) * 4
    local T = rule_type(ARGV[o + 1])
    local st, found = load_state(T, KEYS[i])
    if found and T.release then
        local p = T.params(N(ARGV[o + 2]), N(ARGV[o + 3]), st)
        T.prep(p, st)
        T.release(p, st, N(ARGV[o + 4]))
        save_state(T, p, st, KEYS[i], floor_ms, hold_ms)
    end
end
return {'ok', h[2]}
