#!/usr/bin/env bash
# Conformance.pyverbs/<transport>: rdma-core's own pyverbs suite, unmodified, on emu0.
#
#   run_pyverbs.sh EMURDMA_SCRIPT BUILD_DIR TRANSPORT DOC LIMIT_SECONDS
#
# Debian's python3-pyverbs ships the suite of its own rdma-core release as documentation
# (/usr/share/doc/rdma-core/tests, some files gzipped): copied and unzipped into a fresh
# directory, run as `run_tests.py -v` through `emurdma run --transport TRANSPORT`, with the
# system python (the one python3-pyverbs installs into). The verbose output is kept in
# BUILD_DIR/conformance/pyverbs-TRANSPORT.log and checked against the table of DOC
# (docs/conformance.md) by pyverbs_check.py: any failure, any regression, any skip the table
# does not list with its reason fails this test. Exit 77 (skipped) only when python3-pyverbs
# is not installed (scripts/setup.sh installs it).
set -euo pipefail

emurdma="${1:?usage: run_pyverbs.sh EMURDMA_SCRIPT BUILD_DIR TRANSPORT DOC LIMIT}"
build_dir="${2:?}"
transport="${3:?}"
doc="${4:?}"
limit="${5:?}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
suite=/usr/share/doc/rdma-core/tests
python=/usr/bin/python3

if ! "$python" -c 'import pyverbs' 2>/dev/null; then
  echo "SKIPPED: pyverbs is not installed (apt-get install python3-pyverbs)"
  exit 77
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/emurdma-pyverbs.XXXXXX")"
trap 'rm -rf "$work"' EXIT
if [[ ! -e $suite/run_tests.py && ! -e $suite/run_tests.py.gz ]]; then
  # Images that drop /usr/share/doc (dpkg path-exclude) lose the suite: take it from the
  # package itself.
  echo "$suite is missing: unpacking it from the python3-pyverbs package"
  (cd "$work" && apt-get download -qq python3-pyverbs && dpkg-deb -x python3-pyverbs_*.deb pkg) ||
    { echo "FAILED: cannot get the python3-pyverbs package to unpack its tests"; exit 1; }
  suite="$work/pkg/usr/share/doc/rdma-core/tests"
fi
cp -r "$suite" "$work/"
find "$work/tests" -name '*.gz' -exec gunzip -f {} +
mkdir -p "$build_dir/conformance"
log="$build_dir/conformance/pyverbs-$transport.log"

echo "pyverbs suite of python3-pyverbs $(dpkg-query -W -f '${Version}' python3-pyverbs 2>/dev/null ||
  echo '?') on emu0 over $transport (log: $log)"
status=0
(cd "$work" && EMURDMA_BUILD_DIR="$build_dir" timeout -k 10 "$limit" \
  "$emurdma" run --transport "$transport" -- "$python" tests/run_tests.py -v) >"$log" 2>&1 ||
  status=$?
if ((status == 124 || status == 137)); then
  tail -n 20 "$log"
  echo "FAILED: the suite did not finish within $limit s"
  exit 1
fi
# run_tests.py's own status is 1 on any failure; the check below says which and why.
"$python" "$here/pyverbs_check.py" check "$log" --doc "$doc" --column emu0 || {
  echo "(run_tests.py exited $status; full output: $log)"
  exit 1
}
