// Device profiles (emu/device_profile.h, docs/usage.md "Device profiles"): the named profiles'
// identities, clamping to what the engine honours, and the file form's errors.
#include "emu/device_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "emu/limits.h"

namespace {

using emu::DeviceProfile;

bool has_note(const std::vector<std::string>& notes, const std::string& text) {
  for (const std::string& n : notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(DeviceProfile, Emu0IsTheEngineOwn) {
  const ibv_device_attr& a = emu::emu0_profile().attr;
  EXPECT_EQ(a.vendor_id, emu::kEmu0VendorId);
  EXPECT_NE(a.vendor_id, 0u);
  EXPECT_EQ(a.vendor_part_id, emu::kEmu0VendorPartId);
  EXPECT_EQ(a.max_qp_wr, static_cast<int>(emu::kMaxQpWr));
  EXPECT_EQ(a.max_cqe, static_cast<int>(emu::kMaxCqe));
  EXPECT_EQ(a.phys_port_cnt, 1);
  DeviceProfile copy = emu::emu0_profile();
  EXPECT_TRUE(emu::clamp_to_engine(copy).empty());  // nothing of its own is above itself
}

TEST(DeviceProfile, NamedProfilesCarryTheirVendorIds) {
  auto rxe = emu::builtin_profile("rxe");
  ASSERT_TRUE(rxe.has_value());
  EXPECT_EQ(rxe->attr.vendor_id, 0xFFFFFFu);
  EXPECT_EQ(rxe->attr.vendor_part_id, 0u);
  EXPECT_STREQ(rxe->attr.fw_ver, "0.0.0");
  EXPECT_EQ(rxe->attr.max_cqe, 32767);
  auto mlx5 = emu::builtin_profile("mlx5");
  ASSERT_TRUE(mlx5.has_value());
  EXPECT_EQ(mlx5->attr.vendor_id, 0x02c9u);
  EXPECT_EQ(mlx5->attr.vendor_part_id, 4119u);
  EXPECT_STREQ(mlx5->attr.fw_ver, "16.35.2000");
  EXPECT_FALSE(emu::builtin_profile("mlx4").has_value());
}

TEST(DeviceProfile, LimitsAndCapabilitiesAboveTheEngineAreClamped) {
  DeviceProfile p = *emu::builtin_profile("mlx5");
  const auto notes = emu::clamp_to_engine(p);
  const ibv_device_attr& e = emu::emu0_profile().attr;
  EXPECT_EQ(p.attr.max_qp_wr, e.max_qp_wr);
  EXPECT_TRUE(has_note(notes, "max_qp_wr 32768 is above emu0's 16384"));
  EXPECT_EQ(p.attr.max_sge, e.max_sge);
  EXPECT_EQ(p.attr.max_qp, e.max_qp);
  EXPECT_EQ(p.attr.max_mcast_grp, 0);  // no multicast on emu0
  EXPECT_EQ(p.attr.device_cap_flags & ~e.device_cap_flags, 0u);
  EXPECT_TRUE(has_note(notes, "device_cap_flags"));
  EXPECT_EQ(p.attr.page_size_cap & ~e.page_size_cap, 0u);
  EXPECT_EQ(p.attr.node_guid, e.node_guid);
  // What is below the engine's stays as the device reports it.
  EXPECT_EQ(p.attr.max_srq_wr, e.max_srq_wr);
  EXPECT_EQ(p.attr.local_ca_ack_delay, 16);
  EXPECT_EQ(p.attr.vendor_id, 0x02c9u);
  EXPECT_EQ(p.port.max_msg_sz, 0x40000000u);
}

TEST(DeviceProfile, AnUnknownNameGivesEmu0AndAnError) {
  std::string error;
  std::vector<std::string> notes;
  DeviceProfile p = emu::resolve_profile("connectx9", &error, &notes);
  EXPECT_EQ(p.name, "emu0");
  EXPECT_NE(error.find("'connectx9' is neither a profile"), std::string::npos) << error;
  p = emu::resolve_profile("rxe", &error, &notes);
  EXPECT_EQ(p.attr.vendor_id, 0xFFFFFFu);
  EXPECT_TRUE(error.empty());
  EXPECT_TRUE(has_note(notes, "max_qp_wr"));
  p = emu::resolve_profile("/nonexistent/profile.conf", &error, &notes);
  EXPECT_EQ(p.name, "emu0");
  EXPECT_NE(error.find("cannot read /nonexistent/profile.conf"), std::string::npos) << error;
}

// prefix, n times 'x', suffix (built by append: GCC 12 at -O3 warns falsely on operator+ here).
std::string with_xs(const char* prefix, size_t n, const char* suffix) {
  std::string s(prefix);
  s.append(n, 'x');
  s.append(suffix);
  return s;
}

std::string parse_error(const std::string& text) {
  std::string error;
  EXPECT_FALSE(emu::parse_profile(text, "p.conf", &error).has_value()) << text;
  return error;
}

TEST(DeviceProfile, FileErrorsNameTheirLine) {
  EXPECT_EQ(parse_error("# comment\n\nvendor_id = 1\nmax_qpp = 3\n"),
            "p.conf:4: unknown key 'max_qpp'");
  EXPECT_EQ(parse_error("vendor_id 7\n"), "p.conf:1: expected `key = value`");
  EXPECT_EQ(parse_error("max_qp = lots\n"),
            "p.conf:1: max_qp = 'lots' is not a number from 0 to 2147483647");
  EXPECT_EQ(parse_error("max_qp = -1\n"),
            "p.conf:1: max_qp = '-1' is not a number from 0 to 2147483647");
  EXPECT_EQ(parse_error("\nmax_pkeys = 65536\n"),
            "p.conf:2: max_pkeys = '65536' is not a number from 0 to 65535");
  EXPECT_EQ(parse_error("vendor_id = 1\nbase = rxe\n"),
            "p.conf:2: `base` must come before every other key");
  EXPECT_EQ(parse_error("base = ib0\n"), "p.conf:1: unknown base profile 'ib0' (emu0, rxe, mlx5)");
  EXPECT_EQ(parse_error("active_width = 3\n"), "p.conf:1: active_width 3 is not 1, 2, 4, 8 or 16");
  EXPECT_EQ(parse_error("active_speed = 3\n"),
            "p.conf:1: active_speed 3 is not a power of two up to 128");
  EXPECT_EQ(parse_error(with_xs("fw_ver = ", 64, "\n")),
            "p.conf:1: fw_ver is longer than 63 bytes");
}

TEST(DeviceProfile, AFileSetsItsKeysOverItsBase) {
  std::string error;
  auto p = emu::parse_profile(
      "base = mlx5   # a ConnectX-5\nvendor_part_id = 4123\nfw_ver = 20.31.1014\n"
      "max_qp_wr = 0x100\nactive_speed = 64\n",
      "cx6.conf", &error);
  ASSERT_TRUE(p.has_value()) << error;
  EXPECT_EQ(p->name, "cx6.conf");
  EXPECT_EQ(p->attr.vendor_id, 0x02c9u);
  EXPECT_EQ(p->attr.vendor_part_id, 4123u);
  EXPECT_STREQ(p->attr.fw_ver, "20.31.1014");
  EXPECT_EQ(p->attr.max_qp_wr, 256);
  EXPECT_EQ(p->port.active_speed, 64);
  // Without a base, the file starts from emu0's own profile.
  p = emu::parse_profile("vendor_id = 5\n", "x.conf", &error);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->attr.max_qp_wr, emu::emu0_profile().attr.max_qp_wr);
}

// A profile file is a regular file of at most 64 KiB: a device or a FIFO would hold the open.
TEST(DeviceProfile, OnlyASmallRegularFileIsRead) {
  std::string error;
  std::vector<std::string> notes;
  DeviceProfile p = emu::resolve_profile("/dev/zero", &error, &notes);
  EXPECT_EQ(p.name, "emu0");
  EXPECT_EQ(error, "/dev/zero is not a regular file of at most 65536 bytes");
  const std::string path =
      ::testing::TempDir() + "/emurdma-profile-big-" + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  const std::string comment = with_xs("# ", 1000, "\n");
  for (int i = 0; i < 66; ++i) std::fputs(comment.c_str(), f);  // 66,132 bytes
  std::fclose(f);
  p = emu::resolve_profile(path.c_str(), &error, &notes);
  EXPECT_EQ(p.name, "emu0");
  EXPECT_EQ(error, path + " is not a regular file of at most 65536 bytes");
  std::remove(path.c_str());
}

TEST(DeviceProfile, AFileIsResolvedAndClamped) {
  const std::string path =
      ::testing::TempDir() + "/emurdma-profile-test-" + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("max_cqe = 0x7fffffff\nvendor_id = 42\n", f);
  std::fclose(f);
  std::string error;
  std::vector<std::string> notes;
  DeviceProfile p = emu::resolve_profile(path.c_str(), &error, &notes);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(p.attr.vendor_id, 42u);
  EXPECT_EQ(p.attr.max_cqe, emu::emu0_profile().attr.max_cqe);
  EXPECT_TRUE(has_note(notes, "max_cqe"));
  std::remove(path.c_str());
}

}  // namespace
