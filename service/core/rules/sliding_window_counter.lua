-- sliding_window_counter.lua - the Redis port of sliding_window_counter.c, line by line, every
-- time relative to now (service/redis/lib.lua has the helpers; docs/redis.md says how a port
-- is written).
--
-- sliding_window_counter {limit, window}: last, cur, prev
-- 'W' last cur(8 bytes) prev
register_rule('swc', function()
    local T = {params = {'limit', 'window'}, layout = 1}
    function T.zero(t)
        t.last, t.cur, t.prev = 0, 0, 0
        return t
    end
    function T.load(v, t)
        local n = #v
        if byte(v, 1) == 87 and n >= 17 and n <= 25 then
            t.last, t.cur, t.prev = dec_time(v, 2), uint(v, 10, 17), uint(v, 18, n)
            return t
        end
    end
    function T.dump(s) return 'W' .. enc_time(s.last) .. enc_u8(s.cur) .. enc_var(s.prev) end
    -- roll(t) with t = max(now, last), which becomes last (a roll needs t in a later
    -- window); ws is the start of its window (last does not change again before the state
    -- is saved)
    function T.prep(p, s)
        if not isneg(s.last) then return end
        local w = p.window
        local ws, ls = start_of(w, 0), start_of(w, s.last)
        if cmp(ws, ls) ~= 0 then
            if cmp(sub(ws, ls), w) == 0 then
                s.prev = s.cur
            else
                s.prev = 0
            end
            s.cur = 0
        end
        s.last, s.ws = 0, ws
    end
    -- prev * (w - e) + (cur + cost) * w <= limit * w, i.e. with room = limit - cur - cost:
    -- room >= 0 and prev * (w - e) <= room * w
    local function fits(p, s, cost)
        local w = p.window
        local room = sub(sub(p.limit, s.cur), cost)
        if isneg(room) then return false end
        local e = sub(s.last, window_start(p, s))
        return cmp_prod(s.prev, sub(w, e), room, w) <= 0
    end
    -- k = floor(room * w / prev) >= w iff room >= prev
    local function first_fit(p, prev, cur, cost)
        local room = sub(sub(p.limit, cost), cur)
        if isneg(room) then return p.window end
        if iszero(prev) then return 0 end
        if cmp(room, prev) >= 0 then return 0 end
        return sub(p.window, (mdm(room, p.window, 0, prev)))
    end
    function T.wait(p, s, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        if fits(p, s, cost) then return 0 end
        local ws = window_start(p, s)
        local e = first_fit(p, s.prev, s.cur, cost)
        if cmp(e, p.window) < 0 then return add_sat(ws, e) end
        e = first_fit(p, s.cur, 0, cost)
        return add_sat(add_sat(ws, p.window), e)
    end
    function T.take(p, s, cost) s.cur = used_add(s.cur, cost) end
    function T.refund(p, s, taken_at, amount)
        if isneg(amount) then
            s.cur = used_add(s.cur, sub(0, amount))
            return
        end
        local ws, ts = window_start(p, s), start_of(p.window, taken_at)
        local field
        if cmp(ts, ws) == 0 then
            field = 'cur'
        elseif cmp(ts, sub(ws, p.window)) == 0 then
            field = 'prev'
        end
        if field then
            if cmp(amount, s[field]) >= 0 then
                s[field] = 0
            else
                s[field] = sub(s[field], amount)
            end
        end
    end
    function T.idle(p, s)
        if s.cur ~= 0 then return add_sat_t(window_start(p, s), mul(2, p.window)) end
        if s.prev ~= 0 then return add_sat_t(window_start(p, s), p.window) end
        return false
    end
    function T.status(p, s)
        local w = p.window
        local ws = window_start(p, s)
        local e = sub(s.last, ws)
        local q, r = mdm(s.prev, sub(w, e), 0, w)
        if r ~= 0 then q = add(q, 1) end
        local est = add(s.cur, q)
        local reset = 0
        if not iszero(s.cur) then
            reset = add(ws, mul(2, w))
        elseif not iszero(s.prev) then
            reset = add(ws, w)
        end
        return p.limit, sub(p.limit, est), reset, w
    end
    return T
end)
