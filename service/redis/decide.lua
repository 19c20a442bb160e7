-- decide.lua - one decision, atomically: phase 1 asks every rule of every level how long until
-- its amount fits; phase 2 takes from every rule only when all answered 0, and records the
-- reservation. Then every rule reports its status.
--
-- KEYS: the state keys the items name, then (with a reservation id) the reservation's key and
--       the reservation index.
-- ARGV: as args.def lists them (A_ and I_ offsets, put above this file by the build): now ('' =
--       Redis TIME), dry run ('1'/'0'), the request's cost, reservation TTL (ns), least TTL of a
--       key (ms), TTL of a reservation and of held slots (ms), reservation id ('' = none),
--       whether the request asked for the reservation ('1'; '0': it is made only when a rule
--       that holds slots takes), the items' modes ('' when every item blocks and takes, else a
--       character per item: '-' it does, 's' a shadow rule: never blocks, takes only when its
--       cost fits, 'c' a charge rule that does not block: takes whatever it has left), keep
--       ('1': also return each state as it was before and after its take, see undo.lua), the
--       number of items, then per item: type tag ('' for a rule decided by the caller), key
--       index (0 for none), need, cost, the caller's wait (for a rule without state), the
--       item's reservation record ('' when it keeps none), then the rule's parameters
--       (T.params; none for a rule decided by the caller).
-- Returns {'ok', then per item: wait, limit, remaining, reset_after, window, next, then now}
-- (integers,
-- which Redis makes of Lua numbers exactly below 2^53, or decimals beyond; statuses are '' for
-- rules decided by the caller), or {'dup'} when the reservation id is taken. next is
-- rl_status_next: the wait for one whole unit more than remains (0 when full); now is the
-- script's now as a decimal (what a take is given back at, see undo.lua). With keep, then per
-- item its state's value before and after its take ('' before: there was none; '' after: it
-- took nothing).
--
-- Each state is read and prepared (refilled, rolled) once; wait, take, status and next all
-- start from it, as each of them would in C from the same state at the same now.

clock(ARGV[A_NOW])
local dry = ARGV[A_DRY] == '1'
local floor_ms, hold_ms = tonumber(ARGV[A_FLOOR_MS]), tonumber(ARGV[A_HOLD_MS])
local id = ARGV[A_ID]
local n = tonumber(ARGV[A_ITEMS])
local modes = ARGV[A_MODES]
local items = {}
local allowed = true

-- An item is one table: its state, its rule's parameters (the field names never collide, so the
-- table is both the p and the s of the rule functions), and T, k, rec, cost, wait and mode
-- (false for '').
local o = A_FIELDS
for i = 1, n do
    local k = tonumber(ARGV[o + I_KEY])
    local it
    if k > 0 then
        local T = rule_type(ARGV[o + I_TAG])
        if not T then return redis.error_reply('no rule type port for tag ' .. ARGV[o + I_TAG]) end
        it = load_state(T, KEYS[k])
        -- N(x), with the usual case (up to 15 digits: a number) inline
        local need, cost = ARGV[o + I_NEED], ARGV[o + I_COST]
        need = #need <= 15 and tonumber(need) or N(need)
        cost = #cost <= 15 and tonumber(cost) or N(cost)
        it.T, it.cost, it.k, it.rec = T, cost, k, ARGV[o + I_RECORD]
        -- read_params, inline
        local names = T.params
        o = o + I_FIELDS
        for j = 1, #names do
            local v = ARGV[o + j]
            it[names[j]] = #v <= 15 and tonumber(v) or N(v)
        end
        o = o + #names
        T.prep(it, it)
        it.wait = T.wait(it, it, need)
    else
        it = {wait = N(ARGV[o + I_WAIT]), k = 0, rec = ARGV[o + I_RECORD]}
        o = o + I_FIELDS
    end
    if modes ~= '' then
        local m = string.sub(modes, i, i)
        if m ~= '-' then it.mode = m end
    end
    if it.wait ~= 0 and not it.mode then allowed = false end
    items[i] = it
end

-- Whether an item takes when the request is allowed: a shadow rule only when its cost fits.
local function takes(it) return it.mode ~= 's' or it.wait == 0 end

-- A reservation is made when asked for, or when a rule that holds slots takes (its record's
-- second character is 1).
local function reserves()
    if id == '' then return false end
    if ARGV[A_RESERVE] == '1' then return true end
    for i = 1, n do
        local it = items[i]
        if it.rec ~= '' and string.byte(it.rec, 2) == 49 and takes(it) then return true end
    end
    return false
end

if allowed and not dry then
    local rk, ik = KEYS[#KEYS - 1], KEYS[#KEYS]
    local resv = reserves()
    if resv then
        -- the reservation (lib.lua's read_resv has the format), written first: an id already
        -- taken leaves Redis untouched
        local exp = dec_of_rel(sat_time(N(ARGV[A_RESERVATION_TTL])))
        local rec = {'0', ARGV[A_COST], now_str(), exp, ARGV[A_USAGE]}
        for i = 1, n do
            if items[i].rec ~= '' and takes(items[i]) then rec[#rec + 1] = items[i].rec end
        end
        if not redis.call('SET', rk, table.concat(rec, '\n'), 'PX', hold_ms, 'NX') then
            return {'dup'}
        end
        redis.call('ZADD', ik, exp, id)
    end
    local keep = ARGV[A_KEEP] == '1'
    for i = 1, n do
        local it = items[i]
        if it.T and takes(it) then
            if keep then it.before = redis.call('GET', KEYS[it.k]) or '' end
            it.T.take(it, it, it.cost)
            save_state(it.T, it, it, KEYS[it.k], floor_ms, hold_ms)
            if keep then it.after = it.T.dump(it) end
        end
    end
end

local out = {'ok'}
local j = 1
for i = 1, n do
    local it = items[i]
    local w = it.wait
    out[j + 1] = type(w) == 'number' and w or S(w)
    if it.T then
        local T = it.T
        local limit, remaining, reset, window = T.status(it, it)
        local nxt = 0
        if type(remaining) == 'number' and type(limit) == 'number' then
            if remaining < limit then
                local want = (remaining > 0 and remaining - remaining % ONE or 0) + ONE
                nxt = T.wait(it, it, want < limit and want or limit)
            end
        elseif cmp(remaining, limit) < 0 then
            local whole = 0
            if ispos(remaining) then whole = mul((divmod(remaining, ONE)), ONE) end
            nxt = T.wait(it, it, min(add(whole, ONE), limit))
        end
        out[j + 2] = type(limit) == 'number' and limit or S(limit)
        out[j + 3] = type(remaining) == 'number' and remaining or S(remaining)
        out[j + 4] = type(reset) == 'number' and reset or S(reset)
        out[j + 5] = type(window) == 'number' and window or S(window)
        out[j + 6] = type(nxt) == 'number' and nxt or S(nxt)
    else
        for f = 2, 6 do out[j + f] = '' end
    end
    j = j + 6
end
out[j + 1] = now_str()
if ARGV[A_KEEP] == '1' then
    for i = 1, n do
        out[#out + 1] = items[i].before or ''
        out[#out + 1] = items[i].after or ''
    end
end
return out
