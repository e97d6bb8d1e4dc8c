#!/bin/bash
# The hardware-mode suite, run inside the soft-RoCE guest (tests/hw/guest_init.sh starts it
# once rxe0 exists on veth0). Every program goes through OUR libraries: the wrapper
# /opt/emurdma/bin/emurdma puts our libibverbs.so.1 first, and that library hands rxe0 to the
# system rdma-core (delegation, docs/usage.md "Real HCAs").
#
# Output: one "PASS name" or "FAIL name (reason)" line per check ("SKIP name (reason)" for a
# check left out), then "N passed, N failed".
# Other lines (program output of a failed check, timings) are indented so they can never be
# taken for a result. HWTEST_ONLY=<ERE> runs only the checks whose name matches.
#
# Proof that a program really went through our library: it runs with EMURDMA_LOG=info, and
# our libibverbs.so.1 logs "real HCAs: delegating to <system libibverbs.so.1>" when it loads
# the system library; a check passes only if every process of it printed that line.
set -euo pipefail

readonly emu=/opt/emurdma/bin/emurdma
readonly lib_dir=/opt/emurdma/lib/emurdma
readonly dat_conf=/opt/emurdma/etc/dat.conf
readonly dev=rxe0
readonly dev_addr=198.18.0.1 # veth0's address, which rxe0 sits on
# Seconds a program may run before it counts as hung (HWTEST_PROGRAM_LIMIT from the host).
readonly limit=${HWTEST_PROGRAM_LIMIT:-90}
readonly delegation_re='real HCAs: delegating to /'
# EMURDMA_LOG of the programs: info at least (the delegation line is logged at info).
log_level=${HWTEST_LOG:-info}
[[ $log_level == trace || $log_level == debug ]] || log_level=info
work=$(mktemp -d /tmp/hwsuite.XXXXXX)

passed=0
failed=0
finished=0
# A bug of this script (set -e) must still end in a verdict the host can read.
trap 'status=$?; if ((finished == 0)); then
  echo "FAIL suite-aborted (exit status $status after: $BASH_COMMAND)"
  echo "$passed passed, $((failed + 1)) failed"
fi' EXIT
pass() {
  echo "PASS $1"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL $1 ($2)"
  failed=$((failed + 1))
}
# selected <name>: whether HWTEST_ONLY (an ERE; empty = all) lets the check run.
selected() {
  [[ -z ${HWTEST_ONLY:-} ]] || [[ $1 =~ $HWTEST_ONLY ]]
}
# show <title> <file>: the tail of a program's output, indented (never a result line).
show() {
  local lines=${HWTEST_SHOW_LINES:-25}
  echo "  ---- $1 (last $lines lines)"
  tail -n "$lines" "$2" 2>/dev/null | sed 's/^/  | /' || true
}

