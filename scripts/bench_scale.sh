# shellcheck shell=bash disable=SC2154,SC2034  # bench.sh sets and reads the shared names
# The scale of scripts/bench.sh (sourced by it), issue 26: 1, 100, 1,000 and 10,000 RC QPs
# between two processes over shared memory (transport_bench srq: the server's QPs all take
# their receives from one SRQ): the time to create and connect one QP (create + INIT/RTR/RTS,
# median and p99 over the QPs), memory per QP (the client's resident growth and the growth of
# /dev/shm, divided by the count), and the 8-byte message rate across all QPs against one
# QP's. EMURDMA_BENCH_SCALE_QPS overrides the counts (e.g. "1 100").
# Latency under load: an 8-byte ping-pong's median, p99 and p99.9 on one QP, idle and while
# another QP of the same two processes streams 1 MiB RDMA WRITEs (transport_bench lat --load),
# over shm and TCP; the goal is a loaded p99 within 2x of the idle one.
# Processes: 2, 4, 8 and 16 processes of one host, every pair connected by an RC QP each way over
# shm (mesh_bench): the time to connect the mesh, the host's shared memory per pair, the
# aggregate 8-byte write rate, and the shared memory left once they all exited (goal: none;
# per pair: not growing with the count). EMURDMA_BENCH_SCALE_PROCS overrides the counts.

bench_scale() {
  build
  transport_bench_ok=1
  [[ -x build/tests/bench/transport_bench ]] || transport_bench_ok=0
  local counts n lines
  read -r -a counts <<<"${EMURDMA_BENCH_SCALE_QPS:-1 100 1000 10000}"
  local -A fig=()
  for n in "${counts[@]}"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "bench: EMURDMA_BENCH_SCALE_QPS: $n is not a count" >&2; exit 2; }
    lines="$(ours shm srq --qps "$n" --seconds 0.5 --rounds "$bench_rounds")"
    fig[setup_median/$n]="$(result_of "$lines" "qp_setup_${n}qp_median_us")"
    fig[setup_p99/$n]="$(result_of "$lines" "qp_setup_${n}qp_p99_us")"
    fig[rss/$n]="$(result_of "$lines" "qp_rss_${n}qp_bytes_per_qp")"
    fig[shm/$n]="$(result_of "$lines" "qp_shm_${n}qp_bytes_per_qp")"
    fig[ratio/$n]="$(result_of "$lines" "srq_rate_${n}qp_vs_1qp")"
    # With one QP, srq_rate_1qp_Mmsgps is printed twice (the one-QP phase and the N-QP one).
    fig[rate/$n]="$(result_of "$lines" "srq_rate_${n}qp_Mmsgps" | tail -n 1)"
  done
  local metric what unit direction line
  for metric in "qp_setup_median_us setup_median us lower" "qp_setup_p99_us setup_p99 us lower" \
    "qp_rss_bytes_per_qp rss B lower" "qp_shm_bytes_per_qp shm B lower" \
    "qp_rate_Mmsgs rate Mmsg/s higher" "qp_rate_vs_1qp ratio ratio higher"; do
    read -r metric what unit direction <<<"$metric"
    line="bench $metric $unit $direction"
    for n in "${counts[@]}"; do line+=" qps$n=${fig[$what/$n]}"; done
    echo "$line"
  done
  # The goal's own line: 10,000 QPs within 20 % of one QP's rate.
  [[ -n ${fig[ratio/10000]:-} ]] && echo "bench qp_rate_10000qp_vs_1qp ratio higher ours=${fig[ratio/10000]}"
  bench_mesh
  bench_loaded_latency
}

# N processes, every pair connected: one line per figure, a word per count (medians of rounds).
bench_mesh() {
  local bin=build/tests/bench/mesh_bench counts n round lines metric what unit direction
  [[ -x $bin ]] || return 0
  read -r -a counts <<<"${EMURDMA_BENCH_SCALE_PROCS:-2 4 8 16}"
  local -A got=()
  for n in "${counts[@]}"; do
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 2 || n > 16)); then
      echo "bench: EMURDMA_BENCH_SCALE_PROCS: $n is not 2..16" >&2
      exit 2
    fi
    for ((round = 1; round <= bench_rounds; ++round)); do
      echo "bench: mesh_bench --procs $n over shm" >&2
      lines="$(EMURDMA_TRANSPORT=shm timeout "$kToolTimeout" "$bin" --procs "$n" --seconds 1 \
        --yield 1 | grep '^result ')" || true
      for what in connect_ms shm_bytes_per_pair rate_Mmsgs shm_left_bytes; do
        got[$what/$n]+=" $(result_of "$lines" "mesh_$what")"
      done
    done
  done
  for metric in "mesh_connect_ms connect_ms ms lower" \
    "mesh_shm_bytes_per_pair shm_bytes_per_pair B lower" \
    "mesh_rate_8B_Mmsgs rate_Mmsgs Mmsg/s higher" "mesh_shm_left_bytes shm_left_bytes B lower"; do
    read -r metric what unit direction <<<"$metric"
    local line="bench $metric $unit $direction"
    # shellcheck disable=SC2086  # the figures are words without spaces
    for n in "${counts[@]}"; do line+=" procs$n=$(median_of ${got[$what/$n]})"; done
    echo "$line"
  done
}

# The 8-byte ping-pong idle and under a 1 MiB write stream, medians of the rounds' figures.
bench_loaded_latency() {
  local transport state stat round lines ratio_line="bench lat_under_load_p99_vs_idle ratio lower"
  local -A got=()
  for transport in shm tcp; do
    for ((round = 1; round <= bench_rounds; ++round)); do
      for state in idle loaded; do
        local load=()
        [[ $state == loaded ]] && load=(--load 1048576)
        lines="$(ours "$transport" lat --size 8 --iters 100000 --seconds 2 "${load[@]}")"
        for stat in median p99 p999; do
          got[$transport/$state/$stat]+=" $(result_of "$lines" "lat_8B_${stat}_us")"
        done
      done
    done
    local line="bench lat_under_load_${transport}_8B_us us lower" idle99 loaded99
    for state in idle loaded; do
      for stat in median p99 p999; do
        # shellcheck disable=SC2086  # the figures are words without spaces
        line+=" ${state}_$stat=$(median_of ${got[$transport/$state/$stat]})"
      done
    done
    echo "$line"
    # shellcheck disable=SC2086
    idle99="$(median_of ${got[$transport/idle/p99]})"
    # shellcheck disable=SC2086
    loaded99="$(median_of ${got[$transport/loaded/p99]})"
    ratio_line+=" $transport=$(awk -v a="$loaded99" -v b="$idle99" 'BEGIN {
      if (a + 0 > 0 && b + 0 > 0) printf "%.2f\n", a / b; else print "n/a" }')"
  done
  echo "$ratio_line"
}
