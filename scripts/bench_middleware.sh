#!/usr/bin/env bash
# scripts/bench.sh middleware: our MPI ping-pong (tests/mpi/mpi_pingpong.c, two ranks) over
# emu0 through each MPI stack that runs on it, beside the same program over UCX's own shared
# memory and TCP transports (no emu0), in the same run. Prints, as bench.sh's other lines:
#   bench mpi_<shm|tcp>_lat_8B_us us lower <label>=<v> ...      one-way, half a round trip
#   bench mpi_<shm|tcp>_bw_1MiB_MBps MB/s higher <label>=<v> ...  1 MiB / one-way time
# Labels: ompi_ofi_emu0 (Open MPI, OFI MTL, libfabric verbs;ofi_rxm on emu0), ompi_ucx_emu0 and
# mpich_ucx_emu0 (UCX rc_verbs on emu0:1), ompi_ucx_sm / ompi_ucx_tcp (UCX_TLS=sm,self or
# tcp,self: UCX's own transports, emu0 not involved). emu0's shm lines use
# EMURDMA_TRANSPORT=shm, its tcp lines tcp. Median of EMURDMA_BENCH_ROUNDS rounds (default 3);
# a configuration that fails prints <label>=failed and the run goes on.
#   usage: bench_middleware.sh BUILD_DIR
set -uo pipefail

build_dir="$(cd "${1:?usage: bench_middleware.sh BUILD_DIR}" && pwd)"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${EMURDMA_BENCH_ROUNDS:-3}"
emurdma="$repo/scripts/emurdma"
pp_ompi="$build_dir/tests/mpi/mpi_pingpong_openmpi"
pp_mpich="$build_dir/tests/mpi/mpi_pingpong_mpich"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EMURDMA_BUILD_DIR="$build_dir"
ompi=(mpirun.openmpi -n 2 --bind-to none --mca btl self)
# Open MPI 4.1's UCX PML selects itself only for the devices and transports these name (by
# default mlx5 hardware); "any" lets it run on emu0 and on UCX's shm and TCP.
ompi_ucx=(--mca pml ucx --mca osc ^ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
forward=(-x LD_LIBRARY_PATH -x EMURDMA_TRANSPORT)

# run_config <label> <transport> : prints the ping-pong's output of one run of that config.
run_config() {
  local label=$1 transport=$2
  case "$label" in
    ompi_ofi_emu0)
      FI_PROVIDER="verbs;ofi_rxm" "$emurdma" run --transport "$transport" -- "${ompi[@]}" \
        --mca pml cm --mca mtl ofi -x FI_PROVIDER "${forward[@]}" "$pp_ompi" ;;
    ompi_ucx_emu0)
      UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=emu0:1 "$emurdma" run --transport "$transport" -- \
        "${ompi[@]}" "${ompi_ucx[@]}" -x UCX_TLS -x UCX_NET_DEVICES "${forward[@]}" \
        $([[ -n ${EMURDMA_VIEW_DIR:-} ]] && echo "-x LD_PRELOAD -x EMURDMA_VIEW_DIR") "$pp_ompi" ;;
    mpich_ucx_emu0)
      UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=emu0:1 MPIR_CVAR_NOLOCAL=1 "$emurdma" run \
        --transport "$transport" -- mpirun.mpich -n 2 "$pp_mpich" ;;
    ompi_ucx_sm | ompi_ucx_tcp)
      UCX_TLS="${label#ompi_ucx_},self" "${ompi[@]}" "${ompi_ucx[@]}" -x UCX_TLS "$pp_ompi" ;;
  esac
}

# figure <output> <bytes> <lat|bw>
figure() {
  awk -v n="$2" -v what="$3" '$1 == "pingpong" && $2 == n {
    if (what == "lat") print $4; else print $(NF-1) }' <<<"$1"
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

for transport in shm tcp; do
  peer=ompi_ucx_sm
  [[ $transport == tcp ]] && peer=ompi_ucx_tcp
  lat_line="bench mpi_${transport}_lat_8B_us us lower"
  bw_line="bench mpi_${transport}_bw_1MiB_MBps MB/s higher"
  for label in ompi_ofi_emu0 ompi_ucx_emu0 mpich_ucx_emu0 "$peer"; do
    lats=() bws=()
    for ((r = 0; r < rounds; ++r)); do
      out="$(timeout -k 5 120 bash -c "$(declare -f run_config); $(declare -p ompi ompi_ucx forward pp_ompi pp_mpich emurdma); run_config $label $transport" 2>&1)"
      if ! grep -q '^pingpong: OK' <<<"$out"; then
        echo "bench: $label over $transport failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')" >&2
        lats=() bws=()
        break
      fi
      lats+=("$(figure "$out" 8 lat)")
      bws+=("$(figure "$out" 1048576 bw)")
    done
    echo "bench: $label over $transport: 8 B ${lats[*]:-failed} us, 1 MiB ${bws[*]:-failed} MB/s" >&2
    lat_line+=" $label=$( ((${#lats[@]})) && median "${lats[@]}" || echo failed)"
    bw_line+=" $label=$( ((${#bws[@]})) && median "${bws[@]}" || echo failed)"
  done
  echo "$lat_line"
  echo "$bw_line"
done
