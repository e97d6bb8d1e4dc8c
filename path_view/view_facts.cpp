// emurdma-view-facts NETDEV: prints what the view shows of emu0 (path_view/README.md), one
// entry a line, for scripts/emurdma to write into the view directory:
//   f <path under the view> <content>     a file holding <content> and a newline
//   l <path under the view> <target>      a symbolic link
// Run through `emurdma run` so that it binds to our libibverbs.so.1: the values are what
// ibv_query_device / ibv_query_port / ibv_query_gid_ex answer, so the two never disagree. The
// GID is the default (link-local) form built from the node GUID: emu0's real GID is per process
// (it encodes the process's transport address), and ibv_query_gid is authoritative.
#include <endian.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr char kDevice[] = "emu0";
constexpr uint8_t kPort = 1;

std::string guid_text(__be64 guid) {
  const uint64_t g = be64toh(guid);
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48),
                static_cast<unsigned>((g >> 32) & 0xffff),
                static_cast<unsigned>((g >> 16) & 0xffff), static_cast<unsigned>(g & 0xffff));
  return text;
}

// The kernel's "%pI6" of a GID: eight groups of four hex digits.
std::string gid_text(const uint8_t raw[16]) {
  std::string out;
  char group[8];
  for (int i = 0; i < 16; i += 2) {
    std::snprintf(group, sizeof(group), "%s%02x%02x", i == 0 ? "" : ":", raw[i], raw[i + 1]);
    out += group;
  }
  return out;
}

// The port's rate as the kernel's rate file prints it, e.g. "100 Gb/sec (4X EDR)".
std::string rate_text(uint8_t width, uint32_t speed) {
  int lanes = 1;
  switch (width) {
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      break;
  }
  struct Speed {
    uint32_t code;
    int tenths_gbps;  // per lane
    const char* name;
  };
  static const Speed speeds[] = {{1, 25, "SDR"},    {2, 50, "DDR"},    {4, 100, "QDR"},
                                 {8, 103, "FDR10"}, {16, 140, "FDR"},  {32, 250, "EDR"},
                                 {64, 500, "HDR"},  {128, 1000, "NDR"}};
  int tenths = 25;
  const char* name = "SDR";
  for (const Speed& s : speeds) {
    if (s.code == speed) {
      tenths = s.tenths_gbps;
      name = s.name;
    }
  }
  const int total = tenths * lanes;
  char text[48];
  if (total % 10 == 0) {
    std::snprintf(text, sizeof(text), "%d Gb/sec (%dX %s)", total / 10, lanes, name);
  } else {
    std::snprintf(text, sizeof(text), "%d.%d Gb/sec (%dX %s)", total / 10, total % 10, lanes, name);
  }
  return text;
}

// The online CPUs (the list form of /sys/devices/system/cpu/online, "0-3,6"); all configured
// ones when the file is unreadable.
std::vector<bool> online_cpus() {
  const long configured = sysconf(_SC_NPROCESSORS_CONF);
  std::vector<bool> cpus(configured > 0 ? static_cast<std::size_t>(configured) : 1, false);
  std::ifstream in("/sys/devices/system/cpu/online");
  std::string list;
  if (!std::getline(in, list)) {
    cpus.assign(cpus.size(), true);
    return cpus;
  }
  std::size_t pos = 0;
  while (pos < list.size()) {
    std::size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string range = list.substr(pos, end - pos);
    unsigned first = 0, last = 0;
    if (std::sscanf(range.c_str(), "%u-%u", &first, &last) == 2 ||
        (std::sscanf(range.c_str(), "%u", &first) == 1 && (last = first, true))) {
      for (unsigned c = first; c <= last && c < 4096; ++c) {
        if (c >= cpus.size()) cpus.resize(c + 1, false);
        cpus[c] = true;
      }
    }
    pos = end + 1;
  }
  return cpus;
}

// A CPU mask as the kernel's "%*pb" prints it: 32-bit groups of hex digits, most significant
// first, separated by commas, the first group without leading zeros beyond the CPU count.
std::string cpu_mask_text(const std::vector<bool>& cpus) {
  const std::size_t groups = (cpus.size() + 31) / 32;
  std::string out;
  for (std::size_t g = groups; g-- > 0;) {
    uint32_t word = 0;
    for (std::size_t b = 0; b < 32 && g * 32 + b < cpus.size(); ++b) {
      if (cpus[g * 32 + b]) word |= 1u << b;
    }
    char text[16];
    if (g == groups - 1) {
      const std::size_t bits = cpus.size() - g * 32;
      std::snprintf(text, sizeof(text), "%0*x", static_cast<int>((bits + 3) / 4), word);
    } else {
      std::snprintf(text, sizeof(text), ",%08x", word);
    }
    out += text;
  }
  return out;
}

