#!/usr/bin/env python3
"""Checks the pcapng files (EMURDMA_PCAP) of one program run against docs/wire.md, "Capture
(EMURDMA_PCAP)": the opcodes, QPNs, PSN sequence and lengths the program's traffic must produce,
read back through tshark, and no malformed packet (issue 25). tests/capture/run_capture.sh runs
it through tests/programs/run_program.sh --capture, after both programs have exited.

  check_capture.py --profile PROFILE --iters N SERVER_DIR SERVER_LOG CLIENT_DIR CLIENT_LOG

Each directory holds the one file its process wrote; each log is the program's output, whose
"local address: ... QPN 0x..., PSN 0x..." and "remote address: ..." lines name the QPs and the
first PSNs. Exit 0 when every check passes, else 1 with each failure named (file, packet,
expected, got). A missing tshark is a failure ("run scripts/setup.sh"), never a skip.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

TSHARK_BASE = ["--disable-heuristic", "eth_over_ib", "--disable-heuristic", "mellanox_eoib"]
FIELDS = ["frame.number", "frame.packet_flags_direction", "frame.len", "frame.cap_len",
          "ipv6.plen", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
          "infiniband.aeth.syndrome", "infiniband.reth.dmalen", "infiniband.atomiceth.cmpdt",
          "infiniband.deth.q_key", "infiniband.deth.srcqp"]
SENT, RECEIVED = 2, 1
PSN_MASK = 0xFFFFFF

# BTH opcodes (docs/wire.md's table)
RC_SEND_ONLY, RC_WRITE_ONLY, RC_READ_REQUEST = 0x04, 0x0A, 0x0C
RC_READ_RESPONSE_ONLY, RC_ACKNOWLEDGE, RC_ATOMIC_ACKNOWLEDGE = 0x10, 0x11, 0x12
RC_FETCH_ADD, UD_SEND_ONLY = 0x14, 0x64
AETH_ACK = 0x1F  # infiniband.aeth.syndrome 31

failures = []


def fail(message):
    failures.append(message)
    if len(failures) <= 30:  # the first ones name the fault; the count says how many more
        print(f"check_capture: FAIL: {message}", file=sys.stderr)


def tshark(path, *args):
    result = subprocess.run(["tshark", "-r", path, *TSHARK_BASE, *args],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        fail(f"{path}: tshark exited with {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def number(text):
    return int(text, 0) if text else None


class Packet:
    def __init__(self, path, values):
        self.path = path
        v = dict(zip(FIELDS, values))
        self.number = number(v["frame.number"])
        self.direction = number(v["frame.packet_flags_direction"])
        self.len = number(v["frame.len"])
        self.cap_len = number(v["frame.cap_len"])
        self.plen = number(v["ipv6.plen"])
        self.opcode = number(v["infiniband.bth.opcode"])
        self.destqp = number(v["infiniband.bth.destqp"])
        self.psn = number(v["infiniband.bth.psn"])
        self.syndrome = number(v["infiniband.aeth.syndrome"])
        self.dmalen = number(v["infiniband.reth.dmalen"])
        self.cmpdt = number(v["infiniband.atomiceth.cmpdt"])
        self.qkey = number(v["infiniband.deth.q_key"])
        self.srcqp = number(v["infiniband.deth.srcqp"])

    def where(self):
        way = {SENT: "sent", RECEIVED: "received"}.get(self.direction, "direction?")
        return f"{self.path}: packet {self.number} ({way}, opcode {self.opcode})"

    def expect(self, field, expected):
        got = getattr(self, field)
        if got != expected:
            fail(f"{self.where()}: {field} expected {fmt(expected)}, got {fmt(got)}")
            return False
        return True


def fmt(value):
    return f"{value} (0x{value:x})" if isinstance(value, int) else repr(value)


class Side:
    """One process: its file, its packets, the QPNs and PSNs its program printed."""

    def __init__(self, name, directory, log):
        self.name = name
        files = sorted(glob.glob(os.path.join(directory, "*.pcapng")))
        if len(files) != 1:
            raise SystemExit(
                f"check_capture: FAIL: the {name} wrote {len(files)} capture files in "
                f"{directory} (expected 1): {files}")
        self.path = files[0]
        self.local_qpn, self.local_psn, self.remote_qpn = read_addresses(name, log)
        print(f"check_capture: {name}: {self.path}, QPN 0x{self.local_qpn:x}, first PSN "
              f"0x{self.local_psn:x}, peer QPN 0x{self.remote_qpn:x}", file=sys.stderr)
        bad = tshark(self.path, "-o", "udp.check_checksum:TRUE",
                     "-Y", '_ws.malformed || _ws.expert.severity >= "error"')
        if bad.strip():
            fail(f"{self.path}: malformed packets or error-severity expert items "
                 f"(udp.check_checksum on):\n{bad.rstrip()}")
        out = tshark(self.path, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f",
                     *[a for f in FIELDS for a in ("-e", f)])
        self.packets = [Packet(self.path, line.split("\t")) for line in out.splitlines()]
        if not self.packets:
            fail(f"{self.path}: no packets")
        for p in self.packets:
            if p.opcode is None:
                fail(f"{p.where()}: not decoded as InfiniBand (no infiniband.bth.opcode)")
            if p.direction not in (SENT, RECEIVED):
                fail(f"{p.where()}: frame.packet_flags_direction expected 1 or 2, "
                     f"got {p.direction}")
            # Every packet of a run goes between the two printed QPs.
            p.expect("destqp", self.remote_qpn if p.direction == SENT else self.local_qpn)
        self.sent = [p for p in self.packets if p.direction == SENT]
        self.received = [p for p in self.packets if p.direction == RECEIVED]

    def sent_op(self, opcode):
        return [p for p in self.sent if p.opcode == opcode]

    def received_op(self, opcode):
        return [p for p in self.received if p.opcode == opcode]


ADDRESS = re.compile(r"(local|remote) address:\s*LID [^Q]*QPN (0x[0-9a-fA-F]+),?\s+"
                     r"PSN (0x[0-9a-fA-F]+)")


def read_addresses(name, log):
    found = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = ADDRESS.search(line)
            if m and m.group(1) not in found:
                found[m.group(1)] = (int(m.group(2), 16), int(m.group(3), 16))
    for which in ("local", "remote"):
        if which not in found:
            raise SystemExit(f"check_capture: FAIL: the {name}'s output ({log}) has no "
                             f"'{which} address: ... QPN 0x..., PSN 0x...' line")
    return found["local"][0], found["local"][1], found["remote"][0]


def expect_count(side, what, packets, expected, at_least=False):
    ok = len(packets) >= expected if at_least else len(packets) == expected
    if not ok:
        fail(f"{side.path}: the {side.name} {what}: expected "
             f"{'at least ' if at_least else ''}{expected} packets, got {len(packets)}")


def expect_only(side, allowed):
    """Every packet the side sent has one of the allowed opcodes."""
    for p in side.sent:
        if p.opcode not in allowed:
            fail(f"{p.where()}: the {side.name} may send only opcodes {sorted(allowed)}")


def expect_psns_from(side, packets):
    """One PSN per message: consecutive from the first PSN the program printed."""
    for i, p in enumerate(packets):
        if not p.expect("psn", (side.local_psn + i) & PSN_MASK):
            break


def expect_acks(side):
    """Every Acknowledge the side sent is an ACK (AETH 0x1F) of a request it received."""
    asked = {p.psn for p in side.received if p.opcode not in (
        RC_ACKNOWLEDGE, RC_READ_RESPONSE_ONLY, RC_ATOMIC_ACKNOWLEDGE)}
    for p in side.sent_op(RC_ACKNOWLEDGE):
        p.expect("syndrome", AETH_ACK)
        p.expect("len", 82)
        if p.psn not in asked:
            fail(f"{p.where()}: an ACK of PSN {fmt(p.psn)}, which no received request carried")


def expect_answers(responder, requests_opcode, answer_opcode):
    """The responder's answers, one per request it received, each with its request's PSN."""
    requests = responder.received_op(requests_opcode)
    answers = responder.sent_op(answer_opcode)
    expect_count(responder, f"answers (opcode {answer_opcode}) to the {len(requests)} "
                 f"requests (opcode {requests_opcode}) received", answers, len(requests))
    for request, answer in zip(requests, answers):
        if not answer.expect("psn", request.psn):
            break


def check_rc_pingpong(server, client, iters):
    for side in (server, client):
        sends = side.sent_op(RC_SEND_ONLY)
        expect_count(side, "SEND Only sent", sends, iters)
        expect_count(side, "SEND Only received", side.received_op(RC_SEND_ONLY), iters)
        expect_only(side, {RC_SEND_ONLY, RC_ACKNOWLEDGE})
        for p in sends:
            p.expect("len", 4174)  # 74 header bytes + 4096 + the ICRC
        expect_psns_from(side, sends)
        expect_acks(side)


def check_write_bw(server, client, iters):
    writes = client.sent_op(RC_WRITE_ONLY)
    expect_count(client, "RDMA WRITE Only sent", writes, iters, at_least=True)
    expect_only(client, {RC_WRITE_ONLY})
    for p in writes:
        p.expect("dmalen", 65536)
        p.expect("len", 65638)   # jumbogram: 14 + 40 + 8 (Hop-by-Hop) + 8 + 12 + 16 + 65536 + 4
        p.expect("plen", 0)      # RFC 2675: the length is in the Jumbo Payload option
        p.expect("cap_len", 128)  # EMURDMA_PCAP_SNAPLEN=128
    expect_psns_from(client, writes)
    expect_count(server, "RDMA WRITE Only received", server.received_op(RC_WRITE_ONLY),
                 len(writes))
    expect_only(server, {RC_ACKNOWLEDGE})
    expect_acks(server)


def check_requests_and_answers(server, client, iters, request, request_fields, answer,
                               answer_len):
    """The client sends only requests (opcode, fields), PSNs consecutive from its first; the
    server only answers (opcode, AETH ACK, length), each with its request's PSN."""
    requests = client.sent_op(request)
    expect_count(client, f"requests (opcode {request}) sent", requests, iters, at_least=True)
    expect_only(client, {request})
    for p in requests:
        for field, expected in request_fields.items():
            p.expect(field, expected)
    expect_psns_from(client, requests)
    expect_only(server, {answer})
    for p in server.sent:
        p.expect("syndrome", AETH_ACK)
        p.expect("len", answer_len)
    expect_answers(server, request, answer)


