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
trap 'fail "line $LINENO"' ERR
work=$(mktemp -d)
cp "$here/Dockerfile" "$here/hello.c" "$work/"
cd "$work"

# Before the job builds anything: what the image's container storage already holds.
preloaded=$(podman images --noheading --format '{{.Repository}}:{{.Tag}}' | paste -sd ' ' -) || fail images
step "preloaded images: ${preloaded:-none}"

step "importing the base image from this guest's root"
# A compiler's worth of the guest's root: the files of gcc, libc6-dev and a shell, with
# everything they depend on (dpkg's own records), the usr-merge links and cc's alternative.
declare -A seen=()
queue=(gcc libc6-dev dash coreutils)
while [ "${#queue[@]}" -gt 0 ]; do
  p=${queue[0]}; queue=("${queue[@]:1}")
  [ -z "${seen[$p]:-}" ] || continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || continue
  seen[$p]=1
  for d in $(dpkg-query -W -f='${Pre-Depends},${Depends}' "$p" | tr ',|' '\n\n' | sed -e 's/([^)]*)//g' -e 's/:any//g' -e 's/ //g'); do
    [ -n "$d" ] && [ -z "${seen[$d]:-}" ] && queue+=("$d")
  done
done
# (dpkg still names some files by their pre-merge paths, /bin/dash: the merged path is
# the file, and the top-level links are added once.)
{ dpkg-query -L "${!seen[@]}" 2>/dev/null | grep -v '^/\.*$' |
    sed -e 's|^/||' -e 's|^bin/|usr/bin/|' -e 's|^sbin/|usr/sbin/|' -e 's|^lib/|usr/lib/|' -e 's|^lib64/|usr/lib64/|' |
    grep -v -e 'lto-dump' -e '/lib[altu]*san\.so' -e '^usr/share/'
  printf '%s\n' bin sbin lib lib64 usr/bin/cc etc/alternatives/cc etc/ld.so.cache etc/passwd etc/group; } |
  sort -u | while read -r f; do [ -e "/$f" ] || [ -L "/$f" ] && echo "$f"; done >"$work/files"
step "$(wc -l <"$work/files") files of ${#seen[@]} packages"
tar -C / --no-recursion -cf - -T "$work/files" |
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
