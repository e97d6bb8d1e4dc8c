#!/usr/bin/env bash
# Runs an unmodified uDAPL program of Debian's dapl2-utils (dtest, dtestcm, dtestx, dtestsrq,
# dapltest) on the emulator's DAT provider through scripts/emurdma and checks its result. One
# ctest entry per call (tests/dat_programs/CMakeLists.txt).
#
#   run_dat_program.sh --mode shm|tcp|netns|auto --program KIND [--limit S] [--wrapper PATH]
#                      [--build-dir DIR] [-- ARGS...]
#
#   --mode shm     IA emu0-shm, both processes on this host
#   --mode tcp     IA emu0-tcp, both processes on this host (the client names 127.0.0.1)
#   --mode auto    IA emu0 (EMURDMA_TRANSPORT=auto: shared memory between processes of this
#                  host), both processes on this host: what scripts/demo.sh shows
#   --mode netns   IA emu0-tcp across two network namespaces joined by a veth pair (198.18.0.1
#                  server, 198.18.0.2 client; EMURDMA_TCP_ADDR set to each side's address, so
#                  that the IA address dat_ia_query reports is the namespace's). Needs root and
#                  `ip netns`: without them the test is SKIPPED (exit 77), never passed.
#   --program KIND what runs, and what passing means besides every process exiting 0 (the
#                  programs exit 0 after most failures, so their own success lines decide):
#     dtest          server `dtest -P IA ARGS`, client `dtest -P IA -h SERVER ARGS`: both print
#                    "DAPL Test Complete. PASSED" and no error line
#     dtestcm        server `dtestcm -P IA -p PORT ARGS`, client adds `-h SERVER`: both print
#                    "ALL <n> CONNECTED" (n from -c, default 1000) and "DAPL Connection Test
#                    Complete."
#     dtestx         server `dtestx -P IA -s ARGS`, client `dtestx -P IA -c -h SERVER ARGS`: both
#                    print "IB extension test - ... PASSED" (our provider advertises the IB
#                    extensions: "IB extension not supported" fails the test). A client that connected
#                    before the server's PSP existed (dtestx's own race) restarts both, up to 5
#                    times. With -p (print counters) each side also shows its counters queried
#                    and printed, non-zero where it had traffic (expect_dtestx_counters).
#     dtestsrq       server `dtestsrq -P IA -p PORT ARGS`, client adds `-h SERVER`: both print
#                    "ALL <n> CONNECTED" (n from -c, default 1) and "DAPL RC SRQ Test Complete."
#     dapltest-trans server `dapltest -T S -D IA -n PORT`, client `dapltest -T T -s SERVER -D IA
#                    -n PORT ARGS` (ARGS: -t/-w/-i/-V and the ops), then `dapltest -T Q` stops
#                    the server. The client prints its statistics for all threads and EPs, and
#                    the byte totals (send, recv, RDMA read, RDMA write) that ARGS imply; the
#                    server finished the test for this client; no error line on either side.
#     dapltest-perf  as dapltest-trans with `-T P` (ARGS: the op, e.g. RW 4096 2): the client
#                    prints its Statistics block; the server finished the performance test.
#     dapltest-limit one process, `dapltest -T L -D IA ARGS` (e.g. limit_ep): "Limit Testing
#                    Completed - Successfully" and no error line.
#   --limit S      every process is killed after S seconds (default 55): a hang is a failure
#   --secret       every process gets the same job secret (EMURDMA_SECRET_FILE, a 0600 file of
#                  random bytes): the DAT CM and the TCP transport authenticate each connection
#
# Exit: 0 pass, 1 fail, 77 skipped. Every process started is killed on every path (own process
# group each, plus `timeout`); namespaces are removed.
set -uo pipefail

readonly kSkip=77
mode=""
program=""
limit=55
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wrapper="$here/../../scripts/emurdma"
build_dir=""
secret=0

fail() {
  echo "run_dat_program: FAIL: $*" >&2
  exit 1
}
skip() {
  echo "run_dat_program: SKIPPED: $*" >&2
  exit "$kSkip"
}

while (($# > 0)); do
  case "$1" in
    --mode) mode="$2"; shift 2 ;;
    --program) program="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --wrapper) wrapper="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --secret) secret=1; shift ;;
    --) shift; break ;;
    *) fail "unknown argument '$1'" ;;
  esac
