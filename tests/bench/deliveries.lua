-- wrk script: POSTs pre-signed, unique workflow_job deliveries (see make-deliveries.mjs).
-- args: DIR DELAY_MS FIRST_FILE: thread N reads DIR/sigs-(FIRST_FILE+N), so runs that are
-- given different FIRST_FILE values never send the same delivery twice.
-- Prints one JSON line of results in done(): ok_rps counts only the 2xx answers (wrk's own
-- rate counts every answer, a 503 included).
local counter = 0
local threads = {}

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local prefix, suffix, ids, sigs, n, i, pause

function init(args)
  local dir = args[1]
  pause = tonumber(args[2] or "0")
  local file = tonumber(tid) + tonumber(args[3] or "0")
  prefix = io.open(dir .. "/prefix"):read("*a")
  suffix = io.open(dir .. "/suffix"):read("*a")
  ids, sigs, n, i = {}, {}, 0, 0
  math.randomseed(file)
  for line in io.lines(dir .. "/sigs-" .. file) do
    local id, sig = line:match("(%d+) (%x+)")
    n = n + 1
    ids[n], sigs[n] = id, sig
  end
end

function request()
  i = i + 1
  if i > n then i = 1 end
  local body = prefix .. ids[i] .. suffix
  return wrk.format("POST", "/webhook", {
    ["Content-Type"] = "application/json",
    ["User-Agent"] = "GitHub-Hookshot/bench",
    ["X-GitHub-Event"] = "workflow_job",
    ["X-GitHub-Delivery"] = "bench-" .. ids[i],
    ["X-Hub-Signature-256"] = "sha256=" .. sigs[i],
  }, body)
end

-- A random pause with the given mean, so that connections do not fire in lockstep (wrk's
-- timers tick together) and arrivals look like independent deliveries.
function delay()
  if pause == 0 then return 0 end
  return math.random(0, 2 * pause)
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local non2xx = summary.errors.status
  io.write(string.format(
    '{"requests":%d,"rps":%.1f,"ok_rps":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,"non2xx":%d,"socket_errors":%d}\n',
    summary.requests, summary.requests / secs, (summary.requests - non2xx) / secs, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, non2xx,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
