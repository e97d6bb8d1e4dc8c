#!/usr/bin/env bash
# Conformance.checker_refuses_mismatches: pyverbs_check.py, the judge of Conformance.pyverbs/*,
# on made-up run_tests.py -v output against a made-up table: it passes a run that matches,
# and fails (naming each) a failure, a regression, an unlisted test, a skip without a reason,
# a listed test that did not run, a table giving rxe a pass where emu0 has none, and a
# known-gap row whose test passes; a known-gap row's failure is accepted.
set -euo pipefail
check="$(dirname "${BASH_SOURCE[0]}")/pyverbs_check.py"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/good.log" <<'LOG'
test_a (tests.test_x.T.test_a) ... ok
test_b (tests.test_x.T.test_b)
A docstring line ... skipped 'no such thing'
test_c (tests.test_x.T.test_c) ... some output
ok
test_m (tests.test_mlx5_y.T.test_m) ... skipped 'not mlx5'

----------------------------------------------------------------------
Ran 4 tests in 0.1s

OK (skipped=2)
LOG
cat >"$tmp/doc.md" <<'DOC'
| test | rxe | emu0 | reason |
|---|---|---|---|
| `tests.test_x.T.test_a` | pass | pass | |
| `tests.test_x.T.test_b` | skip | skip | not offered |
| `tests.test_x.T.test_c` | skip | pass | |
| `tests.test_mlx5_y.*` | skip | skip | mlx5 only |
| `tests.test_x.T.test_e` | pass | known-gap | not offered yet |
DOC
sed -i 's/^Ran 4 tests/Ran 5 tests/; s/^test_a (tests.test_x.T.test_a) ... ok$/&\ntest_e (tests.test_x.T.test_e) ... ERROR/' "$tmp/good.log"
/usr/bin/python3 "$check" check "$tmp/good.log" --doc "$tmp/doc.md" >"$tmp/out" ||
  { cat "$tmp/out"; echo "FAILED: a matching run was refused"; exit 1; }

cat >"$tmp/bad.log" <<'LOG'
test_a (tests.test_x.T.test_a) ... FAIL
test_b (tests.test_x.T.test_b) ... skipped 'x'
test_d (tests.test_x.T.test_d) ... skipped 'unlisted'
test_m (tests.test_mlx5_y.T.test_m) ... ok
----------------------------------------------------------------------
Ran 4 tests in 0.1s
LOG
cat >"$tmp/bad.md" <<'DOC'
| test | rxe | emu0 | reason |
|---|---|---|---|
| `tests.test_x.T.test_a` | pass | pass | |
| `tests.test_x.T.test_b` | pass | skip | |
| `tests.test_x.T.test_c` | skip | pass | |
| `tests.test_mlx5_y.*` | skip | skip | mlx5 only |
| `tests.test_x.T.test_e` | pass | known-gap | not offered yet |
DOC
sed -i 's/^Ran 4 tests/Ran 5 tests/; s/^test_a (tests.test_x.T.test_a) ... FAIL$/&\ntest_e (tests.test_x.T.test_e) ... ok/' "$tmp/bad.log"
if /usr/bin/python3 "$check" check "$tmp/bad.log" --doc "$tmp/bad.md" >"$tmp/out"; then
  cat "$tmp/out"
  echo "FAILED: a mismatching run was accepted"
  exit 1
fi
status=0
for expected in "test_a: FAIL" "test_b: the table gives rxe a pass" "test_b: a skip without a reason" \
  "test_c: listed in the table but did not run" "test_d: skip (unlisted) but not listed" \
  "test_m: pass, the table says skip" "test_e: pass, the table says known-gap"; do
  grep -qF "$expected" "$tmp/out" || { echo "FAILED: no mismatch reported for '$expected'"; status=1; }
done
cat "$tmp/out"
((status == 0)) && echo "OK: the checker refuses every kind of mismatch"
exit $status
