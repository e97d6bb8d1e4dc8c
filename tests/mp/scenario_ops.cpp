// Every operation between two processes, checked at both ends against ibv_post_send(3) and
// ibv_poll_cq(3): data placed, completion opcodes, byte_len, imm_data, atomic results.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <set>
#include <span>
#include <sstream>
#include <thread>

#include "tests/memfd_buffer.h"
#include "tests/mp/scenarios.h"

namespace mp {

namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint8_t kUntouched = 0xEE;  // fill of buffers that must not be written

// The single peer of a two-party role ("peer=client" by default on the server side).
std::string other(const Peer& p, const std::string& fallback) {
  return p.option("peer", fallback);
}

// ---------------------------------------------------------------------------------------------
// SEND / SEND_WITH_IMM, both directions

constexpr uint32_t kSendSizes[] = {0, 1, 63, 64, 1000, 4096, 4097, 65536};
constexpr size_t kSendCount = std::size(kSendSizes);
constexpr uint32_t kSendSlot = 65536 + 64;
constexpr uint32_t kReplySize = 4096;
constexpr uint64_t kReplyRecvId = 900;

uint32_t send_imm(size_t i) {
  return 0x1000u + static_cast<uint32_t>(i);
}
bool send_has_imm(size_t i) {
  return i % 2 == 1;
}

}  // namespace

void send_recv_server(Peer& p) {
  const std::string client = other(p, "client");
  Device dev;
  emu::Cq* cq = dev.cq(256);
  emu::Qp* qp = dev.rc_qp(cq, cq, 64);
  std::vector<uint8_t> rx(kSendCount * kSendSlot, kUntouched);
  emu::Mr* rx_mr = dev.reg(rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);
  const auto reply = pattern(kReplySize, 77);
  emu::Mr* reply_mr = dev.reg(const_cast<uint8_t*>(reply.data()), reply.size(), 0);

  p.bus.send(client, "qp", dev.describe(qp));
  dev.connect(qp, Device::remote_of(p.bus.receive(client, "qp")));
  for (size_t i = 0; i < kSendCount; ++i) {
    require_posted(post_recv(qp, 100 + i, &rx[i * kSendSlot], kSendSlot, rx_mr), "post_recv");
  }
  p.bus.send(client, "ready");

  auto wcs = reap(cq, kSendCount, "receives");
  for (size_t i = 0; i < kSendCount; ++i) {
    const ibv_wc& wc = wcs[i];
    const std::string what = "receive " + std::to_string(i);
    expect_success(p.check, wc, 100 + i, IBV_WC_RECV, what);
    p.check.eq(wc.byte_len, kSendSizes[i], what + ": byte_len");
    p.check.eq(wc.qp_num, qp->qpn(), what + ": qp_num");
    p.check.eq((wc.wc_flags & IBV_WC_WITH_IMM) != 0, send_has_imm(i), what + ": WITH_IMM flag");
    if (send_has_imm(i)) p.check.eq(be32toh(wc.imm_data), send_imm(i), what + ": imm_data");
    const auto expect = pattern(kSendSizes[i], static_cast<uint32_t>(i));
    const uint8_t* slot = &rx[i * kSendSlot];
    // memcmp may not be given the null data() of an empty vector, even for 0 bytes.
    p.check.that(expect.empty() || std::memcmp(slot, expect.data(), expect.size()) == 0,
                 what + ": payload bytes");
    p.check.eq(slot[kSendSizes[i]], kUntouched, what + ": byte after the message");
  }

  // The other direction: one SEND_WITH_IMM back.
  require_posted(
      post_send(qp, 7, IBV_WR_SEND_WITH_IMM, reply.data(), kReplySize, reply_mr, 0, 0, 0xABCD),
      "reply");
  expect_success(p.check, reap(cq, 1, "reply")[0], 7, IBV_WC_SEND, "reply send");
  p.bus.barrier("end", {client});
}

