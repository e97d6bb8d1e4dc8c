#!/usr/bin/env bash
# run_pair.sh EMURDMA BUILD_DIR MODE LIMIT [--server-says RE] [--client-says RE]
#             [--port-space PS] [--port P] -- SERVER ARGS... -- CLIENT ARGS...
#
# Runs an unmodified rdma_cm server and client (rdmacm-utils, perftest -R) as two processes
# through `emurdma run` on this host, EMURDMA_TRANSPORT=MODE (shm or tcp): the server first,
# the client once the server's rdma_cm port is held and listened on (its abstract socket
# "@emurdma-cm/<ps>/<port>" appears in /proc/net/unix: no sleep, no race). @PORT@ in the
# arguments becomes a free rdma_cm port. Passes when both exit 0 within LIMIT seconds and each
# side's output has a line matching its --*-says pattern (extended regex: what proves the
# data went through, as some programs exit 0 after a failed transfer); a hang is a failure
# (both are killed), and each side's output is printed. --port-space: the server's rdma_cm
# port space in decimal (default 262, RDMA_PS_TCP; udaddy's is 273, RDMA_PS_UDP); --port: a
# port the programs fix themselves (udaddy's 7174) instead of a free one for @PORT@.
set -u
emurdma=$1 build=$2 mode=$3 limit=$4
shift 4
server_says="" client_says="" ps=262 port=""
while [[ ${1:-} == --*-says || ${1:-} == --port-space || ${1:-} == --port ]]; do
  case $1 in
    --server-says) server_says=$2 ;;
    --client-says) client_says=$2 ;;
    --port-space) ps=$2 ;;
    --port) port=$2 ;;
  esac
  shift 2
done
[[ ${1:-} == -- ]] || { echo "usage: run_pair.sh EMURDMA BUILD MODE LIMIT -- SERVER... -- CLIENT..."; exit 2; }
shift
server=()
while (($#)) && [[ $1 != -- ]]; do server+=("$1"); shift; done
shift
client=("$@")

# A port no process of this netns holds in the server's port space, in the range the
# programs accept; a fixed port must be free.
if [[ -n $port ]]; then
  if grep -q "@emurdma-cm/$ps/$port\$" /proc/net/unix; then
    echo "FAIL: rdma_cm port $port (port space $ps) is held by another process"
    exit 1
  fi
else
  for ((i = 0; i < 50; ++i)); do
    candidate=$((20000 + (RANDOM * 7 + $$) % 12000))
    if ! grep -q "@emurdma-cm/$ps/$candidate\$" /proc/net/unix; then port=$candidate; break; fi
  done
  [[ -n $port ]] || { echo "FAIL: no free rdma_cm port"; exit 1; }
fi
server=("${server[@]//@PORT@/$port}")
client=("${client[@]//@PORT@/$port}")

tmp=$(mktemp -d)
trap 'kill -KILL "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
pids=()
export EMURDMA_BUILD_DIR="$build" EMURDMA_TRANSPORT="$mode" EMURDMA_DEVICES=soft
echo "+ [server] emurdma run -- ${server[*]}"
timeout -k 2 "$limit" "$emurdma" run -- "${server[@]}" >"$tmp/server" 2>&1 &
pids+=($!)
server_pid=$!
# Wait until the server listens (bounded), or it ended.
for ((i = 0; i < 200; ++i)); do
  grep -q "@emurdma-cm/$ps/$port\$" /proc/net/unix && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
echo "+ [client] emurdma run -- ${client[*]}"
timeout -k 2 "$limit" "$emurdma" run -- "${client[@]}" >"$tmp/client" 2>&1 &
pids+=($!)
client_pid=$!
wait "$client_pid"
client_status=$?
wait "$server_pid"
server_status=$?
sed 's/^/server| /' "$tmp/server" | tail -n 40
sed 's/^/client| /' "$tmp/client" | tail -n 40
status=0
((server_status == 0)) || { echo "FAIL: the server exited with status $server_status$( ((server_status == 124)) && echo ' (killed after the time limit: a hang)')"; status=1; }
((client_status == 0)) || { echo "FAIL: the client exited with status $client_status$( ((client_status == 124)) && echo ' (killed after the time limit: a hang)')"; status=1; }
if [[ -n $server_says ]] && ! grep -Eq -- "$server_says" "$tmp/server"; then
  echo "FAIL: no line of the server's output matches '$server_says'"
  status=1
fi
if [[ -n $client_says ]] && ! grep -Eq -- "$client_says" "$tmp/client"; then
  echo "FAIL: no line of the client's output matches '$client_says'"
  status=1
fi
((status == 0)) && echo "PASS (mode $mode)"
exit $status
