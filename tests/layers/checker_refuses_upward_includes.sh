#!/usr/bin/env bash
# The layer check itself: a tree whose engine includes a transport, and whose transport reaches
# into the engine past its transport interface, must be refused with one line for each, while
# the same tree without them passes.
set -euo pipefail

checker="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/check_layers.sh"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree"/{base,emu,transports/tcp}
printf '#include "base/spin_lock.h"\n#include "emu/transport.h"\n' >"$tree/transports/tcp/link.cpp"
printf '#include "base/spin_lock.h"\n' >"$tree/emu/node.cpp"
printf '#include <atomic>\n' >"$tree/base/spin_lock.h"

bash "$checker" "$tree" || { echo "FAIL: a clean tree was refused"; exit 1; }

printf '#include "transports/auto/auto_transport.h"\n' >>"$tree/emu/node.cpp"
printf '#include "emu/qp.h"\n' >>"$tree/transports/tcp/link.cpp"
set +e
out="$(bash "$checker" "$tree")"
rc=$?
set -e
echo "$out"
[[ $rc == 1 ]] || { echo "FAIL: exit code $rc, not 1"; exit 1; }
grep -q 'emu/node.cpp includes "transports/auto/auto_transport.h"' <<<"$out" ||
  { echo "FAIL: the engine's upward include was not named"; exit 1; }
grep -q 'transports/tcp/link.cpp includes "emu/qp.h"' <<<"$out" ||
  { echo "FAIL: the transport's include past the interface was not named"; exit 1; }
echo "PASS"
