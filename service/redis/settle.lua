-- settle.lua - settles a reservation with its actual cost: gives reserved - actual back to (or
-- charges it to) every item the caller names, with the rule now in force there.
--
-- KEYS: the reservation, then the state keys of the items to settle.
-- ARGV: now ('' = Redis TIME), actual cost, least TTL (ms), TTL of held slots (ms), then 3
--       fields per state key: type tag and 2 parameters.
-- Returns {'ok', reserved cost}, {'notfound'} (unknown or expired) or {'settled'}.

clock(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'exp', 'settled', 'cost', 'at')
if not h[1] or not ispos(rel_of_dec(h[1])) then return {'notfound'} end
if h[2] == '1' then return {'settled'} end
redis.call('HSET', KEYS[1], 'settled', '1')
local amount = sub(N(h[3]), N(ARGV[2]))
if not iszero(amount) then
    local at = rel_of_dec(h[4])
    local floor_ms, hold_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
    for i = 2, #KEYS do
        local o = 4 + (i - 2) * 3
        local T = rule_type(ARGV[o + 1])
        local st, found = load_state(T, KEYS[i])
        if found then
            local p = T.params(N(ARGV[o + 2]), N(ARGV[o + 3]), st)
            T.prep(p, st)
            T.refund(p, st, at, amount)
            save_state(T, p, st, KEYS[i], floor_ms, hold_ms)
        end
    end
end
return {'ok', h[3]}
