#!/usr/bin/env bash
# Runs an unmodified RDMA program (ibverbs-utils, perftest) on the emulator through
# scripts/emurdma and checks its result. One ctest entry per call (tests/programs/CMakeLists.txt).
#
#   run_program.sh --mode shm|tcp|netns --check KIND [--pair] [--limit S] [--wrapper PATH]
#                  [--build-dir DIR] [--capture-check ARG]... -- PROGRAM [ARGS...]
#
#   --mode shm     EMURDMA_TRANSPORT=shm, both processes on this host
#   --mode tcp     EMURDMA_TRANSPORT=tcp, both processes on this host (127.0.0.1)
#   --mode netns   EMURDMA_TRANSPORT=tcp across two network namespaces joined by a veth pair
#                  (198.18.0.1 server, 198.18.0.2 client; EMURDMA_TCP_ADDR set to each side's
#                  address). Needs root and `ip netns`: without them the test is SKIPPED (exit 77,
#                  which ctest reports as skipped through SKIP_RETURN_CODE), never passed.
#   --pair         server and client processes: PROGRAM ARGS -p PORT, then PROGRAM ARGS -p PORT
#                  SERVER_ADDR. Without --pair one process runs PROGRAM ARGS.
#   --check KIND   what passing means, besides every process exiting 0:
#                  devices   ibv_devices lists emu0
#                  devinfo   ibv_devinfo -v shows emu0, PORT_ACTIVE, link_layer Ethernet, GID 0
#                  pingpong  both sides print their "bytes in ... seconds" and "iters in ..."
#                            lines and no data-validation (-c) or completion error
#                  perftest  the client prints a result row; no completion error on either side
#                  perftest-all  as perftest, plus a result row for every size 2 .. 2^23 (-a)
#   --limit S      every process is killed after S seconds (default 55): a hang is a failure
#   --capture-check ARG  (with --pair; repeated: the words of a command) capture on: each side
#                  runs with EMURDMA_PCAP=<fresh temp dir of its own>/cap-%p.pcapng (removed with
#                  the run's other files on every path); once both programs have exited and
#                  passed, the command runs with SERVER_DIR SERVER_LOG CLIENT_DIR CLIENT_LOG
#                  appended, and its failure fails the test (tests/capture/run_capture.sh).
#
# Exit: 0 pass, 1 fail, 77 skipped (netns without root / ip netns). Every process started is
# killed on every path (own process group each, plus `timeout`); namespaces are removed.
set -uo pipefail

readonly kSkip=77
mode=""
check=""
pair=0
limit=55
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wrapper="$here/../../scripts/emurdma"
# shellcheck source=../netns/two_namespaces.sh
source "$here/../netns/two_namespaces.sh"
build_dir=""
capture_check=()

fail() {
  echo "run_program: FAIL: $*" >&2
  exit 1
}
skip() {
  echo "run_program: SKIPPED: $*" >&2
  exit "$kSkip"
}

while (($# > 0)); do
  case "$1" in
    --mode) mode="$2"; shift 2 ;;
    --check) check="$2"; shift 2 ;;
    --pair) pair=1; shift ;;
    --limit) limit="$2"; shift 2 ;;
    --wrapper) wrapper="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --capture-check) capture_check+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) fail "unknown argument '$1'" ;;
  esac
done
(($# > 0)) || fail "no program given"
program=("$@")
case "$mode" in shm | tcp | netns) ;; *) fail "--mode must be shm, tcp or netns" ;; esac
case "$check" in devices | devinfo | pingpong | perftest | perftest-all) ;;
  *) fail "--check must be devices, devinfo, pingpong, perftest or perftest-all" ;; esac
