#!/usr/bin/env bash
# Checks the DAT support of scripts/emurdma (tests/dat_programs/CMakeLists.txt):
#
#   check_wrapper_dat.sh adapters <wrapper> <build dir>
#     `emurdma run` exports DAT_OVERRIDE naming a dat.conf with emu0, emu0-shm, emu0-tcp and one
#     <device>-<port> entry per port of each real HCA (a fake sysfs through EMURDMA_IB_SYSFS),
#     every entry pointing at the build's provider; a DAT_OVERRIDE the user set is kept; and
#     `emurdma info` lists the adapters.
#   check_wrapper_dat.sh installed <build dir>
#     `cmake --install` puts the provider beside libibverbs.so.1 in <prefix>/lib/emurdma, and
#     the installed <prefix>/bin/emurdma runs an unmodified DAT program (dapltest's PZ limit
#     test) on emu0 through the installed provider.
#
# Exit: 0 pass, 1 fail.
set -uo pipefail

status=0
tmp="$(mktemp -d "${TMPDIR:-/tmp}/emurdma_wrapper_dat.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "check_wrapper_dat: FAIL: $*" >&2
  status=1
}
expect_line() { # expect_line <file> <ERE> <what>
  grep -qE "$2" "$1" || fail "$3 (no line /$2/ in $(basename "$1"))"
}

case "${1:-}" in
  adapters)
    wrapper=$2
    build_dir=$3
    provider="$(cd "$build_dir/dat_api" && pwd)/libdaplemu.so.2"
    mkdir -p "$tmp/sysfs/mlx5_0/ports/1" "$tmp/sysfs/mlx5_0/ports/2" "$tmp/sysfs/hfi1_0/ports/1"
    mkdir -p "$tmp/runtime"
    chmod 700 "$tmp/runtime"
    env -u DAT_OVERRIDE EMURDMA_BUILD_DIR="$build_dir" EMURDMA_IB_SYSFS="$tmp/sysfs" \
      XDG_RUNTIME_DIR="$tmp/runtime" \
      "$wrapper" run -- sh -c 'echo "DAT_OVERRIDE=$DAT_OVERRIDE"; cat "$DAT_OVERRIDE"' \
      >"$tmp/conf" 2>&1 || fail "emurdma run failed"
    cat "$tmp/conf"
    expect_line "$tmp/conf" "^DAT_OVERRIDE=$tmp/runtime/emurdma/dat-[0-9]+\.conf$" \
      "DAT_OVERRIDE names a dat.conf in \$XDG_RUNTIME_DIR/emurdma"
    lib_re="${provider//./\\.}"
    for entry in 'emu0 "emu0 1"' 'emu0-shm "emu0 1 shm"' 'emu0-tcp "emu0 1 tcp"' \
      'mlx5_0-1 "mlx5_0 1"' 'mlx5_0-2 "mlx5_0 2"' 'hfi1_0-1 "hfi1_0 1"'; do
      name=${entry%% *}
      params=${entry#* }
      expect_line "$tmp/conf" "^$name u2\.0 nonthreadsafe default $lib_re dapl\.2\.0 $params \"\"$" \
        "the $name entry"
    done
    count="$(grep -c 'u2\.0 nonthreadsafe' "$tmp/conf")"
    [[ $count == 6 ]] || fail "$count entries, expected 6"

    DAT_OVERRIDE=/users/own/dat.conf EMURDMA_BUILD_DIR="$build_dir" \
      "$wrapper" run -- sh -c 'echo "DAT_OVERRIDE=$DAT_OVERRIDE"' >"$tmp/own" 2>&1 ||
      fail "emurdma run failed"
    expect_line "$tmp/own" '^DAT_OVERRIDE=/users/own/dat\.conf$' "a DAT_OVERRIDE set by the user is kept"

    env -u DAT_OVERRIDE EMURDMA_BUILD_DIR="$build_dir" EMURDMA_IB_SYSFS="$tmp/sysfs" \
      XDG_RUNTIME_DIR="$tmp/runtime" "$wrapper" info >"$tmp/info" 2>&1 ||
      fail "emurdma info failed"
    cat "$tmp/info"
    expect_line "$tmp/info" "^DAT provider: $lib_re$" "info names the provider"
    for entry in 'emu0 +ia_params "emu0 1"' 'emu0-shm +ia_params "emu0 1 shm"' \
      'emu0-tcp +ia_params "emu0 1 tcp"' 'mlx5_0-2 +ia_params "mlx5_0 2"'; do
      expect_line "$tmp/info" "^  $entry$" "info lists ${entry%% *}"
    done
    ;;
  installed)
    build_dir=$2
    prefix="$tmp/prefix"
    cmake --install "$build_dir" --prefix "$prefix" >/dev/null || fail "cmake --install failed"
    for lib in libibverbs.so.1 libdaplemu.so.2; do
      [[ -e $prefix/lib/emurdma/$lib ]] || fail "$lib is not installed in <prefix>/lib/emurdma"
    done
    env -u EMURDMA_BUILD_DIR -u EMURDMA_LIB_DIR -u DAT_OVERRIDE XDG_RUNTIME_DIR="$tmp" \
      "$prefix/bin/emurdma" run -- sh -c 'cat "$DAT_OVERRIDE"' >"$tmp/conf" 2>&1 ||
      fail "the installed emurdma run failed"
    cat "$tmp/conf"
    lib_re="${prefix//./\\.}/lib/emurdma/libdaplemu\.so\.2"
    expect_line "$tmp/conf" "^emu0 u2\.0 nonthreadsafe default $lib_re " \
      "the emu0 entry names the installed provider"
    env -u EMURDMA_BUILD_DIR -u EMURDMA_LIB_DIR -u DAT_OVERRIDE XDG_RUNTIME_DIR="$tmp" \
      timeout 50 "$prefix/bin/emurdma" run -- dapltest -T L -D emu0 -m 8 limit_pz \
      >"$tmp/out" 2>&1 || fail "dapltest through the installed wrapper failed"
    cat "$tmp/out"
    expect_line "$tmp/out" '^LimitTest: PZs created: 8$' "dapltest created 8 PZs on emu0"
    ! grep -q 'error occurs' "$tmp/out" || fail "dapltest reports an error"
    ;;
  *)
    echo "usage: check_wrapper_dat.sh adapters <wrapper> <build dir> | installed <build dir>" >&2
    exit 1
    ;;
esac

echo "check_wrapper_dat: $( ((status == 0)) && echo PASS || echo FAIL ) ($1)" >&2
exit "$status"
