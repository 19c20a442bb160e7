-- token_bucket.lua - the Redis port of token_bucket.c, line by line, every time relative to
-- now (service/redis/lib.lua has the helpers; docs/redis.md says how a port is written).
--
-- token_bucket {capacity, per_second}: used, last, frac
-- 'T' last used (frac 0), or 'U' last frac(4 bytes) used
register_rule('tb', function()
    local T = {params = {'capacity', 'per_second'}, layout = 1}
    function T.zero(t)
        t.used, t.last, t.frac = 0, 0, 0
        return t
    end
    function T.load(v, t)
        local n = #v
        if n < 9 then return nil end
        local k, hi, lo = unpack_('>BI4I4', v)
        if k == 84 and n <= 17 then
            t.used, t.last, t.frac = uint(v, 10, n), rel_of_halves(hi, lo), 0
            return t
        elseif k == 85 and n >= 13 and n <= 21 then
            t.used, t.last, t.frac = uint(v, 14, n), rel_of_halves(hi, lo), uint(v, 10, 13)
            return t
        end
    end
    function T.dump(s)
        local used, frac = s.used, s.frac
        if type(used) == 'number' and used < 4294967296 then
            -- one pack: the type, last, frac when not 0, used in as few bytes as it takes
            local hi, lo = halves_of_rel(s.last)
            local n = used == 0 and '' or used < 256 and 'I1' or used < 65536 and 'I2' or
                          used < 16777216 and 'I3' or 'I4'
            if frac == 0 then return pack('>BI4I4' .. n, 84, hi, lo, used) end
            return pack('>BI4I4I4' .. n, 85, hi, lo, frac, used)
        end
        if frac == 0 then return 'T' .. enc_time(s.last) .. enc_var(used) end
        return 'U' .. enc_time(s.last) .. pack('>I4', frac) .. enc_var(used)
    end
    -- refill: gain = floor(((now - last) * rate + frac) / 1e9); at least used when already
    -- (now - last) * rate >= used * 1e9 (frac >= 0), which settles most refills without
    -- dividing (in doubles: rounding is monotonic, so a rounded product above the other
    -- means an exact one above it)
    function T.prep(p, s)
        local last, used = s.last, s.used
        if type(last) == 'number' then
            if last >= 0 then return end
            if used == 0 then
                s.frac, s.last = 0, 0
                return
            end
            local rate = p.per_second
            if type(used) == 'number' and type(rate) == 'number' and
                -last * rate > used * NS then
                s.used, s.frac, s.last = 0, 0, 0
                return
            end
        elseif not isneg(last) then
            return
        end
        if ispos(used) then
            local dt = sub(0, last)
            if cmp_prod(dt, p.per_second, used, NS) >= 0 then
                s.used, s.frac = 0, 0
            else
                local gain, rem = mdm(dt, p.per_second, s.frac, NS)
                if cmp(gain, used) >= 0 then
                    s.used, s.frac = 0, 0
                else
                    s.used, s.frac = sub(used, gain), rem
                end
            end
        else
            s.frac = 0
        end
        s.last = 0
    end
    -- ceil(((used - target) * 1e9 - frac) / rate), target >= 0; in doubles while
    -- (used - target) * 1e9 stays below 2^53 (floor(x / rate) is exact there)
    local function time_to(p, s, target)
        local used, rate = s.used, p.per_second
        if type(used) == 'number' and type(target) == 'number' and type(rate) == 'number' then
            if used <= target then return 0 end
            local d = (used - target) * NS
            if d < LIM then
                local x = d - s.frac
                local q = floor(x / rate)
                if q * rate < x then q = q + 1 end
                return q
            end
        elseif cmp(used, target) <= 0 then
            return 0
        end
        return ceil_mdm(sub(used, target), NS, 0 - s.frac, rate)
    end
    -- time_to(0), kept in the state until it changes
    local function full(p, s)
        local f = s.full
        if not f then
            f = time_to(p, s, 0)
            s.full = f
        end
        return f
    end
    function T.wait(p, s, cost)
        local cap = p.capacity
        local target
        if type(cost) == 'number' and type(cap) == 'number' then
            if cost > cap then return NEVER end
            target = cap - cost
        else
            if cmp(cost, cap) > 0 then return NEVER end
            target = sub(cap, cost)
        end
        local dt = target == 0 and full(p, s) or time_to(p, s, target)
        if dt == 0 then return 0 end
        return add_sat(s.last, dt)
    end
    function T.take(p, s, cost)
        s.used = used_add(s.used, cost)
        s.full = nil
    end
    function T.refund(p, s, taken_at, amount)
        if isneg(amount) then
            s.used = used_add(s.used, sub(0, amount))
        elseif cmp(amount, s.used) >= 0 then
            s.used = 0
            s.frac = 0
        else
            s.used = sub(s.used, amount)
        end
        s.full = nil
    end
    function T.idle(p, s)
        if s.used == 0 then return false end
        return add_sat_t(s.last, full(p, s))
    end
    function T.status(p, s)
        local f = full(p, s)
        local reset = 0
        if f ~= 0 then reset = add_sat(s.last, f) end
        local win = p.win
        if not win then
            win = ceil_mdm(p.capacity, NS, 0, p.per_second)
            p.win = win
        end
        return p.capacity, sub(p.capacity, s.used), reset, win
    end
    return T
end)
