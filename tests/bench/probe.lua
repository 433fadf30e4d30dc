-- wrk script: GET /healthz, as a monitor would, with its latency as one JSON line.
function request()
  return wrk.format("GET", "/healthz")
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format('{"requests":%d,"rps":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f}\n',
    summary.requests, summary.requests / secs, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
