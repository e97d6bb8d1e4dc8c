#!/usr/bin/env bash
# Middleware.ucx_perftest.<tls>: UCX's ucx_perftest (Debian's ucx-utils) as two processes on
# emu0:1 with only the given UCX transports (UCX_TLS), through `emurdma run`: the traffic that
# the device view makes possible. SKIPPED (77) when ucx_perftest is not installed.
#
#   run_ucx_perftest.sh EMURDMA_SCRIPT BUILD_DIR TLS TRANSPORT
set -euo pipefail

emurdma="${1:?usage: run_ucx_perftest.sh EMURDMA_SCRIPT BUILD_DIR TLS TRANSPORT}"
export EMURDMA_BUILD_DIR="${2:?}"
export UCX_TLS="${3:?}" UCX_NET_DEVICES=emu0:1
transport="${4:?}"
command -v ucx_perftest >/dev/null || { echo "SKIPPED: ucx_perftest is not installed (ucx-utils)"; exit 77; }

# The out-of-band port the two sides meet on: a random one, so that runs in other build trees
# do not collide.
port=$((20000 + RANDOM % 30000))
test_args=(-t tag_bw -s 65536 -n 2000 -p "$port")
server_log="$(mktemp "${TMPDIR:-/tmp}/emurdma-ucx.XXXXXX")"
trap 'kill "$server" 2>/dev/null || true; rm -f "$server_log"' EXIT
"$emurdma" run --transport "$transport" -- ucx_perftest "${test_args[@]}" >"$server_log" 2>&1 &
server=$!
# The server listens once UCX is up; the client retries while it does not yet.
for _ in $(seq 1 50); do
  if out="$("$emurdma" run --transport "$transport" -- ucx_perftest 127.0.0.1 "${test_args[@]}" 2>&1)"; then
    break
  fi
  [[ $out == *"connect"* ]] || break
  sleep 0.2
done
echo "$out" | tail -4
wait "$server" || { echo "the server failed:"; cat "$server_log"; exit 1; }
grep -q '^Final:' <<<"$out" || { echo "FAILED: no Final line from the client"; exit 1; }
echo "ucx_perftest ($UCX_TLS over $transport) ran on emu0:1"
