#!/usr/bin/env bash
# Runs a command with Prism (GitHub's OpenAPI description, cut down) and the GitHub double
# in front of it, and an App key pair, on free loopback ports. Exports:
#   GITHUB_DOUBLE_URL  the double (the client's api_url)
#   PRISM_URL          Prism itself
#   APP_KEY_FILE       the App's private key (mode 0600); APP_ID
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/hatchery-github-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

free_port() { node -e 's=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
prism_port=$(free_port)
double_port=$(free_port)
openssl genrsa -out "$work/app.pem" 2048 2>/dev/null
chmod 600 "$work/app.pem"
openssl rsa -in "$work/app.pem" -pubout -out "$work/app.pub" 2>/dev/null
export APP_ID=424242 APP_KEY_FILE="$work/app.pem"

"$here/../node_modules/.bin/prism" mock --host 127.0.0.1 -p "$prism_port" "$here/openapi-cutdown.json" >"$work/prism.log" 2>&1 &
pids+=($!)
node "$here/github-double.mjs" "$double_port" "http://127.0.0.1:$prism_port" "$work/app.pub" "$APP_ID" >"$work/double.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$prism_port/orgs/o/installation" -H 'Accept: application/json' 2>/dev/null && break
  sleep 0.1
done
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$double_port/__double/log" && break; sleep 0.1; done
export GITHUB_DOUBLE_URL="http://127.0.0.1:$double_port" PRISM_URL="http://127.0.0.1:$prism_port"
rc=0
"$@" || rc=$?
if [ "$rc" != 0 ]; then echo "--- prism log (tail)"; tail -n 20 "$work/prism.log"; echo "--- double log"; tail -n 20 "$work/double.log"; fi
exit $rc
