-- fixed_window.lua - the Redis port of fixed_window.c, line by line, every time relative to
-- now (service/redis/lib.lua has the helpers; docs/redis.md says how a port is written).
--
-- fixed_window {limit, window}: last, count
-- 'F' last count
register_rule('fw', function()
    local T = {params = {'limit', 'window'}, layout = 1}
    function T.zero(t)
        t.last, t.count = 0, 0
        return t
    end
    function T.load(v, t)
        local n = #v
        if byte(v, 1) == 70 and n >= 9 and n <= 17 then
            t.last, t.count = dec_time(v, 2), uint(v, 10, n)
            return t
        end
    end
    function T.dump(s) return 'F' .. enc_time(s.last) .. enc_var(s.count) end
    -- count_at(t) with t = max(now, last), which becomes last; ws is the start of its
    -- window (last does not change again before the state is saved)
    function T.prep(p, s)
        if isneg(s.last) then
            local ws = start_of(p.window, 0)
            if cmp(ws, start_of(p.window, s.last)) ~= 0 then s.count = 0 end
            s.last, s.ws = 0, ws
        end
    end
    function T.wait(p, s, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        if cmp(s.count, sub(p.limit, cost)) <= 0 then return 0 end
        return add_sat(window_start(p, s), p.window)
    end
    function T.take(p, s, cost) s.count = used_add(s.count, cost) end
    function T.refund(p, s, taken_at, amount)
        if isneg(amount) then
            s.count = used_add(s.count, sub(0, amount))
        elseif cmp(start_of(p.window, taken_at), window_start(p, s)) == 0 then
            if cmp(amount, s.count) >= 0 then
                s.count = 0
            else
                s.count = sub(s.count, amount)
            end
        end
    end
    function T.idle(p, s)
        if s.count == 0 then return false end
        return add_sat_t(window_start(p, s), p.window)
    end
    function T.status(p, s)
        local c = s.count
        local reset = 0
        if c ~= 0 then reset = add_sat(window_start(p, s), p.window) end
        return p.limit, sub(p.limit, c), reset, p.window
    end
    return T
end)
