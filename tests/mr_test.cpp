// Memory registration, as ibv_reg_mr(3) and ibv_poll_cq(3) describe it: keys, protection
// domains, bounds and access rights, checked both by the local requester (lkey, giving
// IBV_WC_LOC_PROT_ERR) and by the remote responder (rkey, giving IBV_WC_REM_ACCESS_ERR).
#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

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
    ibv_sge sge = sge_of(local, sizeof(uint64_t), local_mr);
    return post(qp, atomic_wr(wr_id, op, &sge, 1, remote_addr, rkey, compare_add, swap));
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

  // What the remote-write bounds tests write into: 256 bytes of storage of which [64, 192) is a
  // registered region, and 16 registered source bytes.
  struct RegionTarget {
    std::array<uint8_t, 256> storage{};
    std::array<uint8_t, 16> src;
    Mr* region_mr = nullptr;
    Mr* src_mr = nullptr;
    uint8_t* region() { return storage.data() + 64; }
  };
  void prepare(RegionTarget& t, uint8_t src_fill) {
    t.region_mr = reg(t.region(), 128);
    t.src.fill(src_fill);
    t.src_mr = reg(t.src.data(), t.src.size());
  }
  // One RDMA WRITE of the 16 source bytes to `offset` bytes from the start of the region.
  ibv_wc write_at(RegionTarget& t, ptrdiff_t offset) {
    return write_once(t.src.data(), 16, t.src_mr, addr_of(t.region() + offset), t.region_mr->rkey);
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
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 2, .status = IBV_WC_REM_ACCESS_ERR}));
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
  auto [a, b, rcq] = pair_with_rcq(16);
  char src[16] = "to foreign";
  char dst[16] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* foreign = reg_in(other_pd(), dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 5, dst, sizeof(dst), foreign), 0);
  ASSERT_EQ(post_send(a, 6, IBV_WR_SEND, src, 8, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 5, .status = IBV_WC_LOC_PROT_ERR}));
  ibv_wc s = poll_one(cq);
  EXPECT_EQ(s.wr_id, 6u);
  // ibv_poll_cq(3): a malformed WQE on the responder's receive queue.
  EXPECT_EQ(s.status, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(dst[0], 0);
}

// ---------------------------------------------------------------------------------------------
// Bounds

TEST_F(MemoryRegistration, RemoteWriteEndingAtTheRegionEndIsAccepted) {
  RegionTarget t;  // the region: storage[64, 192)
  prepare(t, 0xab);
  ibv_wc wc = write_at(t, 128 - 16);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(t.storage[64 + 128 - 1], 0xab);
  EXPECT_EQ(t.storage[64 + 128], 0) << "wrote past the region";
  // The whole region in one write.
  wc = write_at(t, 0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

TEST_F(MemoryRegistration, RemoteWriteOneBytePastTheRegionEndIsRefused) {
  RegionTarget t;
  prepare(t, 0xcd);
  EXPECT_EQ(write_at(t, 128 - 15).status, IBV_WC_REM_ACCESS_ERR);
  for (size_t i = 0; i < t.storage.size(); ++i) EXPECT_EQ(t.storage[i], 0) << "byte " << i;
}

TEST_F(MemoryRegistration, RemoteWriteOneByteBeforeTheRegionIsRefused) {
  RegionTarget t;
  prepare(t, 0xef);
  EXPECT_EQ(write_at(t, -1).status, IBV_WC_REM_ACCESS_ERR);
  for (size_t i = 0; i < t.storage.size(); ++i) EXPECT_EQ(t.storage[i], 0) << "byte " << i;
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
  auto [a, b, rcq] = pair_with_rcq(16);
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
  EXPECT_EQ(try_reg(nullptr, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), EINVAL);
}

TEST_F(MemoryRegistration, AddressRangeThatWrapsIsInvalid) {
  void* near_top = reinterpret_cast<void*>(UINTPTR_MAX - 4095);
  EXPECT_EQ(try_reg(pd, near_top, 8192, IBV_ACCESS_LOCAL_WRITE), EINVAL);
  EXPECT_EQ(try_reg(pd, reinterpret_cast<void*>(UINTPTR_MAX), 2, 0), EINVAL);
}

TEST_F(MemoryRegistration, RemoteWriteOrAtomicWithoutLocalWriteIsInvalid) {
  char buf[64];
  EXPECT_EQ(try_reg(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE), EINVAL);
  EXPECT_EQ(try_reg(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
  EXPECT_EQ(try_reg(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
            EINVAL);
}

TEST_F(MemoryRegistration, UnmappedMemoryIsAFault) {
  // Three pages with a hole in the middle; the mapped pages on either side are fine.
  expect_reg_across_hole_is_efault(16, 64, 2);
}

}  // namespace
}  // namespace emu_test
