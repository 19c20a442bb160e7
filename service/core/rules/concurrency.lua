-- concurrency.lua - the Redis port of concurrency.c, line by line, every time relative to
-- now (service/redis/lib.lua has the helpers; docs/redis.md says how a port is written).
--
-- concurrency {limit, retry}: held
-- the decimal held (which Redis keeps as an integer)
register_rule('cc', function()
    local T = {params = {'limit', 'retry'}, layout = 1, prep = noop}
    function T.zero(t)
        t.held = 0
        return t
    end
    function T.load(v, t)
        local k = byte(v, 1)
        if k >= 48 and k <= 57 and #v <= 19 then
            t.held = N(v)
            return t
        end
    end
    function T.dump(s) return S(s.held) end
    function T.wait(p, s, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        if cmp(s.held, sub(p.limit, cost)) <= 0 then return 0 end
        return p.retry
    end
    function T.take(p, s, cost) s.held = used_add(s.held, cost) end
    function T.release(p, s, amount)
        if cmp(amount, s.held) >= 0 then
            s.held = 0
        else
            s.held = sub(s.held, amount)
        end
    end
    function T.idle(p, s) return not iszero(s.held) end
    function T.status(p, s) return p.limit, sub(p.limit, s.held), 0, 0 end
    return T
end)
