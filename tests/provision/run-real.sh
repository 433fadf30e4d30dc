#!/usr/bin/env bash
# Runs `test_provision real`: starts the test libvirtd (tests/libvirt/libvirtd.sh), builds
# or reuses the ppc64le and s390x test guests and the LXC root, and captures hatcheryd's
# log lines for the secret scan.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
"$root/tests/libvirt/libvirtd.sh" start
# A run that died mid-test leaves its guests; the next would fail on their names.
for uri in qemu:///system lxc:///; do
  for d in $(virsh -c "$uri" list --all --name | grep '^hatchery-ptest-' || true); do
    echo "provision: removing $d, left by an earlier run ($uri)"
    virsh -c "$uri" destroy "$d" >/dev/null 2>&1 || true
    virsh -c "$uri" undefine --nvram "$d" >/dev/null 2>&1 || virsh -c "$uri" undefine "$d" >/dev/null 2>&1 || true
  done
done
export GUEST_ppc64le GUEST_s390x ROOTFS
GUEST_ppc64le=$("$root/images/test-guest/build.sh" ppc64le)
GUEST_s390x=$("$root/images/test-guest/build.sh" s390x)
ROOTFS=$("$root/images/test-guest/build-rootfs.sh")
export HATCHERY_TEST_LOG
HATCHERY_TEST_LOG=$(mktemp /tmp/hatchery-prov-log-XXXXXX)
rc=0
export LIBVIRTD_SH="$root/tests/libvirt/libvirtd.sh"
export SILENT_PROXY="$here/silent-proxy.py"
"$1" real 2> >(tee "$HATCHERY_TEST_LOG" >&2) || rc=$?
sleep 0.2
rm -f "$HATCHERY_TEST_LOG"
exit $rc
