#!/usr/bin/env bash
# run_pair.sh EMURDMA BUILD_DIR MODE LIMIT [--server-says RE]... [--client-says RE]...
#             [--refuse RE] [--server-stays] [--port-space PS] [--port P] [--kernel-port]
#             -- SERVER ARGS... -- CLIENT ARGS...
#
# Runs an unmodified rdma_cm server and client (rdmacm-utils, perftest -R) as two processes
# through `emurdma run`, the server first, the client once the server's rdma_cm port is held
# and listened on (its abstract socket "@emurdma-cm/<ps>/<port>" appears in the server's
# /proc/net/unix: no sleep, no race). MODE:
#   shm    EMURDMA_TRANSPORT=shm, both on this host, the server's address 127.0.0.1
#   tcp    EMURDMA_TRANSPORT=tcp, both on this host, 127.0.0.1
#   netns  EMURDMA_TRANSPORT=tcp across two network namespaces joined by a veth pair
#          (tests/netns/two_namespaces.sh): the server in the first at 198.18.0.1, the client in
#          the second at 198.18.0.2, EMURDMA_TCP_ADDR set to each side's address and one job
#          secret (EMURDMA_SECRET_FILE) for both, so the client's dial goes through the server
#          host's CM gateway (EMURDMA_CM_PORT). Needs root and `ip netns`: without them the test
#          is SKIPPED (exit 77, SKIP_RETURN_CODE in ctest), never passed.
# In the arguments @PORT@ becomes a free rdma_cm port and @ADDR@ the server's address.
#
# Passes when both exit 0 within LIMIT seconds and each side's output has a line matching each
# of its --*-says patterns (extended regex: what proves the work was done, as some programs exit
# 0 after a failed transfer); a hang is a failure (both are killed), and each side's output is
# printed. --refuse RE: no line of either side's output may match RE (an error the program
# reports without a failing exit status; the library's own "[emurdma ...]" lines are left
# out). --server-stays: the server does not end by itself (v44's cmtime loops on events):
# it must still be alive when the client has ended, and is then stopped (TERM). --port-space:
# the server's rdma_cm port space in decimal (default 262, RDMA_PS_TCP; udaddy's is 273,
# RDMA_PS_UDP); --port: a port the programs fix themselves (udaddy's 7174) instead of a free
# one for @PORT@; --kernel-port: the server listens on a kernel TCP port (rstream -T s), so
# the client starts once that port is in LISTEN (/proc/net/tcp, tcp6) instead of the rdma_cm
# port's socket.
set -u
readonly kSkip=77
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../netns/two_namespaces.sh
source "$here/../netns/two_namespaces.sh"

emurdma=$1 build=$2 mode=$3 limit=$4
shift 4
server_says=() client_says=() refuse="" server_stays=0 ps=262 port="" kernel_port=0
while [[ ${1:-} == --?* ]]; do
  case $1 in
    --server-says) server_says+=("$2"); shift 2 ;;
    --client-says) client_says+=("$2"); shift 2 ;;
    --server-stays) server_stays=1; shift ;;
    --refuse) refuse=$2; shift 2 ;;
    --port-space) ps=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --kernel-port) kernel_port=1; shift ;;
    *) echo "run_pair.sh: unknown option $1"; exit 2 ;;
  esac
done
usage="usage: run_pair.sh EMURDMA BUILD shm|tcp|netns LIMIT [options] -- SERVER... -- CLIENT..."
[[ ${1:-} == -- ]] || { echo "$usage"; exit 2; }
shift
server=()
while (($#)) && [[ $1 != -- ]]; do server+=("$1"); shift; done
shift
client=("$@")
((${#server[@]} && ${#client[@]})) || { echo "$usage"; exit 2; }

transport=$mode server_addr=127.0.0.1
case $mode in
  shm | tcp) ;;
  netns) transport=tcp ;;
  *) echo "$usage"; exit 2 ;;
esac

tmp=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; done
  wait 2>/dev/null
  two_namespaces_down
  rm -rf "$tmp"
}
trap cleanup EXIT

server_env=() client_env=() in_server_ns=() in_client_ns=()
if [[ $mode == netns ]]; then
  if why_not=$(two_namespaces_why_not); then
    echo "SKIPPED: $why_not"
    exit $kSkip
  fi
  two_namespaces_up emucm emc
  case $? in
    0) ;;
    2) echo "SKIPPED: $two_namespaces_error"; exit $kSkip ;;
    *) echo "FAIL: $two_namespaces_error"; exit 1 ;;
  esac
  server_addr=$addr_a
  in_server_ns=(ip netns exec "$ns_a")
  in_client_ns=(ip netns exec "$ns_b")
  (umask 077 && head -c 32 /dev/urandom | base64 >"$tmp/secret")
  server_env=(EMURDMA_TCP_ADDR="$addr_a" EMURDMA_SECRET_FILE="$tmp/secret")
  client_env=(EMURDMA_TCP_ADDR="$addr_b" EMURDMA_SECRET_FILE="$tmp/secret")
