-- POST /acquire with a JSON body naming the user and the team.
package.path = (os.getenv("BENCH_DIR") or "bench") .. "/?.lua;" .. package.path
local c = require("wrk_common")
local pool, n, i

setup = c.setup

function init(args)
    pool = c.init(function(user, team)
        local body = '{"keys": {"user": "' .. user .. '", "team": "' .. team .. '"}}'
        return wrk.format("POST", "/acquire", {["Content-Type"] = "application/json"}, body)
    end, 2000 + id)
    n = #pool
    i = 0
end

function request()
    i = i % n + 1
    return pool[i]
end

done = c.done
