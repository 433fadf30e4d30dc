#!/usr/bin/env bash
# End to end on the production runner image, for ppc64le and s390x: build (or reuse) the
# image (production-image.sh), then let hatcheryd serve real jobs on it through the real
# libvirtd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
"$root/tests/libvirt/libvirtd.sh" start >/dev/null

export IMAGE_ppc64le IMAGE_s390x GUEST_ppc64le
IMAGE_ppc64le=$("$here/production-image.sh" ppc64le)
IMAGE_s390x=$("$here/production-image.sh" s390x)
# The busybox test guest, booted beside the production image for a like-for-like figure.
GUEST_ppc64le=$("$root/images/test-guest/build.sh" ppc64le)
exec "$root/tests/github/with-prism.sh" node --test --test-reporter=spec "$here/production.test.mjs"
