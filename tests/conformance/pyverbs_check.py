#!/usr/bin/env python3
"""Reads the verbose output of rdma-core's pyverbs suite (run_tests.py -v) and checks it
against the table of docs/conformance.md.

  pyverbs_check.py parse LOG                       one line per test: id, status, reason (TSV)
  pyverbs_check.py check LOG --doc FILE --column C  exit 1 unless every test's status is the
                                                    one the table's column C gives it
  pyverbs_check.py table --rxe LOG --emu0 LOG       table rows from two runs (to update the doc)

Statuses: pass, fail, error, skip. The table's first column names a test id
(`tests.test_mr.MWTest.test_mw_type1`) or an fnmatch pattern (`tests.test_mlx5_*`); an exact
id wins over a pattern, a longer pattern over a shorter one. Rules of `check`, from issue 24:
a failure or an error is never acceptable; a test the table says passes must pass; a skip
must be listed as a skip with its reason; every test must be listed; the table itself must
give emu0 a pass wherever rxe passes (emu0's results are a superset of soft-RoCE's).
One exception, so that the rest keeps guarding while a gap is being closed: a row whose emu0
cell is `known-gap`, with its reason, accepts a failure or an error of that test (and only
that: a pass then fails, "update the table"); each such row is printed as a KNOWN GAP line and
means the issue's goal is not met yet.
"""
import argparse
import fnmatch
import re
import sys

HEADER = re.compile(r"^(\w+) \((tests\.[\w.]+)\)")
RESULT = re.compile(
    r"(?:^|\.\.\. )(ok|FAIL|ERROR|expected failure|unexpected success|"
    r"skipped '(.*)'|skipped \"(.*)\")$")
RAN = re.compile(r"^Ran (\d+) tests? in ")
RULE = re.compile(r"^(=|-){70}$")
STATUS = {"ok": "pass", "FAIL": "fail", "ERROR": "error", "expected failure": "pass",
          "unexpected success": "fail"}


def parse_log(path):
    """Returns ({test id: (status, reason)}, the 'Ran N tests' count or None)."""
    results, ran, current, done = {}, None, None, False
    with open(path, encoding="utf-8", errors="replace") as log:
        for raw in log:
            line = raw.rstrip("\n")
            if RULE.match(line):
                done = True  # the failure details and summary: no more results
            m = RAN.match(line)
            if m:
                ran = int(m.group(1))
            if done:
                continue
            m = HEADER.match(line)
            if m:
                current = m.group(2)
                line = line[m.end():]
            if current is None or current in results:
                continue
            m = RESULT.search(line)
            if not m:
                continue
            word = m.group(1)
            if word.startswith("skipped"):
                results[current] = ("skip", m.group(2) if m.group(2) is not None else m.group(3))
            else:
                results[current] = (STATUS[word], "")
    return results, ran


def read_table(doc):
    """Rows of the pyverbs table: {test id or pattern: {column name: cell}}."""
    rows, columns = {}, None
    with open(doc, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("|"):
                columns = None if columns and not line else columns
                continue
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells and cells[0] == "test":
                columns = cells
                continue
            if columns is None or set(cells[0]) <= set("-: "):
                continue
            key = cells[0].strip("`")
            if not key.startswith("tests."):
                continue
            rows[key] = dict(zip(columns, cells))
    return rows


def expected_row(rows, test):
    if test in rows:
        return rows[test]
    best = None
    for key in rows:
        if any(ch in key for ch in "*?[") and fnmatch.fnmatchcase(test, key):
            if best is None or len(key) > len(best):
                best = key
    return rows[best] if best else None


def check(args):
    results, ran = parse_log(args.log)
    rows = read_table(args.doc)
    problems = []
    if not results:
        problems.append(f"no test result found in {args.log}")
    if ran is None:
        problems.append("the suite did not print its 'Ran N tests' line: it did not finish")
    elif ran != len(results):
        problems.append(f"the suite ran {ran} tests but {len(results)} results were read")
    gaps = []
    for key, row in sorted(rows.items()):
        rxe, ours = row.get("rxe", ""), row.get(args.column, "")
        if ours == "known-gap":
            if not row.get("reason"):
                problems.append(f"{key}: a known gap without a reason in the table")
            gaps.append(f"{key}: {row.get('reason', '')}")
        elif rxe == "pass" and ours != "pass":
            problems.append(f"{key}: the table gives rxe a pass and {args.column} '{ours}'")
        if ours == "skip" and not row.get("reason"):
            problems.append(f"{key}: a skip without a reason in the table")
        if ours not in ("pass", "skip", "known-gap"):
            problems.append(f"{key}: '{ours}' in column {args.column}: only pass or skip is acceptable")
        if not any(ch in key for ch in "*?[") and key not in results:
            problems.append(f"{key}: listed in the table but did not run")
    for test, (status, reason) in sorted(results.items()):
        row = expected_row(rows, test)
        if status in ("fail", "error") and row is not None and row.get(args.column) == "known-gap":
            continue
        if status in ("fail", "error"):
            problems.append(f"{test}: {status.upper()}")
        elif row is None:
            problems.append(f"{test}: {status} ({reason}) but not listed in {args.doc}")
        elif row.get(args.column) != status:
            hint = " (update the table)" if status == "pass" else ""
            problems.append(f"{test}: {status}{' (' + reason + ')' if reason else ''}, "
                            f"the table says {row.get(args.column)}{hint}")
    counts = {}
    for status, _ in results.values():
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"pyverbs suite: {len(results)} tests: {summary}")
    for g in gaps:
        print(f"KNOWN GAP {g}")
    for p in problems:
        print(f"MISMATCH {p}")
    print("OK: the results match docs/conformance.md" if not problems
          else f"FAILED: {len(problems)} mismatches with {args.doc}")
    return 0 if not problems else 1


def table(args):
    rxe, _ = parse_log(args.rxe)
    emu, _ = parse_log(args.emu0)
    print("| test | rxe | emu0 | reason |")
    print("|---|---|---|---|")
    for test in sorted(set(rxe) | set(emu)):
        r, e = rxe.get(test, ("-", "")), emu.get(test, ("-", ""))
        print(f"| `{test}` | {r[0]} | {e[0]} | {e[1] if e[0] == 'skip' else ''} |")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parse")
    p.add_argument("log")
    c = sub.add_parser("check")
    c.add_argument("log")
    c.add_argument("--doc", required=True)
    c.add_argument("--column", default="emu0")
    t = sub.add_parser("table")
    t.add_argument("--rxe", required=True)
    t.add_argument("--emu0", required=True)
    args = parser.parse_args()
    if args.cmd == "parse":
        results, ran = parse_log(args.log)
        for test, (status, reason) in sorted(results.items()):
            print(f"{test}\t{status}\t{reason}")
        print(f"# ran {ran}, read {len(results)}", file=sys.stderr)
        return 0
    return check(args) if args.cmd == "check" else table(args)


if __name__ == "__main__":
    sys.exit(main())