void send_recv_client(Peer& p) {
  const std::string server = other(p, "server");
  Device dev;
  emu::Cq* cq = dev.cq(256);
  emu::Qp* qp = dev.rc_qp(cq, cq, 64);
  std::vector<std::vector<uint8_t>> msgs;
  for (size_t i = 0; i < kSendCount; ++i) {
    msgs.push_back(pattern(kSendSizes[i], static_cast<uint32_t>(i)));
  }
  std::vector<emu::Mr*> mrs;
  for (auto& m : msgs) mrs.push_back(m.empty() ? nullptr : dev.reg(m.data(), m.size(), 0));
  std::vector<uint8_t> rx(kReplySize + 64, kUntouched);
  emu::Mr* rx_mr = dev.reg(rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);

  p.bus.send(server, "qp", dev.describe(qp));
  dev.connect(qp, Device::remote_of(p.bus.receive(server, "qp")));
  require_posted(post_recv(qp, kReplyRecvId, rx.data(), static_cast<uint32_t>(rx.size()), rx_mr),
                 "post_recv");
  p.bus.receive(server, "ready");

  for (size_t i = 0; i < kSendCount; ++i) {
    int flags = IBV_SEND_SIGNALED;
    if (kSendSizes[i] == 63) flags |= IBV_SEND_INLINE;  // inline data crosses processes too
    require_posted(post_send(qp, i, send_has_imm(i) ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
                             msgs[i].data(), kSendSizes[i], mrs[i], 0, 0, send_imm(i), flags),
                   "send " + std::to_string(i));
  }
  // Completions come in order, and the reply's receive completes on the same CQ: sort them.
  auto wcs = reap(cq, kSendCount + 1, "sends and the reply");
  size_t next_send = 0;
  for (const ibv_wc& wc : wcs) {
    if (wc.wr_id == kReplyRecvId) {
      expect_success(p.check, wc, kReplyRecvId, IBV_WC_RECV, "reply receive");
      p.check.eq(wc.byte_len, kReplySize, "reply receive: byte_len");
      p.check.that((wc.wc_flags & IBV_WC_WITH_IMM) != 0, "reply receive: WITH_IMM flag");
      p.check.eq(be32toh(wc.imm_data), 0xABCDu, "reply receive: imm_data");
      const auto expect = pattern(kReplySize, 77);
      p.check.that(std::memcmp(rx.data(), expect.data(), kReplySize) == 0,
                   "reply receive: payload");
      p.check.eq(rx[kReplySize], kUntouched, "reply receive: byte after the message");
      continue;
    }
    expect_success(p.check, wc, next_send, IBV_WC_SEND, "send " + std::to_string(next_send));
    ++next_send;
  }
  p.bus.barrier("end", {server});
}

// ---------------------------------------------------------------------------------------------
// RDMA WRITE / WRITE_WITH_IMM

namespace {

constexpr size_t kRegion = 1 << 20;
struct Chunk {
  size_t offset;
  uint32_t len;
};
constexpr Chunk kWrites[] = {{0, 1}, {100, 4096}, {8192, 65536}, {kRegion - 100, 100}};
constexpr Chunk kWriteImm = {300000, 5000};
constexpr uint32_t kWriteImmValue = 0x5000, kEmptyWriteImmValue = 0x5001;

// What the server's region holds once every write of the client has been placed.
std::vector<uint8_t> written_region() {
  const auto src = pattern(kRegion, 9);
  std::vector<uint8_t> region(kRegion, 0);
  for (const Chunk& c : kWrites) std::memcpy(&region[c.offset], &src[c.offset], c.len);
  std::memcpy(&region[kWriteImm.offset], &src[kWriteImm.offset], kWriteImm.len);
  return region;
}

}  // namespace

