#!/bin/bash
# The stand-in's hostile job: what PR code on the runner would try. It opens a TCP
# connection to each ADDR:PORT given (the host through the user network's 10.0.2.2, the
# host's own address, the outside) and reports which opened, in the job's report.
# usage: probe.sh ADDR:PORT[+ADDR:PORT...]
set -u
report=${HATCHERY_REPORT_FILE:-/dev/null}
probes=
for target in ${1//+/ }; do
  host=${target%:*}
  port=${target##*:}
  if timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then state=open; else state=closed; fi
  echo "job: probe $target: $state"
  probes="$probes${probes:+,}\"$target\":\"$state\""
done
printf '{"result":"succeeded","uid":%d,"probes":{%s}}\n' "$(id -u)" "$probes" > "$report"
