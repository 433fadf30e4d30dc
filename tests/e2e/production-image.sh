#!/usr/bin/env bash
# The production runner image for ARCH (ppc64le or s390x), built with
# images/runner/build-image.sh from the runner stand-in and a preloaded build image,
# or reused: images are cached by a hash of every input under $HATCHERY_IMAGE_CACHE
# (default /var/cache/hatchery/test-images, outside the checkout, so CI's fresh clones
# reuse them), and the Debian stage by its package list (build-image.sh --debian-cache).
# Prints the image's path; its .kernel, .initrd and .json are beside it.
#
# usage: tests/e2e/production-image.sh ARCH
#        tests/e2e/production-image.sh both   (ppc64le and s390x side by side, as the
#                                              prepare.production_images test does; each
#                                              under qemu-user, one core each)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
arch=${1:?usage: production-image.sh ARCH|both}
cache=${HATCHERY_IMAGE_CACHE:-/var/cache/hatchery/test-images}
runner_version=${HATCHERY_STAND_IN_VERSION:-2.330.0}
mkdir -p "$cache"

if [ "$arch" = both ]; then
  "$0" ppc64le & ppc=$!
  "$0" s390x & s390=$!
  rc=0
  wait "$ppc" || rc=$?
  wait "$s390" || rc=$?
  exit "$rc"
fi

# One build at a time per cache and architecture, whoever asks (a CI run and a
# developer's run); each architecture's files are its own.
exec 9>"$cache/.lock-$arch"
flock 9
tarball=$("$root/images/runner/stand-in/make-tarball.sh" "$arch" "$runner_version" "$cache/stand-in")
preload=$("$here/make-preload.sh" "$arch" "$cache/preload")
key=$( { cat "$root/images/runner/build-image.sh" "$root/images/runner/hatchery-agent.service" \
           "$root/agent/hatchery-agent.c" "$root/agent/confine.c" "$root/agent/confine.h" "$root/agent/build-static.sh" \
           "$root/include/hatchery/agent_protocol.h" "$root/include/hatchery/hex.h" "$root/include/hatchery/version.h.in" \
           "$tarball" "$preload"; "$root/agent/build-static.sh" --version; } | sha256sum | cut -c1-16)
image="$cache/runner-$arch-$key.qcow2"
if [ ! -f "$image.json" ]; then
  t0=$SECONDS
  HATCHERY_AGENT_FROM_SOURCE=1 "$root/images/runner/build-image.sh" --debian-cache "$cache/debian" --preload "$preload" \
    "$arch" "$tarball" "$image" >&2
  echo "production($arch): image built in $((SECONDS - t0)) s" >&2
  # Older images of this arch are stale inputs: keep the cache to one per arch.
  find "$cache" -maxdepth 1 -name "runner-$arch-*" ! -name "runner-$arch-$key.*" -delete
else
  echo "production($arch): image cached ($image)" >&2
fi
echo "$image"
