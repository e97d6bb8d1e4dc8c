#!/usr/bin/env bash
# The main job: installs what is missing, builds, then
#   1. runs rdma-core's unmodified ibv_srq_pingpong (16 QPs sharing one SRQ, buffers validated)
#      as a server and a client process on the soft device emu0, over shared memory, through
#      scripts/emurdma run, printing both outputs (the demo fails if the pingpong fails);
#   2. runs the SRQ walk-through on the engine (the worked example of dat_srq_query, the
#      low-watermark event, refused and successful resizes), printing each step.
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
