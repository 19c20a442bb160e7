-- sliding_window.lua - the Redis port of sliding_window.c, line by line, every time relative to
-- now (service/redis/lib.lua has the helpers; docs/redis.md says how a port is written).
--
-- sliding_window {limit, window}: sum, last, and the log as pairs ts, cost (oldest first)
-- 'S' last sum, then ts cost per entry
register_rule('sw', function()
    local T = {params = {'limit', 'window'}, layout = 1, prep = noop}
    function T.zero(t)
        t.sum, t.last, t.ts, t.c = 0, 0, {}, {}
        return t
    end
    function T.load(v, s)
        local n = #v
        if byte(v, 1) ~= 83 or n < 17 or (n - 17) % 16 ~= 0 then return nil end
        local ts, c = {}, {}
        s.last, s.sum, s.ts, s.c = dec_time(v, 2), uint(v, 10, 17), ts, c
        local k = 0
        for i = 18, n, 16 do
            k = k + 1
            ts[k] = dec_time(v, i)
            c[k] = uint(v, i + 8, i + 15)
        end
        return s
    end
    function T.dump(s)
        local out = {'S', enc_time(s.last), enc_u8(s.sum)}
        for i = 1, #s.ts do
            out[#out + 1] = enc_time(s.ts[i])
            out[#out + 1] = enc_u8(s.c[i])
        end
        return table.concat(out)
    end
    function T.wait(p, s, cost)
        if cmp(cost, p.limit) > 0 then return NEVER end
        local t = max(0, s.last)
        local live, room = s.sum, sub(p.limit, cost)
        local edge = sub(t, p.window)
        local i, n = 1, #s.ts
        while i <= n and cmp(s.ts[i], edge) <= 0 do
            live = sub(live, s.c[i])
            i = i + 1
        end
        if cmp(live, room) <= 0 then return 0 end
        while i <= n do
            live = sub(live, s.c[i])
            if cmp(live, room) <= 0 then return add_sat(s.ts[i], p.window) end
            i = i + 1
        end
        return NEVER
    end
    local function expire(p, s, t)
        local edge = sub(t, p.window)
        local k = 0
        while k < #s.ts and cmp(s.ts[k + 1], edge) <= 0 do
            s.sum = sub(s.sum, s.c[k + 1])
            k = k + 1
        end
        if k > 0 then
            local ts, c = {}, {}
            for i = k + 1, #s.ts do
                ts[#ts + 1] = s.ts[i]
                c[#c + 1] = s.c[i]
            end
            s.ts, s.c = ts, c
        end
    end
    local function append(s, t, amount)
        local n = #s.ts
        if n > 0 and cmp(s.ts[n], t) == 0 then
            s.c[n] = used_add(s.c[n], amount)
        else
            s.ts[n + 1] = t
            s.c[n + 1] = amount
        end
        s.sum = used_add(s.sum, amount)
    end
    function T.take(p, s, cost)
        local t = max(0, s.last)
        expire(p, s, t)
        append(s, t, cost)
        s.last = t
    end
    function T.refund(p, s, taken_at, amount)
        local t = max(0, s.last)
        expire(p, s, t)
        s.last = t
        if isneg(amount) then
            append(s, t, sub(0, amount))
            return
        end
        for i = #s.ts, 1, -1 do
            local c = cmp(s.ts[i], taken_at)
            if c < 0 then break end
            if c == 0 then
                local back = min(amount, s.c[i])
                s.c[i] = sub(s.c[i], back)
                s.sum = sub(s.sum, back)
                break
            end
        end
    end
    function T.idle(p, s)
        if #s.ts == 0 then return false end
        return add_sat_t(s.last, p.window)
    end
    function T.status(p, s)
        local t = max(0, s.last)
        local live = s.sum
        local edge = sub(t, p.window)
        local i = 1
        while i <= #s.ts and cmp(s.ts[i], edge) <= 0 do
            live = sub(live, s.c[i])
            i = i + 1
        end
        local reset = 0
        if ispos(live) then reset = add_sat(s.last, p.window) end
        return p.limit, sub(p.limit, live), reset, p.window
    end
    return T
end)
