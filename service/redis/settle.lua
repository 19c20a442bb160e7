-- settle.lua - settles a reservation: gives back to (or charges) each item the caller names
-- the amount the caller worked out for it (its reserved amount less the actual one in its
-- unit), with the rule now in force there.
--
-- KEYS: the reservation, then the state keys of the items to settle.
-- ARGV: as args.def lists them: now ('' = Redis TIME), actual cost, least TTL (ms), TTL of held
--       slots (ms), how the call went (kind and latency, as release.lua takes them), the channel
--       of given-back states (announce), then per state key: type tag, amount (given back;
--       negative: charged), and the rule's parameters (T.params). A type with T.learn learns the
--       outcome (its slots stay held).
-- Returns {'ok', reserved cost}, {'notfound'} (unknown or expired) or {'settled'}.

clock(ARGV[A_NOW])
local exp, settled, cost, taken, hash = read_resv(KEYS[1])
if not exp or not ispos(rel_of_dec(exp)) then return {'notfound'} end
if settled == '1' then return {'settled'} end
settle_resv(KEYS[1], hash)
local at = rel_of_dec(taken)
local floor_ms, hold_ms = tonumber(ARGV[A_FLOOR_MS]), tonumber(ARGV[A_HOLD_MS])
local kind, latency = tonumber(ARGV[A_KIND]), tonumber(ARGV[A_LATENCY])
local learn = kind ~= 0 or latency >= 0
local o = A_FIELDS
local given = {}
for i = 2, #KEYS do
    local T = rule_type(ARGV[o + I_TAG])
    local amount = N(ARGV[o + I_AMOUNT])
    local st, found = load_state(T, KEYS[i])
    o = read_params(T, st, ARGV, o + I_FIELDS)
    if found and T.refund and not iszero(amount) then
        T.prep(st, st)
        T.refund(st, st, at, amount)
        save_state(T, st, st, KEYS[i], floor_ms, hold_ms)
        given[#given + 1] = KEYS[i]
    elseif found and T.learn and learn then
        T.prep(st, st)
        T.learn(st, st, at, kind, latency)
        save_state(T, st, st, KEYS[i], floor_ms, hold_ms)
    end
end
announce(ARGV[A_CHANNEL], given, 1)
return {'ok', cost}
