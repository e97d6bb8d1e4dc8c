# shellcheck shell=bash
# The peers' figures for scripts/bench.sh transports and verbs (sourced by it): one run of
# another tool between two processes on this host, read from its own output. Each prints one
# figure, or "failed" (figure_or_failed, in bench.sh, shows the end of both sides' output).

# fi_pingpong <provider> <endpoint type> <size> <iterations> [emu0 transport]: one-way latency
# in us. Its "usec/xfer" is the run's time over 2 x iterations transfers, i.e. half a round
# trip. With a transport, both sides run through scripts/emurdma over it (libfabric's verbs
# provider on our libibverbs.so.1 and librdmacm.so.1, domain emu0).
fi_pingpong_us() {
  local provider=$1 ep_type=$2 size=$3 iters=$4 transport=${5:-} port
  port="$(next_port)"
  local common=(-p "$provider" -e "$ep_type" -S "$size" -I "$iters")
  # No "--" after the wrapper's options: peer_run splits server from client at the first one.
  local run=(fi_pingpong)
  if [[ -n $transport ]]; then
    run=(env EMURDMA_DEVICES=soft scripts/emurdma run --transport "$transport" fi_pingpong)
    common+=(-d emu0)
  fi
  peer_run "$port" "${run[@]}" "${common[@]}" -B "$port" -- \
    "${run[@]}" "${common[@]}" -P "$port" 127.0.0.1 | awk -v size="$size" '
      # Its sizes print as 8, 512, 2k, 64k, 1m: bytes with a binary suffix.
      function bytes(s) {
        if (s ~ /k$/) return (s + 0) * 1024
        if (s ~ /m$/) return (s + 0) * 1048576
        return s + 0
      }
      { for (i = 1; i <= NF; ++i) if ($i == "usec/xfer") col = i }
      col && $1 ~ /^[0-9]+[km]?$/ && bytes($1) == size && NF >= col { v = $col }
      END { if (v != "") print v }' | figure_or_failed "fi_pingpong ${common[*]}"
}

# ucx_perftest <UCX_TLS> <test> <size> <iterations> <latency|bandwidth|rate>: the "Final:"
# line's overall (whole-run mean) latency in us (ping-pong tests report half a round trip), its
# overall bandwidth, which ucx_perftest prints in MiB/s, converted to GB/s, or its overall
# message rate in millions of messages a second.
ucx_perftest_figure() {
  local tls=$1 test=$2 size=$3 iters=$4 what=$5 port
  port="$(next_port)"
  peer_run "$port" env UCX_TLS="$tls" ucx_perftest -p "$port" -- \
    env UCX_TLS="$tls" ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" \
    -w $((iters / 10 + 1)) | awk -v what="$what" '
      $1 == "Final:" && NF >= 9 {
        if (what == "latency") printf "%.3f\n", $5
        else if (what == "rate") printf "%.3f\n", $9 / 1e6
        else printf "%.3f\n", $7 * 1048576 / 1e9
      }' | figure_or_failed "UCX_TLS=$tls ucx_perftest -t $test -s $size"
}

# qperf <test> <size>: tcp_lat's one-way latency in us, or tcp_bw in GB/s (qperf prints SI
# units: GB/sec = 10^9 bytes/s). Two seconds per test.
qperf_figure() {
  local test=$1 size=$2 port data_port
  port="$(next_port)"
  data_port="$(next_port)"
  peer_run "$port" qperf --listen_port "$port" -- \
    qperf 127.0.0.1 --listen_port "$port" --ip_port "$data_port" -t 2 -m "$size" "$test" |
    awk '
      $1 == "latency" && $2 == "=" {
        s = ($4 == "ns") ? 1e-3 : ($4 == "us") ? 1 : ($4 == "ms") ? 1e3 : ($4 == "sec") ? 1e6 : 0
        if (s) printf "%.3f\n", $3 * s
      }
      $1 == "bw" && $2 == "=" {
        s = ($4 == "KB/sec") ? 1e-6 : ($4 == "MB/sec") ? 1e-3 : ($4 == "GB/sec") ? 1 : 0
        if (s) printf "%.3f\n", $3 * s
      }' | figure_or_failed "qperf -m $size $test"
}

# perftest over emu0 (scripts/bench.sh verbs): PROGRAM at SIZE bytes over TRANSPORT, server and
# client through scripts/emurdma. Latency tests print t_avg (perftest's lat tests report one
# way, half a round trip); bandwidth tests print BW average, MiB/s in perftest, here GB/s, or
# with a fifth argument "rate" their MsgRate, millions of messages a second.
perftest_figure() {
  local transport=$1 program=$2 size=$3 iters=$4 what=${5:-} port
  port="$(next_port)"
  # No "--" after the wrapper's options: peer_run splits server from client at the first one.
  local run=(scripts/emurdma run --transport "$transport" "$program" -x 0 -F -s "$size"
    -n "$iters" -p "$port")
  peer_run "$port" "${run[@]}" -- "${run[@]}" 127.0.0.1 |
    awk -v size="$size" -v lat="${program: -3}" -v what="$what" '
      $1 == size && $2 ~ /^[0-9]+$/ && NF >= 5 {
        if (lat == "lat") printf "%.3f\n", $6
        else if (what == "rate") printf "%.3f\n", $5
        else printf "%.3f\n", $4 * 1048576 / 1e9
      }' | figure_or_failed "$program -s $size over $transport"
}
