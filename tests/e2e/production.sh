#!/usr/bin/env bash
# End to end on the production runner image, for ppc64le and s390x: build (or reuse) the
# image with images/runner/build-image.sh from the runner stand-in and a small preloaded
# OCI archive, then let hatcheryd serve real jobs on it through the real libvirtd.
#
# The images are cached by a hash of every input under $HATCHERY_IMAGE_CACHE (default
# /var/cache/hatchery/test-images, outside the checkout, so CI's fresh clones reuse them),
# and the Debian stage by its package list (build-image.sh --debian-cache).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${HATCHERY_IMAGE_CACHE:-/var/cache/hatchery/test-images}
runner_version=${HATCHERY_STAND_IN_VERSION:-2.330.0}
mkdir -p "$cache"
"$root/tests/libvirt/libvirtd.sh" start >/dev/null

# One build at a time per cache, whoever asks (a CI run and a developer's run).
exec 9>"$cache/.lock"
flock 9

image_for() {
  local arch=$1
  local tarball preload key image
  tarball=$("$root/images/runner/stand-in/make-tarball.sh" "$arch" "$runner_version" "$cache/stand-in")
  preload=$("$here/make-preload.sh" "$arch" "$cache/preload")
  key=$( { cat "$root/images/runner/build-image.sh" "$root/images/runner/hatchery-agent.service" \
             "$root/agent/hatchery-agent.c" "$root/agent/build-static.sh" \
             "$root/include/hatchery/agent_protocol.h" "$root/include/hatchery/version.h.in" \
             "$tarball" "$preload"; "$root/agent/build-static.sh" --version; } | sha256sum | cut -c1-16)
  image="$cache/runner-$arch-$key.qcow2"
  if [ ! -f "$image.json" ]; then
    local t0=$SECONDS
    "$root/images/runner/build-image.sh" --debian-cache "$cache/debian" --preload "$preload" \
      "$arch" "$tarball" "$image" >&2
    echo "production($arch): image built in $((SECONDS - t0)) s" >&2
    # Older images of this arch are stale inputs: keep the cache to one per arch.
    find "$cache" -maxdepth 1 -name "runner-$arch-*" ! -name "runner-$arch-$key.*" -delete
  else
    echo "production($arch): image cached ($image)" >&2
  fi
  echo "$image"
}

export IMAGE_ppc64le IMAGE_s390x GUEST_ppc64le
IMAGE_ppc64le=$(image_for ppc64le)
IMAGE_s390x=$(image_for s390x)
flock -u 9
# The busybox test guest, booted beside the production image for a like-for-like figure.
GUEST_ppc64le=$("$root/images/test-guest/build.sh" ppc64le)
exec "$root/tests/github/with-prism.sh" node --test --test-reporter=spec "$here/production.test.mjs"
