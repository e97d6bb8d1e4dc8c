#!/usr/bin/env bash
# The main job: installs what is missing, builds, then
#   1. runs rdma-core's unmodified ibv_srq_pingpong (16 QPs sharing one SRQ, buffers validated)
#      as a server and a client process on the soft device emu0, over shared memory, through
#      scripts/emurdma run, printing both outputs (the demo fails if the pingpong fails);
#   2. runs the SRQ walk-through on the engine (the worked example of dat_srq_query, the
#      low-watermark event, refused and successful resizes), printing each step;
#   3. runs dapl2-utils' unmodified dtestsrq (10 connections sharing one SRQ on each side) as a
#      server and a client process on IA emu0 (our DAT provider, shared memory between the two)
#      through scripts/emurdma run, which writes the dat.conf and sets DAT_OVERRIDE;
#   4. runs the SRQ walk-through through the DAT API (dat_srq_query's worked example, the
#      low-watermark event once, a refused and a successful shrink), printing each step.
# A failed DAT step does not stop the demo (the other one still shows); the demo then exits 1.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bash scripts/build.sh >&2
build_dir="${BUILD_DIR:-build}"

echo "== ibv_srq_pingpong (rdma-core, unmodified) on emu0 over shared memory:"
echo "   scripts/emurdma run --transport shm -- ibv_srq_pingpong -g 0 -q 16 -c      (server)"
echo "   scripts/emurdma run --transport shm -- ibv_srq_pingpong -g 0 -q 16 -c HOST (client)"
# run_program.sh starts both through scripts/emurdma, retries the client until the server
# listens, kills both on every path (time limit 55 s) and checks their results.
if ! bash tests/programs/run_program.sh --mode shm --check pingpong --pair \
  --wrapper "$repo/scripts/emurdma" --build-dir "$(cd "$build_dir" && pwd)" -- \
  ibv_srq_pingpong -g 0 -q 16 -c 2>&1; then
  echo "demo: ibv_srq_pingpong failed on emu0 (output above)" >&2
  exit 1
fi

echo
echo "== SRQ walk-through on the engine:"
"$build_dir/tests/srq_walkthrough"

dat_failures=()

echo
echo "== dtestsrq (dapl2-utils, unmodified) on IA emu0, 10 connections sharing one SRQ:"
echo "   scripts/emurdma run -- dtestsrq -P emu0 -p PORT -c 10                  (server)"
echo "   scripts/emurdma run -- dtestsrq -P emu0 -p PORT -c 10 -h 127.0.0.1     (client)"
# run_dat_program.sh starts both through scripts/emurdma (dat.conf, DAT_OVERRIDE), kills both
# on every path (time limit 50 s) and checks their own success lines.
if ! bash tests/dat_programs/run_dat_program.sh --mode auto --program dtestsrq \
  --wrapper "$repo/scripts/emurdma" --build-dir "$(cd "$build_dir" && pwd)" -- -c 10 2>&1; then
  echo "demo: dtestsrq failed on emu0 (output above)" >&2
  dat_failures+=(dtestsrq)
fi

echo
echo "== SRQ walk-through through the DAT API (IA emu0, libdat2 + our provider):"
echo "   scripts/emurdma run -- $build_dir/tests/dat_programs/dat_srq_walkthrough emu0"
if ! EMURDMA_BUILD_DIR="$(cd "$build_dir" && pwd)" scripts/emurdma run -- \
  "$build_dir/tests/dat_programs/dat_srq_walkthrough" emu0 2>&1; then
  echo "demo: the DAT SRQ walk-through failed (output above)" >&2
  dat_failures+=(dat_srq_walkthrough)
fi

if ((${#dat_failures[@]} > 0)); then
  echo "demo: the DAT steps failed: ${dat_failures[*]}" >&2
  exit 1
fi