[[ $limit =~ ^[0-9]+$ ]] || fail "--limit must be a number of seconds"
((${#capture_check[@]} == 0 || pair == 1)) || fail "--capture-check needs --pair"
[[ -x $wrapper ]] || fail "wrapper $wrapper is not executable"
[[ -n $build_dir ]] && export EMURDMA_BUILD_DIR="$build_dir"
command -v "${program[0]}" >/dev/null ||
  fail "${program[0]} is not installed (scripts/setup.sh installs ibverbs-utils and perftest)"

transport="$mode"
[[ $mode == netns ]] && transport=tcp

start_s=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/emurdma_programs.XXXXXX")"
pgids=()

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
  two_namespaces_down
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "run_program: interrupted" >&2; exit 1' INT TERM HUP

remaining() {
  local r=$((limit - (SECONDS - start_s)))
  ((r > 1)) && echo "$r" || echo 1
}

# start <log> <netns or ""> <EMURDMA_TCP_ADDR or ""> ARGS...: starts the program through the
# wrapper in a process group of its own, killed by timeout after the remaining time; its pid
# (= process group id) in $last_pid. With $pcap set, the process captures to it (EMURDMA_PCAP). stdbuf makes the program's stdout line-buffered, so
# that what it printed before a hang is in its log when it is killed.
start() {
  local log=$1 ns=$2 addr=$3
  shift 3
  local cmd=(timeout -k 3 "$(remaining)" env ${addr:+EMURDMA_TCP_ADDR=$addr} ${pcap:+EMURDMA_PCAP=$pcap}
    "$wrapper" run --transport "$transport" -- stdbuf -oL "$@")
  if [[ -n $ns ]]; then
    setsid ip netns exec "$ns" "${cmd[@]}" >"$log" 2>&1 </dev/null &
  else
    setsid "${cmd[@]}" >"$log" 2>&1 </dev/null &
  fi
  pgids+=("$!")
  echo "+ [${ns:-host}] EMURDMA_TRANSPORT=$transport${addr:+ EMURDMA_TCP_ADDR=$addr}${pcap:+ EMURDMA_PCAP=$pcap} emurdma run -- $*" >&2
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

show() {
  local name=$1 log=$2
  echo "----- $name output -----"
  sed "s/^/$name| /" "$log"
}

# A TCP port nothing on this host listens on, for the program's out-of-band exchange. Below
# the kernel's ephemeral range, so no outgoing connection takes it meanwhile; spread by PID and
# RANDOM so that tests running in parallel pick different ones.
pick_port() {
  local port i
  for ((i = 0; i < 50; ++i)); do
    port=$((20000 + (RANDOM * 7 + $$) % 12000))
    if ! command -v ss >/dev/null || [[ -z $(ss -ltnH "sport = :$port" 2>/dev/null) ]]; then
      echo "$port"
      return
    fi
  done
  fail "no free TCP port found"
}

# --- namespaces -----------------------------------------------------------------------------
server_host=127.0.0.1
if [[ $mode == netns ]]; then
  why_not=$(two_namespaces_why_not) && skip "$why_not"
  two_namespaces_up emupg emp
  case $? in
    0) ;;
    2) skip "$two_namespaces_error" ;;
    *) fail "$two_namespaces_error" ;;
  esac
  server_host=$addr_a
fi

# --- run ------------------------------------------------------------------------------------
status=0
wait_status=0
server_log="$tmp/server.log"
client_log="$tmp/client.log"
pcap=""
server_capture="$tmp/server-capture"
client_capture="$tmp/client-capture"
if ((pair == 0)); then
  start "$client_log" "$ns_a" "$addr_a" "${program[@]}"
  pid=$last_pid
  if ! wait_for "$pid" $((limit + 5)); then
    echo "run_program: the program did not end within $limit s" >&2
    status=1
  fi
  show "${program[0]}" "$client_log"
  if ((status == 0 && wait_status != 0)); then
    echo "run_program: ${program[0]} exited with status $wait_status$( ((wait_status == 124)) && echo ' (killed after the time limit)')" >&2
    status=1
  fi
  logs=("$client_log")
else
  port="$(pick_port)" || exit 1
  if ((${#capture_check[@]} > 0)); then
    mkdir "$server_capture" || fail "mkdir $server_capture"
    pcap="$server_capture/cap-%p.pcapng"
  fi
  start "$server_log" "$ns_a" "$addr_a" "${program[@]}" -p "$port"
  server_pid=$last_pid
  # The server is ready when it accepts the client's connection: the client is retried for a
  # while when it could not reach the server's port (nothing has happened on either side then).
  connect_re="Couldn't connect to [^ ]+:[0-9]+|Unable to open file descriptor for socket connection|Unable to init the socket connection"
  connect_deadline=$((SECONDS + 15))
  attempts=0
  while :; do
    ((++attempts))
    if ((${#capture_check[@]} > 0)); then
      # A fresh directory each attempt: only the client that ran holds a file there.
      rm -rf "$client_capture" && mkdir "$client_capture" || fail "mkdir $client_capture"
      pcap="$client_capture/cap-%p.pcapng"
    fi
    start "$client_log" "$ns_b" "$addr_b" "${program[@]}" -p "$port" "$server_host"
    client_pid=$last_pid
    if ! wait_for "$client_pid" $((limit + 5)); then
      client_status=124
    else
      client_status=$wait_status
    fi
    if ((client_status != 0)) && grep -qE "$connect_re" "$client_log" &&
      kill -0 "$server_pid" 2>/dev/null && ((SECONDS < connect_deadline)); then
      sleep 0.3
      continue
    fi
    break
  done
  ((attempts > 1)) && echo "run_program: the client connected at attempt $attempts" >&2
  # The server ends by itself after a good run; after a failed client give it a few seconds.
  if ((client_status == 0)); then server_wait=$(($(remaining) + 5)); else server_wait=5; fi
  if wait_for "$server_pid" "$server_wait"; then
    server_status=$wait_status
  else
    server_status=124
    echo "run_program: the server did not end (within $server_wait s after the client)" >&2
  fi
  show server "$server_log"
  show client "$client_log"
  report_status() { # report_status <side> <status>
    if (($2 != 0)); then
      echo "run_program: the $1 exited with status $2$( (($2 == 124)) && echo ' (killed after the time limit: a hang)')" >&2
      status=1
    fi
  }
  report_status server "$server_status"
  report_status client "$client_status"
  logs=("$server_log" "$client_log")
fi

# --- checks ---------------------------------------------------------------------------------
expect() { # expect <log> <ERE> <what>
  grep -qE "$2" "$1" || { echo "run_program: missing in $(basename "$1" .log) output: $3" >&2; status=1; }
}
refuse() { # refuse <ERE> <what>: no line the program printed may match (the library's own
  # log lines, "[emurdma <level>] ...", are not the program's checks: left out)
  local log
  for log in "${logs[@]}"; do
    if grep -v '^\[emurdma ' "$log" | grep -qE "$1"; then
      echo "run_program: $(basename "$log" .log) output shows $2:" >&2
      grep -v '^\[emurdma ' "$log" | grep -E "$1" | head -5 | sed 's/^/  /' >&2
      status=1
    fi
  done
}

case "$check" in
  devices)
    expect "$client_log" '^[[:space:]]+emu0[[:space:]]' "device emu0 in the list"
    ;;
  devinfo)
    expect "$client_log" '^hca_id:[[:space:]]+emu0$' "hca_id: emu0"
    expect "$client_log" 'state:[[:space:]]+PORT_ACTIVE' "port state PORT_ACTIVE"
    expect "$client_log" 'link_layer:[[:space:]]+Ethernet' "link_layer: Ethernet"
    expect "$client_log" 'GID\[ *0\]:[[:space:]]*[0-9a-fA-F:]+' "a GID line for index 0"
    ;;
  pingpong)
    for log in "${logs[@]}"; do
      expect "$log" '^[0-9]+ bytes in [0-9.]+ seconds = ' "the 'bytes in ... seconds' result line"
      expect "$log" '^[0-9]+ iters in [0-9.]+ seconds = ' "the 'iters in ... seconds' result line"
    done
    refuse 'invalid data|Failed status|[Ff]ailed to|Couldn|unknown wr_id|Completion for' \
      "a validation or completion error"
    ;;
  perftest | perftest-all)
    # Result rows: "<bytes> <iterations> <figures...>" under the "#bytes" header.
    expect "$client_log" '^[[:space:]]*#bytes' "the result table header"
    expect "$client_log" '^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+' "a result row"
    refuse 'Completion with error|[Ff]ailed|Couldn|Unable to|Problems|error in' \
      "an error"
    if [[ $check == perftest-all ]]; then
      missing=()
      # A latency row may read "inf": perftest re-estimates the CPU clock for every size and
      # gets 0 when the machine is too loaded to time its sample loop; the size still ran.
      for ((size = 2; size <= 8388608; size *= 2)); do
        grep -qE "^[[:space:]]*${size}[[:space:]]+[0-9]+[[:space:]]+([0-9.]+|inf)" "$client_log" ||
          missing+=("$size")
      done
      if ((${#missing[@]} > 0)); then
        echo "run_program: -a: no result row for sizes ${missing[*]}" >&2
        status=1
      fi
    fi
    ;;
esac

# --- capture --------------------------------------------------------------------------------
if ((${#capture_check[@]} > 0)); then
  if ((status == 0)); then
    echo "+ ${capture_check[*]} $server_capture $server_log $client_capture $client_log" >&2
    "${capture_check[@]}" "$server_capture" "$server_log" "$client_capture" "$client_log" ||
      { echo "run_program: the capture check failed" >&2; status=1; }
  else
    echo "run_program: the capture was not checked: the run failed before" >&2
  fi
fi

echo "run_program: $( ((status == 0)) && echo PASS || echo FAIL ) (mode $mode, $((SECONDS - start_s)) s)" >&2
exit "$status"
