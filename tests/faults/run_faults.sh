#!/usr/bin/env bash
# Runs an unmodified RDMA or uDAPL program pair under a fault plan (EMURDMA_FAULTS, issue 25)
# and checks that it still completes: one ctest entry per call (tests/faults/CMakeLists.txt).
#
#   run_faults.sh --plan PLAN --runner programs|dat_programs [--processes N] -- RUNNER_ARGS...
#
#   --plan PLAN     the fault plan every process of the run gets (EMURDMA_FAULTS=PLAN; a plan
#                   text or @file). It should name its seed, so that a failure can be replayed.
#   --runner R      which runner starts, kills and checks the programs: programs is
#                   tests/programs/run_program.sh (ibverbs-utils, perftest), dat_programs is
#                   tests/dat_programs/run_dat_program.sh (dapl2-utils); RUNNER_ARGS are its own
#                   (--mode, --check or --program, --limit, ...). Its verdict stands: a program
#                   that fails, hangs or reports an error under the plan fails the test.
#   --processes N   how many processes must show that the plan was in force (default 2: a
#                   server and a client). Each process that opens emu0 under a plan logs it
#                   once, "[emurdma info] EMURDMA_FAULTS: <n> rules, seed=<s> ...", which the
#                   runners show in the programs' output; without that line the run proved
#                   nothing about faults (the plan was not read), so the test fails.
#
# Exit: the runner's (0 pass, 1 fail, 77 skipped), or 1 when the plan was not seen in force.
# The runner kills every process it started on every path; this script starts none itself.
#
# The processes keep their stat pages (EMURDMA_STAT_KEEP=1, in a directory of this run): the
# retransmissions the plan caused, as `emurdma stat --json` reads them after the run, must be
# above zero (a plan that loses frames and no frame sent again proves the faults did nothing).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
plan=""
runner=""
processes=2

fail() {
  echo "run_faults: FAIL: $*" >&2
  exit 1
}

while (($# > 0)); do
  case "$1" in
    --plan) plan="$2"; shift 2 ;;
    --runner) runner="$2"; shift 2 ;;
    --processes) processes="$2"; shift 2 ;;
    --) shift; break ;;
    *) fail "unknown argument '$1'" ;;
  esac
done
[[ -n $plan ]] || fail "--plan is required"
[[ $processes =~ ^[0-9]+$ ]] || fail "--processes must be a number"
case "$runner" in
  programs) script="$here/../programs/run_program.sh" ;;
  dat_programs) script="$here/../dat_programs/run_dat_program.sh" ;;
  *) fail "--runner must be programs or dat_programs" ;;
esac

out="$(mktemp "${TMPDIR:-/tmp}/emurdma_faults.XXXXXX")" || fail "mktemp failed"
stats="$(mktemp -d "${TMPDIR:-/tmp}/emurdma_faults_stat.XXXXXX")" || fail "mktemp failed"
trap 'rm -f "$out"; rm -rf "$stats"' EXIT
export EMURDMA_STAT_DIR="$stats" EMURDMA_STAT_KEEP=1

# info: the plan's one line per process (its seed) is shown; the runners leave the library's
# own "[emurdma ...]" lines out of their error checks.
echo "run_faults: EMURDMA_FAULTS='$plan'" >&2
EMURDMA_FAULTS="$plan" EMURDMA_LOG=info bash "$script" "$@" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
((status == 0)) || exit "$status"

# The runners show each program's output with its side as a prefix ("server| ", "client| ").
in_force=$(grep -cE '^[a-z]+\| \[emurdma info\] EMURDMA_FAULTS: [0-9]+ rules?, seed=[0-9]+' "$out")
if ((in_force < processes)); then
  fail "the plan was in force in $in_force of the $processes processes (no 'EMURDMA_FAULTS: ... seed=' line from the others): was EMURDMA_FAULTS read?"
fi
# Every process's counters, summed: retransmitted requests and, per process, its pages.
read -r pages resent < <(python3 "$here/../../scripts/emurdma_stat.py" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["processes"]
print(len(d), sum(p["device"]["retransmitted_pkts"] for p in d))')
echo "run_faults: emurdma stat: $pages stat pages, retransmitted_pkts $resent in all" >&2
((pages >= processes)) || fail "emurdma stat found $pages stat pages for $processes processes"
((resent > 0)) || fail "no request was sent again: the plan's losses were not seen by RC"
echo "run_faults: PASS under the plan ($in_force processes showed it in force)" >&2
exit 0