# The GID index of rxe0 that carries veth0's IPv4 address (RoCE v2, ::ffff:198.18.0.1): index 0
# is the link-local IPv6 GID; the IPv4 one follows once the address is configured.
ipv4_gid_index() {
  local want gid_file
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${dev_addr//./ })
  for gid_file in "/sys/class/infiniband/$dev/ports/1/gids/"*; do
    if [[ $(cat "$gid_file" 2>/dev/null) == "$want" ]]; then
      basename "$gid_file"
      return 0
    fi
  done
  return 1
}
gid=""
for _ in $(seq 50); do
  gid=$(ipv4_gid_index) && break
  sleep 0.1
done
if [[ -z $gid ]]; then
  echo "  rxe0 has no GID for $dev_addr; its GIDs:"
  grep -H . /sys/class/infiniband/$dev/ports/1/gids/* 2>/dev/null | grep -v ':0000:0000:0000:0000:0000:0000:0000:0000$' | sed 's/^/  | /' || true
  gid=1
fi
echo "  rxe0: GID index $gid is ::ffff:$dev_addr"

# ---- device listing ------------------------------------------------------------------------

# hca_ids <log>: the device names ibv_devinfo printed, space-separated, in order.
hca_ids() {
  sed -nE 's/^hca_id:[[:space:]]*([^[:space:]]+).*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'
}

# devinfo_check <name> <EMURDMA_DEVICES value or ""> <expected hca_ids> <via: system|ours>
devinfo_check() {
  local name=$1 devices=$2 want=$3 via=$4 log="$work/$1.log" status=0 got
  selected "$name" || return 0
  if [[ $via == system ]]; then
    timeout "$limit" ibv_devinfo >"$log" 2>&1 || status=$?
  else
    EMURDMA_DEVICES=$devices EMURDMA_LOG=$log_level timeout "$limit" "$emu" run -- ibv_devinfo >"$log" 2>&1 ||
      status=$?
  fi
  got=$(hca_ids "$log")
  if ((status != 0)); then
    fail "$name" "ibv_devinfo exited with $status; devices: ${got:-none}"
    show ibv_devinfo "$log"
  elif [[ $got != "$want" ]]; then
    fail "$name" "ibv_devinfo listed '${got:-nothing}', expected '$want'"
    show ibv_devinfo "$log"
  elif [[ $via == ours && $devices != soft ]] && ! grep -qE "$delegation_re" "$log"; then
    fail "$name" "no '$delegation_re' line: the system library was not loaded through ours"
    show ibv_devinfo "$log"
  elif [[ $devices == soft ]] && grep -qE "$delegation_re" "$log"; then
    fail "$name" "EMURDMA_DEVICES=soft loaded the system library"
    show ibv_devinfo "$log"
  elif [[ $want == *rxe0* ]] && ! grep -A 30 "hca_id:[[:space:]]*rxe0" "$log" | grep -q PORT_ACTIVE; then
    fail "$name" "rxe0's port is not PORT_ACTIVE"
    show ibv_devinfo "$log"
  else
    pass "$name"
  fi
}

# Baseline: the system rdma-core alone sees the kernel device (no emurdma involved).
devinfo_check system.ibv_devinfo "" "rxe0" system
devinfo_check devinfo.all "" "emu0 rxe0" ours
devinfo_check devinfo.hw hw "rxe0" ours
devinfo_check devinfo.soft soft "emu0" ours

# The wrapper really puts our library first for a system program.
if selected wrapper.ldd; then
  log="$work/ldd.log"
  if ! "$emu" run -- ldd /usr/bin/ibv_rc_pingpong >"$log" 2>&1; then
    fail wrapper.ldd "ldd through emurdma run failed"
    show ldd "$log"
  elif grep -qE "libibverbs\.so\.1 => $lib_dir/libibverbs\.so\.1 " "$log"; then
    pass wrapper.ldd
  else
    fail wrapper.ldd "ibv_rc_pingpong does not bind libibverbs.so.1 to $lib_dir: $(grep libibverbs "$log" | xargs)"
  fi
fi

# ---- two-process checks --------------------------------------------------------------------

# The command lines of the next pair(): server, client, and (dapltest) the command that stops
# the server afterwards. Set by the caller.
server=()
client=()
quit=()
# Lines that must not appear in any program output of the next pair (the DAT programs exit 0
# after most failures); the libraries' own log lines ("[emurdma...") are not looked at.
refuse_re=""
# A line every process of the next pair must have logged besides the delegation line (the
# rdma_cm pairs: our librdmacm handing the id to the system's).
require_re=""
# A client failure that is the program's own race: the pair runs again (pair()).
race_re=""
# A client started before the server listens fails with one of these and is started again.
readonly retry_re="Couldn't connect to|Could not connect to|Failed to get server parameters|Connection refused|RDMA_CM_EVENT_REJECTED|Unable to perform rdma_client function"

# start <log> <cmd...>: runs cmd through our wrapper in the background, output to log, time
# limited (timeout's status 124 when it hung); the pid in $started.
start() {
  local log=$1
  shift
  # stdbuf: line-buffered output, so a program killed for hanging still shows how far it got.
  EMURDMA_LOG=$log_level timeout -k 3 "$limit" "$emu" run -- stdbuf -oL -eL "$@" >"$log" 2>&1 &
  started=$!
}

# wait_ready <pid> <log> <ready>: until the server listens (ready = a TCP port number) or
# printed a line matching ready (an ERE), at most 30 s. Fails if the server ended first.
wait_ready() {
  local pid=$1 log=$2 ready=$3
  for _ in $(seq 300); do
    if [[ $ready =~ ^[0-9]+$ ]]; then
      [[ -n $(ss -ltnH "sport = :$ready" 2>/dev/null) ]] && return 0
    else
      grep -qE -- "$ready" "$log" && return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# rxe_sent_packets: the RoCE packets rxe0 has sent (its hw_counters), -1 if unreadable. A pair
# must raise it: proof that the traffic crossed the kernel device, not emu0.
rxe_sent_packets() {
  cat "/sys/class/infiniband/$dev/ports/1/hw_counters/sent_pkts" 2>/dev/null || echo -1
}

# exit_text <status>: "exited with N", naming timeout's 124 a hang.
exit_text() {
  if (($1 == 124)); then
    echo "exited with 124 (hung: killed after $limit s)"
  else
    echo "exited with $1"
  fi
}

# pair <name> <ready> <server ERE> <client ERE>: runs $server, waits until it is ready, runs
# $client (again if it could not connect yet), then $quit if set. Passes when every process
# exits 0, every one logged the delegation line, the server's output matches <server ERE> and
# the client's <client ERE> (empty: not checked), and nothing matches $refuse_re. A client
# whose output matches $race_re lost a race of the program's own (perftest -R, below): the
# server is stopped and the whole pair runs again, at most 5 runs, each one reported.
pair() {
  local name=$1 ready=$2 server_re=$3 client_re=$4
  selected "$name" || return 0
  local slog="$work/$name.server.log" clog="$work/$name.client.log" qlog="$work/$name.quit.log"
  local spid cpid sstatus cstatus attempt run t0=$SECONDS reasons=() log packets
  packets=$(rxe_sent_packets)
  rm -f "$qlog"
  for run in 1 2 3 4 5; do
    reasons=()
    start "$slog" "${server[@]}"
    spid=$started
    if ! wait_ready "$spid" "$slog" "$ready"; then
      reasons+=("the server was not ready ($ready) within 30 s")
    fi
    for attempt in 1 2 3 4 5; do
      start "$clog" "${client[@]}"
      cpid=$started
      cstatus=0
      wait "$cpid" || cstatus=$?
      if ((cstatus != 0)) && grep -qE -- "$retry_re" "$clog" && kill -0 "$spid" 2>/dev/null; then
        sleep 1
        continue
      fi
      break
    done
    if ((cstatus != 0)) && [[ -n $race_re ]] && grep -qE -- "$race_re" "$clog" && ((run < 5)); then
      echo "  ($name: run $run: the client lost the program's race (/$race_re/): the pair again)"
      kill "$spid" 2>/dev/null
      wait "$spid" 2>/dev/null
      sleep 1
      continue
    fi
    break
  done
  if ((${#quit[@]} > 0)); then
    start "$qlog" "${quit[@]}"
    wait "$started" || true
  fi
  sstatus=0
  wait "$spid" || sstatus=$?
  ((sstatus == 0)) || reasons+=("server $(exit_text "$sstatus")")
  ((cstatus == 0)) || reasons+=("client $(exit_text "$cstatus")")
  for log in "$slog" "$clog"; do
    grep -qE "$delegation_re" "$log" ||
      reasons+=("$(basename "$log" .log | sed 's/.*\.//'): no delegation line")
    [[ -z $require_re ]] || grep -qE -- "$require_re" "$log" ||
      reasons+=("$(basename "$log" .log | sed 's/.*\.//'): no line /$require_re/")
  done
  [[ -z $server_re ]] || grep -qE -- "$server_re" "$slog" || reasons+=("server output lacks /$server_re/")
  [[ -z $client_re ]] || grep -qE -- "$client_re" "$clog" || reasons+=("client output lacks /$client_re/")
  if [[ -n $refuse_re ]]; then
    for log in "$slog" "$clog"; do
      if grep -vE '^\[emurdma' "$log" | grep -qE -- "$refuse_re"; then
        reasons+=("$(basename "$log" .log | sed 's/.*\.//') printed: $(grep -vE '^\[emurdma' "$log" | grep -E -- "$refuse_re" | head -1 | cut -c1-100)")
      fi
    done
  fi
  if ((packets >= 0)); then
    packets=$(($(rxe_sent_packets) - packets))
    ((packets > 0)) || reasons+=("rxe0 sent no RoCE packet")
  fi
  echo "  ($name: $((SECONDS - t0)) s, runs: $run, client attempts: $attempt, rxe0 packets sent: $packets)"
  if ((${#reasons[@]} == 0)); then
    pass "$name"
  else
    local IFS=';'
    fail "$name" "${reasons[*]}"
    show server "$slog"
    show client "$clog"
    [[ ! -s $qlog ]] || show quit "$qlog"
  fi
  server=()
  client=()
  quit=()
  refuse_re=""
  require_re=""
  race_re=""
}

# ---- one-process checks (our programs, tests/hw/*.cpp) -------------------------------------

readonly hw_bin=/opt/emurdma/hw/bin

# single <name> <program> <args...>: runs one of our test programs (hwtest.sh copies them to
# $hw_bin) through the wrapper. The program prints one "ok <rule>" or "FAILED <rule>: <details>"
# line per rule. Passes when it exits 0, printed at least one "ok" line and no "FAILED" line,
# logged the delegation line, and rxe0 sent RoCE packets meanwhile.
single() {
  local name=$1 program=$2
  shift 2
  selected "$name" || return 0
  local log="$work/$name.log" status=0 t0=$SECONDS reasons=() packets
  if [[ ! -x $hw_bin/$program ]]; then
    fail "$name" "$hw_bin/$program is missing: hwtest.sh found no $program in the build (target of tests/hw/CMakeLists.txt)"
    return 0
  fi
  packets=$(rxe_sent_packets)
  start "$log" "$hw_bin/$program" "$@"
  wait "$started" || status=$?
  ((status == 0)) || reasons+=("$(exit_text "$status")")
  grep -qE "$delegation_re" "$log" || reasons+=("no delegation line")
  grep -qE '^ok ' "$log" || reasons+=("no 'ok' line")
  if grep -qE '^FAILED ' "$log"; then
    reasons+=("$(grep -E '^FAILED ' "$log" | head -3 | cut -c1-160 | tr '\n' ';' | sed 's/;$//')")
  fi
  if ((packets >= 0)); then
    packets=$(($(rxe_sent_packets) - packets))
    ((packets > 0)) || reasons+=("rxe0 sent no RoCE packet")
  fi
  echo "  ($name: $((SECONDS - t0)) s, rxe0 packets sent: $packets)"
  grep -E '^(ok|FAILED) ' "$log" | sed 's/^/  | /' || true
  if ((${#reasons[@]} == 0)); then
    pass "$name"
  else
    local IFS=';'
    fail "$name" "${reasons[*]}"
    # The rule lines are above: the rest of the output (progress, log lines) shows the way.
    grep -vE '^(ok|FAILED) ' "$log" >"$log.rest" || true
    show "$program" "$log.rest"
  fi
}

# Verbs programs on rxe0, server and client in this guest; both use rxe0 (the client names the
# server by 127.0.0.1 for the out-of-band TCP exchange; the RoCE traffic goes through rxe0).
# rdma-core's pingpongs: 1000 iterations, "N iters in S seconds" on both sides.
readonly iters_re='[0-9]+ iters in [0-9.]+ seconds'
server=(ibv_rc_pingpong -d "$dev" -g "$gid")
client=(ibv_rc_pingpong -d "$dev" -g "$gid" 127.0.0.1)
pair verbs.rc_pingpong 18515 "$iters_re" "$iters_re"

server=(ibv_srq_pingpong -d "$dev" -g "$gid" -q 8)
client=(ibv_srq_pingpong -d "$dev" -g "$gid" -q 8 127.0.0.1)
pair verbs.srq_pingpong 18515 "$iters_re" "$iters_re"

server=(ibv_uc_pingpong -d "$dev" -g "$gid")
client=(ibv_uc_pingpong -d "$dev" -g "$gid" 127.0.0.1)
pair verbs.uc_pingpong 18515 "$iters_re" "$iters_re"

server=(ibv_ud_pingpong -d "$dev" -g "$gid")
client=(ibv_ud_pingpong -d "$dev" -g "$gid" 127.0.0.1)
pair verbs.ud_pingpong 18515 "$iters_re" "$iters_re"

# emu0 and rxe0 side by side in one process (two contexts): an RC loopback on each, a Send
# and an RDMA WRITE each way per round, both devices at once. emu0 through our engine, rxe0
# through the system rdma-core (EMURDMA_DEVICES unset: both listed).
single verbs.side_by_side hw_side_by_side "$gid" 50

# perftest: the client prints the result row "<bytes> <iterations> <figures...>". A figure
# may read "inf" or 0: perftest times with the cycle counter, and its calibration against
# gettimeofday ("Correlation coefficient r^2: ... < 0.9") fails under the emulated CPU of a
# tcg VM. Without -F a bandwidth server then exits 1 ("Can't produce a report") and leaves
# its client waiting for ever; with -F (every perftest here) it reports what it has. The row
# (bytes, iterations completed) and exit status 0 still say the traffic crossed rxe0; the
# packet counter below says it went on the wire.
readonly perf_row_re='^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+([0-9.]+|inf)[[:space:]]+([0-9.]+|inf)'
# -n 1000: a fifth of perftest's default 5,000 writes of 64 KiB (13 s under TCG).
server=(ib_write_bw -d "$dev" -x "$gid" -F -n 1000)
client=(ib_write_bw -d "$dev" -x "$gid" -F -n 1000 127.0.0.1)
pair perftest.write_bw 18515 "" "$perf_row_re"

server=(ib_send_lat -d "$dev" -x "$gid" -F)
client=(ib_send_lat -d "$dev" -x "$gid" -F 127.0.0.1)
pair perftest.send_lat 18515 "" "$perf_row_re"

server=(ib_read_bw -d "$dev" -x "$gid" -F)
client=(ib_read_bw -d "$dev" -x "$gid" -F 127.0.0.1)
pair perftest.read_bw 18515 "" "$perf_row_re"

# ---- rdma_cm on rxe0 ------------------------------------------------------------------------
# The programs load our librdmacm.so.1 (the wrapper puts it first); rxe0's address is a real
# device's, so our library hands the ids to the system librdmacm (loaded beside the system
# libibverbs) and the kernel's rdma_cm connects them over rxe0.
readonly rdmacm_delegation_re='real HCAs: delegating to /.*librdmacm\.so\.1'
server=(rping -s -a "$dev_addr" -p 7471 -C 20 -V -v -d)
client=(rping -c -a "$dev_addr" -p 7471 -C 20 -V -v)
require_re=$rdmacm_delegation_re
pair rdmacm.rping "rdma_listen" "server ping data: rdma-ping-19: " "ping data: rdma-ping-19: "

# A wildcard listener: ours on emu0 and the kernel's beside it on rxe0 (delegation.h).
server=(rping -s -a 0.0.0.0 -p 7473 -C 20 -V -v -d)
client=(rping -c -a "$dev_addr" -p 7473 -C 20 -V -v)
require_re=$rdmacm_delegation_re
pair rdmacm.rping_wildcard "rdma_listen" "server ping data: rdma-ping-19: " "ping data: rdma-ping-19: "

# perftest -R: the measured QPs connect through rdma_cm, handed to the kernel's over rxe0. Its
# server opens that listener only after telling the client (over its TCP exchange) to connect:
# a race of perftest 4.5's own, on any device, that the kernel answers with REJ reason 8 (no
# listener), after which the 4.5 client's retry crashes on the ids it freed (perftest 3d9d8d0,
# Dec 2025, fixes it upstream). emu0's CM waits for the listener (EMURDMA_CM_LISTENER_WAIT_MS);
# the kernel does not, so a run that lost that race is run again (race_re, pair()).
readonly perf_cm_race_re='RDMA_CM_EVENT_REJECTED; error: 8'
# -R: the exchange of keys connects through rdma_cm too (port 18515 of the rdma_cm port space).
readonly perf_cm_ready='Waiting for client to connect'
for test in ib_send_lat ib_write_bw ib_read_lat ib_send_bw; do
  server=("$test" -d "$dev" -x "$gid" -F -R -n 200)
  client=("$test" -d "$dev" -x "$gid" -F -R -n 200 "$dev_addr")
  require_re=$rdmacm_delegation_re
  race_re=$perf_cm_race_re
  pair "rdmacm.perftest.${test#ib_}" "$perf_cm_ready" "" "$perf_row_re"
done
server=(ib_send_bw -d "$dev" -x "$gid" -F -R -n 200 --use-srq)
client=(ib_send_bw -d "$dev" -x "$gid" -F -R -n 200 --use-srq "$dev_addr")
require_re=$rdmacm_delegation_re
race_re=$perf_cm_race_re
pair rdmacm.perftest.send_bw_srq "$perf_cm_ready" "" "$perf_row_re"

# One process, rdma_cm on emu0 (127.0.0.1) and on rxe0 (its address) at once, through one
# wildcard listener (hw_cm_side_by_side.cpp).
single rdmacm.side_by_side hw_cm_side_by_side "$dev_addr" 7472

# ---- DAT (uDAPL) on rxe0 -------------------------------------------------------------------
# The provider drives rxe0 through our libibverbs.so.1 and thus the system rdma-core: IA
# rxe0-1 (ia_params "rxe0 1") in the dat.conf that hwtest.sh adapted from the build's. The
# wrapper keeps a DAT_OVERRIDE it finds set.
export DAT_OVERRIDE=$dat_conf
readonly dat_error_re='[Ee]rror|ERR[: ]|FAIL|[Ff]ailed|[Cc]ould not|[Cc]ouldn.t|[Cc]annot|[Uu]nexpected|[Ii]nvalid|bad (dis)?connection event|MISMATCH'

if selected dat.conf; then
  log="$work/dat-info.log"
  # The wrapper's own dat.conf (without DAT_OVERRIDE) names the real HCA ports from sysfs.
  if env -u DAT_OVERRIDE "$emu" info >"$log" 2>&1 && grep -qE '^[[:space:]]*rxe0-1[[:space:]]+ia_params "rxe0 1"' "$log" &&
    grep -qE '^rxe0-1 u2\.0 .* "rxe0 1" ""$' "$dat_conf"; then
    pass dat.conf
  else
    fail dat.conf "rxe0-1 missing from the wrapper's adapters or from $dat_conf"
    show "emurdma info" "$log"
  fi
fi

# -B 100 -b 65536: 100 RDMA writes each way instead of 1000, of 64 KiB instead of 4 MiB: every
# step dtest checks still runs on rxe0 (8 GB through rxe under TCG took minutes, and 400 MB
# still 44 of the guest's 228 s).
server=(dtest -P rxe0-1 -B 100 -b 65536)
client=(dtest -P rxe0-1 -B 100 -b 65536 -h 127.0.0.1)
refuse_re=$dat_error_re
pair dat.dtest "waiting for client connection" "DAPL Test Complete. PASSED" "DAPL Test Complete. PASSED"

# The SRQ rules through the DAT API on rxe0 (hw_dat_srq.cpp): dat_srq_set_lw (IBV_SRQ_LIMIT,
# one DAT event per IBV_EVENT_SRQ_LIMIT_REACHED), dat_srq_resize (IBV_SRQ_MAX_WR, the DAT rules
# checked before the call), dat_srq_query (available unknown, outstanding exact).
single dat.srq_rules hw_dat_srq rxe0-1

# dtestsrq waits, after its disconnect, for DAT_ASYNC_ERROR_EP_BROKEN on each SRQ endpoint.
# rxe (Linux 6.1) raises no IBV_EVENT_QP_LAST_WQE_REACHED; the provider's connection manager
# reports the endpoint broken itself when it moves the QP to the error state.
server=(dtestsrq -P rxe0-1 -p 47111 -c 4)
client=(dtestsrq -P rxe0-1 -p 47111 -c 4 -h 127.0.0.1)
refuse_re=$dat_error_re
pair dat.dtestsrq_c4 "server ready on port" "DAPL RC SRQ Test Complete" "DAPL RC SRQ Test Complete"

server=(dapltest -T S -D rxe0-1 -n 47200)
client=(dapltest -T T -s 127.0.0.1 -D rxe0-1 -n 47200 -i 100 client SR 4096 server SR 4096 client RW 4096 client RR 4096)
quit=(dapltest -T Q -s 127.0.0.1 -D rxe0-1 -n 47200)
refuse_re=$dat_error_re
pair dat.dapltest_trans "Dapltest: Service Point Ready" "Transaction Test Finished for this client" "End of Work"

rm -rf "$work"
# shellcheck disable=SC2034  # read by the EXIT trap
finished=1
echo "$passed passed, $failed failed"