void write_server(Peer& p) {
  const std::string client = other(p, "client");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.rc_qp(cq, cq, 16);
  std::vector<uint8_t> region(kRegion, 0);
  emu::Mr* region_mr =
      dev.reg(region.data(), region.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  std::vector<uint8_t> rx(2 * 64, kUntouched);
  emu::Mr* rx_mr = dev.reg(rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);

  p.bus.send(client, "qp", dev.describe(qp, region_mr));
  dev.connect(qp, Device::remote_of(p.bus.receive(client, "qp")));
  require_posted(post_recv(qp, 200, &rx[0], 64, rx_mr), "post_recv");
  require_posted(post_recv(qp, 201, &rx[64], 64, rx_mr), "post_recv");
  p.bus.send(client, "ready");

  // A WRITE_WITH_IMM consumes a receive and reports the bytes written; the data goes to the
  // region, never into the receive buffer.
  auto wcs = reap(cq, 2, "WRITE_WITH_IMM receives");
  expect_success(p.check, wcs[0], 200, IBV_WC_RECV_RDMA_WITH_IMM, "write with imm");
  p.check.eq(wcs[0].byte_len, kWriteImm.len, "write with imm: byte_len");
  p.check.that((wcs[0].wc_flags & IBV_WC_WITH_IMM) != 0, "write with imm: WITH_IMM flag");
  p.check.eq(be32toh(wcs[0].imm_data), kWriteImmValue, "write with imm: imm_data");
  expect_success(p.check, wcs[1], 201, IBV_WC_RECV_RDMA_WITH_IMM, "empty write with imm");
  p.check.eq(wcs[1].byte_len, 0u, "empty write with imm: byte_len");
  p.check.eq(be32toh(wcs[1].imm_data), kEmptyWriteImmValue, "empty write with imm: imm_data");
  p.check.that(std::all_of(rx.begin(), rx.end(), [](uint8_t b) { return b == kUntouched; }),
               "receive buffers of WRITE_WITH_IMM untouched");
  // RC places writes in order: the last immediate means every write before it is in place.
  p.check.that(region == written_region(), "region holds exactly the bytes written");
  p.bus.barrier("end", {client});
}

void write_client(Peer& p) {
  const std::string server = other(p, "server");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.rc_qp(cq, cq, 16);
  auto src = pattern(kRegion, 9);
  emu::Mr* src_mr = dev.reg(src.data(), src.size(), 0);

  p.bus.send(server, "qp", dev.describe(qp));
  const RemoteQp remote = Device::remote_of(p.bus.receive(server, "qp"));
  dev.connect(qp, remote);
  p.bus.receive(server, "ready");

  uint64_t id = 0;
  for (const Chunk& c : kWrites) {
    require_posted(post_send(qp, id++, IBV_WR_RDMA_WRITE, &src[c.offset], c.len, src_mr,
                             remote.addr + c.offset, remote.rkey),
                   "write");
  }
  require_posted(
      post_send(qp, id++, IBV_WR_RDMA_WRITE_WITH_IMM, &src[kWriteImm.offset], kWriteImm.len, src_mr,
                remote.addr + kWriteImm.offset, remote.rkey, kWriteImmValue),
      "write with imm");
  require_posted(post_send(qp, id++, IBV_WR_RDMA_WRITE_WITH_IMM, nullptr, 0, nullptr, remote.addr,
                           remote.rkey, kEmptyWriteImmValue),
                 "empty write with imm");
  auto wcs = reap(cq, id, "writes");
  for (uint64_t i = 0; i < id; ++i) {
    expect_success(p.check, wcs[i], i, IBV_WC_RDMA_WRITE, "write " + std::to_string(i));
  }
  p.bus.barrier("end", {server});
}

// ---------------------------------------------------------------------------------------------
// RDMA READ

namespace {

struct ReadPiece {
  size_t remote_offset;
  uint32_t len;
  size_t local_offset;
};
// One READ per entry except the last two, which are one READ scattered over two SGEs.
constexpr ReadPiece kReads[] = {
    {0, 1, 0}, {4096, 4096, 4096}, {12345, 70000, 12345}, {kRegion - 8, 8, kRegion - 8}};
constexpr ReadPiece kScatterRead[] = {{500000, 1000, 600000}, {501000, 2000, 700000}};

}  // namespace

void read_server(Peer& p) {
  const std::string client = other(p, "client");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.rc_qp(cq, cq, 16);
  auto region = pattern(kRegion, 21);
  emu::Mr* region_mr = dev.reg(region.data(), region.size(), IBV_ACCESS_REMOTE_READ);

  p.bus.send(client, "qp", dev.describe(qp, region_mr));
  dev.connect(qp, Device::remote_of(p.bus.receive(client, "qp")));
  p.bus.send(client, "ready");
  p.bus.receive(client, "done");
  p.check.that(region == pattern(kRegion, 21), "a READ leaves the target's region unchanged");
  p.bus.barrier("end", {client});
}

void read_client(Peer& p) {
  const std::string server = other(p, "server");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.rc_qp(cq, cq, 16);
  std::vector<uint8_t> local(kRegion, kUntouched);
  emu::Mr* local_mr = dev.reg(local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);

  p.bus.send(server, "qp", dev.describe(qp));
  const RemoteQp remote = Device::remote_of(p.bus.receive(server, "qp"));
  dev.connect(qp, remote);
  p.bus.receive(server, "ready");

  uint64_t id = 0;
  for (const ReadPiece& r : kReads) {
    require_posted(post_send(qp, id++, IBV_WR_RDMA_READ, &local[r.local_offset], r.len, local_mr,
                             remote.addr + r.remote_offset, remote.rkey),
                   "read");
  }
  ibv_sge sges[2];
  for (int i = 0; i < 2; ++i) {
    sges[i] = ibv_sge{reinterpret_cast<uint64_t>(&local[kScatterRead[i].local_offset]),
                      kScatterRead[i].len, local_mr->lkey};
  }
  ibv_send_wr wr{};
  wr.wr_id = id++;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = sges;
  wr.num_sge = 2;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote.addr + kScatterRead[0].remote_offset;
  wr.wr.rdma.rkey = remote.rkey;
  ibv_send_wr* bad = nullptr;
  require_posted(qp->post_send(&wr, &bad), "scatter read");

  auto wcs = reap(cq, id, "reads");
  for (uint64_t i = 0; i < id; ++i) {
    expect_success(p.check, wcs[i], i, IBV_WC_RDMA_READ, "read " + std::to_string(i));
  }
  const auto remote_bytes = pattern(kRegion, 21);
  std::vector<uint8_t> expect(kRegion, kUntouched);
  auto place = [&](const ReadPiece& r) {
    std::memcpy(&expect[r.local_offset], &remote_bytes[r.remote_offset], r.len);
  };
  for (const ReadPiece& r : kReads) place(r);
  for (const ReadPiece& r : kScatterRead) place(r);
  p.check.that(local == expect, "READs placed exactly the remote bytes, nothing else");
  p.bus.send(server, "done");
  p.bus.barrier("end", {server});
}

// ---------------------------------------------------------------------------------------------
// Atomics: a fixed sequence from one client, then fetch-and-add contention from every client

namespace {

constexpr size_t kWords = 8;
constexpr uint64_t kSequenceFinal = 999;

}  // namespace

void atomics_server(Peer& p) {
  const auto clients = p.list("clients");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  alignas(64) uint64_t words[kWords] = {100, ~uint64_t{0}, 0, 0, 0, 0, 0, 0};
  emu::Mr* words_mr = dev.reg(words, sizeof(words), kRemoteAll);
  for (const auto& c : clients) {
    emu::Qp* qp = dev.rc_qp(cq, cq, 16);
    p.bus.send(c, "qp", dev.describe(qp, words_mr));
    dev.connect(qp, Device::remote_of(p.bus.receive(c, "qp")));
  }
  for (const auto& c : clients) p.bus.send(c, "ready");
  uint64_t adds = 0;
  for (const auto& c : clients) adds += p.bus.receive(c, "done").num("adds");
  p.check.eq(words[0], kSequenceFinal, "word 0 after FAA, FAA, CAS (match), CAS (mismatch)");
  p.check.eq(words[1], uint64_t{1}, "word 1 after a fetch-and-add that wraps");
  p.check.eq(words[2], adds, "word 2 after every client's fetch-and-adds");
  for (size_t i = 3; i < kWords; ++i) p.check.eq(words[i], uint64_t{0}, "untargeted word");
  p.bus.barrier("end", clients);
}

void atomics_client(Peer& p) {
  const std::string server = other(p, "server");
  const uint64_t adds = p.number("adds", 300);
  Device dev;
  emu::Cq* cq = dev.cq(1024);
  emu::Qp* qp = dev.rc_qp(cq, cq, 64);
  std::vector<uint64_t> results(adds + 8, 0xdeadbeef);
  emu::Mr* results_mr =
      dev.reg(results.data(), results.size() * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);
  p.bus.send(server, "qp", dev.describe(qp));
  const RemoteQp remote = Device::remote_of(p.bus.receive(server, "qp"));
  dev.connect(qp, remote);
  p.bus.receive(server, "ready");

  if (p.number("sequence", 0) != 0) {
    struct Step {
      ibv_wr_opcode op;
      size_t word;
      uint64_t compare_add, swap, original;
    };
    const Step steps[] = {
        {IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 5, 0, 100},
        {IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 7, 0, 105},
        {IBV_WR_ATOMIC_CMP_AND_SWP, 0, 112, kSequenceFinal, 112},  // matches: swapped
        {IBV_WR_ATOMIC_CMP_AND_SWP, 0, 1, 5, kSequenceFinal},      // does not: unchanged
        {IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 2, 0, ~uint64_t{0}},      // wraps to 1
    };
    for (size_t i = 0; i < std::size(steps); ++i) {
      const Step& s = steps[i];
      require_posted(post_atomic(qp, i, s.op, &results[i], results_mr, remote.addr + 8 * s.word,
                                 remote.rkey, s.compare_add, s.swap),
                     "atomic");
      const std::string what = "atomic step " + std::to_string(i);
      expect_success(p.check, reap(cq, 1, what)[0], i,
                     s.op == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD, what);
      p.check.eq(results[i], s.original, what + ": original value returned");
    }
  }

  // Contention: fetch-and-add 1 on word 2, many in flight, while other clients do the same.
  std::vector<uint64_t> fetched;
  uint64_t posted = 0;
  while (fetched.size() < adds) {
    while (posted < adds && posted - fetched.size() < 32) {
      require_posted(
          post_atomic(qp, 1000 + posted, IBV_WR_ATOMIC_FETCH_AND_ADD, &results[8 + posted],
                      results_mr, remote.addr + 16, remote.rkey, 1, 0),
          "fetch-and-add");
      ++posted;
    }
    for (const ibv_wc& wc : reap(cq, 1, "fetch-and-add")) {
      const uint64_t k = fetched.size();
      expect_success(p.check, wc, 1000 + k, IBV_WC_FETCH_ADD, "fetch-and-add " + std::to_string(k));
      fetched.push_back(results[8 + k]);
    }
  }
  // One QP's atomics execute in order at the target: each one sees a larger value.
  for (size_t i = 1; i < fetched.size(); ++i) {
    if (!p.check.that(fetched[i] > fetched[i - 1], "fetched values increase along one QP")) break;
  }
  p.bus.result("fetched", join(fetched));
  p.bus.send(server, "done", Fields().add("adds", adds));
  p.bus.barrier("end", {server});
}

// ---------------------------------------------------------------------------------------------
// Large messages: 8 MiB WRITE and READ, 4 MiB SEND
//
// With memory=shared every buffer lies in a memfd mapped MAP_SHARED, which the shm transport
// hands to the peer to map read-only instead of reading it with process_vm_readv; with
// expect_mapped=1 each side proves it from /proc/self/maps.

namespace {

constexpr size_t kLargeRegion = 8 << 20;
constexpr uint32_t kLargeSend = 4 << 20;
// The bus line saying the client deregistered src can overtake the transport's unmap message:
// the server polls its maps for a bounded time.
constexpr auto kUnmapWait = std::chrono::seconds(5);
constexpr auto kUnmapPoll = std::chrono::milliseconds(10);

// The name of a large role's memfd, as both processes see it in /proc/self/maps.
std::string large_memfd_name(const std::string& role, const std::string& buffer) {
  return "emurdma-mp-large-" + role + "-" + buffer;
}

// A buffer of the large roles: a vector, or a MemfdBuffer named large_memfd_name(role, buffer)
// when `shared`.
class LargeBuffer {
 public:
  LargeBuffer(bool shared, const std::string& role, const std::string& buffer, size_t size,
              uint8_t fill) {
    if (shared) {
      shared_ = std::make_unique<emu_test::MemfdBuffer>(large_memfd_name(role, buffer), size);
      if (shared_->data() == nullptr) throw PeerError(shared_->error());
      bytes_ = {shared_->data(), shared_->size()};
    } else {
      private_.resize(size);
      bytes_ = private_;
    }
    std::fill(bytes_.begin(), bytes_.end(), fill);
  }
  LargeBuffer(bool shared, const std::string& role, const std::string& buffer,
              const std::vector<uint8_t>& contents)
      : LargeBuffer(shared, role, buffer, contents.size(), 0) {
    std::copy(contents.begin(), contents.end(), bytes_.begin());
  }

  uint8_t* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  uint8_t operator[](size_t i) const { return bytes_[i]; }
  bool holds(std::span<const uint8_t> expected) const {
    return std::ranges::equal(bytes_, expected);
  }

 private:
  std::vector<uint8_t> private_;
  std::unique_ptr<emu_test::MemfdBuffer> shared_;
  std::span<uint8_t> bytes_;
};

struct Mapping {
  std::string perms;  // "r--s", "rw-s", ...
  std::string path;   // "/memfd:name (deleted)" for a memfd
};

std::vector<Mapping> read_self_maps() {
  std::vector<Mapping> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, offset, device, inode;
    Mapping m;
    fields >> range >> m.perms >> offset >> device >> inode;
    std::getline(fields >> std::ws, m.path);
    out.push_back(std::move(m));
  }
  return out;
}

bool names_memfd(const Mapping& m, const std::string& memfd_name) {
  const std::string prefix = "/memfd:" + memfd_name;
  return m.path.starts_with(prefix) &&
         (m.path.size() == prefix.size() || m.path[prefix.size()] == ' ');
}

// Whether this process maps the memfd read-only and shared, as the shm transport maps an object
// a peer handed it.
bool maps_read_only(const std::string& memfd_name) {
  return std::ranges::any_of(read_self_maps(), [&](const Mapping& m) {
    return m.perms == "r--s" && names_memfd(m, memfd_name);
  });
}

// The large roles' memfd lines of /proc/self/maps, for failure messages.
std::string large_memfd_mappings() {
  std::string out;
  for (const Mapping& m : read_self_maps()) {
    if (m.path.find("/memfd:emurdma-mp-large-") == std::string::npos) continue;
    out += (out.empty() ? "" : " | ") + m.perms + " " + m.path;
  }
  return out.empty() ? "(no large memfd mappings)" : out;
}

void check_maps_read_only(Peer& p, const std::string& memfd_name, const std::string& why) {
  p.check.that(maps_read_only(memfd_name), "no r--s mapping of /memfd:" + memfd_name + " " + why +
                                               "; /proc/self/maps has: " + large_memfd_mappings());
}

struct LargeOptions {
  bool shared = false;
  bool expect_mapped = false;
};

LargeOptions large_options(const Peer& p) {
  LargeOptions o;
  const std::string memory = p.option("memory", "private");
  if (memory != "private" && memory != "shared") {
    throw PeerError("memory=" + memory + ": expected private or shared");
  }
  o.shared = memory == "shared";
  o.expect_mapped = p.number("expect_mapped", 0) != 0;
  if (o.expect_mapped && !o.shared) throw PeerError("expect_mapped=1 needs memory=shared");
  return o;
}

}  // namespace

