#!/usr/bin/env bash
# Runs an unmodified RDMA program pair with capture on (EMURDMA_PCAP, issue 25) and checks what
# each process's pcapng file holds, read back through tshark: one ctest entry per call
# (tests/capture/CMakeLists.txt).
#
#   run_capture.sh --profile P --iters N [--snaplen B] -- RUN_PROGRAM_ARGS...
#
#   --profile P   what the traffic must be (check_capture.py: rc_pingpong, write_bw, read_lat,
#                 atomic_lat, ud_pingpong); N is the run's iteration count (-n / --iters)
#   --snaplen B   EMURDMA_PCAP_SNAPLEN=B in both processes (headers only)
#
# tests/programs/run_program.sh starts, kills and checks the programs (RUN_PROGRAM_ARGS are its
# own: --mode, --check, --pair, ...); with --capture-check it gives each side a fresh capture
# directory of its temp dir (removed on every path) and runs check_capture.py on them after
# both programs have exited and passed. Its verdict stands.
#
# Exit: 0 pass, 1 fail. Without tshark the test fails ("run scripts/setup.sh"), never skips.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
profile=""
iters=""

fail() {
  echo "run_capture: FAIL: $*" >&2
  exit 1
}

while (($# > 0)); do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --snaplen) export EMURDMA_PCAP_SNAPLEN="$2"; shift 2 ;;
    --) shift; break ;;
    *) fail "unknown argument '$1'" ;;
  esac
done
[[ -n $profile ]] || fail "--profile is required"
[[ $iters =~ ^[0-9]+$ ]] || fail "--iters must be a number"
command -v tshark >/dev/null || fail "tshark is not installed: run scripts/setup.sh"
command -v python3 >/dev/null || fail "python3 is not installed"

exec bash "$here/../programs/run_program.sh" \
  --capture-check python3 --capture-check "$here/check_capture.py" \
  --capture-check --profile --capture-check "$profile" \
  --capture-check --iters --capture-check "$iters" "$@"
