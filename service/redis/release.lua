-- release.lua - ends a reservation and gives back the slots it holds; also expires one whose
-- time has come (mode 'expire', run by every instance's housekeeping).
--
-- KEYS: the reservation, the reservation index, then the state keys of the held items.
-- ARGV: as args.def lists them: now ('' = Redis TIME), mode ('release' or 'expire'), the
--       reservation id, least TTL (ms), TTL of held slots (ms), how the call went (kind: 0
--       not said, 1 ok, 2 error, 3 timeout, 4 dropped; latency in ns, -1 not said; an expiry
--       is a timeout lasting from the take to now), the channel of given-back states
--       (announce), then per state key: type tag, the amount held and the rule's parameters
--       (T.params). A type with T.learn learns the outcome.
-- Returns {'ok', settled ('1'/'0')}, {'notfound'}, or {'early'} when it is not yet due.

clock(ARGV[A_NOW])
local expire = ARGV[A_MODE] == 'expire'
local exp, settled, _, taken = read_resv(KEYS[1])
if not exp then
    if expire then redis.call('ZREM', KEYS[2], ARGV[A_ID]) end
    return {'notfound'}
end
local due = not ispos(rel_of_dec(exp))
if due and not expire then return {'notfound'} end
if expire and not due then return {'early'} end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[A_ID])
local floor_ms, hold_ms = tonumber(ARGV[A_FLOOR_MS]), tonumber(ARGV[A_HOLD_MS])
local kind, latency = tonumber(ARGV[A_KIND]), tonumber(ARGV[A_LATENCY])
local at = taken and rel_of_dec(taken) or 0
if expire then
    kind, latency = 3, sub(0, at)
    if type(latency) ~= 'number' or latency > 3600 * NS then latency = 3600 * NS end
    if latency < 0 then latency = 0 end
end
local o = A_FIELDS
local given = {}
for i = 3, #KEYS do
    local T = rule_type(ARGV[o + I_TAG])
    local held = ARGV[o + I_HELD]
    local st, found = load_state(T, KEYS[i])
    o = read_params(T, st, ARGV, o + I_FIELDS)
    if found and T.release then
        T.prep(st, st)
        if T.learn and kind ~= 0 or T.learn and latency >= 0 then
            T.learn(st, st, at, kind, latency)
        end
        T.release(st, st, N(held))
        save_state(T, st, st, KEYS[i], floor_ms, hold_ms)
        given[#given + 1] = KEYS[i]
    end
end
announce(ARGV[A_CHANNEL], given, 1)
return {'ok', settled}
