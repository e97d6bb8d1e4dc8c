#!/bin/sh
# check_symbols.sh OBJDUMP SYSTEM_LIB OUR_LIB: the drop-in exports exactly the system
# library's name@version set (hidden "(VERSION)" entries included), plus our extension
# (EMURDMA_1.0 to EMURDMA_1.2: verbs_api/emurdma_verbs.h).
set -eu
objdump=$1 system=$2 ours=$3
symbols() {
  "$objdump" -T "$1" | awk '$0 !~ /\*UND\*/ && ($3 == "DF" || $3 == "DO") { print $(NF) "@" $(NF-1) }' | sort -u
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
symbols "$system" > "$tmp/system"
symbols "$ours" | grep -v '@EMURDMA_1\.[012]$' > "$tmp/ours"
if ! diff -u "$tmp/system" "$tmp/ours"; then
  echo "FAIL: symbol sets differ (- system only, + drop-in only)"
  exit 1
fi
symbols "$ours" | grep -qx 'emu_query_srq_counts@EMURDMA_1.0' || { echo "FAIL: no emu_query_srq_counts@EMURDMA_1.0"; exit 1; }
symbols "$ours" | grep -qx 'emu_query_counters@EMURDMA_1.1' || { echo "FAIL: no emu_query_counters@EMURDMA_1.1"; exit 1; }
symbols "$ours" | grep -qx 'emu_settle_qp@EMURDMA_1.2' || { echo "FAIL: no emu_settle_qp@EMURDMA_1.2"; exit 1; }
echo "OK: $(wc -l < "$tmp/system") symbols match"
