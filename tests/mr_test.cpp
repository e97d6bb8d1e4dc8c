// Memory registration, as ibv_reg_mr(3) and ibv_poll_cq(3) describe it: keys, protection
// domains, bounds and access rights, checked both by the local requester (lkey, giving
// IBV_WC_LOC_PROT_ERR) and by the remote responder (rkey, giving IBV_WC_REM_ACCESS_ERR).
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <set>

#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

class MemoryRegistration : public EngineTest {
 protected:
  void TearDown() override {
    for (Mr* mr : other_mrs) EXPECT_EQ(ctx->dereg_mr(mr), 0);
    if (pd2 != nullptr) {
      EXPECT_EQ(ctx->dealloc_pd(pd2), 0);
    }
    EngineTest::TearDown();
  }

  // A second protection domain, for the ownership rules.
  Pd* other_pd() {
    if (pd2 == nullptr) {
      EXPECT_EQ(ctx->alloc_pd(&pd2), 0);
    }
    return pd2;
  }

  Mr* reg_in(Pd* p, void* addr, size_t len, int access = kAllAccess) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(p, addr, len, access, &mr), 0);
    if (mr) other_mrs.push_back(mr);
    return mr;
  }

  int post_atomic(Qp* qp, uint64_t wr_id, ibv_wr_opcode op, uint64_t* local, Mr* local_mr,
                  uint64_t remote_addr, uint32_t rkey, uint64_t compare_add, uint64_t swap = 0) {
    ibv_sge sge{addr_of(local), sizeof(uint64_t), local_mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  // Posts one RDMA WRITE of len bytes from src on a fresh pair and returns its completion.
  ibv_wc write_once(void* src, uint32_t len, Mr* src_mr, uint64_t remote_addr, uint32_t rkey) {
    auto [a, b] = connected_pair();
    EXPECT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src, len, src_mr, remote_addr, rkey), 0);
    return poll_one(cq);
  }

  ibv_wc read_once(void* dst, uint32_t len, Mr* dst_mr, uint64_t remote_addr, uint32_t rkey) {
    auto [a, b] = connected_pair();
    EXPECT_EQ(post_send(a, 1, IBV_WR_RDMA_READ, dst, len, dst_mr, remote_addr, rkey), 0);
    return poll_one(cq);
  }

  Pd* pd2 = nullptr;
  std::vector<Mr*> other_mrs;
};

// ---------------------------------------------------------------------------------------------
// Keys

TEST_F(MemoryRegistration, KeysAreNonZeroAndDistinctPerRegion) {
  static char buffers[8][256];
  std::set<uint32_t> lkeys;
  std::set<uint32_t> rkeys;
  std::vector<Mr*> regions;
  for (auto& b : buffers) regions.push_back(reg(b, sizeof(b)));
  // The same memory registered again is another region, with keys of its own.
  regions.push_back(reg(buffers[0], sizeof(buffers[0])));
  regions.push_back(reg(buffers[0], 16));
  for (Mr* mr : regions) {
    ASSERT_NE(mr, nullptr);
    EXPECT_NE(mr->lkey, 0u);
    EXPECT_NE(mr->rkey, 0u);
    lkeys.insert(mr->lkey);
    rkeys.insert(mr->rkey);
  }
  EXPECT_EQ(lkeys.size(), regions.size());
  EXPECT_EQ(rkeys.size(), regions.size());
}

TEST_F(MemoryRegistration, RegionReportsWhatWasRegistered) {
  char buf[128];
  Mr* mr = reg(buf + 8, 100, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->pd, pd);
  EXPECT_EQ(mr->addr, addr_of(buf + 8));
  EXPECT_EQ(mr->length, 100u);
}

TEST_F(MemoryRegistration, DeregisteredRkeyIsRefusedEvenAfterNewRegistrations) {
  uint64_t src = 0xfeedfacecafebeefULL;
  std::array<uint64_t, 4> target{};
  Mr* ms = reg(&src, sizeof(src));

  Mr* old = nullptr;
  ASSERT_EQ(ctx->reg_mr(pd, target.data(), sizeof(target), kAllAccess, &old), 0);
  const uint32_t stale = old->rkey;
  ASSERT_EQ(ctx->dereg_mr(old), 0);

  // The same memory registered again, several times, with the same rights.
  Mr* fresh = nullptr;
  for (int i = 0; i < 8; ++i) {
    fresh = reg(target.data(), sizeof(target));
    ASSERT_NE(fresh, nullptr);
    EXPECT_NE(fresh->rkey, stale) << "registration " << i << " reused the stale rkey";
  }

  auto [a, b] = connected_pair();
  ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, &src, 8, ms, addr_of(&target[0]), fresh->rkey), 0);
  ibv_wc ok = poll_one(cq);
  EXPECT_EQ(ok.status, IBV_WC_SUCCESS) << "the current rkey must work";
  EXPECT_EQ(target[0], src);

  ASSERT_EQ(post_send(a, 2, IBV_WR_RDMA_WRITE, &src, 8, ms, addr_of(&target[2]), stale), 0);
  ibv_wc refused = poll_one(cq);
  EXPECT_EQ(refused.wr_id, 2u);
  EXPECT_EQ(refused.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target[2], 0u) << "memory written through a deregistered rkey";
}