void large_server(Peer& p) {
  const std::string client = other(p, "client");
  const LargeOptions o = large_options(p);
  // Declared before the device: registered memory outlives its registrations.
  LargeBuffer region(o.shared, "server", "region", kLargeRegion, 0);
  LargeBuffer rx(o.shared, "server", "rx", kLargeSend + 64, kUntouched);
  Device dev;
  emu::Cq* cq = dev.cq(16);
  emu::Qp* qp = dev.rc_qp(cq, cq, 8);
  emu::Mr* region_mr = dev.reg(region.data(), region.size(), kRemoteAll);
  emu::Mr* rx_mr = dev.reg(rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);

  p.bus.send(client, "qp", dev.describe(qp, region_mr));
  dev.connect(qp, Device::remote_of(p.bus.receive(client, "qp")));
  require_posted(post_recv(qp, 300, rx.data(), static_cast<uint32_t>(rx.size()), rx_mr), "recv");
  p.bus.send(client, "ready");

  const ibv_wc wc = reap(cq, 1, "large receive")[0];
  expect_success(p.check, wc, 300, IBV_WC_RECV, "large receive");
  p.check.eq(wc.byte_len, kLargeSend, "large receive: byte_len");
  const auto expect = pattern(kLargeSend, 31);
  p.check.that(std::memcmp(rx.data(), expect.data(), kLargeSend) == 0, "large receive: payload");
  p.check.eq(rx[kLargeSend], kUntouched, "large receive: byte after the message");
  // The client's WRITE completed: at RC that means it is placed here.
  p.bus.receive(client, "written");
  const auto written = pattern(kLargeRegion, 33);
  p.check.that(region.holds(written), "8 MiB WRITE placed whole");
  if (o.expect_mapped) {
    // The payloads came out of the client's objects, mapped here read-only.
    check_maps_read_only(p, large_memfd_name("client", "src"), "after the client's WRITE");
    check_maps_read_only(p, large_memfd_name("client", "msg"), "after the client's SEND");
    // The client deregisters src (which unmaps it here) only once this look is over.
    p.bus.send(client, "mappings_seen");
  }
  p.bus.receive(client, "done");
  p.check.that(region.holds(written), "8 MiB READ left the region unchanged");
  if (o.expect_mapped) {
    p.bus.receive(client, "src_deregistered");
    const std::string src = large_memfd_name("client", "src");
    const auto deadline = std::chrono::steady_clock::now() + kUnmapWait;
    bool mapped = maps_read_only(src);
    while (mapped && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(kUnmapPoll);
      mapped = maps_read_only(src);
    }
    p.check.that(!mapped,
                 "the client's src object is still mapped here 5 s after its last region "
                 "was deregistered; /proc/self/maps has: " +
                     large_memfd_mappings());
    // msg is still registered at the client: its object stays mapped.
    check_maps_read_only(p, large_memfd_name("client", "msg"),
                         "while the client's msg region is still registered");
  }
  p.bus.barrier("end", {client});
}

