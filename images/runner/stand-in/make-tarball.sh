#!/usr/bin/env bash
# Packs the runner stand-in in the layout of the real runner's release tarball:
#   actions-runner-linux-ARCH-VERSION.tar.gz: run.sh, run-helper.sh, bin/Runner.Listener,
#   and job/ (the stand-in's job: a Dockerfile built with podman inside the guest; or the
#   hostile job, probe.sh).
# usage: images/runner/stand-in/make-tarball.sh ARCH VERSION OUT_DIR   (prints the path)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:?ARCH}; version=${2:?VERSION}; out=${3:?OUT_DIR}
case "$arch" in ppc64le|s390x|x86_64) ;; *) echo "make-tarball: unknown arch $arch" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
install -D -m 0755 "$here/run.sh" "$work/run.sh"
install -D -m 0755 "$here/run-helper.sh" "$work/run-helper.sh"
install -D -m 0755 "$here/Runner.Listener" "$work/bin/Runner.Listener"
install -D -m 0755 "$here/job/run-job.sh" "$work/job/run-job.sh"
install -D -m 0755 "$here/job/probe.sh" "$work/job/probe.sh"
install -D -m 0644 "$here/job/Dockerfile" "$work/job/Dockerfile"
install -D -m 0644 "$here/job/hello.c" "$work/job/hello.c"
mkdir -p "$out"
tarball="$out/actions-runner-linux-$arch-$version.tar.gz"
# Reproducible: fixed owner, order and times, so the image cache key is stable.
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - . | gzip -n > "$tarball"
echo "$tarball"
