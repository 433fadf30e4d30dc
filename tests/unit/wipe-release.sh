#!/usr/bin/env bash
# The wipe of an agent protocol line (agent_msg_encode: a config line carries the JIT
# config) must survive a release build: compiled here with Debian's own build flags
# (dpkg-buildflags: -O2, _FORTIFY_SOURCE), the function must still call explicit_bzero
# (or its fortified __explicit_bzero_chk) on the encoded text before it frees it. A
# memset there compiles to nothing: GCC drops a store to memory that is freed next.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/probe.c" <<'C'
#include "hatchery/agent_protocol.h"
char *probe_encode(json_t *msg, size_t *ret_len);
char *probe_encode(json_t *msg, size_t *ret_len)
{
    return agent_msg_encode(msg, ret_len);
}
C
# shellcheck disable=SC2046
cc -std=gnu11 $(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CFLAGS) \
  -I"$root/include" -c "$work/probe.c" -o "$work/probe.o"
objdump -dr --no-show-raw-insn "$work/probe.o" | awk '/<probe_encode>:/,/^$/' >"$work/probe.s"
calls=$(grep -oE 'R_[A-Z0-9_]+[[:space:]]+[A-Za-z_][A-Za-z0-9_]*' "$work/probe.s" | awk '{print $2}' | tr '\n' ' ')
echo "probe_encode, built with $(dpkg-buildflags --get CFLAGS | grep -oE -- '-O[0-9s]'): calls $calls"
case " $calls " in
  *" explicit_bzero "* | *" __explicit_bzero_chk "*) echo "the wipe is there" ;;
  *) echo "FAIL: no explicit_bzero left in agent_msg_encode at release flags"; exit 1 ;;
esac
