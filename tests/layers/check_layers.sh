#!/usr/bin/env bash
# check_layers.sh ROOT: the layers of the tree point down only (docs/architecture.md, "Folders
# and layers"). Every project include ("dir/file.h") of a product folder must name a folder that
# the table below allows it; prints each violation and exits 1 if there is any.
#
#   base/        generic pieces          -> base/
#   emu/         the engine              -> base/, emu/
#   transports/  the transports          -> base/, transports/, and of the engine only its
#                                           transport interface (emu/transport.h)
#   process/     the composition root    -> base/, emu/, transports/, process/
#   verbs_api/   the verbs face          -> base/, emu/, process/, verbs_api/
#   cm/          the connection manager  -> cm/, and two generic pieces of base/: the job
#                shared by the faces        secret (base/job_secret.h), DropCounter
#                                           (base/drop_counter.h); it speaks verbs types only
#   dat_api/     the DAT face            -> dat_api/, cm/, our documented verbs extension
#                                           (verbs_api/emurdma_verbs.h): it speaks verbs only,
#                                           and the same two pieces of base/
#   rdmacm_api/  the rdma_cm face        -> rdmacm_api/, cm/, verbs_api/emurdma_verbs.h and
#                                           the same two pieces of base/
#   path_view/   the device view         -> path_view/, base/ (an LD_PRELOAD library: no engine,
#                (LD_PRELOAD library)       no face)
# and transports/test_support.h (faults and looks for tests) is included by no product folder
# but transports/ itself.
set -euo pipefail

root="${1:?usage: check_layers.sh ROOT}"
cd "$root"

allowed() {
  local layer="$1" target="$2"
  case "$layer" in
    base) [[ $target == base/* ]] ;;
    emu) [[ $target == base/* || $target == emu/* ]] ;;
    transports) [[ $target == base/* || $target == transports/* || $target == emu/transport.h ]] ;;
    process) [[ $target =~ ^(base|emu|transports|process)/ ]] ;;
    verbs_api) [[ $target =~ ^(base|emu|process|verbs_api)/ ]] ;;
    cm) [[ $target == cm/* || $target == base/job_secret.h || $target == base/drop_counter.h ]] ;;
    dat_api | rdmacm_api)
      [[ $target == "$layer"/* || $target == cm/* || $target == verbs_api/emurdma_verbs.h ||
         $target == base/job_secret.h || $target == base/drop_counter.h ]] ;;
    path_view) [[ $target == path_view/* || $target == base/* ]] ;;
    *) return 1 ;;
  esac
}

violations=0
checked=0
for layer in base emu transports process verbs_api cm dat_api rdmacm_api path_view; do
  [[ -d $layer ]] || continue
  while IFS= read -r -d '' file; do
    while IFS= read -r target; do
      checked=$((checked + 1))
      # A bare name (no folder) is a header beside the file or a system one: not a layer.
      [[ $target == */* ]] || continue
      if [[ $target == transports/test_support.h && $layer != transports ]]; then
        echo "layers: $file includes \"$target\": only tests and transports/ may"
        violations=$((violations + 1))
      elif ! allowed "$layer" "$target"; then
        echo "layers: $file includes \"$target\": $layer/ may not depend on that"
        violations=$((violations + 1))
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
  done < <(find "$layer" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
done

if ((checked == 0)); then
  echo "layers: no include found under $root: wrong root?"
  exit 2
fi
if ((violations != 0)); then
  echo "layers: $violations include(s) point up or sideways ($checked checked)"
  exit 1
fi
echo "layers: $checked includes, every one points down"
