#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds emurdma and runs one of its benchmarks, printing the figures. The last line printed
# by each subcommand is a one-line summary that other tools parse:
#   bench <metric> <unit> <higher|lower> <label>=<value> ...
# where "higher"/"lower" says which direction is better.
#
# Usage: scripts/bench.sh rings|engine|transports|verbs|cm|floors|sweep|scale|middleware
#   rings   two-thread SPSC throughput of emu::SpscRing against boost::lockfree::spsc_queue
#           (uint64_t elements, same capacity, medians of repetitions). The summary uses the
#           capacity in RING_BENCH_CAPACITY (default 1024; the benchmark has 1024 and 4096).
#   engine  the engine's own cost on the in-process loopback transport: one 8-byte SEND with
#           its receive (post, deliver, both completions, both polls), and the message rate of
#           1,000 QPs sharing one SRQ divided by that of one QP. Ours only: no peer runs
#           in-process; the transports issue compares shm and TCP with libfabric and UCX.
#   verbs   the transports comparison with perftest over emu0 added to its lines, as
#           perftest=<v> (ib_send_lat 8 B and ib_write_bw 1 MiB, over shm and over tcp),
#           through scripts/emurdma: an unmodified verbs program on our libibverbs.so.1; and
#           libfabric's verbs provider on emu0 (our libibverbs.so.1 and librdmacm.so.1) to the
#           8 B latency lines as fi_verbs_pingpong=<v> (fi_pingpong -p verbs: -e rdm, over
#           ofi_rxm, over shm beside fi_shm_pingpong; -e msg over tcp beside fi_tcp_pingpong).
#   transports  two processes on this host, over shared memory and over TCP (127.0.0.1): our
#           transport_bench (RC SEND/RECV ping-pong, RDMA WRITE streaming, SRQ rate) beside
#           libfabric fi_pingpong (providers shm and tcp), UCX ucx_perftest (shared memory,
#           and UCX_TLS=tcp: tag_lat, tag_bw, ucp_put_bw) and qperf (kernel TCP), all run in
#           this invocation, in turn, three rounds (EMURDMA_BENCH_ROUNDS), each line giving
#           every tool's median round (about three minutes when the machine is idle). Units:
#           latency in us, one way = half a ping-pong round trip, mean over the run (each
#           tool's average); bandwidth in GB/s
#           = 10^9 bytes/s, 1 MiB messages streamed with many outstanding (shm_bw_1MiB_shared:
#           from registered memory mapped shared, which the peer maps). Each peer's label
#           names its test; a tool that fails prints <label>=failed, ours prints ours=n/a when
#           its transport is not available, and the run goes on. ours_counters_off= is ours
#           again with EMURDMA_COUNTERS=0 (no counting: what the counters cost, issue 25).
#           floor= is the machine's (see floors). shm_rate_8B_Mmsgs and tcp_rate_8B_Mmsgs:
#           8-byte messages streamed, millions a second (scripts/bench_rates.sh).
#           Prints several bench lines.
#   cm      the connection rate of rdma_cm over emu0: cmtime (rdmacm-utils) as a server and a
#           client process through scripts/emurdma (tests/rdmacm_programs/run_pair.sh), over
#           shm and over tcp (127.0.0.1), EMURDMA_BENCH_CM_CONNECTIONS connections (default
#           500) each round, EMURDMA_BENCH_ROUNDS rounds (default 3), the median round:
#           connections established per second = the count / cmtime's "connect" step (the
#           client's first rdma_connect to its last ESTABLISHED). Ours only (cmtime needs an
#           RDMA device). A failed run prints <label>=failed.
#   floors  what this machine allows without emurdma (scripts/bench_floors.sh): one-way
#           latency through a shared cache line and of a bare TCP ping-pong, memcpy,
#           process_vm_readv and a bulk TCP stream of 1 MiB, medians of the rounds. The
#           transports lines carry the same floors as floor=<v> beside ours=.
#   sweep   latency (8 B .. 64 KiB) and bandwidth (8 B .. 4 MiB) by powers of 4, over shm and
#           TCP, ours beside perftest over emu0, ucx_perftest, fi_pingpong and the floor:
#           build/bench/sweep.csv and log-log plots build/bench/sweep_*.png (gnuplot-nox),
#           bench lines for a few sizes (scripts/bench_sweep.sh); EMURDMA_SWEEP_ROUNDS=3 makes
#           each point the median of 3 runs.
#   scale   1, 100, 1,000 and 10,000 QPs between two processes over shm, one SRQ: setup time
#           per QP (median, p99), memory per QP, the message rate against one QP's
#           (scripts/bench_scale.sh).
#   middleware  our MPI ping-pong (tests/mpi) over emu0 through Open MPI (libfabric verbs, UCX)
#           and MPICH (UCX), beside the same program over UCX's own shared memory and TCP:
#           scripts/bench_middleware.sh says how.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

