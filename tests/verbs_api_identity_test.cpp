// emu0's identity through the public verbs API: the values rdma-core's pyverbs suite checks
// (tests/test_device.py: vendor_id != 0, phys_port_cnt_ex == phys_port_cnt) and their agreement
// across ibv_query_device, ibv_query_device_ex, ibv_query_port, ibv_query_gid(_ex/_table) and
// the device list; and EMURDMA_PROFILE (docs/usage.md, "Device profiles") as a program sees it.
#include "emu/device_profile.h"
#include "emu/limits.h"
#include "tests/verbs_api_fixture.h"

namespace verbs_api_fixture {
namespace {

TEST_F(VerbsApi, IdentityHasVendorIdsAndOnePort) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_NE(attr.vendor_id, 0u);
  EXPECT_EQ(attr.vendor_id, emu::kEmu0VendorId);
  EXPECT_EQ(attr.vendor_part_id, emu::kEmu0VendorPartId);
  EXPECT_NE(attr.node_guid, 0u);
  EXPECT_NE(attr.sys_image_guid, 0u);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_SYS_IMAGE_GUID, 0u);
  EXPECT_EQ(attr.phys_port_cnt, 1);
  EXPECT_GT(std::strlen(attr.fw_ver), 0u);
  // The vendor id is the OUI of the node GUID (its first three bytes).
  EXPECT_EQ(be64toh(attr.node_guid) >> 40, attr.vendor_id);
}

TEST_F(VerbsApi, QueryDeviceExAgreesWithQueryDevice) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  ibv_device_attr_ex ex{};
  std::memset(&ex, 0xa5, sizeof(ex));  // every field must be written
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
  EXPECT_EQ(std::memcmp(&ex.orig_attr, &attr, sizeof(attr)), 0);
  EXPECT_EQ(ex.phys_port_cnt_ex, attr.phys_port_cnt);
  EXPECT_EQ(ex.device_cap_flags_ex & 0xffffffffu, attr.device_cap_flags);
  EXPECT_EQ(ex.max_dm_size, 0u);
  EXPECT_EQ(ex.odp_caps.general_caps, 0u);
  EXPECT_EQ(ex.odp_caps.per_transport_caps.rc_odp_caps, 0u);
  EXPECT_EQ(ex.xrc_odp_caps, 0u);
  EXPECT_EQ(ex.hca_core_clock, emu::kHcaCoreClockKhz);
  // Completion timestamps count all 64 bits of a 1 GHz clock (emu/cq.h).
  EXPECT_EQ(ex.hca_core_clock, 1000000u);
  EXPECT_EQ(ex.completion_timestamp_mask, UINT64_MAX);
  EXPECT_EQ(ex.pci_atomic_caps.fetch_add, 0u);
  EXPECT_EQ(ex.tm_caps.max_num_tags, 0u);
  EXPECT_EQ(ex.max_wq_type_rq, 0u);
}

TEST_F(VerbsApi, IdentityAgreesWithTheDeviceListPortAndGids) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(ibv_get_device_guid(ctx_->device), attr.node_guid);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx_, attr.phys_port_cnt, &port), 0);
  EXPECT_EQ(ibv_query_port(ctx_, attr.phys_port_cnt + 1, &port), EINVAL);
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  EXPECT_EQ(port.pkey_tbl_len, attr.max_pkeys);
  EXPECT_EQ(port.gid_tbl_len, emu::kGidTableLength);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_NE(port.flags & IBV_QPF_GRH_REQUIRED, 0);  // a RoCE port: address handles need a GRH
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  ibv_gid_entry entry{};
  ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &entry, 0), 0);
  EXPECT_EQ(std::memcmp(entry.gid.raw, gid.raw, sizeof(gid.raw)), 0);
  std::vector<ibv_gid_entry> table(port.gid_tbl_len);
  ASSERT_EQ(ibv_query_gid_table(ctx_, table.data(), table.size(), 0), 1);
  EXPECT_EQ(std::memcmp(table[0].gid.raw, gid.raw, sizeof(gid.raw)), 0);
  EXPECT_EQ(table[0].port_num, 1u);
}

