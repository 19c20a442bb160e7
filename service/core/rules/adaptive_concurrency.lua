-- adaptive_concurrency.lua - the Redis port of adaptive_concurrency.c, line by line, every time
-- relative to now (service/redis/lib.lua has the helpers; docs/redis.md says how a port is
-- written).
--
-- adaptive_concurrency {initial_limit, ..., retry}: held, limit, last, win_start, cut_at, win_n,
-- win_lat_n, win_lat_sum, win_drop, win_inflight, long_rtt, long_n
-- 'A' then the fields as decimals joined by ',' (times absolute, as C keeps them)
--
-- The algorithm is told by the parameter of the other one, which is 0: tolerance for aimd,
-- backoff_ratio for gradient. T.learn(p, s, taken_at, kind, latency) is C's learn, called by
-- release.lua and settle.lua for an outcome (kind 1 ok .. 4 dropped, latency in ns or -1).
register_rule('ac', function()
    local T = {params = {'initial_limit', 'min_limit', 'max_limit', 'backoff_ratio', 'step',
        'timeout', 'tolerance', 'smoothing', 'queue_size', 'long_window', 'window',
        'window_size', 'retry'}, layout = 1}
    local WARMUP, KEEP, SUM_MAX = 10, 3600 * NS, P52
    local FIELDS = {'held', 'limit', 'last', 'win_start', 'cut_at', 'win_n', 'win_lat_n',
        'win_lat_sum', 'win_drop', 'win_inflight', 'long_rtt', 'long_n'}
    local TIMES = {last = true, win_start = true, cut_at = true}
    function T.zero(t)
        for i = 1, #FIELDS do t[FIELDS[i]] = 0 end
        -- C's zeroed times are the absolute 0
        local zero = rel_of_dec('0')
        t.last, t.win_start, t.cut_at = zero, zero, zero
        return t
    end
    function T.load(v, t)
        if byte(v, 1) ~= 65 then return nil end
        local i = 0
        for f in string.gmatch(string.sub(v, 2), '[^,]+') do
            i = i + 1
            local name = FIELDS[i]
            if not name then return nil end
            if TIMES[name] then t[name] = rel_of_dec(f) else t[name] = N(f) end
        end
        if i ~= #FIELDS then return nil end
        return t
    end
    function T.dump(s)
        local out = {}
        for i = 1, #FIELDS do
            local name = FIELDS[i]
            out[i] = TIMES[name] and dec_of_rel(s[name]) or S(s[name])
        end
        return 'A' .. table.concat(out, ',')
    end
    -- C's limit_of, kept in s: initial_limit for a new key, within the rule's bounds
    function T.prep(p, s)
        local l = s.limit
        if l == 0 then l = p.initial_limit end
        if l < p.min_limit then l = p.min_limit elseif l > p.max_limit then l = p.max_limit end
        s.limit = l
    end
    local function whole(l) return l - l % ONE end
    function T.wait(p, s, need)
        local frac = need % ONE
        local slots = need - frac
        local lim = whole(s.limit)
        local reserve = (lim / ONE) * frac
        if cmp(slots, whole(p.max_limit)) > 0 then return NEVER end
        if cmp(add(add(s.held, slots), reserve), lim) <= 0 then return 0 end
        return p.retry
    end
    function T.take(p, s, cost)
        s.held = used_add(s.held, cost)
        if cmp(s.held, s.win_inflight) > 0 then s.win_inflight = s.held end
        if cmp(s.last, 0) < 0 then s.last = 0 end
    end
    local function clamp(p, v)
        if v < p.min_limit then return p.min_limit end
        if v > p.max_limit then return p.max_limit end
        return v
    end
    local function baseline(p, s, shrt)
        if s.long_n < WARMUP then
            s.long_rtt = mdm(s.long_rtt, s.long_n, shrt, s.long_n + 1)
            s.long_n = s.long_n + 1
        else
            s.long_rtt = mdm(s.long_rtt, p.long_window - 1, 2 * shrt, p.long_window + 1)
        end
        if s.long_rtt > 2 * shrt then s.long_rtt = mdm(s.long_rtt, 95, 0, 100) end
    end
    local function close_window(p, s)
        local limit = s.limit
        local busy = cmp(add(s.win_inflight, s.win_inflight), limit) >= 0
        if p.tolerance == 0 then -- aimd
            if s.win_drop == 1 then
                limit = mdm(limit, p.backoff_ratio, 0, ONE)
            elseif busy then
                limit = limit + p.step
            end
        else
            local shrt = 0
            if s.win_lat_n > 0 then shrt = floor(s.win_lat_sum / s.win_lat_n) end
            if shrt > 3600000000 then shrt = 3600000000 end
            if s.win_drop == 0 and shrt > 0 then baseline(p, s, shrt) end
            if s.win_drop == 1 or busy then
                local g = ONE
                if s.win_drop == 1 then
                    g = ONE / 2
                elseif shrt > 0 then
                    g = mdm(p.tolerance, s.long_rtt, 0, shrt)
                    if g < ONE / 2 then g = ONE / 2 elseif g > ONE then g = ONE end
                end
                local nl = mdm(limit, g, 0, ONE) + p.queue_size
                limit = divmod(add(mul(limit, ONE - p.smoothing), mul(nl, p.smoothing)), ONE)
            end
        end
        if limit < s.limit then s.cut_at = 0 end
        s.limit = clamp(p, limit)
        s.win_start = 0
        s.win_n, s.win_lat_n, s.win_lat_sum, s.win_drop = 0, 0, 0, 0
        s.win_inflight = s.held
    end
    function T.learn(p, s, taken_at, kind, latency)
        local counts = cmp(taken_at, s.cut_at) >= 0
        s.win_n = s.win_n + 1
        if kind ~= 1 and kind ~= 0 and counts then s.win_drop = 1 end
        if latency >= 0 then
            if p.tolerance == 0 and latency > p.timeout and counts then s.win_drop = 1 end
            if kind <= 1 or kind == 3 then
                local us = floor(latency / 1000)
                if s.win_lat_sum > SUM_MAX - us then
                    s.win_lat_sum = SUM_MAX
                else
                    s.win_lat_sum = s.win_lat_sum + us
                end
                s.win_lat_n = s.win_lat_n + 1
            end
        end
        if s.win_n >= p.window_size and cmp(sub(0, s.win_start), p.window) >= 0 then
            close_window(p, s)
        end
        if cmp(s.last, 0) < 0 then s.last = 0 end
    end
    function T.release(p, s, amount)
        if cmp(amount, s.held) >= 0 then
            s.held = 0
        else
            s.held = sub(s.held, amount)
        end
        if cmp(s.last, 0) < 0 then s.last = 0 end
    end
    function T.idle(p, s)
        if not iszero(s.held) then return true end
        return add_sat_t(s.last, KEEP)
    end
    function T.status(p, s)
        local lim = whole(s.limit)
        return lim, sub(lim, s.held), 0, 0
    end
    return T
end)