def check_read_lat(server, client, iters):
    # 2-byte READs: the request 94 bytes (RETH, no payload), the response 86 (AETH, 2 bytes + pad)
    check_requests_and_answers(server, client, iters, RC_READ_REQUEST, {"dmalen": 2, "len": 94},
                               RC_READ_RESPONSE_ONLY, 86)


def check_atomic_lat(server, client, iters):
    # Fetch-and-add: AtomicETH's Compare is 0; ATOMIC Acknowledge is AETH + AtomicAckETH
    check_requests_and_answers(server, client, iters, RC_FETCH_ADD, {"cmpdt": 0, "len": 106},
                               RC_ATOMIC_ACKNOWLEDGE, 90)


def check_ud_pingpong(server, client, iters):
    for side in (server, client):
        sends = side.sent_op(UD_SEND_ONLY)
        expect_count(side, "UD SEND Only sent", sends, iters)
        expect_count(side, "UD SEND Only received", side.received_op(UD_SEND_ONLY), iters)
        expect_only(side, {UD_SEND_ONLY})
        for p in side.packets:
            if p.opcode == RC_ACKNOWLEDGE:
                fail(f"{p.where()}: an Acknowledge in a UD run")
            p.expect("qkey", 0x11111111)
            p.expect("len", 2134)  # 74 + 8 (DETH) + 2048 + the ICRC
        for p in sends:
            p.expect("srcqp", side.local_qpn)
        for p in side.received_op(UD_SEND_ONLY):
            p.expect("srcqp", side.remote_qpn)
        expect_psns_from(side, sends)


PROFILES = {
    "rc_pingpong": check_rc_pingpong,
    "write_bw": check_write_bw,
    "read_lat": check_read_lat,
    "atomic_lat": check_atomic_lat,
    "ud_pingpong": check_ud_pingpong,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, choices=sorted(PROFILES))
    parser.add_argument("--iters", required=True, type=int)
    parser.add_argument("server_dir")
    parser.add_argument("server_log")
    parser.add_argument("client_dir")
    parser.add_argument("client_log")
    args = parser.parse_args()
    if shutil.which("tshark") is None:
        print("check_capture: FAIL: tshark is not installed: run scripts/setup.sh",
              file=sys.stderr)
        return 1
    server = Side("server", args.server_dir, args.server_log)
    client = Side("client", args.client_dir, args.client_log)
    PROFILES[args.profile](server, client, args.iters)
    for side in (server, client):
        print(f"check_capture: {side.name}: {len(side.sent)} packets sent, "
              f"{len(side.received)} received", file=sys.stderr)
    if failures:
        print(f"check_capture: FAIL ({len(failures)} failures)", file=sys.stderr)
        return 1
    print("check_capture: PASS", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
