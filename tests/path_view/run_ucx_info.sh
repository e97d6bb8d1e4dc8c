#!/usr/bin/env bash
# Middleware.ucx_info_lists_emu0: `emurdma run -- ucx_info -d` lists UCX's verbs transports on
# emu0:1 (rc_verbs and ud_verbs), which UCX offers only when the device view shows emu0's
# /dev/infiniband node and sysfs files. SKIPPED (77) when ucx_info is not installed.
#
#   run_ucx_info.sh EMURDMA_SCRIPT BUILD_DIR
set -euo pipefail

emurdma="${1:?usage: run_ucx_info.sh EMURDMA_SCRIPT BUILD_DIR}"
export EMURDMA_BUILD_DIR="${2:?}"
command -v ucx_info >/dev/null || { echo "SKIPPED: ucx_info is not installed (ucx-utils)"; exit 77; }

out="$("$emurdma" run -- ucx_info -d 2>&1)"
# Pairs "<transport> <device>" in the order ucx_info prints them.
pairs="$(awk '/Transport:/ { t = $3 } /Device:/ { print t, $3 }' <<<"$out")"
missing=0
for transport in rc_verbs ud_verbs; do
  if grep -qx "$transport emu0:1" <<<"$pairs"; then
    echo "ok: $transport on emu0:1"
  else
    echo "FAILED: ucx_info -d lists no $transport on emu0:1"
    missing=1
  fi
done
if ((missing)); then
  echo "transports listed:"
  while IFS= read -r line; do echo "  $line"; done <<<"$pairs"
  exit 1
fi
