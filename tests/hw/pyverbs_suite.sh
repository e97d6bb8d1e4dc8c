#!/bin/bash
# Runs rdma-core's own pyverbs suite (Debian's python3-pyverbs ships it as documentation, some
# files gzipped) on the guest's soft-RoCE device rxe0, for the rxe column of
# docs/conformance.md (scripts/hwtest.sh with HWTEST_SUITE=pyverbs). Every line of the suite's
# output is prefixed "pyverbs| " so the host can pick it out of the console. rxe's own failures
# are results, not failures of this run: the run passes when the suite ran to its end.
set -uo pipefail

src=/usr/share/doc/rdma-core/tests
work=/tmp/pyverbs
limit=$((${HWTEST_SUITE_LIMIT:-600} - 30))

if [[ ! -f $src/run_tests.py && ! -f $src/run_tests.py.gz ]]; then
  echo "FAIL pyverbs-suite ($src is missing: is python3-pyverbs in the guest?)"
  echo "0 passed, 1 failed"
  exit 0
fi
rm -rf "$work"
mkdir -p "$work"
cp -r "$src" "$work/"
gunzip -f "$work"/tests/*.gz 2>/dev/null || true

echo "emurdma-hw: pyverbs suite on rxe0 ($(dpkg-query -W -f '${Version}' python3-pyverbs))"
cd "$work" || exit 1
timeout -k 5 "$limit" python3 tests/run_tests.py -v --dev rxe0 2>&1 | sed -u 's/^/pyverbs| /'
status=${PIPESTATUS[0]}
if ((status == 124 || status == 137)); then
  echo "FAIL pyverbs-suite (did not finish within $limit s)"
  echo "0 passed, 1 failed"
else
  # run_tests.py exits 1 when any test failed on rxe: that is rxe's result, recorded above.
  echo "PASS pyverbs-suite (run_tests.py exited $status)"
  echo "1 passed, 0 failed"
fi
