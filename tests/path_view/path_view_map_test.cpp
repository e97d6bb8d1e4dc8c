// PathViewMap.*: which paths the device view rewrites (path_view/view_map.h), and which it
// leaves alone: real devices, look-alike names, everything when the view is off.
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "path_view/view_map.h"

namespace {

using path_view::map_path;
using path_view::Target;

constexpr char kView[] = "/run/user/1/emurdma/view-1";

struct Mapped {
  Target target;
  std::string path;
};

Mapped map(const char* path, const char* view = kView) {
  char out[PATH_MAX] = {};
  const Target t = map_path(view, path, out, sizeof(out));
  return {t, t == Target::device_node || t == Target::view ? out : ""};
}

TEST(PathViewMap, DeviceNodeIsDevNull) {
  const Mapped m = map("/dev/infiniband/uverbs_emu0");
  EXPECT_EQ(m.target, Target::device_node);
  EXPECT_EQ(m.path, "/dev/null");
}

TEST(PathViewMap, Emu0SysfsGoesIntoTheView) {
  for (const char* path : {"/sys/class/infiniband/emu0", "/sys/class/infiniband/emu0/",
                           "/sys/class/infiniband/emu0/ports/1/gid_attrs/types/0",
                           "/sys/class/infiniband/emu0/device/net/",
                           "/sys/class/infiniband_verbs/uverbs_emu0/ibdev"}) {
    const Mapped m = map(path);
    EXPECT_EQ(m.target, Target::view) << path;
    EXPECT_EQ(m.path, std::string(kView) + path) << path;
  }
}

TEST(PathViewMap, ClassDirectoryListsEmu0) {
  EXPECT_EQ(map("/sys/class/infiniband").target, Target::view);
  EXPECT_EQ(map("/sys/class/infiniband/").target, Target::view);
}

TEST(PathViewMap, TrailingSlashesOfTheViewDirectoryAreDropped) {
  const Mapped m = map("/sys/class/infiniband/emu0/fw_ver", "/v//");
  EXPECT_EQ(m.path, "/v/sys/class/infiniband/emu0/fw_ver");
}

TEST(PathViewMap, OtherDevicesAndLookAlikesAreUntouched) {
  for (const char* path :
       {"/sys/class/infiniband/mlx5_0", "/sys/class/infiniband/mlx5_0/ports/1/state",
        "/sys/class/infiniband/emu01", "/sys/class/infiniband/emu", "/sys/class/infiniband_verbs",
        "/sys/class/infiniband_verbs/", "/sys/class/infiniband_verbs/uverbs0/ibdev",
        "/sys/class/infiniband_verbs/uverbs_emu01", "/sys/class/infiniband_mad",
        "/sys/class/infinibandX/emu0", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs_emu00",
        "/dev/infiniband/uverbs_emu0/x", "/dev/infiniband", "/dev/null", "/etc/passwd",
        "sys/class/infiniband/emu0", "", "/"}) {
    EXPECT_EQ(map(path).target, Target::untouched) << path;
  }
  EXPECT_EQ(map(nullptr).target, Target::untouched);
}

TEST(PathViewMap, ViewOffLeavesEverythingUntouched) {
  EXPECT_EQ(map("/dev/infiniband/uverbs_emu0", nullptr).target, Target::untouched);
  EXPECT_EQ(map("/sys/class/infiniband/emu0", "").target, Target::untouched);
}

TEST(PathViewMap, ResultLongerThanTheBufferIsRefused) {
  const std::string view = "/" + std::string(PATH_MAX - 10, 'v');
  EXPECT_EQ(map("/sys/class/infiniband/emu0/ports/1/state", view.c_str()).target, Target::too_long);
  char small[4];
  EXPECT_EQ(map_path(kView, "/dev/infiniband/uverbs_emu0", small, sizeof(small)), Target::too_long);
}

}  // namespace
