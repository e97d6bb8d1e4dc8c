#!/usr/bin/env python3
"""emurdma stat: the counters of processes using emu0, read from their stat pages.

Each node of a process using emu0 keeps its counters in a file of shared memory,
$EMURDMA_STAT_DIR (default /dev/shm)/emurdma-stat-<pid>-<node>, which describes itself: the
names of its counters are in it (emu/stat_page.cpp writes it; docs/usage.md, "Counters", gives
the layout). This reads those files, read-only, and prints each process's counters: the
device's (the node's own, plus every QP's, CQ's and SRQ's summed, those destroyed included),
then each live QP's, CQ's and SRQ's, non-zero counters only, or everything as JSON.
"""

import argparse
import datetime
import glob
import json
import mmap
import os
import struct
import sys
import time

MAGIC = b"EMUSTAT1"
HEADER = struct.Struct("<8sIIIIQ16s16sII")  # 72 bytes
KIND = struct.Struct("<IIIIQQ")  # 32 bytes, 4 of them after the header
KINDS = ("device", "qp", "cq", "srq")
QP_TYPES = {2: "RC", 3: "UC", 4: "UD", 8: "RAW_PACKET", 9: "XRC_SEND", 10: "XRC_RECV"}


class PageError(Exception):
    pass


def stat_dir():
    return os.environ.get("EMURDMA_STAT_DIR") or "/dev/shm"


def pages(pid=None):
    pattern = f"emurdma-stat-{pid}-*" if pid is not None else "emurdma-stat-*-*"
    found = []
    for path in glob.glob(os.path.join(stat_dir(), pattern)):
        parts = os.path.basename(path).split("-")
        try:
            found.append((int(parts[2]), int(parts[3]), path))
        except (IndexError, ValueError):
            continue
    return sorted(found)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def u64s(buf, offset, count):
    return struct.unpack_from(f"<{count}Q", buf, offset)


