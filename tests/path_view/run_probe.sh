#!/usr/bin/env bash
# PathView.<case>: what a program run by `emurdma run` sees of emu0 under /dev and /sys through
# libemurdma_view.so (path_view/README.md), checked with path_view_probe's libc calls.
#
#   run_probe.sh EMURDMA_SCRIPT BUILD_DIR PROBE CASE
#
# CASE:
#   device_node        /dev/infiniband/uverbs_emu0 is a character device, readable and writable
#                      (UCX's uct_ib_device_is_accessible); without the view it is not there
#   gid_type           fopen/open of the sysfs files UCX reads: gid_attrs/types/0 "RoCE v2",
#                      ndevs/0 the netdev, device/numa_node, device/local_cpus
#   realpath           realpath of the ibdev path and of the device node resolve to themselves
#   ls_netdev          `ls .../device/net/` in a child process lists the netdev (pyverbs' base.py)
#   other_paths        paths of other devices and look-alikes answer as without the view
#   view_unset         with EMURDMA_VIEW_DIR unset the preloaded library changes nothing
#   refuses_writes     the view's files cannot be opened for writing (EACCES)
#   real_devices       the class directory lists the real devices beside emu0 (a stand-in sysfs
#                      named by EMURDMA_IB_SYSFS), as links to their own directories
#   agrees_with_verbs  node_guid, fw_ver and the port's state match ibv_devinfo on emu0
set -euo pipefail

emurdma="${1:?usage: run_probe.sh EMURDMA_SCRIPT BUILD_DIR PROBE CASE}"
export EMURDMA_BUILD_DIR="${2:?}"
probe="${3:?}"
case_name="${4:?}"
unset EMURDMA_LIB_DIR EMURDMA_VIEW_DIR

failures=0
# expect <what> <actual> <expected>
expect() {
  if [[ $2 == "$3" ]]; then
    echo "ok: $1: $2"
  else
    echo "FAILED: $1: got '$2', expected '$3'"
    failures=$((failures + 1))
  fi
}

in_view() { "$emurdma" run -- "$probe" "$@"; }
without_view() { "$emurdma" run --no-view -- "$probe" "$@"; }

ib=/sys/class/infiniband/emu0
node=/dev/infiniband/uverbs_emu0
# What the view shows as emu0's netdev: lo unless EMURDMA_TCP_ADDR names another interface's.
netdev=lo
if [[ -n ${EMURDMA_TCP_ADDR:-} ]]; then
  netdev="$(ip -o -4 addr show | awk -v a="${EMURDMA_TCP_ADDR%%:*}" '{ split($4, p, "/"); if (p[1] == a) print $2 }')"
fi

