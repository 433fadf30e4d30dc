#!/usr/bin/env bash
# End to end: hatcheryd, the test libvirtd, real emulated ppc64le and s390x guests, and
# GitHub played by Prism (GitHub's own OpenAPI description) behind the GitHub double.
# usage: run.sh [TEST_FILE]   (default e2e.test.mjs; templates.test.mjs for warm templates)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
"$root/tests/libvirt/libvirtd.sh" start >/dev/null
export GUEST_ppc64le GUEST_s390x
GUEST_ppc64le=$("$root/images/test-guest/build.sh" ppc64le)
GUEST_s390x=$("$root/images/test-guest/build.sh" s390x)
exec "$root/tests/github/with-prism.sh" node --test --test-reporter=spec "$here/${1:-e2e.test.mjs}"
