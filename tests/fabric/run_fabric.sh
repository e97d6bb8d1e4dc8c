#!/usr/bin/env bash
# Runs libfabric's own programs (Debian libfabric-bin) with its verbs provider on emu0, through
# scripts/emurdma: our libibverbs.so.1 and librdmacm.so.1 under an unmodified libfabric.
#
#   run_fabric.sh EMURDMA BUILD_DIR MODE LIMIT info
#   run_fabric.sh EMURDMA BUILD_DIR MODE LIMIT pingpong EP_TYPE [FI_PINGPONG ARGS...]
#
#   MODE      shm or tcp (EMURDMA_TRANSPORT, both processes on this host, 127.0.0.1), or netns
#             (tcp across two network namespaces joined by a veth pair, 198.18.0.1 server,
#             198.18.0.2 client; needs root and `ip netns`, else SKIPPED with exit 77)
#   info      `fi_info -p verbs` must list the domain emu0 with a FI_EP_MSG endpoint (verbs) and
#             a FI_EP_RDM one (verbs;ofi_rxm), and `fi_info -p verbs -t FI_EP_MSG -d emu0 -v`
#             an IP source address
#   pingpong  `fi_pingpong -p verbs -e EP_TYPE -c` server, then client with the server's
#             address: both exit 0, print a result table (a header naming usec/xfer, then a
#             row per size) and no error; -c checks every byte received
#   LIMIT     every process is killed after LIMIT seconds: a hang is a failure
#
# The control port (-B / -P) is a free TCP port of this host, so that runs in parallel do not
# collide on fi_pingpong's fixed 47592. Every process started is killed on every path.
set -uo pipefail

readonly kSkip=77
emurdma=$1 build=$2 mode=$3 limit=$4 what=$5
shift 5

fail() {
  echo "run_fabric: FAIL: $*" >&2
  exit 1
}
skip() {
  echo "run_fabric: SKIPPED: $*" >&2
  exit "$kSkip"
}

case $mode in shm | tcp | netns) ;; *) fail "MODE must be shm, tcp or netns" ;; esac
[[ $limit =~ ^[0-9]+$ ]] || fail "LIMIT must be a number of seconds"
[[ -x $emurdma ]] || fail "$emurdma is not executable"
command -v fi_info >/dev/null && command -v fi_pingpong >/dev/null ||
  fail "fi_info / fi_pingpong are not installed (scripts/setup.sh installs libfabric-bin)"

transport=$mode
[[ $mode == netns ]] && transport=tcp
export EMURDMA_BUILD_DIR="$build" EMURDMA_TRANSPORT="$transport" EMURDMA_DEVICES=soft
# Only the verbs provider: no other provider answers for it, whatever the host has.
export FI_PROVIDER=verbs

start_s=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/emurdma_fabric.XXXXXX")"
pgids=()
ns_a="" ns_b=""
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
trap 'echo "run_fabric: interrupted" >&2; exit 1' INT TERM HUP

remaining() {
  local r=$((limit - (SECONDS - start_s)))
  ((r > 1)) && echo "$r" || echo 1
}

# start <log> <netns or ""> <EMURDMA_TCP_ADDR or ""> ARGS...: the program through the wrapper
# in a process group of its own (killed by timeout after the remaining time); its pid in
# $last_pid. stdbuf: what it printed before a hang is in its log.
start() {
  local log=$1 ns=$2 addr=$3
  shift 3
  local cmd=(timeout -k 3 "$(remaining)" env ${addr:+EMURDMA_TCP_ADDR=$addr}
    "$emurdma" run -- stdbuf -oL "$@")
  if [[ -n $ns ]]; then
    setsid ip netns exec "$ns" "${cmd[@]}" >"$log" 2>&1 </dev/null &
  else
    setsid "${cmd[@]}" >"$log" 2>&1 </dev/null &
  fi
  last_pid=$!
  pgids+=("$last_pid")
  echo "+ [${ns:-host}] EMURDMA_TRANSPORT=$transport${addr:+ EMURDMA_TCP_ADDR=$addr} emurdma run -- $*"
}

# finish <pid>: waits for the process (the time limit bounds it); its status in $status_of.
finish() {
  wait "$1"
  status_of=$?
}

show() {
  echo "----- $1 output -----"
  sed "s/^/$1| /" "$2" | tail -n 60
}

# A TCP port nothing on this host (or in the namespace) listens on, below the ephemeral range.
pick_port() {
  local port i
  for ((i = 0; i < 50; ++i)); do
    port=$((20000 + (RANDOM * 7 + $$) % 12000))
    if [[ -z $(ss -ltnH "sport = :$port" 2>/dev/null) ]]; then
      echo "$port"
      return
    fi
  done
  fail "no free TCP port found"
}