case "$case_name" in
  device_node)
    expect "stat in the view" "$(in_view stat "$node")" "stat $node: chr"
    expect "statx in the view" "$(in_view statx "$node")" "statx $node: chr"
    expect "access R|W in the view" "$(in_view access "$node")" "access $node: ok"
    [[ -e $node ]] || expect "stat without the view" "$(without_view stat "$node")" \
      "stat $node: error ENOENT"
    ;;
  gid_type)
    expect "fopen types/0" "$(in_view fopen "$ib/ports/1/gid_attrs/types/0")" \
      "fopen $ib/ports/1/gid_attrs/types/0: RoCE v2"
    expect "open ndevs/0" "$(in_view open "$ib/ports/1/gid_attrs/ndevs/0")" \
      "open $ib/ports/1/gid_attrs/ndevs/0: $netdev"
    expect "open numa_node" "$(in_view open "$ib/device/numa_node")" "open $ib/device/numa_node: -1"
    cpus="$(in_view open "$ib/device/local_cpus")"
    [[ $cpus =~ ^open\ $ib/device/local_cpus:\ [0-9a-f]+(,[0-9a-f]{8})*$ ]] ||
      expect "local_cpus is a kernel CPU mask" "$cpus" "<hex groups>"
    expect "link_layer" "$(in_view fopen "$ib/ports/1/link_layer")" "fopen $ib/ports/1/link_layer: Ethernet"
    [[ -e $ib ]] || expect "fopen without the view" \
      "$(without_view fopen "$ib/ports/1/gid_attrs/types/0")" \
      "fopen $ib/ports/1/gid_attrs/types/0: error ENOENT"
    ;;
  realpath)
    expect "realpath ibdev path" "$(in_view realpath "$ib")" "realpath $ib: $ib"
    expect "realpath with dot-dot" "$(in_view realpath "$ib/ports/1/../..")" "realpath $ib/ports/1/../..: $ib"
    expect "realpath device node" "$(in_view realpath "$node")" "realpath $node: $node"
    expect "realpath of a missing file" "$(in_view realpath "$ib/nothing")" "realpath $ib/nothing: error ENOENT"
    expect "lstat of the netdev link" "$(in_view lstat "$ib/device/net/$netdev")" "lstat $ib/device/net/$netdev: lnk"
    expect "readlink of the netdev link" "$(in_view readlink "$ib/device/net/$netdev")" \
      "readlink $ib/device/net/$netdev: /sys/class/net/$netdev"
    ;;
  ls_netdev)
    expect "ls in a child" "$("$emurdma" run -- sh -c "ls $ib/device/net/")" "$netdev"
    expect "opendir of the class" "$(in_view opendir /sys/class/infiniband | grep -ow emu0)" "emu0"
    ;;
  other_paths)
    others=(/sys/class/infiniband/mlx5_0 /sys/class/infiniband/emu01 /sys/class/infiniband_verbs
            /sys/class/infiniband_verbs/uverbs0/ibdev /dev/infiniband/uverbs0
            /dev/infiniband/uverbs_emu00 /dev/infiniband /etc/hostname)
    args=()
    for path in "${others[@]}"; do args+=(stat "$path" realpath "$path" opendir "$path"); done
    expect "other paths as without the view" "$(in_view "${args[@]}")" "$(without_view "${args[@]}")"
    expect "a missing device" "$(in_view stat /sys/class/infiniband/mlx9_9)" \
      "stat /sys/class/infiniband/mlx9_9: error ENOENT"
    ;;
  view_unset)
    args=(stat "$node" fopen "$ib/ports/1/gid_attrs/types/0" realpath "$ib" opendir "$ib/device/net")
    expect "view unset" "$("$emurdma" run -- env -u EMURDMA_VIEW_DIR "$probe" "${args[@]}")" \
      "$(without_view "${args[@]}")"
    # shellcheck disable=SC2016  # expanded by the child's shell, in the wrapper's environment
    preloaded="$("$emurdma" run -- sh -c 'echo "$LD_PRELOAD"')"
    [[ $preloaded == *libemurdma_view.so* ]] || expect "the library is preloaded" "$preloaded" "*libemurdma_view.so*"
    ;;
  refuses_writes)
    expect "write to a view file" "$(in_view openw "$ib/node_desc")" "openw $ib/node_desc: error EACCES"
    expect "write through the device node" "$(in_view openw "$node")" "openw $node: ok"
    ;;
  real_devices)
    fake="$(mktemp -d "${TMPDIR:-/tmp}/emurdma-view-test.XXXXXX")"
    view=""
    # The view of this stand-in is of no use to any other run: removed with it.
    trap 'rm -rf "$fake" ${view:+"$view"}' EXIT
    mkdir -p "$fake/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0/ports/1" "$fake/class"
    ln -s "../devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0" "$fake/class/mlx5_0"
    listing="$(EMURDMA_IB_SYSFS="$fake/class" in_view opendir /sys/class/infiniband)"
    expect "the class lists both" "$listing" "opendir /sys/class/infiniband: emu0 mlx5_0"
    # shellcheck disable=SC2016  # expanded by the child's shell, in the wrapper's environment
    view="$(EMURDMA_IB_SYSFS="$fake/class" "$emurdma" run -- sh -c 'echo "$EMURDMA_VIEW_DIR"')"
    expect "the real device's entry" "$(readlink "$view/sys/class/infiniband/mlx5_0")" \
      "$fake/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0"
    ;;
  agrees_with_verbs)
    command -v ibv_devinfo >/dev/null || { echo "SKIPPED: ibv_devinfo is not installed"; exit 77; }
    info="$("$emurdma" run --no-view -- ibv_devinfo -d emu0 -v)"
    guid="$(awk '/node_guid:/ { print $2 }' <<<"$info")"
    fw="$(awk '/fw_ver:/ { print $2 }' <<<"$info")"
    expect "node_guid" "$(in_view fopen "$ib/node_guid")" "fopen $ib/node_guid: $guid"
    expect "fw_ver" "$(in_view fopen "$ib/fw_ver")" "fopen $ib/fw_ver: $fw"
    expect "port state" "$(in_view fopen "$ib/ports/1/state")" "fopen $ib/ports/1/state: 4: ACTIVE"
    # ibv_devinfo reads board_id from sysfs: through the view it finds ours.
    expect "board_id through ibv_devinfo" \
      "$("$emurdma" run -- ibv_devinfo -d emu0 | awk '/board_id:/ { print $2 }')" "emurdma"
    ;;
  *)
    echo "run_probe.sh: unknown case $case_name" >&2
    exit 2
    ;;
esac

if ((failures != 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
