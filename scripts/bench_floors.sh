# shellcheck shell=bash disable=SC2154  # kToolTimeout and the like are bench.sh's
# The machine's floors for scripts/bench.sh (sourced by it): what two processes on this host can
# do without emurdma, measured by build/tests/bench/floor_bench (tests/bench/floor_bench.cpp).
#   cacheline   one-way latency through one shared cache line: the floor of shm latency
#   tcp         one-way latency of a plain 8-byte TCP ping-pong on loopback: the floor of TCP's
#   memcpy      copying 1 MiB: the floor of a payload from memory both processes map
#   vm_readv    process_vm_readv of 1 MiB: the floor of a payload from the peer's private memory
#   tcp_stream  a bulk TCP stream of 1 MiB writes: the floor of TCP bandwidth
# Goals (issue 26, docs/performance.md): shm 8 B within 3x cacheline, TCP 8 B within 1.25x tcp,
# 1 MiB shared within 10 % of memcpy, 1 MiB private within 10 % of vm_readv, TCP 1 MiB within
# 15 % of tcp_stream.

# floor_figure <mode> [size]: one figure of floor_bench (at its default size: 8 B for the
# latencies, 1 MiB for the rest), or "failed" (its message on stderr).
floor_figure() {
  local bin=build/tests/bench/floor_bench out
  local size=()
  [[ -n ${2:-} ]] && size=(--size "$2")
  if [[ ! -x $bin ]]; then
    echo "bench: $bin was not built (is EMURDMA_BENCH on?)" >&2
    echo failed
    return
  fi
  if ! out="$(timeout "$kToolTimeout" "$bin" "$1" "${size[@]}")"; then
    echo "bench: floor_bench $1 ${size[*]} failed" >&2
    echo failed
    return
  fi
  echo "bench: floor $out" >&2
  awk '{ printf "%.3f\n", $3 }' <<<"$out"
}

# floor_figure is the figure function: compare calls it with each mode as the label.
bench_floors() {
  build
  compare floors_lat_8B_us us lower floor_figure cacheline tcp
  compare floors_bw_1MiB_GBps GB/s higher floor_figure memcpy vm_readv tcp_stream
}
