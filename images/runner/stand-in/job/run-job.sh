#!/bin/bash
# The stand-in runner's job: what a `ciflow/ppc64le` job does, in miniature, run as the
# runner's user inside the guest:
#   1. import a base image from the guest's own root (no registry is reachable here);
#   2. `docker build` job/Dockerfile with UBI_IMAGE switched to that base, compiling and
#      running a program in a RUN step;
#   3. `docker run` the result;
#   4. list what the image's container storage already had (the preloaded build images);
#   5. write the report (result, uid, image digest, the container's output) to
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
work=$(mktemp -d)
cp "$here/Dockerfile" "$here/hello.c" "$work/"
cd "$work"

step "preloaded images: $(podman images --noheading --format '{{.Repository}}:{{.Tag}}' | tr '\n' ' ')"
preloaded=$(podman images --noheading --format '{{.Repository}}:{{.Tag}}' | grep -v '^localhost/hatchery-' | tr '\n' ' ' | sed 's/ $//')

step "importing the base image from this guest's root"
# What a compiler needs: the merged /usr without the kernel's modules, the container
# engine and documentation, plus /etc's loader and user files.
tar -C / -cf - --exclude=usr/lib/modules --exclude=usr/lib/firmware --exclude=usr/share \
    --exclude='usr/lib/*/libicu*' --exclude=usr/libexec/podman --exclude=usr/bin/podman \
    --exclude=usr/lib/git-core --exclude=opt --exclude=usr/lib/python3* \
    bin sbin lib usr $( [ -e /lib64 ] && echo lib64 ) etc/ld.so.cache etc/passwd etc/group 2>/dev/null |
  podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - localhost/hatchery-base:latest >/dev/null || fail import

step "docker build (compiles in a RUN step)"
docker build --network=none --build-arg UBI_IMAGE=localhost/hatchery-base:latest \
  -t localhost/hatchery-job:latest -f Dockerfile . || fail build

step "docker run"
output=$(docker run --rm --network=none localhost/hatchery-job:latest) || fail run
echo "$output"
digest=$(podman image inspect --format '{{.Digest}}' localhost/hatchery-job:latest) || fail inspect
step "built $digest"
printf '{"result":"succeeded","uid":%d,"image_digest":"%s","output":"%s","preloaded":"%s"}\n' \
  "$(id -u)" "$digest" "$output" "$preloaded" > "$report"