usage() {
  echo "usage: $0 <subcommand>" >&2
  echo "  rings   SPSC ring throughput: ours vs boost::lockfree::spsc_queue" >&2
  echo "  engine  engine cost per message and SRQ rate with 1000 QPs vs 1 (loopback)" >&2
  echo "  transports  shm and TCP between two processes: ours vs fi_pingpong, ucx_perftest," >&2
  echo "          qperf; latency in us (one way = round trip / 2), bandwidth in GB/s (10^9 B/s)" >&2
  echo "  verbs   transports, plus perftest over emu0 (ib_send_lat, ib_write_bw) as perftest=" >&2
  echo "  cm      rdma_cm connections established per second (cmtime) over shm and tcp" >&2
  echo "  floors  what the machine allows without emurdma (cache line, TCP, memcpy, CMA)" >&2
  echo "  sweep   latency and bandwidth by size, every tool and the floor: CSV and PNG plots" >&2
  echo "  scale   1 to 10,000 QPs: setup time, memory per QP, message rate against one QP" >&2
  echo "  middleware  MPI ping-pong over emu0 (Open MPI, MPICH) beside UCX's shm and TCP" >&2
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

# --- transports --------------------------------------------------------------------------

# Every tool gets this long, server and client alike; a hung tool costs one figure, not the run.
readonly kToolTimeout=60
# How many times each comparison runs every tool, in turn (EMURDMA_BENCH_ROUNDS, default 3).
bench_rounds="${EMURDMA_BENCH_ROUNDS:-3}"
if [[ ! $bench_rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "bench: EMURDMA_BENCH_ROUNDS must be a positive count, not '$bench_rounds'" >&2
  exit 2
fi
transports_tmp=""
transport_bench_ok=0
# shellcheck source=bench_peers.sh
source "$repo/scripts/bench_peers.sh"
# shellcheck source=bench_floors.sh
source "$repo/scripts/bench_floors.sh"
# shellcheck source=bench_rates.sh
source "$repo/scripts/bench_rates.sh"
# shellcheck source=bench_sweep.sh
source "$repo/scripts/bench_sweep.sh"
# shellcheck source=bench_scale.sh
source "$repo/scripts/bench_scale.sh"
server_pid=""

# A port for the next server, spread by our PID so that two runs on one host do not collide.
# The figures are computed in subshells: the counter lives in a file.
next_port() {
  local file="$transports_tmp/port" port
  port=$(($(cat "$file" 2>/dev/null || echo $((20000 + ($$ % 2000) * 10))) + 1))
  echo "$port" >"$file"
  echo "$port"
}

# Waits (up to 5 s) until something listens on TCP port $1 of this host.
wait_listen() {
  local port=$1 i
  for ((i = 0; i < 50; ++i)); do
    if command -v ss >/dev/null; then
      [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]] && return 0
    elif ((i >= 10)); then
      return 0  # no ss: a second's head start has to do
    fi
    sleep 0.1
  done
  return 1
}

# Forgets what the kernel learned about each destination from earlier TCP connections
# (`ip tcp_metrics`: reordering, RTT), so that every TCP tool, ours and the peers', starts from
# the same state rather than from what the tool before it left. A bulk run on loopback leaves
# a reordering and an RTT that the next connection to that address inherits; measured with
# our 1 MiB streaming: 4 of 8 runs at 5-5.3 GB/s after another run, 1 of 8 after a flush, 0 of
# 8 with nothing saved (tcp_no_metrics_save=1). Root only; elsewhere the state stays as found.
fresh_tcp_metrics() {
  if ((EUID == 0)) && command -v ip >/dev/null; then
    ip tcp_metrics flush all 2>/dev/null || true
  fi
}

# peer_run <port> <server command...> -- <client command...>: starts the server in the
# background, waits for it to listen on port, runs the client against it and prints the
# client's output. Both outputs stay in $transports_tmp for figure_or_failed.
peer_run() {
  local port=$1
  shift
  local server=()
  while (($# > 0)) && [[ $1 != -- ]]; do
    server+=("$1")
    shift
  done
  shift
  fresh_tcp_metrics
  timeout "$kToolTimeout" "${server[@]}" >"$transports_tmp/server.log" 2>&1 &
  server_pid=$!
  wait_listen "$port" || echo "bench: ${server[*]}: nothing listens on port $port" >&2
  local out
  out="$(timeout "$kToolTimeout" "$@" 2>&1)" || true
  stop_server
  printf '%s\n' "$out" >"$transports_tmp/client.log"
  printf '%s\n' "$out"
}

stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}

# figure_or_failed <what>: prints the figure read on stdin, or "failed" (and on stderr the
# end of both sides' output) when the tool produced none.
figure_or_failed() {
  local v
  v="$(cat)"
  if [[ $v =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    echo "$v"
    return
  fi
  echo "bench: $1 failed; the end of its output:" >&2
  tail -n 6 "$transports_tmp/client.log" | sed 's/^/  client| /' >&2
  tail -n 6 "$transports_tmp/server.log" | sed 's/^/  server| /' >&2
  echo failed
}

# ours <transport> <transport_bench arguments>: the "result <name> <value>" lines of our tool,
# or nothing when it failed (its reasons are on stderr).
ours() {
  local transport=$1
  shift
  local bin="build/tests/bench/transport_bench"
  ((transport_bench_ok)) || return 0
  fresh_tcp_metrics
  echo "bench: transport_bench $* over $transport" >&2
  local results
  results="$(EMURDMA_TRANSPORT="$transport" timeout "$kToolTimeout" "$bin" "$@" \
    --watchdog "$kToolTimeout" | grep '^result ')" || true
  # Every result, on stderr too: the medians and percentiles beside the bench line's mean.
  printf '%s\n' "$results" >&2
  printf '%s\n' "$results"
}

# result_of <result lines> <name>: the value, or n/a.
result_of() {
  local v
  v="$(awk -v n="$2" '$1 == "result" && $2 == n { print $3 }' <<<"$1")"
  echo "${v:-n/a}"
}

bench_transports_cleanup() {
  stop_server
  [[ -n $transports_tmp ]] && rm -rf "$transports_tmp"
}

# ours_figure <result name> <transport> <transport_bench arguments>: that one result of ours,
# or n/a.
ours_figure() {
  local name=$1
  shift
  result_of "$(ours "$@")" "$name"
}

# median_of <figure>...: the median of the numeric figures (the mean of the middle two for an
# even count), or the first figure when none is numeric (failed, n/a).
median_of() {
  printf '%s\n' "$@" | awk '
    NR == 1 { first = $1 }
    $1 ~ /^[0-9]+([.][0-9]+)?$/ { v[n++] = $1 + 0 }
    END {
      if (n == 0) { print first; exit }
      for (i = 1; i < n; ++i)
        for (j = i; j > 0 && v[j - 1] > v[j]; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      m = (n % 2) ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2
      printf "%.3f\n", m
    }'
}

# compare <metric> <unit> <lower|higher> <figure function> <label>...: runs the figure function
# for each label in turn, ours first, and that $bench_rounds times over, then prints the bench
# line with each label's median. Rounds alternate the tools, so that a change in the machine's
# state (two vCPUs that the hypervisor moves, another tenant) does not land on one tool's
# whole measurement; each round's figures go to stderr.
compare() {
  local metric=$1 unit=$2 direction=$3 figure=$4
  shift 4
  local -A figures=()
  local round label
  for ((round = 1; round <= bench_rounds; ++round)); do
    for label in "$@"; do
      if [[ $label == ours_counters_off ]]; then
        # Ours with counting switched off (issue 25): the counters' cost is the difference.
        figures[$label]+=" $(EMURDMA_COUNTERS=0 "$figure" ours)"
      else
        figures[$label]+=" $("$figure" "$label")"
      fi
    done
  done
  local line="bench $metric $unit $direction"
  for label in "$@"; do
    echo "bench: $metric $label, round by round:${figures[$label]}" >&2
    # shellcheck disable=SC2086  # the figures are words without spaces
    line+=" $label=$(median_of ${figures[$label]})"
  done
  echo "$line"
}

# Shared memory for UCX: its shared-memory transports only (plus self).
readonly kUcxShm="posix,sysv,cma,self"

# The figure functions: one figure of the named tool for that metric.
shm_lat_8B() {
  case $1 in
    ours) ours_figure lat_8B_us shm lat --size 8 --iters 200000 ;;
    floor) floor_figure cacheline ;;
    fi_shm_pingpong) fi_pingpong_us shm rdm 8 100000 ;;
    ucx_tag_lat) ucx_perftest_figure "$kUcxShm" tag_lat 8 200000 latency ;;
    perftest) perftest_figure shm ib_send_lat 8 100000 ;;
    fi_verbs_pingpong) fi_pingpong_us verbs rdm 8 100000 shm ;;
  esac
}
shm_lat_64B() {
  case $1 in
    ours) ours_figure lat_64B_us shm lat --size 64 --iters 200000 ;;
    fi_shm_pingpong) fi_pingpong_us shm rdm 64 100000 ;;
    ucx_tag_lat) ucx_perftest_figure "$kUcxShm" tag_lat 64 200000 latency ;;
  esac
}
shm_bw_1MiB() {
  case $1 in
    ours) ours_figure bw_1048576B_GBps shm bw --size 1048576 --window 32 --seconds 2 ;;
    floor) floor_figure vm_readv ;;
    ucx_tag_bw) ucx_perftest_figure "$kUcxShm" tag_bw 1048576 5000 bandwidth ;;
    perftest) perftest_figure shm ib_write_bw 1048576 5000 ;;
  esac
}
# Registered memory mapped shared (a memfd): the peer maps it and copies with memcpy. UCX's
# put writes into memory it allocated itself in shared memory: the like-for-like peer.
shm_bw_1MiB_shared() {
  case $1 in
    ours)
      ours_figure bw_1048576B_GBps shm bw --size 1048576 --window 32 --seconds 2 --memory shared
      ;;
    ucx_put_bw) ucx_perftest_figure "$kUcxShm" ucp_put_bw 1048576 20000 bandwidth ;;
    floor) floor_figure memcpy ;;
  esac
}
tcp_lat_8B() {
  case $1 in
    ours) ours_figure lat_8B_us tcp lat --size 8 --iters 100000 ;;
    floor) floor_figure tcp ;;
    fi_tcp_pingpong) fi_pingpong_us tcp msg 8 20000 ;;
    ucx_tag_lat) ucx_perftest_figure tcp tag_lat 8 20000 latency ;;
    qperf_tcp_lat) qperf_figure tcp_lat 8 ;;
    perftest) perftest_figure tcp ib_send_lat 8 20000 ;;
    fi_verbs_pingpong) fi_pingpong_us verbs msg 8 20000 tcp ;;
  esac
}
tcp_bw_1MiB() {
  case $1 in
    ours) ours_figure bw_1048576B_GBps tcp bw --size 1048576 --window 32 --seconds 2 ;;
    floor) floor_figure tcp_stream ;;
    ucx_tag_bw) ucx_perftest_figure tcp tag_bw 1048576 3000 bandwidth ;;
    ucx_put_bw) ucx_perftest_figure tcp ucp_put_bw 1048576 3000 bandwidth ;;
    qperf_tcp_bw) qperf_figure tcp_bw 1M ;;
    perftest) perftest_figure tcp ib_write_bw 1048576 3000 ;;
  esac
}

