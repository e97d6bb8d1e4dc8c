#!/usr/bin/env bash
# Installs what is missing, then configures and builds emurdma into build/ (Release,
# incremental). Extra arguments go to CMake's configure step, e.g. -DEMURDMA_ASAN=ON.
# BUILD_DIR overrides the build directory (the sanitizer builds use their own).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bash scripts/setup.sh

build_dir="${BUILD_DIR:-build}"
generator=()
if [[ ! -f "$build_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
