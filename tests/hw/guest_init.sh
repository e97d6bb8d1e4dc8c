#!/bin/bash
# /init of the soft-RoCE guest that scripts/hwtest.sh boots under qemu (PID 1, no systemd).
#
# Mounts the kernel file systems, loads rdma_rxe and veth, joins veth0 and veth1 with
# addresses of 198.18.0.0/15 (the benchmarking range: never routed anywhere), puts the soft-RoCE
# device rxe0 on veth0, runs the hardware suite (/opt/emurdma/hw/suite.sh, or pyverbs_suite.sh
# with HWTEST_SUITE=pyverbs) and powers off.
# Everything goes to the serial console, which the host reads; the host decides pass or fail
# from the suite's "PASS name" / "FAIL name (reason)" lines and its closing
# "N passed, N failed" line. A setup failure prints a FAIL line and a closing line too, so the
# host always has a verdict to show.
set -euo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
# Options from the host (HWTEST_ONLY, HWTEST_LOG, HWTEST_SUITE_LIMIT ...), written by
# scripts/hwtest.sh.
if [[ -r /opt/emurdma/hw/env ]]; then
  # shellcheck disable=SC1091
  source /opt/emurdma/hw/env
fi

# The host waits for this line to know the guest booted (and that KVM, if tried, works).
echo "emurdma-hw: guest init started"

power_off() {
  # No init system to ask: the kernel powers off through ACPI (qemu then exits). If that
  # failed, leaving PID 1 panics the kernel, and panic=-1 with qemu's -no-reboot ends qemu too.
  echo o >/proc/sysrq-trigger 2>/dev/null || true
  sleep 30
  exit 1
}

# setup_failed <what>: reports the setup step that failed as the run's only result.
setup_failed() {
  echo "FAIL guest-setup ($1)"
  echo "0 passed, 1 failed"
  power_off
}
trap 'setup_failed "line $LINENO: $BASH_COMMAND exited with $?"' ERR

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The initramfs's own /dev/console is hidden now: reopen the console from devtmpfs.
exec </dev/console >/dev/console 2>&1
# devtmpfs has no /dev/fd: bash's process substitution (the wrapper uses it) needs it.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
# emu0's shared-memory transport needs a tmpfs at /dev/shm.
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
hostname hwguest
echo "127.0.1.1 hwguest" >>/etc/hosts
ip link set lo up

# No DAD delay on the new links: their link-local address (GID index 0 of rxe0) is usable at
# once, as the DAT provider sources its connections from GID 0.
echo 0 >/proc/sys/net/ipv6/conf/default/accept_dad

modprobe veth
# rdma_rxe computes the RoCE ICRC with the crypto API's "crc32", which it does not depend on
# by symbol: load it first so that creating rxe0 finds it.
modprobe crc32_generic
modprobe rdma_rxe
modprobe ib_uverbs
modprobe rdma_ucm

ip link add veth0 type veth peer name veth1
ip addr add 198.18.0.1/24 dev veth0
ip addr add 198.18.0.2/24 dev veth1
ip link set veth0 up
ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0

# The uverbs character device appears in devtmpfs when rxe0 registers; wait for it briefly.
for _ in $(seq 50); do
  [[ -e /dev/infiniband/uverbs0 ]] && break
  sleep 0.1
done
[[ -e /dev/infiniband/uverbs0 ]] || setup_failed "/dev/infiniband/uverbs0 did not appear after rdma link add"

echo "emurdma-hw: kernel $(uname -r), up $(cut -d' ' -f1 /proc/uptime) s; $(rdma link show | tr '\n' ' ')"
trap - ERR

# The suite never stops at a failed check; a guard on the whole run keeps a hung program from
# holding the guest until the host's time limit.
status=0
suite_script=/opt/emurdma/hw/suite.sh
[[ ${HWTEST_SUITE:-hw} == pyverbs ]] && suite_script=/opt/emurdma/hw/pyverbs_suite.sh
timeout -k 5 "${HWTEST_SUITE_LIMIT:-400}" bash "$suite_script" || status=$?
if ((status == 124 || status == 137)); then
  echo "FAIL suite-time-limit (the suite did not finish within ${HWTEST_SUITE_LIMIT:-400} s)"
  echo "0 passed, 1 failed"
fi
echo "emurdma-hw: suite exited with status $status at $(cut -d' ' -f1 /proc/uptime) s; powering off"
power_off