void large_client(Peer& p) {
  const std::string server = other(p, "server");
  const LargeOptions o = large_options(p);
  // Declared before the device: registered memory outlives its registrations.
  LargeBuffer src(o.shared, "client", "src", pattern(kLargeRegion, 33));
  LargeBuffer msg(o.shared, "client", "msg", pattern(kLargeSend, 31));
  LargeBuffer back(o.shared, "client", "back", kLargeRegion, 0);
  Device dev;
  emu::Cq* cq = dev.cq(16);
  emu::Qp* qp = dev.rc_qp(cq, cq, 8);
  emu::Mr* src_mr = dev.reg(src.data(), src.size(), 0);
  emu::Mr* msg_mr = dev.reg(msg.data(), msg.size(), 0);
  emu::Mr* back_mr = dev.reg(back.data(), back.size(), IBV_ACCESS_LOCAL_WRITE);

  p.bus.send(server, "qp", dev.describe(qp));
  const RemoteQp remote = Device::remote_of(p.bus.receive(server, "qp"));
  dev.connect(qp, remote);
  p.bus.receive(server, "ready");

  require_posted(post_send(qp, 1, IBV_WR_SEND, msg.data(), kLargeSend, msg_mr), "large send");
  require_posted(post_send(qp, 2, IBV_WR_RDMA_WRITE, src.data(), kLargeRegion, src_mr, remote.addr,
                           remote.rkey),
                 "large write");
  auto wcs = reap(cq, 2, "large send and write");
  expect_success(p.check, wcs[0], 1, IBV_WC_SEND, "large send");
  expect_success(p.check, wcs[1], 2, IBV_WC_RDMA_WRITE, "large write");
  p.bus.send(server, "written");

  require_posted(post_send(qp, 3, IBV_WR_RDMA_READ, back.data(), kLargeRegion, back_mr, remote.addr,
                           remote.rkey),
                 "large read");
  expect_success(p.check, reap(cq, 1, "large read")[0], 3, IBV_WC_RDMA_READ, "large read");
  p.check.that(std::memcmp(back.data(), src.data(), kLargeRegion) == 0,
               "8 MiB READ returns what was written");
  if (o.expect_mapped) {
    // The READ response came out of the server's region object, mapped here read-only.
    check_maps_read_only(p, large_memfd_name("server", "region"), "after the READ");
  }
  p.bus.send(server, "done");
  // src's object has no other region: its deregistration must unmap it at the server, so it
  // waits until the server has looked for the mapping.
  if (o.expect_mapped) p.bus.receive(server, "mappings_seen");
  dev.dereg(src_mr);
  if (o.expect_mapped) p.bus.send(server, "src_deregistered");
  p.bus.barrier("end", {server});
}