done
args=("$@")
case "$mode" in shm | tcp | netns | auto) ;; *) fail "--mode must be shm, tcp, netns or auto" ;; esac
case "$program" in
  dtest | dtestcm | dtestx | dtestsrq) binary=$program ;;
  dapltest-trans | dapltest-perf | dapltest-limit) binary=dapltest ;;
  *) fail "--program must be dtest, dtestcm, dtestx, dtestsrq, dapltest-trans, dapltest-perf or dapltest-limit" ;;
esac
[[ $limit =~ ^[0-9]+$ ]] || fail "--limit must be a number of seconds"
[[ -x $wrapper ]] || fail "wrapper $wrapper is not executable"
[[ -n $build_dir ]] && export EMURDMA_BUILD_DIR="$build_dir"
command -v "$binary" >/dev/null ||
  fail "$binary is not installed (scripts/setup.sh installs dapl2-utils)"

case "$mode" in
  shm) transport=shm ia=emu0-shm ;;
  auto) transport=auto ia=emu0 ;;
  *) transport=tcp ia=emu0-tcp ;;
esac

start_s=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/emurdma_dat_programs.XXXXXX")"
pgids=()
ns_a=""
ns_b=""

# Kills every process group we started (TERM, then KILL), removes the namespaces and files.
cleanup() {
  local g
  for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
  for g in "${pgids[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 -- "-$g" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$g" 2>/dev/null
  done
  wait 2>/dev/null
  [[ -n $ns_a ]] && ip netns del "$ns_a" 2>/dev/null
  [[ -n $ns_b ]] && ip netns del "$ns_b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "run_dat_program: interrupted" >&2; exit 1' INT TERM HUP

if ((secret)); then
  (umask 077 && head -c 32 /dev/urandom | base64 >"$tmp/secret") || fail "writing the secret failed"
  export EMURDMA_SECRET_FILE="$tmp/secret"
  unset EMURDMA_SECRET
  echo "run_dat_program: job secret in EMURDMA_SECRET_FILE=$EMURDMA_SECRET_FILE" >&2
fi

remaining() {
  local r=$((limit - (SECONDS - start_s)))
  ((r > 1)) && echo "$r" || echo 1
}

# start <log> <netns or ""> <EMURDMA_TCP_ADDR or ""> ARGS...: starts the program through the
# wrapper (which writes the dat.conf and sets DAT_OVERRIDE) in a process group of its own,
# killed by timeout after the remaining time; its pid (= process group id) in $last_pid.
# stdbuf makes stdout line-buffered, so that what a program printed before a hang is in its log.
start() {
  local log=$1 ns=$2 addr=$3
  shift 3
  local cmd=(timeout -k 3 "$(remaining)" env ${addr:+EMURDMA_TCP_ADDR=$addr}
    "$wrapper" run --transport "$transport" -- stdbuf -oL "$@")
  if [[ -n $ns ]]; then
    setsid ip netns exec "$ns" "${cmd[@]}" >"$log" 2>&1 </dev/null &
  else
    setsid "${cmd[@]}" >"$log" 2>&1 </dev/null &
  fi
  pgids+=("$!")
  echo "+ [${ns:-host}]${addr:+ EMURDMA_TCP_ADDR=$addr} emurdma run --transport $transport -- $*" >&2
  last_pid=$!
}

# wait_for <pid> <seconds>: waits until the process ends (its status in $wait_status, 124
# after a timeout) or the seconds pass (returns 1, process still running).
wait_for() {
  local pid=$1 end=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    ((SECONDS < end)) || return 1
    sleep 0.1
  done
  wait "$pid"
  wait_status=$?
  return 0
}

# wait_for_line <pid> <log> <ERE> <seconds>: waits until the log shows the line (0), or the
# process ends or the seconds pass (1).
wait_for_line() {
  local pid=$1 log=$2 re=$3 end=$((SECONDS + $4))
  while ! grep -qE -- "$re" "$log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || return 1
    ((SECONDS < end)) || return 1
    sleep 0.1
  done
  return 0
}

show() {
  local name=$1 log=$2
  echo "----- $name output -----"
  sed "s/^/$name| /" "$log"
}

# A TCP port for the connection qualifier (the DAT connection manager listens on it) with room
# above it: dapltest's test threads use the next ports. Below the kernel's ephemeral range and
# spread by PID and RANDOM. Two tests starting together could both find the same range free
# before either listens (seen in CI: dtestcm and dapltest on 20000, dapltest's client then
# reaching dtestcm's server), so a range is also claimed with a lock file this script holds
# open until it exits (port_lock_fd; its children inherit it and release it as they end).
# Sets port; runs in this shell (not in $(...)), which must keep the lock's descriptor.
pick_port() {
  local i lock
  for ((i = 0; i < 50; ++i)); do
    port=$((20000 + ((RANDOM * 7 + $$) % 120) * 100))
    if command -v ss >/dev/null && [[ -n $(ss -ltnH "sport >= :$port and sport <= :$((port + 40))" 2>/dev/null) ]]; then
      continue
    fi
    lock="${TMPDIR:-/tmp}/emurdma-dat-port-$port.lock"
    exec {port_lock_fd}>>"$lock" || continue
    if flock -n "$port_lock_fd"; then
      return 0
    fi
    exec {port_lock_fd}>&-
  done
  fail "no free TCP port range found"
}

# value_of <flag> <default> ARGS...: the value following the last <flag> in ARGS.
value_of() {
  local flag=$1 value=$2
  shift 2
  while (($# > 0)); do
    if [[ $1 == "$flag" && $# -ge 2 ]]; then
      value=$2
      shift
    fi
    shift
  done
  echo "$value"
}

# --- namespaces -----------------------------------------------------------------------------
addr_a=""
addr_b=""
server_host=127.0.0.1
if [[ $mode == netns ]]; then
  [[ $(id -u) == 0 ]] || skip "two network namespaces need root (CI runs as root)"
  command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
  ip netns list >/dev/null 2>&1 || skip "ip netns is not available here"
  tag="$$"
  ns_a="emudat_a_$tag"
  ns_b="emudat_b_$tag"
  if ! ip netns add "$ns_a" 2>"$tmp/netns.err"; then
    ns_a=""
    skip "ip netns add failed (no network namespace support here): $(cat "$tmp/netns.err")"
  fi
  ip netns add "$ns_b" || { ns_b=""; fail "ip netns add $ns_b failed"; }
  veth_a="eda$tag"
  veth_b="edb$tag"
  ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" ||
    fail "creating the veth pair failed"
  addr_a=198.18.0.1
  addr_b=198.18.0.2
  ip -n "$ns_a" addr add "$addr_a/15" dev "$veth_a" || fail "ip addr add failed"
  ip -n "$ns_b" addr add "$addr_b/15" dev "$veth_b" || fail "ip addr add failed"
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up || fail "lo up failed"; done
  ip -n "$ns_a" link set "$veth_a" up || fail "veth up failed"
  ip -n "$ns_b" link set "$veth_b" up || fail "veth up failed"
  server_host=$addr_a
fi

# --- command lines --------------------------------------------------------------------------
pick_port
server_cmd=()
client_cmd=()
quit_cmd=()
ready_re=""
# dtest and dtestx exchange the server's address over a fixed TCP port before connecting: a
# client started before the server listens fails with these lines, nothing else has happened,
# and it is started again.
retry_re=""
# Client lines after which server and client are both started again (see dtestx).
pair_retry_re=""
case "$program" in
  dtest)
    server_cmd=(dtest -P "$ia" "${args[@]}")
    client_cmd=(dtest -P "$ia" -h "$server_host" "${args[@]}")
    ready_re="waiting for client connection"
    retry_re="Couldn't connect to|Could not connect to|Failed to get server parameters"
    ;;
  dtestcm)
    server_cmd=(dtestcm -P "$ia" -p "$port" "${args[@]}")
    client_cmd=(dtestcm -P "$ia" -p "$port" -h "$server_host" "${args[@]}")
    ready_re="Server ready on port"
    ;;
  dtestx)
    server_cmd=(dtestx -P "$ia" -s "${args[@]}")
    client_cmd=(dtestx -P "$ia" -c -h "$server_host" "${args[@]}")
    ready_re="Running as Server"
    retry_re="Couldn't connect to|Could not connect to|Failed to get server parameters"
    # dtestx's server creates its PSP only after the address exchange, and its client connects
    # as soon as that exchange is done: a client that wins the race is rejected (no listener
    # yet: NON_PEER_REJECTED, 0x4003) while the server waits for a request forever. Nothing
    # else has happened then, so the pair is started again. (Over real IB, address and route
    # resolution before the REQ make the client lose this race.)
    pair_retry_re="unexpected event, !conn established: 0x4003"
    ;;
  dtestsrq)
    server_cmd=(dtestsrq -P "$ia" -p "$port" "${args[@]}")
    client_cmd=(dtestsrq -P "$ia" -p "$port" -h "$server_host" "${args[@]}")
    ready_re="server ready on port"
    ;;
  dapltest-trans | dapltest-perf)
    test_type=T
    [[ $program == dapltest-perf ]] && test_type=P
    server_cmd=(dapltest -T S -D "$ia" -n "$port")
    client_cmd=(dapltest -T "$test_type" -s "$server_host" -D "$ia" -n "$port" "${args[@]}")
    quit_cmd=(dapltest -T Q -s "$server_host" -D "$ia" -n "$port")
    ready_re="Dapltest: Service Point Ready"
    ;;
  dapltest-limit)
    client_cmd=(dapltest -T L -D "$ia" "${args[@]}")
    ;;