TEST_F(VerbsApi, GidTableHasEmptyEntriesBesideIndexZero) {
  // rdma-core's test_query_gid_ex_bad_flow: an empty index is ENODATA for ibv_query_gid_ex,
  // zeros for ibv_query_gid (the kernel's sysfs), left out of ibv_query_gid_table; past the
  // table is EINVAL.
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  ASSERT_GT(port.gid_tbl_len, 1);
  ibv_gid_entry entry{};
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 1, &entry, 0), ENODATA);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, port.gid_tbl_len - 1, &entry, 0), ENODATA);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, port.gid_tbl_len, &entry, 0), EINVAL);
  ibv_gid gid{};
  std::memset(gid.raw, 0xab, sizeof gid.raw);
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 1, &gid), 0);
  EXPECT_EQ(gid.global.subnet_prefix, 0u);
  EXPECT_EQ(gid.global.interface_id, 0u);
  EXPECT_NE(ibv_query_gid(ctx_, 1, port.gid_tbl_len, &gid), 0);
  std::vector<ibv_gid_entry> table(port.gid_tbl_len);
  EXPECT_EQ(ibv_query_gid_table(ctx_, table.data(), table.size(), 0), 1);
}

// In a fresh process (a death test re-runs this binary) with EMURDMA_PROFILE=`value`: prints
// what emu0 reports and checks that the advertised CQ limit is the enforced one. Exits 0 when
// emu0 opened and both hold.
[[noreturn]] void report_profile(const char* value) {
  ::setenv("EMURDMA_PROFILE", value, 1);
  ibv_context* ctx = open_emu0();
  ibv_device_attr a{};
  ibv_port_attr port{};
  if (ctx == nullptr || ibv_query_device(ctx, &a) != 0 || ibv_query_port(ctx, 1, &port) != 0) {
    std::_Exit(2);
  }
  ibv_cq* too_big = ibv_create_cq(ctx, a.max_cqe + 1, nullptr, nullptr, 0);
  ibv_cq* largest = ibv_create_cq(ctx, a.max_cqe, nullptr, nullptr, 0);
  std::fprintf(stderr, "vendor 0x%x part %u fw %s max_qp_wr %d max_sge %d width %u\n", a.vendor_id,
               a.vendor_part_id, a.fw_ver, a.max_qp_wr, a.max_sge, port.active_width);
  const bool enforced = too_big == nullptr && largest != nullptr;
  if (largest != nullptr) ibv_destroy_cq(largest);
  ibv_close_device(ctx);
  std::_Exit(enforced ? 0 : 1);
}

TEST(VerbsApiProfile, NamedProfilesReportTheirVendorIdsClampedToTheEngine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(report_profile("rxe"), ::testing::ExitedWithCode(0),
              "vendor 0xffffff part 0 fw 0.0.0 max_qp_wr 16384 max_sge 16 width 1");
  // mlx5's max_qp_wr (32768) and max_sge (30) are above the engine's: ours, with a log line.
  EXPECT_EXIT(report_profile("mlx5"), ::testing::ExitedWithCode(0),
              "max_qp_wr 32768 is above emu0's 16384(.|\n)*"
              "vendor 0x2c9 part 4119 fw 16.35.2000 max_qp_wr 16384 max_sge 16 width 2");
}

TEST(VerbsApiProfile, AnUnknownProfileIsLoggedAndEmu0KeepsItsOwn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(report_profile("mlx9"), ::testing::ExitedWithCode(0),
              "EMURDMA_PROFILE=mlx9: 'mlx9' is neither a profile(.|\n)*vendor 0x2e00d part 1 fw "
              "emurdma-0.1");
}

TEST(VerbsApiProfile, AProfileFileIsReadAndItsLowerLimitsEnforced) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path =
      ::testing::TempDir() + "/emurdma-profile-" + std::to_string(::getpid()) + ".conf";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("# a custom device\nbase = rxe\nvendor_id = 0x1234\nmax_cqe = 100\n", f);
  std::fclose(f);
  EXPECT_EXIT(report_profile(path.c_str()), ::testing::ExitedWithCode(0),
              "vendor 0x1234 part 0 fw 0.0.0");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace verbs_api_fixture