// ---------------------------------------------------------------------------------------------
// UD between processes

namespace {

constexpr uint32_t kGrh = 40;
constexpr uint32_t kUdSizes[] = {1, 100, 1024, 4096};
constexpr size_t kUdCount = std::size(kUdSizes);
constexpr uint32_t kUdSlot = kGrh + 4096;
constexpr uint32_t kUdReply = 256;

int post_ud(emu::Qp* qp, uint64_t wr_id, const void* buf, uint32_t len, const emu::Mr* mr,
            emu::Ah* ah, uint32_t remote_qpn, bool with_imm, uint32_t imm) {
  ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htobe32(imm);
  wr.wr.ud.ah = &ah->ibv;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = emu_test::kQkey;
  ibv_send_wr* bad = nullptr;
  return qp->post_send(&wr, &bad);
}

// A UD receive: GRH flag, byte_len = payload + 40, the GRH naming sender and receiver.
void check_ud_receive(Peer& p, const ibv_wc& wc, uint64_t wr_id, const uint8_t* slot,
                      const std::vector<uint8_t>& payload, uint32_t src_qp, const ibv_gid& sgid,
                      const ibv_gid& dgid, bool with_imm, uint32_t imm, const std::string& what) {
  expect_success(p.check, wc, wr_id, IBV_WC_RECV, what);
  p.check.eq(wc.byte_len, kGrh + static_cast<uint32_t>(payload.size()), what + ": byte_len");
  p.check.that((wc.wc_flags & IBV_WC_GRH) != 0, what + ": GRH flag");
  p.check.eq(wc.src_qp, src_qp, what + ": src_qp");
  p.check.eq((wc.wc_flags & IBV_WC_WITH_IMM) != 0, with_imm, what + ": WITH_IMM flag");
  if (with_imm) p.check.eq(be32toh(wc.imm_data), imm, what + ": imm_data");
  p.check.that(std::memcmp(slot + kGrh, payload.data(), payload.size()) == 0,
               what + ": payload after the GRH");
  p.check.that(std::memcmp(slot + 8, sgid.raw, 16) == 0, what + ": GRH source GID");
  p.check.that(std::memcmp(slot + 24, dgid.raw, 16) == 0, what + ": GRH destination GID");
}

}  // namespace