esac

# --- run ------------------------------------------------------------------------------------
status=0
wait_status=0
server_log="$tmp/server.log"
client_log="$tmp/client.log"
quit_log="$tmp/quit.log"
logs=()
report_status() { # report_status <side> <status>
  if (($2 != 0)); then
    echo "run_dat_program: the $1 exited with status $2$( (($2 == 124)) && echo ' (killed after the time limit: a hang)')" >&2
    status=1
  fi
}

if ((${#server_cmd[@]} == 0)); then
  start "$client_log" "$ns_a" "$addr_a" "${client_cmd[@]}"
  if wait_for "$last_pid" $((limit + 5)); then
    client_status=$wait_status
  else
    client_status=124
  fi
  show "$binary" "$client_log"
  report_status "$binary" "$client_status"
  logs=("$client_log")
else
  pair_attempts=0
  while :; do
    ((++pair_attempts))
    start "$server_log" "$ns_a" "$addr_a" "${server_cmd[@]}"
    server_pid=$last_pid
    if ! wait_for_line "$server_pid" "$server_log" "$ready_re" 20; then
      echo "run_dat_program: the server did not print /$ready_re/ (it ended, or 20 s passed)" >&2
    fi
    connect_deadline=$((SECONDS + 15))
    attempts=0
    while :; do
      ((++attempts))
      start "$client_log" "$ns_b" "$addr_b" "${client_cmd[@]}"
      client_pid=$last_pid
      if ! wait_for "$client_pid" $((limit + 5)); then
        client_status=124
      else
        client_status=$wait_status
      fi
      if [[ -n $retry_re ]] && grep -qE -- "$retry_re" "$client_log" &&
        kill -0 "$server_pid" 2>/dev/null && ((SECONDS < connect_deadline)); then
        sleep 0.3
        continue
      fi
      break
    done
    ((attempts > 1)) && echo "run_dat_program: the client connected at attempt $attempts" >&2
    if [[ -n $pair_retry_re ]] && grep -qE -- "$pair_retry_re" "$client_log" &&
      ((pair_attempts < 5 && $(remaining) > 15)); then
      echo "run_dat_program: the client connected before the server listened; both start again" >&2
      kill -TERM -- "-$server_pid" 2>/dev/null
      wait_for "$server_pid" 5 || kill -KILL -- "-$server_pid" 2>/dev/null
      continue
    fi
    break
  done
  ((pair_attempts > 1)) && echo "run_dat_program: server and client ran $pair_attempts times" >&2
  if ((${#quit_cmd[@]} > 0)); then
    # dapltest's server serves clients until a quit command arrives.
    if kill -0 "$server_pid" 2>/dev/null; then
      # It prints its ready line again once it waits for the next client.
      end=$((SECONDS + 5))
      while (($(grep -cE -- "$ready_re" "$server_log") < 2 && SECONDS < end)); do sleep 0.1; done
      start "$quit_log" "$ns_b" "$addr_b" "${quit_cmd[@]}"
      wait_for "$last_pid" 15 || echo "run_dat_program: dapltest -T Q did not end" >&2
    fi
  fi
  # The server ends by itself after a good run; after a failed client give it a few seconds.
  if ((client_status == 0)); then server_wait=$(($(remaining) + 5)); else server_wait=5; fi
  if wait_for "$server_pid" "$server_wait"; then
    server_status=$wait_status
  else
    server_status=124
    echo "run_dat_program: the server did not end (within $server_wait s after the client)" >&2
  fi
  show server "$server_log"
  show client "$client_log"
  [[ -s $quit_log ]] && show quit "$quit_log"
  report_status server "$server_status"
  report_status client "$client_status"
  logs=("$server_log" "$client_log")
fi

# --- checks ---------------------------------------------------------------------------------
expect() { # expect <log> <ERE> <what>
  grep -qE -- "$2" "$1" || {
    echo "run_dat_program: missing in $(basename "$1" .log) output: $3" >&2
    status=1
  }
}
# The lines a program printed itself: not the library's log lines, nor the provider's counter
# lines (dat_ib_print_counters: " DCNT_<name> = <value>", whose names hold ERR).
program_lines() {
  grep -vE '^\[emurdma|^ DCNT_[A-Z_]+ = [0-9]+$' "$1"
}
refuse() { # refuse <ERE> <what>: no line the programs printed may match (the library's own
  # log lines, "[emurdma <level>] ..." and "[emurdma-dat <level>] ..." and
  # "[emurdma-cm <level>] ...", are left out)
  local log
  for log in "${logs[@]}"; do
    if program_lines "$log" | grep -qE -- "$1"; then
      echo "run_dat_program: $(basename "$log" .log) output shows $2:" >&2
      program_lines "$log" | grep -E -- "$1" | head -5 | sed 's/^/  /' >&2
      status=1
    fi
  done
}
# The words the programs use for a failure (dtest*, dapltest).
readonly kErrorRe='[Ee]rror|ERR[: ]|FAIL|[Ff]ailed|[Cc]ould not|[Cc]ouldn.t|[Cc]annot|[Uu]nexpected|[Ii]nvalid|bad (dis)?connection event|MISMATCH|[Ww]arning'

# dtestx -p: each side queried (one "Cntrs:" line of values per object) and printed (" NAME =
# value" lines) its counters: the IA's, EP[0]'s and its EVDs'; the counters of what both sides
# did (objects created, each kind of post and receive, EVD waits and CQ polls) are non-zero,
# and so are those of each side's part of the connection. dtestx prints them before it frees
# anything, so frees and disconnect messages may still read 0.
expect_nonzero() { # expect_nonzero <log> <counter names...>
  local log=$1 name
  shift
  for name in "$@"; do
    expect "$log" "^ $name = [1-9][0-9]*\$" "a non-zero $name"
  done
}
expect_dtestx_counters() {
  local log
  for log in "${logs[@]}"; do
    expect "$log" 'IA Cntrs:( [0-9]+)+$' "the IA's counters (dat_ib_query_counters)"
    expect "$log" 'EP\[0\] Cntrs:( [0-9]+)+$' "EP[0]'s counters"
    expect "$log" 'DTO_EVD Cntrs:( [0-9]+)+$' "the DTO EVD's counters"
    expect_nonzero "$log" DCNT_IA_PZ_CREATE DCNT_IA_LMR_CREATE DCNT_IA_EVD_CREATE \
      DCNT_IA_EP_CREATE DCNT_EP_POST_SEND DCNT_EP_POST_SEND_DATA DCNT_EP_POST_RECV \
      DCNT_EP_POST_RECV_DATA DCNT_EP_POST_WRITE_IMM DCNT_EP_POST_WRITE_IMM_DATA \
      DCNT_EP_POST_CMP_SWAP DCNT_EP_POST_FETCH_ADD DCNT_EP_RECV DCNT_EP_RECV_DATA \
      DCNT_EP_RECV_RDMA_IMM DCNT_EP_RECV_RDMA_IMM_DATA DCNT_EVD_WAIT DCNT_EVD_DEQUEUE_POLL_FOUND
  done
  expect_nonzero "$server_log" DCNT_IA_PSP_CREATE DCNT_IA_CM_LISTEN DCNT_IA_SP_CR \
    DCNT_IA_SP_CR_ACCEPTED DCNT_IA_CM_REQ_RX DCNT_IA_CM_REP_TX DCNT_IA_CM_RTU_RX \
    DCNT_IA_CM_PASSIVE_EST DCNT_EVD_CONN_CALLBACK
  expect_nonzero "$client_log" DCNT_EP_CONNECT DCNT_IA_CM_REQ_TX DCNT_IA_CM_REP_RX \
    DCNT_IA_CM_RTU_TX DCNT_IA_CM_ACTIVE_EST DCNT_EVD_CONN_CALLBACK
}

# expect_bytes <label> <bytes>: the client's "Total <label> : <MB> MB" line (dapltest prints
# bytes / 10^6 with two decimals, truncated) shows the bytes all threads should have moved.
expect_bytes() {
  local label=$1 bytes=$2 shown
  shown="$(sed -nE "s/^Total $label *: *([0-9]+)\.([0-9]+) MB.*/\1.\2/p" "$client_log" | head -1)"
  if [[ -z $shown ]]; then
    echo "run_dat_program: missing in client output: the 'Total $label' line" >&2
    status=1
    return
  fi
  if ! awk -v shown="$shown" -v bytes="$bytes" 'BEGIN {
      d = shown - bytes / 1e6; if (d < 0) d = -d; exit !(d < 0.0101) }'; then
    echo "run_dat_program: client's Total $label is $shown MB, expected $bytes bytes" >&2
    status=1
  fi
}

# The byte totals dapltest's transaction client reports, from its arguments: per thread and
# iteration each op moves seg_size * num_segs * EPs per thread; RDMA ops count in one total
# whoever starts them, SR ops as send (client's) or recv (server's); -V appends server SR,
# client SR, server SR of 4096 bytes.
dapltest_expected_bytes() {
  local threads eps iterations validate=0 i=0 who type size segs n=${#args[@]}
  threads="$(value_of -t 1 "${args[@]}")"
  eps="$(value_of -w 1 "${args[@]}")"
  iterations="$(value_of -i 1000 "${args[@]}")"
  send=0 recv=0 rdma_read=0 rdma_write=0
  local ops=()
  while ((i < n)); do
    case "${args[i]}" in
      -t | -w | -i | -D | -s | -n | -R) i=$((i + 2)) ;;
      -V) validate=1; i=$((i + 1)) ;;
      -*) i=$((i + 1)) ;;
      client | server)
        who=${args[i]}
        type=${args[i + 1]}
        size=4096
        segs=1
        i=$((i + 2))
        if ((i < n)) && [[ ${args[i]} =~ ^[0-9]+$ ]]; then size=${args[i]}; i=$((i + 1)); fi
        if ((i < n)) && [[ ${args[i]} =~ ^[0-9]+$ ]]; then segs=${args[i]}; i=$((i + 1)); fi
        ((i < n)) && [[ ${args[i]} == -f ]] && i=$((i + 1))
        ops+=("$who $type $((size * segs))")
        ;;
      *) i=$((i + 1)) ;;
    esac
  done
  ((validate)) && ops+=("server SR 4096" "client SR 4096" "server SR 4096")
  local op scale=$((eps * iterations * threads))
  for op in "${ops[@]}"; do
    read -r who type size <<<"$op"
    case "$type" in
      RR) rdma_read=$((rdma_read + size * scale)) ;;
      RW) rdma_write=$((rdma_write + size * scale)) ;;
      SR) if [[ $who == client ]]; then send=$((send + size * scale)); else recv=$((recv + size * scale)); fi ;;
    esac
  done
  expected_threads=$threads
  expected_eps=$eps
}