# bench_transports <1|0>: with perftest over emu0 among the peers, or without.
bench_transports() {
  local with_perftest=$1
  # The peers need no build: a failed build (or a missing binary) only makes ours n/a.
  transport_bench_ok=1
  if ! (build); then
    # Another target may be what failed: our tool alone may still build.
    if cmake --build build --target transport_bench >&2; then
      echo "bench: the full build failed, transport_bench built; measuring" >&2
    else
      echo "bench: transport_bench does not build; ours=n/a (the peers still run)" >&2
      transport_bench_ok=0
    fi
  elif [[ ! -x build/tests/bench/transport_bench ]]; then
    echo "bench: build/tests/bench/transport_bench was not built (is EMURDMA_BENCH on?);" \
      "ours=n/a" >&2
    transport_bench_ok=0
  fi
  transports_tmp="$(mktemp -d)"
  trap bench_transports_cleanup EXIT
  trap 'exit 130' INT TERM

  local missing=() tool
  for tool in fi_pingpong ucx_perftest qperf; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  ((${#missing[@]} == 0)) || echo "bench: not installed: ${missing[*]} (their figures: failed)" >&2

  # Over emu0 (scripts/bench.sh verbs): perftest, and libfabric's verbs provider beside its shm
  # and tcp providers (rdm over ofi_rxm against shm's rdm, msg against tcp's msg).
  local perftest=() fi_verbs=()
  if ((with_perftest)); then perftest=(perftest) fi_verbs=(fi_verbs_pingpong); fi
  compare shm_lat_8B_us us lower shm_lat_8B ours ours_counters_off floor fi_shm_pingpong ucx_tag_lat "${perftest[@]}" \
    "${fi_verbs[@]}"
  compare shm_lat_64B_us us lower shm_lat_64B ours fi_shm_pingpong ucx_tag_lat
  compare shm_bw_1MiB_GBps GB/s higher shm_bw_1MiB ours ours_counters_off floor ucx_tag_bw "${perftest[@]}"
  compare shm_bw_1MiB_shared_GBps GB/s higher shm_bw_1MiB_shared ours floor ucx_put_bw
  compare tcp_lat_8B_us us lower tcp_lat_8B ours ours_counters_off floor fi_tcp_pingpong ucx_tag_lat qperf_tcp_lat \
    "${perftest[@]}" "${fi_verbs[@]}"
  compare tcp_bw_1MiB_GBps GB/s higher tcp_bw_1MiB ours ours_counters_off floor ucx_tag_bw ucx_put_bw qperf_tcp_bw \
    "${perftest[@]}"
  bench_rates "${perftest[@]}"

  # The SRQ rate is the engine's, measured between two processes: over shm, or over tcp when
  # shm is not available here (a note line says so).
  local srq_transport=shm ours_lines
  ours_lines="$(ours shm srq --qps 1000)"
  if [[ $(result_of "$ours_lines" srq_rate_1000qp_vs_1qp) == n/a ]] && ((transport_bench_ok)); then
    srq_transport=tcp
    ours_lines="$(ours tcp srq --qps 1000)"
    if [[ $(result_of "$ours_lines" srq_rate_1000qp_vs_1qp) != n/a ]]; then
      echo "note srq_rate_1000qp_vs_1qp measured over tcp: the shm transport is not available"
    fi
  fi
  echo "bench: ours over $srq_transport: SRQ rate with 1 QP" \
    "$(result_of "$ours_lines" srq_rate_1qp_Mmsgps) Mmsg/s, with 1000 QPs" \
    "$(result_of "$ours_lines" srq_rate_1000qp_Mmsgps) Mmsg/s" >&2
  echo "bench srq_rate_1000qp_vs_1qp ratio higher" \
    "ours=$(result_of "$ours_lines" srq_rate_1000qp_vs_1qp)"
}

# --- cm --------------------------------------------------------------------------------------

# cm_rate <transport> <connections>: one cmtime run's connections per second, or "failed" (the
# run's output on stderr then).
cm_rate() {
  local transport=$1 count=$2 out
  if ! out="$(tests/rdmacm_programs/run_pair.sh scripts/emurdma build "$transport" \
    "$kToolTimeout" --client-says '^connect +: +[0-9.]+' --refuse 'error|[Ff]ail|Unhandled' \
    --server-stays -- cmtime -c "$count" -p @PORT@ -- cmtime -s @ADDR@ -c "$count" -p @PORT@ 2>&1)"; then
    echo "bench: cmtime -c $count over $transport failed:" >&2
    tail -n 20 <<<"$out" >&2
    echo failed
    return
  fi
  # "client| connect      :   <total ms> <max ms> <min us> <us / conn>"
  awk -v n="$count" '$1 == "client|" && $2 == "connect" && $3 == ":" && $4 > 0 {
    printf "%.0f\n", n / ($4 / 1000); found = 1 } END { if (!found) print "failed" }' <<<"$out"
}

bench_cm() {
  build
  command -v cmtime >/dev/null || { echo "bench: cmtime (rdmacm-utils) is not installed" >&2; exit 1; }
  local count="${EMURDMA_BENCH_CM_CONNECTIONS:-500}"
  [[ $count =~ ^[1-9][0-9]*$ ]] || { echo "bench: EMURDMA_BENCH_CM_CONNECTIONS must be a count" >&2; exit 2; }
  local transport round figures line=""
  for transport in shm tcp; do
    figures=()
    for ((round = 0; round < bench_rounds; ++round)); do figures+=("$(cm_rate "$transport" "$count")"); done
    echo "bench: cmtime -c $count over $transport, rounds: ${figures[*]} connections/s" >&2
    line+=" $transport=$(median_of "${figures[@]}" | awk '$1 ~ /^[0-9.]+$/ { printf "%.0f\n", $1; next } { print }')"
  done
  echo "bench cm_connect_rate conn/s higher$line"
}

case "${1:-}" in
  rings) bench_rings ;;
  engine) bench_engine ;;
  transports) bench_transports 0 ;;
  verbs) bench_transports 1 ;;
  cm) bench_cm ;;
  floors) bench_floors ;;
  sweep) bench_sweep ;;
  scale) bench_scale ;;
  middleware)
    build
    bash scripts/bench_middleware.sh build
    ;;
  *)
    usage
    exit 2
    ;;
esac
