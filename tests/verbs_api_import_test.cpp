// Shared PDs (ibv_import_device(3), ibv_import_pd(3), ibv_import_mr(3)) on emu0 through the
// public verbs API, as rdma-core's tests/test_shared_pd.py uses them: a dup of a context's
// cmd_fd imports the context, handles import its PD and MR, and traffic runs over the imports.
#include <sys/mman.h>

#include "tests/verbs_api_fixture.h"

namespace verbs_api_fixture {
namespace {

class VerbsApiImport : public VerbsApiRcPair {
 protected:
  void TearDown() override {
    if (imported_ != nullptr) {
      EXPECT_EQ(ibv_close_device(imported_), 0);
    }
    VerbsApiRcPair::TearDown();
  }

  // Imports the fixture's context from a dup of its cmd_fd.
  void import_context() {
    const int fd = ::dup(ctx_->cmd_fd);
    ASSERT_GE(fd, 0);
    imported_ = ibv_import_device(fd);
    ASSERT_NE(imported_, nullptr) << "errno " << errno;
    EXPECT_EQ(imported_->cmd_fd, fd);  // the import owns the descriptor it was given
  }

  ibv_context* imported_ = nullptr;
};

TEST_F(VerbsApiImport, CmdFdIsARealCloseOnExecDescriptor) {
  ASSERT_GE(ctx_->cmd_fd, 0);
  const int flags = ::fcntl(ctx_->cmd_fd, F_GETFD);
  ASSERT_GE(flags, 0);
  EXPECT_NE(flags & FD_CLOEXEC, 0);
  ibv_context* other = open_emu0();
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other->cmd_fd, ctx_->cmd_fd);
  EXPECT_EQ(ibv_close_device(other), 0);
}

TEST_F(VerbsApiImport, ADupOfCmdFdImportsTheContext) {
  import_context();
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(imported_->device, ctx_->device);
  EXPECT_STREQ(ibv_get_device_name(imported_->device), "emu0");
  ibv_device_attr a{}, b{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  ASSERT_EQ(ibv_query_device(imported_, &b), 0);
  EXPECT_EQ(a.node_guid, b.node_guid);
}

TEST_F(VerbsApiImport, BadAndForeignDescriptorsAreRefused) {
  errno = 0;
  EXPECT_EQ(ibv_import_device(-1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // A descriptor of something else: a memfd of the program's own, and a pipe.
  const int memfd = ::memfd_create("not-a-context", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(memfd), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ::close(memfd);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(pipe_fds[0]), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST_F(VerbsApiImport, HandlesAreUniqueAndUnknownOnesRefused) {
  ibv_pd* second = ibv_alloc_pd(ctx_);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->handle, pd_->handle);
  EXPECT_NE(mr_[0]->handle, mr_[1]->handle);
  import_context();
  ASSERT_FALSE(HasFatalFailure());
  const uint32_t unknown = pd_->handle + second->handle + 1000;
  errno = 0;
  EXPECT_EQ(ibv_import_pd(imported_, unknown), nullptr);
  EXPECT_EQ(errno, ENOENT);
  ibv_pd* pd = ibv_import_pd(imported_, pd_->handle);
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(pd->handle, pd_->handle);
  EXPECT_EQ(pd->context, imported_);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(pd, mr_[0]->handle + mr_[1]->handle + 1000), nullptr);
  EXPECT_EQ(errno, ENOENT);
  // A region of another PD is not this PD's.
  ibv_pd* other = ibv_import_pd(imported_, second->handle);
  ASSERT_NE(other, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(other, mr_[0]->handle), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* mr = ibv_import_mr(pd, mr_[0]->handle);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->lkey, mr_[0]->lkey);
  EXPECT_EQ(mr->rkey, mr_[0]->rkey);
  EXPECT_EQ(mr->length, mr_[0]->length);
  EXPECT_EQ(mr->addr, nullptr);  // as rdma-core's import: no address
  EXPECT_EQ(mr->pd, pd);
  ibv_unimport_mr(mr);
  ibv_unimport_pd(other);
  ibv_unimport_pd(pd);
  EXPECT_EQ(ibv_dealloc_pd(second), 0);
}

// Unimport frees the import's wrapper only: the originals are still whole, and deallocating
// them destroys the objects (the second dealloc of the PD would fail were it still shared).
TEST_F(VerbsApiImport, UnimportThenDestroyTheOriginals) {
  import_context();
  ASSERT_FALSE(HasFatalFailure());
  ibv_pd* pd = ibv_import_pd(imported_, pd_->handle);
  ASSERT_NE(pd, nullptr);
  ibv_mr* mr = ibv_import_mr(pd, mr_[0]->handle);
  ASSERT_NE(mr, nullptr);
  ibv_unimport_mr(mr);
  ibv_unimport_pd(pd);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);  // its MRs are still registered
  const uint32_t handle = mr_[0]->handle;
  EXPECT_EQ(ibv_dereg_mr(mr_[0]), 0);
  mr_[0] = nullptr;
  pd = ibv_import_pd(imported_, pd_->handle);
  ASSERT_NE(pd, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(pd, handle), nullptr);  // destroyed: no share kept it
  EXPECT_EQ(errno, ENOENT);
  ibv_unimport_pd(pd);
}

// The last owner destroys: with an import alive, deallocating the original leaves the PD to
// the import, on which new objects can still be made.
TEST_F(VerbsApiImport, TheImportOutlivesTheOriginal) {
  import_context();
  ASSERT_FALSE(HasFatalFailure());
  ibv_pd* original = ibv_alloc_pd(ctx_);
  ASSERT_NE(original, nullptr);
  ibv_pd* pd = ibv_import_pd(imported_, original->handle);
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(original), 0);
  std::vector<uint8_t> buf(64);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  const uint32_t handle = pd->handle;
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(imported_, handle), nullptr);  // gone now
  EXPECT_EQ(errno, ENOENT);
}

// The imported context outlives the one it was imported from.
TEST_F(VerbsApiImport, ClosingTheOriginalKeepsTheImportWorking) {
  ibv_context* original = open_emu0();
  ASSERT_NE(original, nullptr);
  const int fd = ::dup(original->cmd_fd);
  ibv_context* imported = ibv_import_device(fd);
  ASSERT_NE(imported, nullptr);
  EXPECT_EQ(ibv_close_device(original), 0);
  ibv_pd* pd = ibv_alloc_pd(imported);
  ASSERT_NE(pd, nullptr);
  ibv_cq* cq = ibv_create_cq(imported, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(imported), 0);
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // closed with its context
}

// test_shared_pd.py's flow: QPs on the imported PD, work requests naming the imported MR.
TEST_F(VerbsApiImport, RdmaWriteOverAnImportedPdAndMr) {
  import_context();
  ASSERT_FALSE(HasFatalFailure());
  ibv_pd* pd = ibv_import_pd(imported_, pd_->handle);
  ASSERT_NE(pd, nullptr);
  ibv_mr* imported_mr[2] = {};
  ibv_mr* original_mr[2] = {mr_[0], mr_[1]};
  ibv_cq* cq[2] = {};
  for (int i = 0; i < 2; ++i) {
    imported_mr[i] = ibv_import_mr(pd, mr_[i]->handle);
    ASSERT_NE(imported_mr[i], nullptr);
    cq[i] = ibv_create_cq(imported_, 16, nullptr, nullptr, 0);  // the QP's context's
    ASSERT_NE(cq[i], nullptr);
    ibv_qp_init_attr a = init_attr(i);
    a.send_cq = a.recv_cq = cq[i];
    qp_[i] = ibv_create_qp(pd, &a);
    ASSERT_NE(qp_[i], nullptr) << "errno " << errno;
    mr_[i] = imported_mr[i];  // post_send names the imported keys
  }
  connect_both();
  std::memcpy(buf_[0].data(), "imported", 8);
  ASSERT_EQ(post_send(0, IBV_WR_RDMA_WRITE, 7, 0, 8, 256), 0);
  auto wc = poll_n(cq[0], 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 256, "imported", 8), 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ibv_destroy_qp(qp_[i]), 0);
    qp_[i] = nullptr;
    EXPECT_EQ(ibv_destroy_cq(cq[i]), 0);
    ibv_unimport_mr(imported_mr[i]);
    mr_[i] = original_mr[i];
  }
  ibv_unimport_pd(pd);
}

}  // namespace
}  // namespace verbs_api_fixture
