#!/usr/bin/env bash
# Runs libfabric's own programs (Debian libfabric-bin) with its verbs provider on emu0, through
# scripts/emurdma: our libibverbs.so.1 and librdmacm.so.1 under an unmodified libfabric.
#
#   run_fabric.sh EMURDMA BUILD_DIR MODE LIMIT info
#   run_fabric.sh EMURDMA BUILD_DIR MODE LIMIT pingpong EP_TYPE [FI_PINGPONG ARGS...]
#
#   MODE      shm or tcp (EMURDMA_TRANSPORT), both processes on this host, 127.0.0.1. Not across
#             namespaces: fi_pingpong names no address, so libfabric's verbs provider binds
#             `localhost`, which on emu0 is 127.0.0.1 (docs/usage.md, "libfabric over emu0").
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

emurdma=$1 build=$2 mode=$3 limit=$4 what=$5
shift 5

fail() {
  echo "run_fabric: FAIL: $*" >&2
  exit 1
}

case $mode in shm | tcp) ;; *) fail "MODE must be shm or tcp" ;; esac
[[ $limit =~ ^[0-9]+$ ]] || fail "LIMIT must be a number of seconds"
[[ -x $emurdma ]] || fail "$emurdma is not executable"
if ! command -v fi_info >/dev/null || ! command -v fi_pingpong >/dev/null; then
  fail "fi_info / fi_pingpong are not installed (scripts/setup.sh installs libfabric-bin)"
fi

export EMURDMA_BUILD_DIR="$build" EMURDMA_TRANSPORT="$mode" EMURDMA_DEVICES=soft
# Only the verbs provider: no other provider answers for it, whatever the host has.
export FI_PROVIDER=verbs

emurdma="$(readlink -f "$emurdma")"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/emurdma_fabric.XXXXXX")"
# The programs run there: libfabric writes a backtrace file into the working directory when one
# crashes.
cd "$tmp" || fail "cannot enter $tmp"
# Each program runs under `timeout`, which passes a TERM on to it and KILLs it 2 s later if it
# lingers: ending the timeouts ends everything started, on every path.
timeouts=()
trap 'kill -TERM "${timeouts[@]}" 2>/dev/null; wait; rm -rf "$tmp"' EXIT
trap 'echo "run_fabric: interrupted" >&2; exit 1' INT TERM HUP
deadline=$((SECONDS + limit))

# start <log> ARGS...: the program through the wrapper until the deadline; its pid in $last_pid.
# stdbuf: what it printed before a hang is in its log.
start() {
  local log=$1
  shift
  timeout -k 2 $((deadline > SECONDS + 1 ? deadline - SECONDS : 1)) \
    "$emurdma" run -- stdbuf -oL "$@" >"$log" 2>&1 </dev/null &
  last_pid=$!
  timeouts+=("$last_pid")
  echo "+ EMURDMA_TRANSPORT=$mode emurdma run -- $*"
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

# --- info -----------------------------------------------------------------------------------
if [[ $what == info ]]; then
  start "$tmp/info" fi_info -p verbs
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
  start "$tmp/verbose" fi_info -p verbs -t FI_EP_MSG -d emu0 -v
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
# The control port: the first free one from a spot of 20000-31999 spread by PID and RANDOM,
# below the ephemeral range, so that tests running at once pick different ones.
port=$((20000 + (RANDOM * 7 + $$) % 12000))
while [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]]; do port=$((port + 1)); done
common=(fi_pingpong -p verbs -e "$ep_type" -c "$@")
start "$tmp/server" "${common[@]}" -B "$port"
server_pid=$last_pid
# The client starts once the server's control port listens (bounded), or the server ended.
for ((i = 0; i < 200; ++i)); do
  [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
start "$tmp/client" "${common[@]}" -P "$port" 127.0.0.1
client_pid=$last_pid
finish "$client_pid"
declare -A exit_status=([client]=$status_of)
finish "$server_pid"
exit_status[server]=$status_of
show server "$tmp/server"
show client "$tmp/client"

status=0
for side in server client; do
  st=${exit_status[$side]}
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
done
((status == 0)) && echo "PASS: fi_pingpong -p verbs -e $ep_type $* (mode $mode)"
exit $status
