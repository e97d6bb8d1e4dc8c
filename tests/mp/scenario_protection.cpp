// Remote access errors between processes: a bad rkey, an address outside the region, a region
// without the remote right the operation needs. The initiator's WR completes with
// IBV_WC_REM_ACCESS_ERR, its QP goes to the error state and the WR behind it is flushed; the
// target's memory is byte for byte what it was (the target checks it itself).
#include <algorithm>
#include <cstring>

#include "tests/mp/scenarios.h"

namespace mp {

namespace {

constexpr size_t kRegionBytes = 4096;

// The target's regions, each filled with its own byte.
enum Region : int { kFull, kReadOnly, kWriteOnly, kLocalOnly, kRegionCount };
constexpr int kRegionAccess[kRegionCount] = {
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
        IBV_ACCESS_REMOTE_ATOMIC,
    IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
    IBV_ACCESS_LOCAL_WRITE,
};
constexpr uint8_t kRegionFill[kRegionCount] = {0xA1, 0xB2, 0xC3, 0xD4};
constexpr const char* kRegionName[kRegionCount] = {"full", "read_only", "write_only", "local"};

struct Case {
  const char* name;
  ibv_wr_opcode op;
  Region region;
  int64_t offset;  // from the region's start; may point outside it
  uint32_t len;
  bool stale_rkey;  // the rkey of a region the target has deregistered
};

constexpr Case kCases[] = {
    {"write with a deregistered rkey", IBV_WR_RDMA_WRITE, kFull, 0, 64, true},
    {"write past the end", IBV_WR_RDMA_WRITE, kFull, kRegionBytes - 32, 64, false},
    {"write before the start", IBV_WR_RDMA_WRITE, kFull, -8, 16, false},
    {"write without REMOTE_WRITE", IBV_WR_RDMA_WRITE, kReadOnly, 0, 64, false},
    {"write to a local-only region", IBV_WR_RDMA_WRITE, kLocalOnly, 0, 64, false},
    {"write with imm without REMOTE_WRITE", IBV_WR_RDMA_WRITE_WITH_IMM, kReadOnly, 0, 64, false},
    {"read without REMOTE_READ", IBV_WR_RDMA_READ, kWriteOnly, 0, 64, false},
    {"read past the end", IBV_WR_RDMA_READ, kFull, kRegionBytes - 64, 128, false},
    {"read with a deregistered rkey", IBV_WR_RDMA_READ, kFull, 0, 64, true},
    {"fetch-and-add without REMOTE_ATOMIC", IBV_WR_ATOMIC_FETCH_AND_ADD, kWriteOnly, 0, 8, false},
    {"compare-and-swap without REMOTE_ATOMIC", IBV_WR_ATOMIC_CMP_AND_SWP, kReadOnly, 0, 8, false},
    {"fetch-and-add past the end", IBV_WR_ATOMIC_FETCH_AND_ADD, kFull, kRegionBytes, 8, false},
    {"fetch-and-add with a deregistered rkey", IBV_WR_ATOMIC_FETCH_AND_ADD, kFull, 0, 8, true},
};
constexpr size_t kCaseCount = std::size(kCases);

}  // namespace

void protection_server(Peer& p) {
  const std::string client = p.option("peer", "client");
  Device dev;
  emu::Cq* cq = dev.cq(256);
  std::vector<std::vector<uint8_t>> regions;
  std::vector<emu::Mr*> mrs;
  for (int r = 0; r < kRegionCount; ++r) {
    regions.emplace_back(kRegionBytes, kRegionFill[r]);
    mrs.push_back(dev.reg(regions.back().data(), kRegionBytes, kRegionAccess[r]));
  }
  // A region registered and deregistered again: its rkey must be refused from now on.
  std::vector<uint8_t> gone(kRegionBytes, 0);
  emu::Mr* gone_mr = dev.reg(gone.data(), gone.size(), kRegionAccess[kFull]);
  const uint32_t stale_rkey = gone_mr->rkey;
  dev.dereg(gone_mr);
  // Where the flushed WR behind each failing one is aimed; not checked.
  std::vector<uint8_t> scratch(kRegionBytes, 0);
  emu::Mr* scratch_mr = dev.reg(scratch.data(), scratch.size(), kRegionAccess[kFull]);

  Fields regions_line;
  for (int r = 0; r < kRegionCount; ++r) {
    regions_line.add(std::string(kRegionName[r]) + "_addr", mrs[r]->addr)
        .add(std::string(kRegionName[r]) + "_rkey", mrs[r]->rkey);
  }
  regions_line.add("stale_rkey", stale_rkey)
      .add("scratch_addr", scratch_mr->addr)
      .add("scratch_rkey", scratch_mr->rkey);
  p.bus.send(client, "regions", regions_line);
  // One QP per case: an access error ends the connection's QPs.
  std::vector<emu::Qp*> qps;
  for (size_t i = 0; i < kCaseCount; ++i) {
    qps.push_back(dev.rc_qp(cq, cq, 8));
    p.bus.send(client, "qp", dev.describe(qps.back()).add("index", i));
  }
  for (size_t i = 0; i < kCaseCount; ++i) {
    const Message m = p.bus.receive(client, "qp");
    dev.connect(qps.at(m.num("index")), Device::remote_of(m));
  }
  // Only now may requests come: a QP still in RTR that answers an access error goes to the
  // error state, and its move to RTS would then be refused.
  p.bus.send(client, "ready");
  p.bus.receive(client, "done");
  for (int r = 0; r < kRegionCount; ++r) {
    size_t changed = 0;
    for (uint8_t b : regions[r]) changed += b != kRegionFill[r];
    p.check.eq(changed, size_t{0}, std::string("bytes changed in region ") + kRegionName[r]);
  }
  p.check.that(std::all_of(gone.begin(), gone.end(), [](uint8_t b) { return b == 0; }),
               "the deregistered region's memory is untouched");
  p.bus.barrier("end", {client});
}

void protection_client(Peer& p) {
  const std::string server = p.option("peer", "server");
  Device dev;
  emu::Cq* cq = dev.cq(256);
  std::vector<uint8_t> local(2 * kRegionBytes, 0x5A);
  emu::Mr* local_mr = dev.reg(local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
  std::vector<emu::Qp*> qps;
  for (size_t i = 0; i < kCaseCount; ++i) {
    qps.push_back(dev.rc_qp(cq, cq, 8));
    p.bus.send(server, "qp", dev.describe(qps.back()).add("index", i));
  }
  const Message regions = p.bus.receive(server, "regions");
  for (size_t i = 0; i < kCaseCount; ++i) {
    const Message m = p.bus.receive(server, "qp");
    dev.connect(qps.at(m.num("index")), Device::remote_of(m));
  }
  p.bus.receive(server, "ready");

  for (size_t i = 0; i < kCaseCount; ++i) {
    const Case& c = kCases[i];
    const std::string region = kRegionName[c.region];
    const uint64_t addr = regions.num(region + "_addr") + static_cast<uint64_t>(c.offset);
    const auto rkey = static_cast<uint32_t>(c.stale_rkey ? regions.num("stale_rkey")
                                                         : regions.num(region + "_rkey"));
    emu::Qp* qp = qps[i];
    const uint64_t bad_id = 2 * i, next_id = 2 * i + 1;
    if (c.op == IBV_WR_ATOMIC_FETCH_AND_ADD || c.op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      require_posted(post_atomic(qp, bad_id, c.op, reinterpret_cast<uint64_t*>(local.data()),
                                 local_mr, addr, rkey, 1, 2),
                     c.name);
    } else {
      require_posted(post_send(qp, bad_id, c.op, local.data(), c.len, local_mr, addr, rkey, 7),
                     c.name);
    }
    // A valid WR behind it: the QP is in error by the time it would run, so it is flushed.
    require_posted(
        post_send(qp, next_id, IBV_WR_RDMA_WRITE, &local[kRegionBytes], 64, local_mr,
                  regions.num("scratch_addr"), static_cast<uint32_t>(regions.num("scratch_rkey"))),
        "write behind the failing one");
    const auto wcs = reap(cq, 2, c.name);
    p.check.eq(wcs[0].wr_id, bad_id, std::string(c.name) + ": first completion");
    p.check.status(wcs[0].status, IBV_WC_REM_ACCESS_ERR, c.name);
    p.check.eq(wcs[1].wr_id, next_id, std::string(c.name) + ": second completion");
    p.check.status(wcs[1].status, IBV_WC_WR_FLUSH_ERR, std::string(c.name) + ": WR behind it");
    p.check.eq(static_cast<int>(state_of(qp)), static_cast<int>(IBV_QPS_ERR),
               std::string(c.name) + ": QP state");
    p.check.eq(poll_available(cq).size(), size_t{0},
               std::string(c.name) + ": completions beyond one per WR");
  }
  p.bus.send(server, "done");
  p.bus.barrier("end", {server});
}

}  // namespace mp