# --- namespaces -----------------------------------------------------------------------------
addr_a="" addr_b="" server_host=127.0.0.1
if [[ $mode == netns ]]; then
  [[ $(id -u) == 0 ]] || skip "two network namespaces need root (CI runs as root)"
  command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
  ip netns list >/dev/null 2>&1 || skip "ip netns is not available here"
  tag="$$"
  ns_a="emufab_a_$tag" ns_b="emufab_b_$tag"
  if ! ip netns add "$ns_a" 2>"$tmp/netns.err"; then
    ns_a=""
    skip "ip netns add failed (no network namespace support here): $(cat "$tmp/netns.err")"
  fi
  ip netns add "$ns_b" || { ns_b=""; fail "ip netns add $ns_b failed"; }
  ip link add "efa$tag" netns "$ns_a" type veth peer name "efb$tag" netns "$ns_b" ||
    fail "creating the veth pair failed"
  addr_a=198.18.0.1 addr_b=198.18.0.2
  ip -n "$ns_a" addr add "$addr_a/15" dev "efa$tag" || fail "ip addr add failed"
  ip -n "$ns_b" addr add "$addr_b/15" dev "efb$tag" || fail "ip addr add failed"
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up || fail "lo up failed"; done
  ip -n "$ns_a" link set "efa$tag" up || fail "veth up failed"
  ip -n "$ns_b" link set "efb$tag" up || fail "veth up failed"
  server_host=$addr_a
fi

# --- info -----------------------------------------------------------------------------------
if [[ $what == info ]]; then
  start "$tmp/info" "$ns_a" "$addr_a" fi_info -p verbs
  finish "$last_pid"
  show fi_info "$tmp/info"
  ((status_of == 0)) || fail "fi_info -p verbs exited with status $status_of"
  # fi_info prints one block per fi_info: provider, fabric, domain, version, type, protocol.
  awk '
    $1 == "provider:" { prov = $2 }
    $1 == "domain:" { dom = $2 }
    $1 == "type:" && dom == "emu0" { seen[prov " " $2] = 1 }
    END { exit !(seen["verbs FI_EP_MSG"] && seen["verbs;ofi_rxm FI_EP_RDM"]) }
  ' "$tmp/info" || fail "no emu0 domain with FI_EP_MSG (verbs) and FI_EP_RDM (verbs;ofi_rxm)"
  start "$tmp/verbose" "$ns_a" "$addr_a" fi_info -p verbs -t FI_EP_MSG -d emu0 -v
  finish "$last_pid"
  ((status_of == 0)) || { show "fi_info -v" "$tmp/verbose"; fail "fi_info -v exited $status_of"; }
  grep -Eq "src_addr: fi_sockaddr_in6?://" "$tmp/verbose" ||
    { show "fi_info -v" "$tmp/verbose"; fail "emu0's msg endpoint has no IP source address"; }
  echo "PASS: fi_info -p verbs lists emu0 (msg, rdm over ofi_rxm) (mode $mode)"
  exit 0
fi

# --- pingpong -------------------------------------------------------------------------------
[[ $what == pingpong ]] || fail "unknown check '$what' (info or pingpong)"
ep_type=$1
shift
port="$(pick_port)"
common=(fi_pingpong -p verbs -e "$ep_type" -c "$@")
start "$tmp/server" "$ns_a" "$addr_a" "${common[@]}" -B "$port"
server_pid=$last_pid
# The client starts once the server's control port listens (bounded), or the server ended.
for ((i = 0; i < 200; ++i)); do
  if [[ -n $ns_a ]]; then
    [[ -n $(ip netns exec "$ns_a" ss -ltnH "sport = :$port" 2>/dev/null) ]] && break
  else
    [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]] && break
  fi
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
start "$tmp/client" "$ns_b" "$addr_b" "${common[@]}" -P "$port" "$server_host"
client_pid=$last_pid
finish "$client_pid"
client_status=$status_of
finish "$server_pid"
server_status=$status_of
show server "$tmp/server"
show client "$tmp/client"

status=0
for side in server client; do
  declare -n st="${side}_status"
  if ((st != 0)); then
    echo "run_fabric: FAIL: the $side exited with status $st$( ((st == 124)) && echo ' (killed after the time limit: a hang)')" >&2
    status=1
  fi
  # A row: bytes (64, 1k, 1m...) #sent #ack total time MB/sec usec/xfer Mxfers/sec.
  rows=$(awk '/usec\/xfer/ { h = 1; next } h && $1 ~ /^[0-9]+[kmg]?$/ && NF >= 8 { n++ } END { print n + 0 }' "$tmp/$side")
  if ((rows == 0)); then
    echo "run_fabric: FAIL: the $side printed no result table" >&2
    status=1
  fi
  if grep -Eq "Error at iteration|corrupted|\[error\]" "$tmp/$side"; then
    echo "run_fabric: FAIL: the $side reported an error" >&2
    status=1
  fi
  unset -n st
done
((status == 0)) && echo "PASS: fi_pingpong -p verbs -e $ep_type (mode $mode)"
exit $status
