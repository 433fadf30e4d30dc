#!/usr/bin/env bash
# A small OCI archive for ARCH to bake into the test runner image (build-image.sh
# --preload): busybox from Debian's archive, as localhost/hatchery-preload-test:ARCH. On a
# machine that reaches a registry, the real archive is the PyTorch build image from
# docker/Dockerfile_ARCH; here none is reachable. Made with buildah from scratch: no
# container runs, so no engine is needed. Cached by its inputs; prints the archive's path.
# usage: tests/e2e/make-preload.sh ARCH OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:?ARCH}; out_dir=${2:?OUT_DIR}
case "$arch" in ppc64le) deb_arch=ppc64el ;; s390x) deb_arch=s390x ;; *) echo "make-preload: unknown arch $arch" >&2; exit 2 ;; esac
mkdir -p "$out_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg --print-foreign-architectures | grep -qx "$deb_arch" || { dpkg --add-architecture "$deb_arch"; apt-get update -qq >/dev/null 2>&1 || true; }
deb=$(ls "$out_dir"/busybox-static_*_"$deb_arch".deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
  (cd "$out_dir" && apt-get download -qq "busybox-static:$deb_arch")
  deb=$(ls "$out_dir"/busybox-static_*_"$deb_arch".deb | head -n 1)
fi
key=$( { cat "$here/make-preload.sh"; sha256sum "$deb"; } | sha256sum | cut -c1-12)
archive="$out_dir/preload-$arch-$key.oci.tar"
if [ ! -f "$archive" ]; then
  dpkg-deb -x "$deb" "$work/x"
  mkdir -p "$work/rootfs/bin"
  cp "$work/x/bin/busybox" "$work/rootfs/bin/busybox"
  ln -s busybox "$work/rootfs/bin/sh"
  tar -C "$work/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/rootfs.tar" .
  b=(buildah --storage-driver vfs --root "$work/storage" --runroot "$work/run")
  ctr=$("${b[@]}" from --arch "$arch" scratch)
  "${b[@]}" add "$ctr" "$work/rootfs.tar" / >/dev/null
  "${b[@]}" config --arch "$arch" --os linux --cmd '["/bin/busybox","echo","preloaded"]' \
    --label org.opencontainers.image.title=hatchery-preload-test "$ctr"
  "${b[@]}" commit -q --format oci "$ctr" "oci-archive:$archive.tmp:localhost/hatchery-preload-test:$arch" >/dev/null
  "${b[@]}" rm "$ctr" >/dev/null
  mv "$archive.tmp" "$archive"
fi
echo "$archive"