void ud_server(Peer& p) {
  const std::string client = other(p, "client");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.ud_qp(cq, cq, 16);
  std::vector<uint8_t> rx(kUdCount * kUdSlot, kUntouched);
  emu::Mr* rx_mr = dev.reg(rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);
  auto reply = pattern(kUdReply, 55);
  emu::Mr* reply_mr = dev.reg(reply.data(), reply.size(), 0);

  p.bus.send(client, "qp", dev.describe(qp));
  const RemoteQp remote = Device::remote_of(p.bus.receive(client, "qp"));
  dev.connect(qp, remote);
  for (size_t i = 0; i < kUdCount; ++i) {
    require_posted(post_recv(qp, 400 + i, &rx[i * kUdSlot], kUdSlot, rx_mr), "post_recv");
  }
  p.bus.send(client, "ready");

  auto wcs = reap(cq, kUdCount, "datagrams");
  for (size_t i = 0; i < kUdCount; ++i) {
    check_ud_receive(p, wcs[i], 400 + i, &rx[i * kUdSlot],
                     pattern(kUdSizes[i], static_cast<uint32_t>(i)), remote.qpn, remote.gid,
                     dev.gid(), i % 2 == 1, 0x700 + static_cast<uint32_t>(i),
                     "datagram " + std::to_string(i));
  }
  // Answer the sender found in the completion, as a UD server does.
  emu::Ah* ah = dev.ah(remote.gid);
  require_posted(post_ud(qp, 9, reply.data(), kUdReply, reply_mr, ah, wcs[0].src_qp, true, 0x77),
                 "reply");
  expect_success(p.check, reap(cq, 1, "reply")[0], 9, IBV_WC_SEND, "reply datagram");
  p.bus.barrier("end", {client});
}

