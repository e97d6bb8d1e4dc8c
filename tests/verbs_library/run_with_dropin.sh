#!/bin/sh
# run_with_dropin.sh LIBDIR CHECK PROGRAM [ARGS...]: runs an unmodified rdma-core or perftest
# program with the drop-in first on the loader path, then checks its output:
#   devinfo  emu0, PORT_ACTIVE, link_layer Ethernet and a GID appear
#   devices  emu0 is listed
#   help     the program started and printed its usage (no "symbol lookup error" under
#            BIND_NOW: perftest links librdmacm, libmlx5 and libefa)
set -u
libdir=$1 check=$2
shift 2
out=$(EMURDMA_DEVICES=soft EMURDMA_TRANSPORT=loopback LD_LIBRARY_PATH="$libdir" "$@" 2>&1)
status=$?
printf '%s\n' "$out"
fail() { echo "FAIL: $1"; exit 1; }
case "$out" in *"symbol lookup error"*|*"undefined symbol"*) fail "unresolved symbol" ;; esac
case $check in
  devinfo)
    [ $status -eq 0 ] || fail "exit status $status"
    printf '%s\n' "$out" | grep -q 'hca_id:[[:space:]]*emu0' || fail "no emu0"
    printf '%s\n' "$out" | grep -q 'PORT_ACTIVE' || fail "no PORT_ACTIVE"
    printf '%s\n' "$out" | grep -q 'link_layer:[[:space:]]*Ethernet' || fail "no Ethernet"
    printf '%s\n' "$out" | grep -q 'GID\[ *0\]' || fail "no GID" ;;
  devices)
    [ $status -eq 0 ] || fail "exit status $status"
    printf '%s\n' "$out" | grep -q '^[[:space:]]*emu0[[:space:]]' || fail "emu0 not listed" ;;
  help)
    printf '%s\n' "$out" | grep -q 'Usage' || fail "no usage text: the program did not start" ;;
  *) fail "unknown check $check" ;;
esac
echo OK
