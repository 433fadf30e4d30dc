#!/usr/bin/env bash
# Style checks as a test (STYLE.md): every C file is clang-formatted with the committed
# .clang-format, the banned functions (strcpy, sprintf, strncpy, strtok, atoi, gets)
# appear nowhere, no buffer is "wiped" with a memset right before its free, and no log
# line's format repeats a key (tests/tools/log-keys.pl), and no two files call each other
# (tests/tools/layers.py). Prints each offence; exits 1 if there is any.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find controller agent include tests -name '*.[ch]')
for f in $files; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not clang-formatted: $f (run: clang-format -i $f)"
    status=1
  fi
done
banned=$(grep -nHE '\b(strcpy|sprintf|strncpy|strtok|atoi|gets)[[:space:]]*\(' $files 2>/dev/null | grep -v 'lint.sh')
if [ -n "$banned" ]; then
  echo "banned functions (use snprintf, memcpy with a checked length, strtol, ...):"
  echo "$banned"
  status=1
fi
# A wipe the optimiser removes: memset of a buffer right before it is freed is a dead
# store (use explicit_bzero or OPENSSL_cleanse; tests/unit/wipe-release.sh checks one).
dead_wipes=$(perl -0ne 'while (/memset\(\s*(\w+)\s*,\s*0\s*,[^;]*\);\s*(?:\/\*.*?\*\/\s*)?free\(\s*\1\s*\)/sg) { print "$ARGV: memset($1, 0, ...) right before free($1)\n" }' $files)
if [ -n "$dead_wipes" ]; then
  echo "wipes a release build removes (use explicit_bzero):"
  echo "$dead_wipes"
  status=1
fi
# A log line that repeats a key means something else to each logfmt reader.
if ! perl tests/tools/log-keys.pl $(echo "$files" | tr ' ' '\n' | grep -E '^(controller|agent)/.*\.c$'); then
  status=1
fi
# Layers (docs/DESIGN.md): no two files of the controller, of its libvirt provider or of its
# scale sets call each other, directly or around a loop.
if ! python3 tests/tools/layers.py controller controller/libvirt controller/scaleset; then
  status=1
fi
[ "$status" = 0 ] && echo "lint: $(echo "$files" | wc -w) files clean"
exit $status
