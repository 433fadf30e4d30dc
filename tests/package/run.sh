#!/usr/bin/env bash
# One ctest test per architecture (tests/CMakeLists.txt: package.*):
#   run.sh native OUT_DIR    build the packages here, lintian, install test (amd64 on CI)
#   run.sh ppc64el OUT_DIR   cross build, unit tests under qemu-user, install test in a
#   run.sh s390x OUT_DIR     ppc64el (s390x) root under qemu-user with the smoke test
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
what=${1:?usage: run.sh native|ppc64el|s390x OUT_DIR}
out=${2:?usage: run.sh native|ppc64el|s390x OUT_DIR}
case "$what" in
  native)
    "$here/build-debs.sh" "$out/native"
    "$here/install-test.sh" "$(dpkg --print-architecture)" "$out/native" ;;
  ppc64el|s390x)
    "$here/cross.sh" "$what" "$out/$what"
    "$here/install-test.sh" "$what" "$out/$what" ;;
  *) echo "run.sh: native, ppc64el or s390x" >&2; exit 2 ;;
esac
