#!/usr/bin/env bash
# Builds the root directory of the Hatchery test container (LXC, host architecture):
# busybox-static, the agent built static for the host, and the stand-in runner.
# usage: images/test-guest/build-rootfs.sh [CACHE_DIR]   (prints the directory)
# Cached by a hash of its inputs, like build.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${1:-$root/build-images}
busybox=/bin/busybox
[ -x "$busybox" ] && file -L "$busybox" 2>/dev/null | grep -q static || busybox=$(dpkg -L busybox-static 2>/dev/null | grep '/busybox$' | head -n 1)
[ -n "$busybox" ] || { echo "build-rootfs.sh: busybox-static is not installed" >&2; exit 1; }
key=$( { cat "$here/build-rootfs.sh" "$here/fake-runner" "$root/agent/hatchery-agent.c" "$root/agent/confine.c" "$root/agent/confine.h" \
         "$root/include/hatchery/agent_protocol.h" "$root/include/hatchery/version.h.in" \
         "$root/agent/build-static.sh" "$root/CMakeLists.txt"; sha256sum "$busybox"; } | sha256sum | cut -c1-16)
out="$cache/test-rootfs-$(uname -m)-$key"
if [ -x "$out/usr/bin/hatchery-agent" ]; then echo "$out"; exit 0; fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"/{bin,usr/bin,proc,sys,dev,tmp,home,var/tmp,work,run/hatchery,etc}
cp "$busybox" "$out.tmp/bin/busybox"
for applet in sh sleep sed echo cat printf ls id tr nc timeout grep mount kill ps head wc cut unshare ip; do ln -s busybox "$out.tmp/bin/$applet"; done
"$root/agent/build-static.sh" "$(uname -m)" "$out.tmp/usr/bin/hatchery-agent"
cp "$here/fake-runner" "$out.tmp/usr/bin/fake-runner"
chmod 755 "$out.tmp/usr/bin/"*
printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'runner:x:1000:1000:runner:/home/runner:/bin/sh' > "$out.tmp/etc/passwd"
printf '%s\n' 'root:x:0:' 'runner:x:1000:' > "$out.tmp/etc/group"
# libvirt enters a container's root through ROOT/.oldroot, which the container's root (no
# one on this machine, in its user namespace) cannot make.
mkdir "$out.tmp/.oldroot"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
