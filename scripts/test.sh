#!/usr/bin/env bash
# Builds emurdma (installing what is missing) and runs every test with ctest. Exits non-zero
# when anything fails. Extra arguments go to ctest (e.g. -R SrqResize).
#
# With EMURDMA_SANITIZERS=1 (the default under CI=true) the suite then runs again in an
# AddressSanitizer + UndefinedBehaviorSanitizer build and in a ThreadSanitizer build, each in
# its own directory (build-asan/, build-tsan/). The ThreadSanitizer run leaves out the
# multi-process tests (Mp*): the orderings between processes (a barrier passed through a
# pipe, a completion seen by another process) are invisible to it, so it reports every RDMA
# target read after one; the in-process suites cover the same engine and transports, threads
# included, under TSan. Then the fuzz targets of the wire decoders (scripts/fuzz.sh, in
# build-fuzz/) replay their seed corpora and run EMURDMA_FUZZ_SECONDS each (default 12: ten
# targets; scripts/fuzz.sh alone runs 60 s each).
# There a ctest entry is a whole test program (e.g. -R srq_test), not one test.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

# run_suite DIR [--exclude REGEX] [cmake args]
run_suite() {
  local dir="$1"
  shift
  local extra=()
  if [[ "${1:-}" == "--exclude" ]]; then
    extra=(-E "$2")
    shift 2
  fi
  local started=$SECONDS
  BUILD_DIR="$dir" bash scripts/build.sh "$@"
  local built=$SECONDS
  echo "== ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" "${extra[@]}" "${ctest_args[@]}"
  # One line per stage, for docs/ci.md's budget (the stage after a failure never prints).
  stage_times+=("$dir: build $((built - started)) s, tests $((SECONDS - built)) s")
  echo "== $dir: build $((built - started)) s, tests $((SECONDS - built)) s"
}

stage_times=()

# Test runners kill programs (a hang, the end of a server), and a killed process leaves its
# stat page in /dev/shm (docs/usage.md, "Counters"): removed at the end, pass or fail, so that
# runs do not pile them up (about 12 KiB each; a container's /dev/shm may be 64 MiB).
trap 'python3 scripts/emurdma_stat.py --clean >/dev/null 2>&1 || true' EXIT

ctest_args=("$@")
run_suite "${BUILD_DIR:-build}"

sanitizers="${EMURDMA_SANITIZERS:-}"
if [[ -z "$sanitizers" && "${CI:-}" == "true" ]]; then
  sanitizers=1
fi
if [[ "$sanitizers" == "1" ]]; then
  # The sanitizer builds register one ctest entry per test program, and leave out the tests
  # their runtimes cannot run (tests/CMakeLists.txt, emurdma_discover_tests, says which and why).
  run_suite build-asan -DEMURDMA_ASAN=ON -DEMURDMA_UBSAN=ON -DEMURDMA_BENCH=OFF
  TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}" run_suite build-tsan --exclude '^Mp' \
    -DEMURDMA_TSAN=ON -DEMURDMA_BENCH=OFF
  fuzz_started=$SECONDS
  bash scripts/fuzz.sh "${EMURDMA_FUZZ_SECONDS:-12}"
  stage_times+=("fuzz: $((SECONDS - fuzz_started)) s")
fi
echo "== stage times (total $SECONDS s):"
printf '==   %s\n' "${stage_times[@]}"