void ud_client(Peer& p) {
  const std::string server = other(p, "server");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.ud_qp(cq, cq, 16);
  std::vector<std::vector<uint8_t>> msgs;
  std::vector<emu::Mr*> mrs;
  for (size_t i = 0; i < kUdCount; ++i) {
    msgs.push_back(pattern(kUdSizes[i], static_cast<uint32_t>(i)));
    mrs.push_back(dev.reg(msgs.back().data(), msgs.back().size(), 0));
  }
  std::vector<uint8_t> rx(kUdSlot, kUntouched);
  emu::Mr* rx_mr = dev.reg(rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);

  p.bus.send(server, "qp", dev.describe(qp));
  const RemoteQp remote = Device::remote_of(p.bus.receive(server, "qp"));
  dev.connect(qp, remote);
  require_posted(post_recv(qp, 900, rx.data(), kUdSlot, rx_mr), "post_recv");
  emu::Ah* ah = dev.ah(remote.gid);
  p.bus.receive(server, "ready");

  for (size_t i = 0; i < kUdCount; ++i) {
    require_posted(post_ud(qp, i, msgs[i].data(), kUdSizes[i], mrs[i], ah, remote.qpn, i % 2 == 1,
                           0x700 + static_cast<uint32_t>(i)),
                   "datagram");
  }
  auto wcs = reap(cq, kUdCount + 1, "datagrams and the reply");
  size_t next_send = 0;
  for (const ibv_wc& wc : wcs) {
    if (wc.wr_id == 900) {
      check_ud_receive(p, wc, 900, rx.data(), pattern(kUdReply, 55), remote.qpn, remote.gid,
                       dev.gid(), true, 0x77, "reply datagram");
      continue;
    }
    expect_success(p.check, wc, next_send, IBV_WC_SEND, "datagram " + std::to_string(next_send));
    ++next_send;
  }
  p.bus.barrier("end", {server});
}

}  // namespace mp