def read_page(path):
    """The counters of one page, as a dict (see emu/stat_page.cpp for the layout)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 4096:
            raise PageError("too short")
        with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as buf:
            (magic, version, header_bytes, pid, kinds, started_ns, gid, transport, names_offset,
             names_bytes) = HEADER.unpack_from(buf, 0)
            if magic != MAGIC:
                raise PageError("not a stat page (yet)")
            if version != 1 or kinds != len(KINDS):
                raise PageError(f"layout version {version} with {kinds} kinds is not known here")
            raw = bytes(buf[names_offset:names_offset + names_bytes]).split(b"\0")
            names, kind_names = [], []
            for word in raw:
                if word:
                    kind_names.append(word.decode())
                elif len(names) < kinds:
                    names.append(kind_names)
                    kind_names = []
            infos = [KIND.unpack_from(buf, HEADER.size + i * KIND.size) for i in range(kinds)]
            page = {
                "pid": pid,
                "transport": transport.rstrip(b"\0").decode(errors="replace"),
                "gid": ":".join(f"{gid[i]:02x}{gid[i + 1]:02x}" for i in range(0, 16, 2)),
                "started": datetime.datetime.fromtimestamp(started_ns / 1e9).isoformat(
                    sep=" ", timespec="seconds"),
            }
            totals = {}
            for k, (counters, slots, slot_bytes, used, slots_offset, retired_offset) in enumerate(
                    infos):
                kind_names = names[k]
                if len(kind_names) != counters:
                    raise PageError(f"{KINDS[k]}: {len(kind_names)} names for {counters} counters")
                sums = list(u64s(buf, retired_offset, counters))
                objects = []
                for slot in range(min(used, slots)):
                    at = slots_offset + slot * slot_bytes
                    ident, detail = struct.unpack_from("<II", buf, at)
                    if ident == 0:
                        continue
                    values = u64s(buf, at + 8, counters)
                    sums = [a + b for a, b in zip(sums, values)]
                    objects.append((ident, detail, dict(zip(kind_names, values))))
                totals.update(zip(kind_names, sums))
                if k > 0:
                    page[KINDS[k] + "s"] = [describe(KINDS[k], i, d, c) for i, d, c in objects]
            page["device"] = totals
            return page


def describe(kind, ident, detail, counters):
    if kind == "qp":
        return {"qpn": ident, "type": QP_TYPES.get(detail, str(detail)), "counters": counters}
    size = "cqe" if kind == "cq" else "max_wr"
    return {"id": ident, size: detail, "counters": counters}


def nonzero(counters):
    return " ".join(f"{k} {v}" for k, v in counters.items() if v) or "(all zero)"


def print_table(found, out):
    for page in found:
        ended = " (ended: killed before it could remove its page)" if page["ended"] else ""
        print(f"pid {page['pid']} node {page['node']}: emu0 over {page['transport']}, "
              f"gid {page['gid']}, since {page['started']}{ended}", file=out)
        print(f"  device       {nonzero(page['device'])}", file=out)
        for qp in page["qps"]:
            print(f"  qp {qp['qpn']:#08x} {qp['type']:<3} {nonzero(qp['counters'])}", file=out)
        for cq in page["cqs"]:
            print(f"  cq {cq['id']:<5} cqe {cq['cqe']:<6} {nonzero(cq['counters'])}", file=out)
        for srq in page["srqs"]:
            print(f"  srq {srq['id']:<4} max_wr {srq['max_wr']:<6} {nonzero(srq['counters'])}",
                  file=out)


def sample(pid):
    found = []
    for page_pid, node, path in pages(pid):
        try:
            page = read_page(path)
        except (OSError, PageError, struct.error) as e:
            print(f"emurdma stat: {path}: {e}", file=sys.stderr)
            continue
        page["node"] = node
        # A process killed by a signal leaves its page: its last counts, for a post-mortem.
        page["ended"] = not alive(page_pid)
        found.append(page)
    return found


def clean():
    for page_pid, _, path in pages():
        if not alive(page_pid):
            os.unlink(path)
            print(f"removed {path} (process {page_pid} has ended)")


def main():
    parser = argparse.ArgumentParser(
        prog="emurdma stat",
        description="Prints the counters of processes using emu0 (docs/usage.md, Counters).")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("pid", nargs="?", type=int, help="only this process")
    who.add_argument("--all", action="store_true", help="every process (the default)")
    who.add_argument("--clean", action="store_true",
                     help="remove the pages that processes killed by a signal left behind")
    parser.add_argument("--json", action="store_true", help="JSON (one document per sample)")
    parser.add_argument("--watch", type=float, metavar="SECONDS",
                        help="print again every SECONDS until interrupted")
    parser.add_argument("--count", type=int, metavar="N",
                        help="with --watch: stop after N samples")
    args = parser.parse_args()
    if args.watch is not None and args.watch <= 0:
        parser.error("--watch takes a positive number of seconds")
    if args.count is not None and (args.watch is None or args.count < 1):
        parser.error("--count N needs --watch and N >= 1")
    if args.clean:
        clean()
        return 0
    taken = 0
    try:
        while True:
            found = sample(args.pid)
            if args.json:
                print(json.dumps({"time": time.time(), "processes": found}), flush=True)
            else:
                if args.watch is not None:
                    print(f"-- {datetime.datetime.now().isoformat(sep=' ', timespec='seconds')}")
                if not found:
                    who_text = f"process {args.pid}" if args.pid is not None else "any process"
                    print(f"no counters of {who_text} in {stat_dir()} (is it using emu0, "
                          "with EMURDMA_COUNTERS on?)")
                print_table(found, sys.stdout)
                sys.stdout.flush()
            taken += 1
            if args.watch is None or (args.count is not None and taken >= args.count):
                break
            time.sleep(args.watch)
    except KeyboardInterrupt:
        pass
    if args.pid is not None and taken == 1 and not found:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
