#!/usr/bin/env bash
# Runs a command with the test libvirtd running (tests/libvirt/libvirtd.sh).
set -euo pipefail
"$(dirname "$0")/libvirtd.sh" start >/dev/null
exec "$@"
