-- Shared by the wrk scripts: 100,000 users and 1,000 teams, a pre-drawn random sequence per
-- thread (so wrk spends its time sending, not drawing), and a machine-readable summary.
local M = {}

M.USERS = 100000
M.TEAMS = 1000
M.POOL = 100000

local threads = {}
local counter = 0

function M.setup(thread)
    thread:set("id", counter)
    counter = counter + 1
    table.insert(threads, thread)
end

-- Builds the request pool with make(user, team) -> request string.
function M.init(make, seed)
    math.randomseed(seed)
    local pool = {}
    for i = 1, M.POOL do
        local u = math.random(0, M.USERS - 1)
        pool[i] = make("user-" .. u, "team-" .. (u % M.TEAMS))
    end
    return pool
end

function M.done(summary, latency, requests)
    local statuses = 0
    for _, t in ipairs(threads) do
        statuses = statuses + (t:get("non2xx") or 0)
    end
    io.write(string.format("wrk_requests: %d\n", summary.requests))
    io.write(string.format("wrk_duration_s: %.3f\n", summary.duration / 1e6))
    io.write(string.format("wrk_rps: %.0f\n", summary.requests / (summary.duration / 1e6)))
    io.write(string.format("wrk_p50_ms: %.3f\n", latency:percentile(50) / 1000))
    io.write(string.format("wrk_p99_ms: %.3f\n", latency:percentile(99) / 1000))
    io.write(string.format("wrk_errors: %d\n", summary.errors.connect + summary.errors.read +
        summary.errors.write + summary.errors.timeout))
    io.write(string.format("wrk_non2xx: %d\n", summary.errors.status))
end

return M
