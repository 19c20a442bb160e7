-- GET with the user and team as headers, named as GET /check reads them: what nginx's
-- limit_req sees and what ratelimitd's /check sees are the same requests.
package.path = (os.getenv("BENCH_DIR") or "bench") .. "/?.lua;" .. package.path
local c = require("wrk_common")
local pool, n, i

setup = c.setup

function init(args)
    local path = args[1] or "/"
    pool = c.init(function(user, team)
        return wrk.format("GET", path, {["X-RateLimit-User"] = user, ["X-RateLimit-Team"] = team})
    end, 1000 + id)
    n = #pool
    i = 0
end

function request()
    i = i % n + 1
    return pool[i]
end

done = c.done
