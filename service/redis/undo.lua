-- undo.lua - gives back what a decision took from some of its rules, or settles or releases
-- them, without a reservation: on a Redis Cluster, the states of a request's levels may lie on
-- several nodes, and what one node took is given back by its own script (when a later node
-- denied the request, or for the settlement or release of a reservation kept elsewhere).
--
-- KEYS: the state keys of the items.
-- ARGV: as args.def lists them: now ('' = Redis TIME), when the amounts were taken (a decimal
--       now as decide.lua returns it), least TTL (ms), TTL of held slots (ms), the channel of
--       given-back states (announce), then per state
--       key: type tag, op ('r': refund the amount, negative to charge it; 'h': release that
--       many held slots), the amount, the state's value before and after the take to give back
--       ('' when not known), then the rule's parameters (T.params). kind and latency: how the
--       call of a released or settled reservation went, as release.lua takes them (kind -1:
--       it expired, a timeout from its take to now), learnt by the 'h' items whose type has
--       T.learn (a settlement sends them with amount 0: the slots stay held).
-- A state still as its take left it goes back to its value before (or is deleted when it had
-- none), which undoes the take exactly, saturation included; a state changed since (another
-- request took or gave back meanwhile) is given the refund or release instead.
-- Returns the number of states changed.

clock(ARGV[A_NOW])
local at = rel_of_dec(ARGV[A_AT])
local floor_ms, hold_ms = tonumber(ARGV[A_FLOOR_MS]), tonumber(ARGV[A_HOLD_MS])
local kind, latency = tonumber(ARGV[A_KIND]), tonumber(ARGV[A_LATENCY])
if kind < 0 then
    kind, latency = 3, sub(0, at)
    if type(latency) ~= 'number' or latency > 3600 * NS then latency = 3600 * NS end
    if latency < 0 then latency = 0 end
end
local learn = kind ~= 0 or latency >= 0
local o = A_FIELDS
local changed = 0
local given = {}
for i = 1, #KEYS do
    local T = rule_type(ARGV[o + I_TAG])
    if not T then return redis.error_reply('no rule type port for tag ' .. ARGV[o + I_TAG]) end
    local op, amount = ARGV[o + I_OP], N(ARGV[o + I_AMOUNT])
    local before, after = ARGV[o + I_BEFORE], ARGV[o + I_AFTER]
    local st, found = load_state(T, KEYS[i])
    o = read_params(T, st, ARGV, o + I_FIELDS)
    local f = op == 'h' and T.release or op == 'r' and T.refund
    if after ~= '' and redis.call('GET', KEYS[i]) == after then
        if before == '' then
            redis.call('DEL', KEYS[i])
        else
            redis.call('SET', KEYS[i], before, 'KEEPTTL')
        end
        changed = changed + 1
        given[#given + 1] = KEYS[i]
    elseif found and f and (not iszero(amount) or op == 'h' and T.learn and learn) then
        T.prep(st, st)
        if op == 'h' and T.learn and learn then T.learn(st, st, at, kind, latency) end
        if op == 'h' then T.release(st, st, amount) else T.refund(st, st, at, amount) end
        save_state(T, st, st, KEYS[i], floor_ms, hold_ms)
        changed = changed + 1
        given[#given + 1] = KEYS[i]
    end
end
announce(ARGV[A_CHANNEL], given, 1)
return changed
