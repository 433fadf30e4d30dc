#!/bin/bash
# The stand-in runner's job: what a `ciflow/ppc64le` job does, in miniature, run as the
# runner's user inside the guest:
#   1. list what the image's container storage already had (the preloaded build images);
#   2. `docker build` job/Dockerfile with UBI_IMAGE switched to the preloaded build image
#      (no registry is reachable here), compiling and running a program in a RUN step;
#   3. `docker run` the result;
#   4. write the report (result, uid, image digest, the container's output) to
#      $HATCHERY_REPORT_FILE, which the agent sends to hatcheryd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
report=${HATCHERY_REPORT_FILE:-/dev/null}
step() { echo "job: $*"; }
fail() {
  printf '{"result":"failed","step":"%s","uid":%d}\n' "$1" "$(id -u)" > "$report"
  echo "job: failed at $1" >&2
  exit 1
}
trap 'fail "line $LINENO"' ERR
work=$(mktemp -d)
cp "$here/Dockerfile" "$here/hello.c" "$work/"
cd "$work"

# Before the job builds anything: what the image's container storage already holds.
preloaded=$(podman images --noheading --format '{{.Repository}}:{{.Tag}}' | paste -sd ' ' -) || fail images
step "preloaded images: ${preloaded:-none}"

# The base: the build image the runner image preloaded (build-image.sh --preload), found by
# its title, as a real job builds FROM the PyTorch build image; nothing is pulled.
base=$(podman images --noheading --filter label=org.opencontainers.image.title=hatchery-preload-test \
  --format '{{.Repository}}:{{.Tag}}' | head -n 1) || fail images
[ -n "$base" ] || fail "no preloaded build image (hatchery-build-image --preload)"
step "building from the preloaded $base"

step "docker build (compiles in a RUN step)"
docker build --network=none --build-arg UBI_IMAGE="$base" \
  -t localhost/hatchery-job:latest -f Dockerfile . || fail build

step "docker run"
output=$(docker run --rm --network=none localhost/hatchery-job:latest) || fail run
echo "$output"
digest=$(podman image inspect --format '{{.Digest}}' localhost/hatchery-job:latest) || fail inspect
step "built $digest"
printf '{"result":"succeeded","uid":%d,"image_digest":"%s","output":"%s","preloaded":"%s"}\n' \
  "$(id -u)" "$digest" "$output" "$preloaded" > "$report"
