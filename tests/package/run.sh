#!/usr/bin/env bash
# One ctest test per architecture (tests/CMakeLists.txt: package.*):
#   run.sh native OUT_DIR    build the packages here, lintian, install test in a clean
#                            bookworm root (amd64 on CI)
#   run.sh ppc64el OUT_DIR   cross build in a clean bookworm root (an unprivileged user,
#   run.sh s390x OUT_DIR     no network), unit tests under qemu-user, install test in a
#                            clean bookworm ppc64el (s390x) root under qemu-user with the
#                            smoke test
#   run.sh ppc64el|s390x OUT_DIR trixie    the same on Debian 13: built in a trixie root,
#                            installed in a trixie root of the architecture. Not in ctest:
#                            the archive this machine reaches lacks trixie 13.8's ppc64el
#                            and s390x packages (docs/DEVELOPMENT.md).
# (The amd64 build on trixie, and its install there: stock_host.trixie.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
what=${1:?usage: run.sh native|ppc64el|s390x OUT_DIR [RELEASE]}
out=${2:?usage: run.sh native|ppc64el|s390x OUT_DIR [RELEASE]}
release=${3:-bookworm}
case "$what" in
  native)
    "$here/build-debs.sh" "$out/native"
    "$here/install-test.sh" "$(dpkg --print-architecture)" "$out/native" ;;
  ppc64el|s390x)
    "$here/cross.sh" "$what" "$out/$what" "$release"
    "$here/install-test.sh" "$what" "$out/$what" "$release" ;;
  *) echo "run.sh: native, ppc64el or s390x" >&2; exit 2 ;;
esac
