# shellcheck shell=bash disable=SC2154  # kUcxShm and the like are bench.sh's
# Message rates for scripts/bench.sh transports (sourced by it): 8-byte messages streamed with
# many outstanding between two processes, in millions of messages a second (issue 26). Ours is
# transport_bench's RDMA WRITE stream (128 outstanding, one in 64 signaled, inline, 2 s: as the
# peers stream); the peers are UCX's tag_bw and,
# with `scripts/bench.sh verbs`, perftest's ib_send_bw and ib_write_bw over emu0. libfabric's
# fabtests here have no bandwidth program (fi_pingpong only), so no fi_ figure.

shm_rate_8B() {
  case $1 in
    ours) ours_figure rate_8B_Mmsgps shm bw --size 8 --window 128 --signal-every 64 --seconds 2 ;;
    ucx_tag_bw) ucx_perftest_figure "$kUcxShm" tag_bw 8 2000000 rate ;;
    perftest) perftest_figure shm ib_send_bw 8 1000000 rate ;;
    perftest_write) perftest_figure shm ib_write_bw 8 1000000 rate ;;
  esac
}
tcp_rate_8B() {
  case $1 in
    ours) ours_figure rate_8B_Mmsgps tcp bw --size 8 --window 128 --signal-every 64 --seconds 2 ;;
    ucx_tag_bw) ucx_perftest_figure tcp tag_bw 8 200000 rate ;;
    perftest) perftest_figure tcp ib_send_bw 8 100000 rate ;;
    perftest_write) perftest_figure tcp ib_write_bw 8 100000 rate ;;
  esac
}

# bench_rates [perftest]: the two rate lines, with perftest's programs when asked.
bench_rates() {
  local perftest=()
  (($# > 0)) && perftest=(perftest perftest_write)
  compare shm_rate_8B_Mmsgs Mmsg/s higher shm_rate_8B ours ucx_tag_bw "${perftest[@]}"
  compare tcp_rate_8B_Mmsgs Mmsg/s higher tcp_rate_8B ours ucx_tag_bw "${perftest[@]}"
}
