# shellcheck shell=bash disable=SC2154,SC2034  # bench.sh sets and reads the shared names
# The size sweep of scripts/bench.sh (sourced by it): latency from 8 B to 64 KiB and bandwidth
# from 8 B to 4 MiB, by powers of 4, over shared memory and TCP, for ours (transport_bench),
# perftest over emu0, UCX's ucx_perftest, libfabric's fi_pingpong (latency: it has no bandwidth
# program here) and the machine's floor (floor_bench at the same size). One run per point, or
# the median of EMURDMA_SWEEP_ROUNDS runs (`transports` gives the medians at 8 B and 1 MiB). Writes
# build/bench/sweep.csv (kind,transport,tool,size,value,unit) and, with gnuplot, a log-log plot
# per kind and transport, build/bench/sweep_<lat|bw>_<shm|tcp>.png, one line per tool, the floor
# dashed. Prints bench lines for a few sizes. About ten minutes on the 2-core machine.

readonly kSweepLatSizes=(8 32 128 512 2048 8192 32768 65536)
readonly kSweepBwSizes=(8 32 128 512 2048 8192 32768 131072 524288 2097152 4194304)
readonly kSweepTools=(ours perftest ucx "fi" floor)

# sweep_iters <size> <transport>: ping-pong round trips for a latency point, fewer for large
# messages and over TCP, so that each point takes about a second.
sweep_iters() {
  local size=$1 transport=$2 n
  if ((size <= 2048)); then n=20000; else n=4000; fi
  [[ $transport == tcp ]] && n=$((n / 4))
  echo "$n"
}

# sweep_count <size> <transport>: messages for a bandwidth point: about 2 GB over shm (1 GB
# over TCP), at least 500 and at most 200,000 messages.
sweep_count() {
  local size=$1 transport=$2 bytes=2000000000
  [[ $transport == tcp ]] && bytes=1000000000
  local n=$((bytes / size))
  ((n > 200000)) && n=200000
  ((n < 500)) && n=500
  echo "$n"
}

# sweep_point <lat|bw> <shm|tcp> <tool> <size>: one figure (us or GB/s), "failed" or "n/a".
sweep_point() {
  local kind=$1 transport=$2 tool=$3 size=$4 iters count tls
  iters="$(sweep_iters "$size" "$transport")"
  count="$(sweep_count "$size" "$transport")"
  tls=$kUcxShm
  [[ $transport == tcp ]] && tls=tcp
  case "$kind/$tool" in
    lat/ours) result_of "$(ours "$transport" lat --size "$size" --iters "$iters")" "lat_${size}B_us" ;;
    lat/perftest) perftest_figure "$transport" ib_send_lat "$size" "$iters" ;;
    lat/ucx) ucx_perftest_figure "$tls" tag_lat "$size" "$iters" latency ;;
    "lat/fi")
      if [[ $transport == shm ]]; then fi_pingpong_us shm rdm "$size" "$iters"; else
        fi_pingpong_us tcp msg "$size" "$iters"
      fi
      ;;
    lat/floor)
      if [[ $transport == shm ]]; then floor_figure cacheline "$size"; else floor_figure tcp "$size"; fi
      ;;
    bw/ours)
      result_of "$(ours "$transport" bw --size "$size" --window 32 --seconds 1)" "bw_${size}B_GBps"
      ;;
    bw/perftest) perftest_figure "$transport" ib_write_bw "$size" "$count" ;;
    bw/ucx) ucx_perftest_figure "$tls" tag_bw "$size" "$count" bandwidth ;;
    "bw/fi") echo n/a ;;
    bw/floor)
      if [[ $transport == shm ]]; then floor_figure vm_readv "$size"; else
        floor_figure tcp_stream "$size"
      fi
      ;;
  esac
}

