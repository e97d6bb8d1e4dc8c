#!/usr/bin/env bash
# Middleware.mpi_<stack>_<program>/<transport>: an MPI program of ours, unmodified MPI from
# Debian, with every MPI and middleware transport but emu0's turned off, so that the traffic
# provably goes through emu0: each rank's QPs are counted in our debug log ("ready to receive")
# and must number at least one per rank.
#
#   run_mpi.sh EMURDMA_SCRIPT BUILD_DIR STACK TRANSPORT RANKS LIMIT PROGRAM [ARGS...]
#
# STACK:
#   openmpi-ofi   Open MPI's cm PML over its OFI MTL: libfabric's verbs provider (verbs;ofi_rxm)
#                 over our librdmacm and libibverbs; BTLs: self only
#   openmpi-ucx   Open MPI's UCX PML with UCX_TLS=rc_verbs (ud_verbs for its wireup), self on emu0:1; BTLs: self only
#   mpich-ucx     MPICH (Debian's ch4:ucx) with UCX_TLS=rc_verbs,ud_verbs:aux,self on emu0:1 and
#                 MPIR_CVAR_NOLOCAL=1 (no MPICH shared memory between local ranks)
# The program's own output is checked by its caller's PASS_REGULAR_EXPRESSION.
set -euo pipefail

emurdma="${1:?usage: run_mpi.sh EMURDMA_SCRIPT BUILD_DIR STACK TRANSPORT RANKS LIMIT PROGRAM [ARGS...]}"
build_dir="${2:?}"
stack="${3:?}"
transport="${4:?}"
ranks="${5:?}"
limit="${6:?}"
shift 6
[[ $# -ge 1 ]] || { echo "run_mpi.sh: no program" >&2; exit 2; }

export EMURDMA_BUILD_DIR="$build_dir" EMURDMA_LOG=debug
forward=""
log="$(mktemp "${TMPDIR:-/tmp}/emurdma-mpi.XXXXXX")"
trap 'rm -f "$log"' EXIT

case "$stack" in
  openmpi-ofi | openmpi-ucx)
    # mpirun refuses root unless told (CI runs as root); children get the variables named by -x.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mpirun=(mpirun.openmpi -n "$ranks" --oversubscribe --bind-to none --mca btl self)
    if [[ $stack == openmpi-ofi ]]; then
      export FI_PROVIDER="verbs;ofi_rxm"
      mpirun+=(--mca pml cm --mca mtl ofi -x FI_PROVIDER)
    else
      export UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=emu0:1
      # Open MPI 4.1's UCX PML selects itself only for the devices and transports its
      # pml_ucx_devices / pml_ucx_tls name (mlx5 hardware by default): "any" lets it take emu0.
      mpirun+=(--mca pml ucx --mca osc ^ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
        -x UCX_TLS -x UCX_NET_DEVICES)
    fi
    # Open MPI passes its ranks only the variables named by -x: what `emurdma run` sets is
    # named inside it (below), those that are set only (-x warns of unset ones).
    forward="LD_LIBRARY_PATH LD_PRELOAD EMURDMA_TRANSPORT EMURDMA_LOG EMURDMA_VIEW_DIR EMURDMA_TCP_ADDR"
    ;;
  mpich-ucx)
    export UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=emu0:1 MPIR_CVAR_NOLOCAL=1
    mpirun=(mpirun.mpich -n "$ranks")
    ;;
  *)
    echo "run_mpi.sh: unknown stack $stack" >&2
    exit 2
    ;;
esac
command -v "${mpirun[0]}" >/dev/null || { echo "SKIPPED: ${mpirun[0]} is not installed"; exit 77; }

# bash -c inserts "-x VAR" for each set variable of $forward between mpirun's options and the
# program, in the environment `emurdma run` made.
launch='opts=(); for v in $EMURDMA_MPI_FORWARD; do [[ -n ${!v+x} ]] && opts+=(-x "$v"); done
n=$1; shift; exec "${@:1:n}" "${opts[@]}" "${@:n+1}"'
status=0
EMURDMA_MPI_FORWARD="${forward:-}" timeout -k 10 "$limit" "$emurdma" run --transport "$transport" -- \
  bash -c "$launch" _ "${#mpirun[@]}" "${mpirun[@]}" "$@" >"$log" 2>&1 || status=$?
# The program's lines, then the proof that emu0 carried them.
grep -v '^\[emurdma debug\]' "$log" || true
qps="$(grep -c 'ready to receive, peer QP' "$log" || true)"
echo "run_mpi.sh: $stack over $transport, $ranks ranks: exit $status, $qps connected QPs on emu0"
if ((status != 0)); then
  echo "FAILED: the MPI run exited $status"
  exit 1
fi
if ((qps < ranks)); then
  echo "FAILED: only $qps QPs connected on emu0 for $ranks ranks: the traffic did not go through emu0"
  exit 1
fi
echo "emu0 carried the run"