TEST_F(MemoryRegistration, DeregisteredLkeyIsALocalProtectionError) {
  char src[16] = "stale lkey";
  char dst[16] = {};
  Mr* md = reg(dst, sizeof(dst));
  Mr* old = nullptr;
  ASSERT_EQ(ctx->reg_mr(pd, src, sizeof(src), kAllAccess, &old), 0);
  Mr copy = *old;
  ASSERT_EQ(ctx->dereg_mr(old), 0);
  ibv_wc wc = write_once(src, 8, &copy, addr_of(dst), md->rkey);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(dst[0], 0);
}

// ---------------------------------------------------------------------------------------------
// Protection domains

TEST_F(MemoryRegistration, LocalRegionOfAnotherPdIsALocalProtectionError) {
  char src[16] = "wrong pd";
  char dst[16] = {};
  Mr* foreign = reg_in(other_pd(), src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ibv_wc wc = write_once(src, 8, foreign, addr_of(dst), md->rkey);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(dst[0], 0) << "data sent from a region of another PD";
}

TEST_F(MemoryRegistration, RemoteRegionOfAnotherPdIsARemoteAccessError) {
  uint64_t src = 0x1111222233334444ULL;
  uint64_t target = 0;
  Mr* ms = reg(&src, sizeof(src));
  Mr* foreign = reg_in(other_pd(), &target, sizeof(target));
  ibv_wc wc = write_once(&src, 8, ms, addr_of(&target), foreign->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target, 0u) << "a QP wrote into a region of another PD";
}

TEST_F(MemoryRegistration, RemoteReadOfAnotherPdIsARemoteAccessError) {
  uint64_t secret = 0x5ec2e75ec2e75ec2ULL;
  uint64_t dst = 0;
  Mr* foreign = reg_in(other_pd(), &secret, sizeof(secret));
  Mr* md = reg(&dst, sizeof(dst));
  ibv_wc wc = read_once(&dst, 8, md, addr_of(&secret), foreign->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(dst, 0u) << "a QP read a region of another PD";
}

TEST_F(MemoryRegistration, ReceiveBufferOfAnotherPdFailsTheReceive) {
  Cq* rcq = create_cq(16);
  QpOptions ob;
  ob.recv_cq = rcq;
  auto [a, b] = connected_pair({}, ob);
  char src[16] = "to foreign";
  char dst[16] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* foreign = reg_in(other_pd(), dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 5, dst, sizeof(dst), foreign), 0);
  ASSERT_EQ(post_send(a, 6, IBV_WR_SEND, src, 8, ms), 0);
  ibv_wc r = poll_one(rcq);
  EXPECT_EQ(r.wr_id, 5u);
  EXPECT_EQ(r.status, IBV_WC_LOC_PROT_ERR);
  ibv_wc s = poll_one(cq);
  EXPECT_EQ(s.wr_id, 6u);
  // ibv_poll_cq(3): a malformed WQE on the responder's receive queue.
  EXPECT_EQ(s.status, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(dst[0], 0);
}

// ---------------------------------------------------------------------------------------------
// Bounds

TEST_F(MemoryRegistration, RemoteWriteEndingAtTheRegionEndIsAccepted) {
  std::array<uint8_t, 256> storage{};
  uint8_t* region = storage.data() + 64;  // the region: storage[64, 192)
  Mr* mt = reg(region, 128);
  std::array<uint8_t, 16> src;
  src.fill(0xab);
  Mr* ms = reg(src.data(), src.size());
  ibv_wc wc = write_once(src.data(), 16, ms, addr_of(region + 128 - 16), mt->rkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(storage[64 + 128 - 1], 0xab);
  EXPECT_EQ(storage[64 + 128], 0) << "wrote past the region";
  // The whole region in one write.
  wc = write_once(src.data(), 16, ms, addr_of(region), mt->rkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

TEST_F(MemoryRegistration, RemoteWriteOneBytePastTheRegionEndIsRefused) {
  std::array<uint8_t, 256> storage{};
  uint8_t* region = storage.data() + 64;
  Mr* mt = reg(region, 128);
  std::array<uint8_t, 16> src;
  src.fill(0xcd);
  Mr* ms = reg(src.data(), src.size());
  ibv_wc wc = write_once(src.data(), 16, ms, addr_of(region + 128 - 15), mt->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  for (size_t i = 0; i < storage.size(); ++i) EXPECT_EQ(storage[i], 0) << "byte " << i;
}

TEST_F(MemoryRegistration, RemoteWriteOneByteBeforeTheRegionIsRefused) {
  std::array<uint8_t, 256> storage{};
  uint8_t* region = storage.data() + 64;
  Mr* mt = reg(region, 128);
  std::array<uint8_t, 16> src;
  src.fill(0xef);
  Mr* ms = reg(src.data(), src.size());
  ibv_wc wc = write_once(src.data(), 16, ms, addr_of(region - 1), mt->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  for (size_t i = 0; i < storage.size(); ++i) EXPECT_EQ(storage[i], 0) << "byte " << i;
}

TEST_F(MemoryRegistration, RemoteReadBoundsAreExact) {
  std::array<uint8_t, 256> storage;
  storage.fill(0x5a);
  uint8_t* region = storage.data() + 64;
  Mr* mt = reg(region, 128);
  std::array<uint8_t, 16> dst{};
  Mr* md = reg(dst.data(), dst.size());
  ibv_wc wc = read_once(dst.data(), 16, md, addr_of(region + 128 - 16), mt->rkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(dst[15], 0x5a);
  dst.fill(0);
  wc = read_once(dst.data(), 16, md, addr_of(region + 128 - 15), mt->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(dst[0], 0);
}

TEST_F(MemoryRegistration, LocalSgeBoundsAreExact) {
  std::array<uint8_t, 256> storage;
  storage.fill(0x77);
  uint8_t* region = storage.data() + 64;
  Mr* ms = reg(region, 128);
  std::array<uint8_t, 32> dst{};
  Mr* md = reg(dst.data(), dst.size());
  // Ends exactly at the end of the local region: accepted.
  ibv_wc wc = write_once(region + 128 - 16, 16, ms, addr_of(dst.data()), md->rkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(dst[15], 0x77);
  // One byte past it: refused locally, nothing sent.
  dst.fill(0);
  wc = write_once(region + 128 - 15, 16, ms, addr_of(dst.data()), md->rkey);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(dst[0], 0);
}

TEST_F(MemoryRegistration, ZeroLengthRegionGrantsNoByte) {
  std::array<uint8_t, 64> storage{};
  Mr* empty = nullptr;
  ASSERT_EQ(ctx->reg_mr(pd, storage.data() + 32, 0, kAllAccess, &empty), 0);
  other_mrs.push_back(empty);
  EXPECT_NE(empty->lkey, 0u);
  EXPECT_NE(empty->rkey, 0u);
  EXPECT_EQ(empty->length, 0u);

  uint8_t src = 0x99;
  Mr* ms = reg(&src, 1);
  ibv_wc wc = write_once(&src, 1, ms, addr_of(storage.data() + 32), empty->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(storage[32], 0);

  uint8_t dst = 0;
  Mr* md = reg(&dst, 1);
  wc = write_once(storage.data() + 32, 1, empty, addr_of(&dst), md->rkey);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
}

// ---------------------------------------------------------------------------------------------
// Access rights

TEST_F(MemoryRegistration, ReadNeedsRemoteRead) {
  uint64_t value = 0x0102030405060708ULL;
  uint64_t dst = 0;
  Mr* md = reg(&dst, sizeof(dst));
  Mr* readable = reg(&value, sizeof(value), IBV_ACCESS_REMOTE_READ);
  ibv_wc wc = read_once(&dst, 8, md, addr_of(&value), readable->rkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(dst, value);

  dst = 0;
  Mr* closed = reg(&value, sizeof(value),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  wc = read_once(&dst, 8, md, addr_of(&value), closed->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(dst, 0u);
}

TEST_F(MemoryRegistration, WriteNeedsRemoteWrite) {
  uint64_t src = 42;
  uint64_t target = 0;
  Mr* ms = reg(&src, sizeof(src));
  Mr* closed = reg(&target, sizeof(target),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  ibv_wc wc = write_once(&src, 8, ms, addr_of(&target), closed->rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target, 0u);
}

TEST_F(MemoryRegistration, AtomicNeedsRemoteAtomic) {
  alignas(8) uint64_t counter = 100;
  uint64_t old = 0;
  Mr* mo = reg(&old, sizeof(old));

  Mr* open = reg(&counter, sizeof(counter), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  {
    auto [a, b] = connected_pair();
    ASSERT_EQ(
        post_atomic(a, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, &old, mo, addr_of(&counter), open->rkey, 5),
        0);
    ibv_wc wc = poll_one(cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(old, 100u);
    EXPECT_EQ(counter, 105u);
  }

  old = 0;
  Mr* closed = reg(&counter, sizeof(counter),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  {
    auto [a, b] = connected_pair();
    ASSERT_EQ(post_atomic(a, 2, IBV_WR_ATOMIC_FETCH_AND_ADD, &old, mo, addr_of(&counter),
                          closed->rkey, 5),
              0);
    ibv_wc wc = poll_one(cq);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  }
  {
    auto [a, b] = connected_pair();
    ASSERT_EQ(post_atomic(a, 3, IBV_WR_ATOMIC_CMP_AND_SWP, &old, mo, addr_of(&counter),
                          closed->rkey, 105, 7),
              0);
    ibv_wc wc = poll_one(cq);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  }
  EXPECT_EQ(counter, 105u) << "an atomic changed memory it had no right to";
  EXPECT_EQ(old, 0u);
}

TEST_F(MemoryRegistration, ReadIntoARegionWithoutLocalWriteIsALocalProtectionError) {
  uint64_t value = 0x0a0b0c0d0e0f0102ULL;
  uint64_t dst = 0;
  Mr* mv = reg(&value, sizeof(value));
  Mr* read_only = reg(&dst, sizeof(dst), 0);  // local read is always granted, nothing more
  ibv_wc wc = read_once(&dst, 8, read_only, addr_of(&value), mv->rkey);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(dst, 0u);
}

TEST_F(MemoryRegistration, ReceiveIntoARegionWithoutLocalWriteFails) {
  Cq* rcq = create_cq(16);
  QpOptions ob;
  ob.recv_cq = rcq;
  auto [a, b] = connected_pair({}, ob);
  char src[16] = "no local write";
  char dst[16] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* read_only = reg(dst, sizeof(dst), IBV_ACCESS_REMOTE_READ);
  ASSERT_EQ(post_recv(b, 1, dst, sizeof(dst), read_only), 0);
  ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, src, 8, ms), 0);
  EXPECT_EQ(poll_one(rcq).status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(dst[0], 0);
}

// ---------------------------------------------------------------------------------------------
// Arguments

TEST_F(MemoryRegistration, NullPdIsInvalid) {
  char buf[64];
  Mr* mr = nullptr;
  EXPECT_EQ(ctx->reg_mr(nullptr, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE, &mr), EINVAL);
  EXPECT_EQ(mr, nullptr);
}

TEST_F(MemoryRegistration, AddressRangeThatWrapsIsInvalid) {
  Mr* mr = nullptr;
  void* near_top = reinterpret_cast<void*>(UINTPTR_MAX - 4095);
  EXPECT_EQ(ctx->reg_mr(pd, near_top, 8192, IBV_ACCESS_LOCAL_WRITE, &mr), EINVAL);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(ctx->reg_mr(pd, reinterpret_cast<void*>(UINTPTR_MAX), 2, 0, &mr), EINVAL);
  EXPECT_EQ(mr, nullptr);
}

TEST_F(MemoryRegistration, RemoteWriteOrAtomicWithoutLocalWriteIsInvalid) {
  char buf[64];
  Mr* mr = nullptr;
  EXPECT_EQ(ctx->reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE, &mr), EINVAL);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(ctx->reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_ATOMIC, &mr), EINVAL);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(
      ctx->reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &mr),
      EINVAL);
  EXPECT_EQ(mr, nullptr);
}

TEST_F(MemoryRegistration, UnmappedMemoryIsAFault) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* map = ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(map);
  ASSERT_EQ(::munmap(base + page, page), 0);  // a hole in the middle

  Mr* mr = nullptr;
  EXPECT_EQ(ctx->reg_mr(pd, base, 3 * page, IBV_ACCESS_LOCAL_WRITE, &mr), EFAULT);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(ctx->reg_mr(pd, base + page + 16, 64, IBV_ACCESS_LOCAL_WRITE, &mr), EFAULT);
  EXPECT_EQ(mr, nullptr);
  // The mapped pages on either side are fine.
  EXPECT_EQ(ctx->reg_mr(pd, base + 2 * page, page, IBV_ACCESS_LOCAL_WRITE, &mr), 0);
  if (mr) {
    EXPECT_EQ(ctx->dereg_mr(mr), 0);
  }

  ::munmap(base, page);
  ::munmap(base + 2 * page, page);
}

}  // namespace
}  // namespace emu_test
