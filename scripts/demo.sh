#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs the SRQ walk-through on the
# engine (the worked example of dat_srq_query, the low-watermark event, refused and
# successful resizes), printing each step.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bash scripts/build.sh >&2
"${BUILD_DIR:-build}/tests/srq_walkthrough"
