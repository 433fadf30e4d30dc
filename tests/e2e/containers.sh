#!/usr/bin/env bash
# Runs a test on real LXC containers: the test libvirtd (for lxc:///), the LXC test root,
# Prism + double.
# usage: containers.sh TEST_FILE   (chaos.test.mjs, containers.test.mjs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
"$root/tests/libvirt/libvirtd.sh" start >/dev/null
export ROOTFS
ROOTFS=$("$root/images/test-guest/build-rootfs.sh")
exec "$root/tests/github/with-prism.sh" node --test --test-reporter=spec "$here/$1"
