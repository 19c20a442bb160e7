-- gcra.lua - the Redis port of gcra.c, line by line, every time relative to
-- now (service/redis/lib.lua has the helpers; docs/redis.md says how a port is written).
--
-- gcra {per_second, burst}: tat, rem, last
-- 'G' tat last rem
register_rule('gcra', function()
    local T = {params = {'per_second', 'burst'}, layout = 1}
    function T.zero(t)
        t.tat, t.rem, t.last = 0, 0, 0
        return t
    end
    function T.load(v, t)
        local n = #v
        if byte(v, 1) == 71 and n >= 17 and n <= 25 then
            t.tat, t.last, t.rem = dec_time(v, 2), dec_time(v, 10), uint(v, 18, n)
            return t
        end
    end
    function T.dump(s) return 'G' .. enc_time(s.tat) .. enc_time(s.last) .. enc_var(s.rem) end
    -- C's ahead(t), the scaled (TAT - t) * rate + rem, as d * rate + r: (TAT - t, rem) when TAT
    -- is ahead of t, else (0, 0)
    local function ahead(s, t)
        local c = cmp(s.tat, t)
        if c < 0 or (c == 0 and iszero(s.rem)) then return 0, 0 end
        return sub(s.tat, t), s.rem
    end
    -- t = max(now, last) becomes last, and a TAT behind it becomes t with rem 0 (ahead 0
    -- either way; take and refund set both): then ahead(last) is (tat - last, rem)
    function T.prep(p, s)
        local t = max(0, s.last)
        s.last = t
        local d, r = ahead(s, t)
        if d == 0 and r == 0 then s.tat, s.rem = t, 0 end
    end
    -- A = ahead * 1e9... as qa * 1e9 + ra (C's "used" and "part"), kept until take
    local function split(p, s)
        local qa = s.qa
        if qa then return qa, s.ra end
        local ra
        qa, ra = mdm(sub(s.tat, s.last), p.per_second, s.rem, NS)
        s.qa, s.ra = qa, ra
        return qa, ra
    end
    function T.wait(p, s, cost)
        local burst = p.burst
        if cmp(cost, burst) > 0 then return NEVER end
        -- fits when A + cost * 1e9 <= burst * 1e9: A <= k * 1e9 with k = burst - cost >= 0
        -- holds iff qa < k, or qa = k and ra = 0
        local k = sub(burst, cost)
        local qa, ra = split(p, s)
        local c = cmp(qa, k)
        if c < 0 or (c == 0 and ra == 0) then return 0 end
        -- ceil((A - k * 1e9) / rate)
        return add_sat(s.last, ceil_mdm(sub(qa, k), NS, ra, p.per_second))
    end
    -- C's set_ahead(t, A + cost * 1e9): floor(scaled / rate) = (tat - t) + floor((rem +
    -- cost * 1e9) / rate), since tat - t is whole: the new TAT is tat + that quotient
    function T.take(p, s, cost)
        local q, rem = mdm(cost, NS, s.rem, p.per_second)
        s.rem = rem
        s.tat = sat_time(add(s.tat, q))
        s.qa = nil
    end
    function T.refund(p, s, taken_at, amount)
        local t = s.last
        local d, r = ahead(s, t)
        local a = add(mul(d, p.per_second), r)
        if isneg(amount) then
            a = add(a, mul(sub(0, amount), NS))
        elseif cmp(a, mul(amount, NS)) > 0 then
            a = sub(a, mul(amount, NS))
        else
            a = 0
        end
        local q, rem = divmod(a, p.per_second)
        s.rem = rem
        s.tat = sat_time(add(t, q))
        s.qa = nil
    end
    function T.idle(p, s)
        if s.rem ~= 0 then return add_sat_t(s.tat, 1) end
        return s.tat
    end
    function T.status(p, s)
        local qa, ra = split(p, s)
        local used = ra ~= 0 and add(qa, 1) or qa
        local burst = p.burst
        local remaining
        if type(used) == 'number' then
            remaining = sub(burst, used)
        elseif cmp(used, USED_MAX) >= 0 then
            remaining = sub(burst, USED_MAX)
        else
            remaining = sub(burst, used)
        end
        local reset = 0
        local d, r = sub(s.tat, s.last), s.rem
        if d ~= 0 or r ~= 0 then
            -- ceil(A / rate) = d + ceil(r / rate), saturated
            local c = add(d, ceil_div(r, p.per_second))
            if type(c) ~= 'number' and cmp(c, NEVER) > 0 then c = NEVER end
            reset = add_sat(s.last, c)
        end
        local win = p.win
        if not win then
            win = ceil_mdm(burst, NS, 0, p.per_second)
            p.win = win
        end
        return burst, remaining, reset, win
    end
    return T
end)