void file(const std::string& path, const std::string& content) {
  std::printf("f %s %s\n", path.c_str(), content.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '\0' || std::strpbrk(argv[1], "/ \n") != nullptr) {
    std::fprintf(stderr, "usage: emurdma-view-facts NETDEV\n");
    return 2;
  }
  const std::string netdev = argv[1];
  ibv_device** list = ibv_get_device_list(nullptr);
  ibv_device* device = nullptr;
  for (int i = 0; list != nullptr && list[i] != nullptr; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), kDevice) == 0) device = list[i];
  }
  ibv_context* context = device != nullptr ? ibv_open_device(device) : nullptr;
  ibv_device_attr attr{};
  ibv_port_attr port{};
  if (context == nullptr || ibv_query_device(context, &attr) != 0 ||
      ibv_query_port(context, kPort, &port) != 0) {
    std::fprintf(stderr, "emurdma-view-facts: %s is not there (not run through emurdma run?)\n",
                 kDevice);
    return 1;
  }
  ibv_gid_entry gid{};
  const bool roce_v2 =
      ibv_query_gid_ex(context, kPort, 0, &gid, 0) == 0 && gid.gid_type == IBV_GID_TYPE_ROCE_V2;
  uint8_t default_gid[16] = {0xfe, 0x80};
  std::memcpy(default_gid + 8, &attr.node_guid, 8);

  const std::string dev = std::string("sys/class/infiniband/") + kDevice + "/";
  file(dev + "node_type", "1: CA");
  file(dev + "node_guid", guid_text(attr.node_guid));
  file(dev + "sys_image_guid", guid_text(attr.sys_image_guid));
  file(dev + "fw_ver", attr.fw_ver);
  file(
      dev + "hw_rev", "0x" + [&] {
        char t[16];
        std::snprintf(t, sizeof(t), "%x", attr.hw_ver);
        return std::string(t);
      }());
  file(dev + "hca_type", "emurdma");
  file(dev + "board_id", "emurdma");
  file(dev + "node_desc", kDevice);
  file(dev + "device/local_cpus", cpu_mask_text(online_cpus()));
  file(dev + "device/numa_node", "-1");
  std::printf("l %sdevice/net/%s /sys/class/net/%s\n", dev.c_str(), netdev.c_str(), netdev.c_str());
  const std::string p = dev + "ports/1/";
  const char* states[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  file(p + "state",
       std::to_string(port.state) + ": " + (port.state < 6 ? states[port.state] : "UNKNOWN"));
  file(p + "phys_state", std::to_string(port.phys_state) + (port.phys_state == 5   ? ": LinkUp"
                                                            : port.phys_state == 3 ? ": Disabled"
                                                                                   : ": Polling"));
  file(p + "rate", rate_text(port.active_width, port.active_speed));
  file(p + "link_layer", port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
  char number[32];
  std::snprintf(number, sizeof(number), "0x%x", port.lid);
  file(p + "lid", number);
  std::snprintf(number, sizeof(number), "0x%x", port.sm_lid);
  file(p + "sm_lid", number);
  file(p + "sm_sl", std::to_string(port.sm_sl));
  file(p + "lid_mask_count", std::to_string(port.lmc));
  std::snprintf(number, sizeof(number), "0x%08x", port.port_cap_flags);
  file(p + "cap_mask", number);
  file(p + "gids/0", gid_text(default_gid));
  file(p + "gid_attrs/types/0", roce_v2 ? "RoCE v2" : "IB/RoCE v1");
  file(p + "gid_attrs/ndevs/0", netdev);
  uint16_t pkey = 0;
  if (ibv_query_pkey(context, kPort, 0, &pkey) == 0) {
    std::snprintf(number, sizeof(number), "0x%04x", be16toh(pkey));
    file(p + "pkeys/0", number);
  }
  const std::string uverbs = std::string("sys/class/infiniband_verbs/uverbs_") + kDevice + "/";
  file(uverbs + "ibdev", kDevice);
  file(uverbs + "abi_version", "1");
  ibv_close_device(context);
  ibv_free_device_list(list);
  return 0;
}
