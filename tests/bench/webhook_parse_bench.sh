#!/usr/bin/env bash
# What reading one delivery costs the core (webhook_parse_bench.c), on octokit's example
# workflow_job payload with a pool's label. It prints figures; it asserts nothing.
# usage: tests/bench/webhook_parse_bench.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/install-deps.sh >/dev/null
[ -d tests/node_modules/@octokit ] || (cd tests && npm ci --no-audit --no-fund --loglevel=error)
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DHATCHERY_TESTS=OFF -DHATCHERY_BENCH=ON >/dev/null
cmake --build build-bench -j"$(nproc)" --target webhook_parse_bench >/dev/null
payload=$(mktemp /tmp/hatchery-payload-XXXXXX.json)
trap 'rm -f "$payload"' EXIT
NODE_PATH=tests/node_modules node -e '
  const p = structuredClone(require("@octokit/webhooks-examples").find((e) => e.name === "workflow_job").examples[5]);
  p.workflow_job.labels = ["self-hosted", "linux.ppc64le"];
  require("fs").writeFileSync(process.argv[1], JSON.stringify(p));
' "$payload"
build-bench/webhook_parse_bench "$payload" "${1:-20000}"
