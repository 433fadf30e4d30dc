-- wrk script: a flood of webhook deliveries with a bad signature, each with a body of
-- BYTES (default 1 MiB, http.max_body_bytes' default): what anyone on the network can send.
-- It prints what was sent and how it was answered, as one JSON line.
-- usage: wrk ... -s bad_signatures.lua URL -- [BYTES]
local body

function init(args)
  body = string.rep("x", tonumber(args[1] or 1048576))
end

function request()
  return wrk.format("POST", "/webhook", {
    ["Content-Type"] = "application/json",
    ["X-GitHub-Event"] = "workflow_job",
    ["X-GitHub-Delivery"] = "flood",
    ["X-Hub-Signature-256"] = "sha256=" .. string.rep("0", 64),
  }, body)
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format('{"requests":%d,"rps":%.1f,"non2xx":%d}\n', summary.requests,
    summary.requests / secs, summary.errors.status))
end