case "$program" in
  dtest)
    for log in "${logs[@]}"; do
      expect "$log" 'DAPL Test Complete\. PASSED' "'DAPL Test Complete. PASSED'"
      expect "$log" 'CONNECTED!' "'CONNECTED!'"
    done
    refuse "$kErrorRe" "an error"
    ;;
  dtestcm)
    connections="$(value_of -c 1000 "${args[@]}")"
    expect "$server_log" "ALL $connections CONNECTED on Server!" "'ALL $connections CONNECTED on Server!'"
    expect "$client_log" "ALL $connections CONNECTED on Client!" "'ALL $connections CONNECTED on Client!'"
    for log in "${logs[@]}"; do
      expect "$log" 'DAPL Connection Test Complete\.' "'DAPL Connection Test Complete.'"
    done
    refuse "$kErrorRe" "an error"
    ;;
  dtestx)
    # The provider advertises the IB extensions: "IB extension not supported" is a failure.
    for log in "${logs[@]}"; do
      expect "$log" 'IB extension test - .* test PASSED' "'IB extension test - ... PASSED'"
    done
    [[ " ${args[*]} " == *" -p "* ]] && expect_dtestx_counters
    refuse "$kErrorRe" "an error"
    ;;
  dtestsrq)
    connections="$(value_of -c 1 "${args[@]}")"
    expect "$server_log" "ALL $connections CONNECTED on server!" "'ALL $connections CONNECTED on server!'"
    expect "$client_log" "ALL $connections CONNECTED on client!" "'ALL $connections CONNECTED on client!'"
    for log in "${logs[@]}"; do
      expect "$log" 'DAPL RC SRQ Test Complete\.' "'DAPL RC SRQ Test Complete.'"
    done
    refuse "$kErrorRe" "an error"
    ;;
  dapltest-trans)
    dapltest_expected_bytes
    expect "$server_log" 'Dapltest: Service Point Ready' "'Dapltest: Service Point Ready'"
    expect "$server_log" 'Server: Transaction Test Finished for this client' \
      "'Server: Transaction Test Finished for this client'"
    expect "$client_log" "^----- Stats ---- : $expected_threads threads, $expected_eps EPs" \
      "the statistics for $expected_threads threads, $expected_eps EPs"
    expect "$client_log" 'End of Work -- Client Exiting' "'End of Work -- Client Exiting'"
    expect_bytes Send "$send"
    expect_bytes Recv "$recv"
    expect_bytes "RDMA Read" "$rdma_read"
    expect_bytes "RDMA Write" "$rdma_write"
    refuse "$kErrorRe" "an error"
    ;;
  dapltest-perf)
    expect "$server_log" 'Dapltest: Service Point Ready' "'Dapltest: Service Point Ready'"
    expect "$server_log" 'Server: Finished performance test' "'Server: Finished performance test'"
    expect "$client_log" '-+ Statistics -+' "the Statistics block"
    expect "$client_log" 'End of Work -- Client Exiting' "'End of Work -- Client Exiting'"
    refuse "$kErrorRe" "an error"
    ;;
  dapltest-limit)
    # Each limit test prints a line of stars, its name, and a closing line of stars when it
    # succeeded ("error occurs, can not continue with limit test" otherwise). Reaching the
    # limit is a "#N fails: DAT_INSUFFICIENT_RESOURCES" line, which is the test working; the
    # count it reached must be at least one.
    for name in "${args[@]}"; do
      [[ $name == limit_* ]] || continue
      if ! awk -v name="$name" '
          $0 ~ "^Limitation Test +" name "$" { seen = 1; next }
          seen && /^\*+$/ { closed = 1 }
          END { exit !(seen && closed) }' "$client_log"; then
        echo "run_dat_program: $name did not complete (no closing line after 'Limitation Test $name')" >&2
        status=1
      fi
    done
    count="$(sed -nE 's/^LimitTest: (IAs opened|[A-Zs]+ created|recv buffers posted per EP): ([0-9]+).*/\2/p' \
      "$client_log" | head -1)"
    if [[ -z $count || $count -lt 1 ]]; then
      echo "run_dat_program: the limit test reports no object created (count '${count:-none}')" >&2
      status=1
    fi
    refuse 'error occurs|free fails|close \((graceful|abrupt)\) (fails|error)|[Nn]o memory|Out of memory|[Ww]arning' \
      "an error"
    ;;
esac

echo "run_dat_program: $( ((status == 0)) && echo PASS || echo FAIL ) ($program, mode $mode, $((SECONDS - start_s)) s)" >&2
exit "$status"