fi

# Whether a kernel TCP socket of the server's netns listens on port $1 (a LISTEN row, state 0A,
# IPv4 or IPv6).
kernel_tcp_listens() {
  local hex
  hex=$(printf '%04X' "$1")
  "${in_server_ns[@]}" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A "
}

# A port no process of the server's netns holds in the server's port space, in the range the
# programs accept; a fixed port must be free.
if [[ -n $port ]]; then
  if "${in_server_ns[@]}" grep -q "@emurdma-cm/$ps/$port\$" /proc/net/unix; then
    echo "FAIL: rdma_cm port $port (port space $ps) is held by another process"
    exit 1
  fi
else
  for ((i = 0; i < 50; ++i)); do
    candidate=$((20000 + (RANDOM * 7 + $$) % 12000))
    if ((kernel_port)) && kernel_tcp_listens "$candidate"; then continue; fi
    if ! "${in_server_ns[@]}" grep -q "@emurdma-cm/$ps/$candidate\$" /proc/net/unix; then
      port=$candidate
      break
    fi
  done
  [[ -n $port ]] || { echo "FAIL: no free rdma_cm port"; exit 1; }
fi
server=("${server[@]//@PORT@/$port}")
client=("${client[@]//@PORT@/$port}")
server=("${server[@]//@ADDR@/$server_addr}")
client=("${client[@]//@ADDR@/$server_addr}")

export EMURDMA_BUILD_DIR="$build" EMURDMA_TRANSPORT="$transport" EMURDMA_DEVICES=soft
echo "+ [server${ns_a:+ in $ns_a}] ${server_env[*]} emurdma run -- ${server[*]}"
# Each side in a process group of its own (setsid), so that stopping it stops all of it.
setsid "${in_server_ns[@]}" env "${server_env[@]}" timeout -k 2 "$limit" "$emurdma" run -- stdbuf -oL \
  "${server[@]}" >"$tmp/server" 2>&1 &
pids+=($!)
server_pid=$!
# Wait until the server listens (bounded), or it ended.
for ((i = 0; i < 200; ++i)); do
  if ((kernel_port)); then
    kernel_tcp_listens "$port" && break
  else
    "${in_server_ns[@]}" grep -q "@emurdma-cm/$ps/$port\$" /proc/net/unix && break
  fi
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
echo "+ [client${ns_b:+ in $ns_b}] ${client_env[*]} emurdma run -- ${client[*]}"
setsid "${in_client_ns[@]}" env "${client_env[@]}" timeout -k 2 "$limit" "$emurdma" run -- stdbuf -oL \
  "${client[@]}" >"$tmp/client" 2>&1 &
pids+=($!)
client_pid=$!
wait "$client_pid"
client_status=$?
server_alive_note=""
if ((server_stays)); then
  if kill -0 "$server_pid" 2>/dev/null; then
    # It stays by design: stopped now, its status (that of the stop) is not the test's.
    kill -TERM -- "-$server_pid" 2>/dev/null
    wait "$server_pid"
    server_status=0
  else
    wait "$server_pid"
    server_status=$?
    server_alive_note=" (it should have stayed until stopped)"
    ((server_status == 0)) && server_status=1
  fi
else
  wait "$server_pid"
  server_status=$?
fi
sed 's/^/server| /' "$tmp/server" | tail -n 40
sed 's/^/client| /' "$tmp/client" | tail -n 40
status=0
((server_status == 0)) || { echo "FAIL: the server exited with status $server_status$( ((server_status == 124)) && echo ' (killed after the time limit: a hang)')$server_alive_note"; status=1; }
((client_status == 0)) || { echo "FAIL: the client exited with status $client_status$( ((client_status == 124)) && echo ' (killed after the time limit: a hang)')"; status=1; }
for re in "${server_says[@]}"; do
  grep -Eq -- "$re" "$tmp/server" || { echo "FAIL: no line of the server's output matches '$re'"; status=1; }
done
for re in "${client_says[@]}"; do
  grep -Eq -- "$re" "$tmp/client" || { echo "FAIL: no line of the client's output matches '$re'"; status=1; }
done
for side in server client; do
  if [[ -n $refuse ]] && grep -v '^\[emurdma ' "$tmp/$side" | grep -Eq -- "$refuse"; then
    echo "FAIL: the $side's output matches '$refuse'"
    status=1
  fi
done
((status == 0)) && echo "PASS (mode $mode)"
exit $status