# sweep_plot <kind> <transport> <dir>: the PNG of one kind and transport from its .dat files.
sweep_plot() {
  local kind=$1 transport=$2 dir=$3 tool plots=() ylabel="one-way latency (us)"
  [[ $kind == bw ]] && ylabel="bandwidth (GB/s, 10^9 B/s)"
  for tool in "${kSweepTools[@]}"; do
    [[ -s $dir/${kind}_${transport}_$tool.dat ]] || continue
    if [[ $tool == floor ]]; then
      plots+=("'$dir/${kind}_${transport}_$tool.dat' using 1:2 with lines dashtype 2 lw 2 title 'floor'")
    else
      plots+=("'$dir/${kind}_${transport}_$tool.dat' using 1:2 with linespoints lw 2 title '$tool'")
    fi
  done
  ((${#plots[@]} > 0)) || return 0
  local IFS=,
  gnuplot <<EOF
set terminal pngcairo size 900,560
set output '$dir/../sweep_${kind}_${transport}.png'
set title "${kind/lat/latency} over $transport ($(hostname), $(date -u +%Y-%m-%d))"
set logscale xy
set xlabel "message size (bytes)"
set ylabel "$ylabel"
set key left top
set grid
plot ${plots[*]}
EOF
}

bench_sweep() {
  build
  transport_bench_ok=1
  [[ -x build/tests/bench/transport_bench ]] || transport_bench_ok=0
  transports_tmp="$(mktemp -d)"
  trap bench_transports_cleanup EXIT
  trap 'exit 130' INT TERM
  local out=build/bench dir=build/bench/sweep
  # EMURDMA_SWEEP_ROUNDS=N: each point the median of N runs (the plots docs/performance.md
  # shows use 3: one run per point on a shared VM gives a curve with spikes of 2-3x).
  local sweep_rounds=${EMURDMA_SWEEP_ROUNDS:-1}
  [[ $sweep_rounds =~ ^[1-9][0-9]*$ ]] || { echo "EMURDMA_SWEEP_ROUNDS must be a count" >&2; exit 2; }
  mkdir -p "$dir"
  rm -f "$dir"/*.dat
  local csv=$out/sweep.csv kind transport tool size v unit sizes
  echo "kind,transport,tool,size,value,unit" >"$csv"
  local -A at=()
  for kind in lat bw; do
    if [[ $kind == lat ]]; then sizes=("${kSweepLatSizes[@]}") unit=us; else
      sizes=("${kSweepBwSizes[@]}") unit=GBps
    fi
    for transport in shm tcp; do
      for size in "${sizes[@]}"; do
        for tool in "${kSweepTools[@]}"; do
          local figures=() round
          for ((round = 0; round < sweep_rounds; ++round)); do
            figures+=("$(sweep_point "$kind" "$transport" "$tool" "$size")")
          done
          v="$(median_of "${figures[@]}")"
          echo "bench: sweep $kind $transport $tool $size B: $v" >&2
          echo "$kind,$transport,$tool,$size,$v,$unit" >>"$csv"
          at[$kind/$transport/$tool/$size]=$v
          [[ $v =~ ^[0-9.]+$ ]] && echo "$size $v" >>"$dir/${kind}_${transport}_$tool.dat"
        done
      done
    done
  done
  if command -v gnuplot >/dev/null; then
    for kind in lat bw; do
      for transport in shm tcp; do sweep_plot "$kind" "$transport" "$dir"; done
    done
    echo "bench: plots in $out/sweep_{lat,bw}_{shm,tcp}.png, figures in $csv" >&2
  else
    echo "bench: gnuplot is not installed (scripts/setup.sh installs gnuplot-nox): no plots;" \
      "figures in $csv" >&2
  fi
  # A few sizes as bench lines: where the paths change (8 KiB, 64 KiB) and the ends.
  local line
  for kind in lat bw; do
    for transport in shm tcp; do
      if [[ $kind == lat ]]; then sizes=(8 8192 65536) unit=us; else sizes=(8192 32768 4194304) unit=GB/s; fi
      for size in "${sizes[@]}"; do
        line="bench sweep_${transport}_${kind}_${size}B ${unit}"
        if [[ $kind == lat ]]; then line+=" lower"; else line+=" higher"; fi
        for tool in "${kSweepTools[@]}"; do line+=" $tool=${at[$kind/$transport/$tool/$size]:-n/a}"; done
        echo "$line"
      done
    done
  done
}
