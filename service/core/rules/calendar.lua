-- calendar.lua - the Redis port of calendar.c, line by line, every time relative to now
-- (service/redis/lib.lua has the helpers; docs/redis.md says how a port is written).
--
-- calendar {limit} and the bounds b0 < b1 < b2 < b3 of three periods in a row, which the C
-- side computes from the time zone (rl_rule_redis.args) around its own time of the call: Redis's
-- clock picks the period holding its now among [b0, b1), [b1, b2) and [b2, b3), so that one
-- clock decides for every instance.
-- 'P' start end count
register_rule('cal', function()
    local T = {params = {'limit', 'b0', 'b1', 'b2', 'b3'}, layout = 1}
    function T.zero(t)
        t.ps, t.pe, t.count = 0, 0, 0
        return t
    end
    function T.load(v, t)
        local n = #v
        if byte(v, 1) == 80 and n >= 17 and n <= 25 then
            t.ps, t.pe, t.count = dec_time(v, 2), dec_time(v, 10), uint(v, 18, n)
            return t
        end
    end
    function T.dump(s) return 'P' .. enc_time(s.ps) .. enc_time(s.pe) .. enc_var(s.count) end
    -- bring: the same period while now is before its end (a new key's end is 0), else now's
    -- period from 0
    function T.prep(p, s)
        if ispos(s.pe) then return end
        local b = {p.b0, p.b1, p.b2, p.b3}
        local lo = sub(b[1], now_big())
        for i = 1, 3 do
            local hi = sub(b[i + 1], now_big())
            if not ispos(lo) and ispos(hi) then
                s.ps, s.pe, s.count = lo, hi, 0
                return
            end
            lo = hi
        end
        error('calendar: the clock of Redis is more than a period away from the instance\'s')
    end
    function T.wait(p, s, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        if cmp(s.count, sub(p.limit, cost)) <= 0 then return 0 end
        return s.pe
    end
    function T.take(p, s, cost) s.count = used_add(s.count, cost) end
    function T.refund(p, s, taken_at, amount)
        if isneg(amount) then
            s.count = used_add(s.count, sub(0, amount))
        elseif cmp(taken_at, s.ps) >= 0 and cmp(taken_at, s.pe) < 0 then
            if cmp(amount, s.count) >= 0 then
                s.count = 0
            else
                s.count = sub(s.count, amount)
            end
        end
    end
    function T.idle(p, s)
        if s.count == 0 then return false end
        return s.pe
    end
    function T.status(p, s)
        local c = s.count
        local reset = 0
        if c ~= 0 then reset = s.pe end
        return p.limit, sub(p.limit, c), reset, sub(s.pe, s.ps)
    end
    return T
end)
