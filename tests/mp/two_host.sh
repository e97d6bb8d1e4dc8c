#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair (198.18.0.0/15, the
# benchmarking range), and the engine's TCP transport between processes in each.
#
#   two_host.sh Tcp      <mp_two_host_test>   every operation across the two namespaces
#   two_host.sh LinkDown <mp_two_host_test>   the veth goes down mid-stream
#   two_host.sh Hostile  <hostile_tcp_two_host_test>   forgers on both hosts (issue 22)
#
# Every process gets the same job secret (EMU_MP_SECRET_FILE, a fresh 0600 file passed on as
# EMURDMA_SECRET_FILE): the TCP handshake across the hosts is the authenticated one.
#
# Needs root and `ip netns` (CI runs as root). Without them the test FAILS: a skipped two-host
# test must not look like a passing one. The namespaces are removed on every exit.
set -euo pipefail

scenario="${1:?usage: two_host.sh Tcp|LinkDown|Hostile <driver>}"
driver="${2:?usage: two_host.sh Tcp|LinkDown|Hostile <driver>}"

fail() {
  echo "two_host.sh: FAIL: $*" >&2
  exit 1
}

[[ "$(id -u)" == 0 ]] || fail "must run as root to create network namespaces (CI does)"
command -v ip >/dev/null || fail "the ip command (iproute2) is not installed"
[[ -x "$driver" ]] || fail "driver $driver is not an executable"

# shellcheck source=../netns/two_namespaces.sh
source "$(dirname "${BASH_SOURCE[0]}")/../netns/two_namespaces.sh"

secret_dir="$(mktemp -d)"
cleanup() {
  two_namespaces_down
  rm -rf "$secret_dir"
}
trap cleanup EXIT
secret_file="$secret_dir/secret"
(umask 077 && head -c 32 /dev/urandom | base64 >"$secret_file")

two_namespaces_up emump emv || fail "$two_namespaces_error"

case "$scenario" in
  Tcp) filter='TwoHost.*:-TwoHost.LinkDown' ;;
  LinkDown) filter='TwoHost.LinkDown' ;;
  Hostile) filter='HostileTwoHost.*' ;;
  *) fail "unknown scenario $scenario" ;;
esac

# A limit of our own, below ctest's TIMEOUT, so that the trap still removes the namespaces.
EMU_MP_NS_A="$ns_a" EMU_MP_NS_B="$ns_b" EMU_MP_ADDR_A="$addr_a" EMU_MP_ADDR_B="$addr_b" \
  EMU_MP_VETH_A="$veth_a" EMU_MP_SECRET_FILE="$secret_file" timeout -k 5 "${EMU_MP_TWO_HOST_LIMIT:-270}" \
  "$driver" --gtest_filter="$filter"
