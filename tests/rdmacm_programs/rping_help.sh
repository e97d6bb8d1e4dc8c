#!/bin/sh
# rping_help.sh EMURDMA BUILD_DIR RPING: an unmodified rdmacm-utils program started through
# `emurdma run` loads our librdmacm.so.1 (the loader says so under LD_DEBUG=libs), prints its
# usage and exits with the status the system library gives it.
set -u
emurdma=$1 build=$2 rping=$3
fail() { echo "FAIL: $1"; exit 1; }
"$rping" -h >/dev/null 2>&1
expected=$?
out=$(EMURDMA_BUILD_DIR="$build" EMURDMA_DEVICES=soft LD_DEBUG=libs "$emurdma" run -- "$rping" -h 2>&1)
status=$?
printf '%s\n' "$out" | grep -v 'symbol=' | tail -n 40
case "$out" in *"symbol lookup error"*|*"undefined symbol"*) fail "unresolved symbol" ;; esac
[ "$status" -eq "$expected" ] || fail "exit status $status, the system library gives $expected"
printf '%s\n' "$out" | grep -q 'rping -s' || fail "no usage text"
ours=$(cd "$build/rdmacm_api" && pwd)/librdmacm.so.1
printf '%s\n' "$out" | grep -q "calling init: $ours" || fail "$ours was not loaded"
printf '%s\n' "$out" | grep -q 'calling init: /.*/usr/lib/.*librdmacm.so.1\|calling init: /usr/lib/.*librdmacm.so.1' &&
  fail "the system librdmacm was loaded"
echo OK
