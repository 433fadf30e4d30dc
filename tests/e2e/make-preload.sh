#!/usr/bin/env bash
# The build image to bake into the test runner image for ARCH (build-image.sh --preload),
# as an OCI archive: localhost/hatchery-preload-test:ARCH, a C compiler's worth of Debian
# bookworm for ARCH (gcc, libc6-dev, dash, coreutils and what they depend on), which the
# stand-in's job builds FROM, as a real job builds FROM the PyTorch build image its runner
# image preloads. On a machine that reaches a registry, the real archive is that image,
# from docker/Dockerfile_ARCH; here none is reachable.
#
# Made on this machine without emulation: mmdebstrap's `extract` variant unpacks the
# packages and runs none of their scripts, and buildah commits the tree from scratch. So
# the alternative `cc` that gcc's script would make is made here. What a compile in a
# container does not need (documentation, LTO, sanitizers, static libc) is left out.
# Cached by this script; prints the archive's path.
# usage: tests/e2e/make-preload.sh ARCH OUT_DIR
set -euo pipefail
arch=${1:?ARCH}; out_dir=${2:?OUT_DIR}
case "$arch" in ppc64le) deb_arch=ppc64el ;; s390x) deb_arch=s390x ;; *) echo "make-preload: unknown arch $arch" >&2; exit 2 ;; esac
mirror=${HATCHERY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$out_dir"
key=$( { cat "$0"; echo "$mirror"; } | sha256sum | cut -c1-12)
archive="$out_dir/preload-$arch-$key.oci.tar"
if [ ! -f "$archive" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mmdebstrap --quiet --variant=extract --architectures="$deb_arch" \
    --include=gcc,libc6-dev,dash,coreutils bookworm "$work/rootfs" "$mirror" ||
    { echo "make-preload: mmdebstrap could not unpack the compiler for $deb_arch from $mirror" >&2; exit 1; }
  (
    cd "$work/rootfs"
    rm -rf usr/share/doc usr/share/man usr/share/info usr/share/locale var/cache/apt var/lib/apt/lists
    find . \( -name 'lto1' -o -name '*lto-dump*' -o -name 'lib[altu]*san.so*' -o -name 'libc.a' \) -delete
    [ -e usr/bin/cc ] || ln -s gcc usr/bin/cc
    [ -e bin/sh ] || ln -s dash bin/sh
    mkdir -p tmp && chmod 1777 tmp
  )
  test -x "$work/rootfs/usr/lib/gcc/$(ls "$work/rootfs/usr/lib/gcc")/12/cc1" ||
    { echo "make-preload: no cc1 in the unpacked tree" >&2; exit 1; }
  tar -C "$work/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/rootfs.tar" .
  b=(buildah --storage-driver vfs --root "$work/storage" --runroot "$work/run")
  ctr=$("${b[@]}" from --arch "$arch" scratch)
  "${b[@]}" add "$ctr" "$work/rootfs.tar" / >/dev/null
  "${b[@]}" config --arch "$arch" --os linux \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd '["/bin/sh"]' --label org.opencontainers.image.title=hatchery-preload-test "$ctr"
  "${b[@]}" commit -q --format oci "$ctr" "oci-archive:$archive.tmp:localhost/hatchery-preload-test:$arch" >/dev/null
  "${b[@]}" rm "$ctr" >/dev/null
  mv "$archive.tmp" "$archive"
  # Older archives of this arch are stale inputs.
  find "$out_dir" -maxdepth 1 -name "preload-$arch-*.oci.tar" ! -name "$(basename "$archive")" -delete
fi
echo "$archive"
