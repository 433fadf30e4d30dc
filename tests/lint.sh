#!/usr/bin/env bash
# Style checks as a test (STYLE.md): every C file is clang-formatted with the committed
# .clang-format, and the banned functions (strcpy, sprintf, strncpy, strtok, atoi, gets)
# appear nowhere. Prints each offence; exits 1 if there is any.
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
[ "$status" = 0 ] && echo "lint: $(echo "$files" | wc -w) files clean"
exit $status
