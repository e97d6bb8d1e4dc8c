#!/usr/bin/env bash
# Builds emurdma and runs one of its benchmarks, printing the figures. The last line printed
# by each subcommand is a one-line summary that other tools parse:
#   bench <metric> <unit> <higher|lower> <label>=<value> ...
# where "higher"/"lower" says which direction is better.
#
# Usage: scripts/bench.sh rings|engine
#   rings   two-thread SPSC throughput of emu::SpscRing against boost::lockfree::spsc_queue
#           (uint64_t elements, same capacity, medians of repetitions). The summary uses the
#           capacity in RING_BENCH_CAPACITY (default 1024; the benchmark has 1024 and 4096).
#   engine  the engine's own cost on the in-process loopback transport: one 8-byte SEND with
#           its receive (post, deliver, both completions, both polls), and the message rate of
#           1,000 QPs sharing one SRQ divided by that of one QP. Ours only: no peer runs
#           in-process; the transports issue compares shm and TCP with libfabric and UCX.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

usage() {
  echo "usage: $0 <subcommand>" >&2
  echo "  rings   SPSC ring throughput: ours vs boost::lockfree::spsc_queue" >&2
  echo "  engine  engine cost per message and SRQ rate with 1000 QPs vs 1 (loopback)" >&2
}

# Configures and builds into build/. Its output goes to stderr so that stdout carries only
# the figures.
build() {
  if [[ -f scripts/build.sh ]]; then
    bash scripts/build.sh >&2
  else
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >&2
    cmake --build build -j2 >&2
  fi
}

have_python() { command -v python3 >/dev/null 2>&1 && python3 -c '' >/dev/null 2>&1; }

# Reads Google Benchmark JSON on stdin and prints "<run name> <median items/s>" for every
# median aggregate that has an items_per_second counter.
medians() {
  if have_python; then
    python3 -c '
import json, sys
for b in json.load(sys.stdin)["benchmarks"]:
    if b.get("aggregate_name") == "median" and "items_per_second" in b:
        print(b["run_name"], b["items_per_second"])
'
  else
    # The library writes one "key": value per line, "name" before the counters.
    awk -F': ' '
      /"run_name":/ { gsub(/[",]/, "", $2); run = $2 }
      /"aggregate_name":/ { gsub(/[",]/, "", $2); agg = $2 }
      /"items_per_second":/ { gsub(/,/, "", $2); if (agg == "median") print run, $2 }
      /^ *}/ { run = ""; agg = "" }
    '
  fi
}

# Builds, then runs the benchmark binary build/tests/bench/$1 with the remaining arguments
# plus random interleaving and aggregates only, and prints "<run name> <median items/s>"
# lines (see medians).
run_medians() {
  build
  local bin="build/tests/bench/$1"
  shift
  if [[ ! -x $bin ]]; then
    echo "bench: $bin was not built (is EMURDMA_BENCH on?)" >&2
    exit 1
  fi
  local json
  json="$(mktemp)"
  echo "bench: running $bin (about half a minute)" >&2
  "$bin" "$@" --benchmark_enable_random_interleaving=true \
    --benchmark_report_aggregates_only=true --benchmark_format=json >"$json"
  medians <"$json"
  rm -f "$json"
}

bench_rings() {
  # Many short repetitions in random order spread both queues over the whole run, so that a
  # change in the machine's state (two noisy virtual cores, whose cross-core latency varies
  # several-fold over time) hits both alike; the medians then discard the outliers.
  local figures
  figures="$(run_medians ring_bench --benchmark_filter='^ring_spsc/' \
    --benchmark_repetitions=21 --benchmark_min_time=0.05)"

  # run name ring_spsc/<impl>/<capacity>/real_time -> Mops per (impl, capacity).
  declare -A mops=()
  local name ips key
  while read -r name ips; do
    key="$(cut -d/ -f2,3 <<<"$name")"
    mops[$key]="$(awk -v v="$ips" 'BEGIN { printf "%.1f", v / 1e6 }')"
  done <<<"$figures"

  printf '%-10s %12s %12s %8s\n' capacity "ours Mops" "boost Mops" ratio
  local cap
  for cap in 1024 4096; do
    local o="${mops[ours/$cap]:-}" b="${mops[boost/$cap]:-}"
    [[ -n $o && -n $b ]] || continue
    printf '%-10s %12s %12s %8s\n' "$cap" "$o" "$b" \
      "$(awk -v o="$o" -v b="$b" 'BEGIN { printf "%.2f", (b > 0 ? o / b : 0) }')"
  done

  cap="${RING_BENCH_CAPACITY:-1024}"
  if [[ -z ${mops[ours/$cap]:-} || -z ${mops[boost/$cap]:-} ]]; then
    echo "bench: no median figures for capacity $cap in the benchmark output" >&2
    exit 1
  fi
  echo "bench ring_spsc_Mops Mops higher ours=${mops[ours/$cap]} boost_spsc=${mops[boost/$cap]}"
}

bench_engine() {
  local figures
  figures="$(run_medians engine_bench --benchmark_repetitions=9 --benchmark_min_time=0.1)"

  declare -A rate=()
  local name ips
  while read -r name ips; do
    rate[$name]="$ips"
  done <<<"$figures"
  local send="${rate[engine_send/8]:-}" one="${rate[srq_rate/1]:-}" many="${rate[srq_rate/1000]:-}"
  if [[ -z $send || -z $one || -z $many ]]; then
    echo "bench: missing median figures in the engine benchmark output" >&2
    exit 1
  fi
  awk -v s="$send" -v o="$one" -v m="$many" 'BEGIN {
    printf "engine 8 B send+recv round: %.0f ns; SRQ rate 1 QP %.2f Mmsg/s, 1000 QPs %.2f Mmsg/s\n",
      1e9 / s, o / 1e6, m / 1e6
    printf "bench engine_send_8B_ns ns lower ours=%.0f\n", 1e9 / s
    printf "bench srq_rate_1000qp_vs_1qp ratio higher ours=%.2f\n", m / o
  }'
}

case "${1:-}" in
  rings) bench_rings ;;
  engine) bench_engine ;;
  # transports) bench_transports ;;   (to come, issue 3)
  # verbs) bench_verbs ;;             (to come)
  *)
    usage
    exit 2
    ;;
esac
