#include "emu/device_profile.h"

#include <endian.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "emu/limits.h"

namespace emu {

namespace {

constexpr uint64_t kEmu0NodeGuid = 0x02e0'0dff'fe00'0001ULL;

// The port capability bits that describe emu0 truthfully: rdma_cm works on it, and its GIDs
// are derived from IP addresses.
constexpr uint32_t kHonouredPortCapFlags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;

void set_fw_ver(ibv_device_attr& a, std::string_view fw) {
  std::memset(a.fw_ver, 0, sizeof(a.fw_ver));
  std::memcpy(a.fw_ver, fw.data(), std::min(fw.size(), sizeof(a.fw_ver) - 1));
}

DeviceProfile make_emu0() {
  DeviceProfile p;
  p.name = "emu0";
  ibv_device_attr& a = p.attr;
  set_fw_ver(a, "emurdma-0.1");
  a.node_guid = htobe64(kEmu0NodeGuid);
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = kMaxMrSize;
  a.page_size_cap = 0xfffff000;  // 4 KiB and up
  a.vendor_id = kEmu0VendorId;
  a.vendor_part_id = kEmu0VendorPartId;
  a.hw_ver = 1;
  a.max_qp = kMaxQp - 2;  // QPN 0 and 1 are reserved
  a.max_qp_wr = kMaxQpWr;
  a.device_cap_flags = IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_N_NOTIFY_CQ |
                       IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SHUTDOWN_PORT |
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_MEM_WINDOW |
                       IBV_DEVICE_MEM_WINDOW_TYPE_2B;  // mw.h
  a.max_sge = kMaxSge;
  a.max_sge_rd = kMaxSge;
  a.max_cq = kMaxCq;
  a.max_cqe = kMaxCqe;
  a.max_mr = kMaxMr - 1;
  a.max_pd = kMaxPd;
  a.max_qp_rd_atom = kMaxQpRdAtomic;
  a.max_res_rd_atom = kMaxQpRdAtomic * (kMaxQp - 2);
  a.max_qp_init_rd_atom = kMaxQpRdAtomic;
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_mw = kMaxMw;
  a.max_ah = kMaxAh;
  a.max_srq = kMaxSrq;
  a.max_srq_wr = kMaxSrqWr;
  a.max_srq_sge = kMaxSge;
  a.max_pkeys = 1;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
  p.port.port_cap_flags = 0;
  p.port.max_msg_sz = kMaxMsgSize;
  p.port.active_width = 2;   // 4x
  p.port.active_speed = 32;  // EDR (25 Gb/s per lane)
  return p;
}

// What a real device reports, as a table row: the fields a named profile sets over emu0's.
struct RealDevice {
  const char* name;
  const char* fw_ver;
  uint32_t vendor_id, vendor_part_id, hw_ver;
  uint64_t max_mr_size, page_size_cap;
  int max_qp, max_qp_wr;
  unsigned device_cap_flags;
  int max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd;
  int max_qp_rd_atom, max_res_rd_atom, max_qp_init_rd_atom;
  int max_mw, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah;
  int max_srq, max_srq_wr, max_srq_sge;
  uint16_t max_pkeys;
  uint8_t local_ca_ack_delay;
  PortProfile port;
};

// Linux 6.1's soft-RoCE: drivers/infiniband/sw/rxe/rxe_param.h's defaults (a running rxe takes
// width and speed from its netdev).
constexpr RealDevice kRxe{
    .name = "rxe",
    .fw_ver = "0.0.0",
    .vendor_id = 0xFFFFFF,
    .vendor_part_id = 0,
    .hw_ver = 0,
    .max_mr_size = UINT64_MAX,
    .page_size_cap = 0xfffff000,
    .max_qp = (1 << 20) - 16,
    .max_qp_wr = 1 << 20,
    .device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_PORT_ACTIVE_EVENT |
                        IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN |
                        IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_MEM_MGT_EXTENSIONS |
                        IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B,
    .max_sge = 32,
    .max_sge_rd = 32,
    .max_cq = 1 << 20,
    .max_cqe = (1 << 15) - 1,
    .max_mr = (1 << 19) - 1,
    .max_pd = 1 << 20,
    .max_qp_rd_atom = 128,
    .max_res_rd_atom = 0x3f000,
    .max_qp_init_rd_atom = 128,
    .max_mw = (1 << 19) - 1,
    .max_mcast_grp = 8192,
    .max_mcast_qp_attach = 56,
    .max_total_mcast_qp_attach = 0x70000,
    .max_ah = (1 << 15) - 1,
    .max_srq = 0x40000 - 0x20001,
    .max_srq_wr = 1 << 20,
    .max_srq_sge = 27,
    .max_pkeys = 64,
    .local_ca_ack_delay = 15,
    .port = {.port_cap_flags = IBV_PORT_CM_SUP,
             .max_msg_sz = 0x800000,
             .active_width = 1,
             .active_speed = 1},  // 1x SDR
};

// A ConnectX-5 RoCE port (PCI 15b3:1017) as ibv_devinfo -v shows it with firmware 16.35.
constexpr RealDevice kMlx5{
    .name = "mlx5",
    .fw_ver = "16.35.2000",
    .vendor_id = 0x02c9,
    .vendor_part_id = 4119,
    .hw_ver = 0,
    .max_mr_size = UINT64_MAX,
    .page_size_cap = 0xfffffffffffff000ULL,
    .max_qp = 262144,
    .max_qp_wr = 32768,
    .device_cap_flags = 0xed721c36,
    .max_sge = 30,
    .max_sge_rd = 30,
    .max_cq = 16777216,
    .max_cqe = 4194303,
    .max_mr = 16777216,
    .max_pd = 16777216,
    .max_qp_rd_atom = 16,
    .max_res_rd_atom = 4194304,
    .max_qp_init_rd_atom = 16,
    .max_mw = 16777216,
    .max_mcast_grp = 2097152,
    .max_mcast_qp_attach = 240,
    .max_total_mcast_qp_attach = 503316480,
    .max_ah = INT_MAX,
    .max_srq = 8388608,
    .max_srq_wr = 32767,
    .max_srq_sge = 31,
    .max_pkeys = 128,
    .local_ca_ack_delay = 16,
    .port = {.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS,
             .max_msg_sz = 0x40000000,
             .active_width = 2,
             .active_speed = 32},  // 4x EDR
};

DeviceProfile make_real(const RealDevice& d) {
  DeviceProfile p = make_emu0();
  p.name = d.name;
  ibv_device_attr& a = p.attr;
  set_fw_ver(a, d.fw_ver);
  a.vendor_id = d.vendor_id;
  a.vendor_part_id = d.vendor_part_id;
  a.hw_ver = d.hw_ver;
  a.max_mr_size = d.max_mr_size;
  a.page_size_cap = d.page_size_cap;
  a.max_qp = d.max_qp;
  a.max_qp_wr = d.max_qp_wr;
  a.device_cap_flags = d.device_cap_flags;
  a.max_sge = d.max_sge;
  a.max_sge_rd = d.max_sge_rd;
  a.max_cq = d.max_cq;
  a.max_cqe = d.max_cqe;
  a.max_mr = d.max_mr;
  a.max_pd = d.max_pd;
  a.max_qp_rd_atom = d.max_qp_rd_atom;
  a.max_res_rd_atom = d.max_res_rd_atom;
  a.max_qp_init_rd_atom = d.max_qp_init_rd_atom;
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_mw = d.max_mw;
  a.max_mcast_grp = d.max_mcast_grp;
  a.max_mcast_qp_attach = d.max_mcast_qp_attach;
  a.max_total_mcast_qp_attach = d.max_total_mcast_qp_attach;
  a.max_ah = d.max_ah;
  a.max_srq = d.max_srq;
  a.max_srq_wr = d.max_srq_wr;
  a.max_srq_sge = d.max_srq_sge;
  a.max_pkeys = d.max_pkeys;
  a.local_ca_ack_delay = d.local_ca_ack_delay;
  p.port = d.port;
  return p;
}

// ---------------------------------------------------------------------------------------------
// The file form: one setter per documented key (docs/usage.md).

using Setter = void (*)(DeviceProfile&, uint64_t);

template <auto Member>
void set_attr(DeviceProfile& p, uint64_t v) {
  using Field = std::remove_reference_t<decltype(p.attr.*Member)>;
  p.attr.*Member = static_cast<Field>(v);
}

template <auto Member>
void set_port(DeviceProfile& p, uint64_t v) {
  using Field = std::remove_reference_t<decltype(p.port.*Member)>;
  p.port.*Member = static_cast<Field>(v);
}

struct NumericKey {
  const char* name;
  Setter set;
  uint64_t max;
};

constexpr uint64_t kU32 = UINT32_MAX, kInt = INT_MAX;

constexpr NumericKey kNumericKeys[] = {
    {"vendor_id", set_attr<&ibv_device_attr::vendor_id>, kU32},
    {"vendor_part_id", set_attr<&ibv_device_attr::vendor_part_id>, kU32},
    {"hw_ver", set_attr<&ibv_device_attr::hw_ver>, kU32},
    {"max_mr_size", set_attr<&ibv_device_attr::max_mr_size>, UINT64_MAX},
    {"page_size_cap", set_attr<&ibv_device_attr::page_size_cap>, UINT64_MAX},
    {"max_qp", set_attr<&ibv_device_attr::max_qp>, kInt},
    {"max_qp_wr", set_attr<&ibv_device_attr::max_qp_wr>, kInt},
    {"device_cap_flags", set_attr<&ibv_device_attr::device_cap_flags>, kU32},
    {"max_sge", set_attr<&ibv_device_attr::max_sge>, kInt},
    {"max_sge_rd", set_attr<&ibv_device_attr::max_sge_rd>, kInt},
    {"max_cq", set_attr<&ibv_device_attr::max_cq>, kInt},
    {"max_cqe", set_attr<&ibv_device_attr::max_cqe>, kInt},
    {"max_mr", set_attr<&ibv_device_attr::max_mr>, kInt},
    {"max_pd", set_attr<&ibv_device_attr::max_pd>, kInt},
    {"max_qp_rd_atom", set_attr<&ibv_device_attr::max_qp_rd_atom>, kInt},
    {"max_res_rd_atom", set_attr<&ibv_device_attr::max_res_rd_atom>, kInt},
    {"max_qp_init_rd_atom", set_attr<&ibv_device_attr::max_qp_init_rd_atom>, kInt},
    {"atomic_cap", set_attr<&ibv_device_attr::atomic_cap>, IBV_ATOMIC_GLOB},
    {"max_mw", set_attr<&ibv_device_attr::max_mw>, kInt},
    {"max_mcast_grp", set_attr<&ibv_device_attr::max_mcast_grp>, kInt},
    {"max_mcast_qp_attach", set_attr<&ibv_device_attr::max_mcast_qp_attach>, kInt},
    {"max_total_mcast_qp_attach", set_attr<&ibv_device_attr::max_total_mcast_qp_attach>, kInt},
    {"max_ah", set_attr<&ibv_device_attr::max_ah>, kInt},
    {"max_srq", set_attr<&ibv_device_attr::max_srq>, kInt},
    {"max_srq_wr", set_attr<&ibv_device_attr::max_srq_wr>, kInt},
    {"max_srq_sge", set_attr<&ibv_device_attr::max_srq_sge>, kInt},
    {"max_pkeys", set_attr<&ibv_device_attr::max_pkeys>, UINT16_MAX},
    {"local_ca_ack_delay", set_attr<&ibv_device_attr::local_ca_ack_delay>, 31},
    {"port_cap_flags", set_port<&PortProfile::port_cap_flags>, kU32},
    {"max_msg_sz", set_port<&PortProfile::max_msg_sz>, kU32},
    {"active_width", set_port<&PortProfile::active_width>, UINT8_MAX},
    {"active_speed", set_port<&PortProfile::active_speed>, UINT8_MAX},
};

std::string_view trim(std::string_view s) {
  const char* space = " \t\r";
  size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

// A decimal or 0x-hexadecimal number no larger than max, with nothing after it.
bool parse_number(std::string_view text, uint64_t max, uint64_t* out) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  std::string s(text);
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || end != s.c_str() + s.size() || v > max) return false;
  *out = v;
  return true;
}

// The encodings ibv_query_port(3) defines; anything else prints as "Invalid" in ibv_devinfo.
bool valid_width(uint64_t w) {
  return w == 1 || w == 2 || w == 4 || w == 8 || w == 16;
}
bool valid_speed(uint64_t s) {
  return s != 0 && s <= 128 && (s & (s - 1)) == 0;
}

template <typename T>
void clamp_limit(const char* name, T& value, T ceiling, std::vector<std::string>& notes) {
  if (value <= ceiling) return;
  notes.push_back(fmt::format("{} {} is above emu0's {}", name, value, ceiling));
  value = ceiling;
}

// A profile is a few dozen lines: a regular file of at most kMaxProfileFileBytes, so that a
// path such as /dev/zero or a FIFO cannot hold the first open of emu0.
constexpr std::streamsize kMaxProfileFileBytes = 64 * 1024;

bool read_profile_file(const char* path, std::string* text, std::string* error) {
  struct stat st {};
  if (::stat(path, &st) != 0) {
    *error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return false;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > kMaxProfileFileBytes) {
    *error =
        fmt::format("{} is not a regular file of at most {} bytes", path, kMaxProfileFileBytes);
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return false;
  }
  text->resize(kMaxProfileFileBytes + 1);
  in.read(text->data(), kMaxProfileFileBytes + 1);
  text->resize(static_cast<size_t>(in.gcount()));
  if (text->size() > static_cast<size_t>(kMaxProfileFileBytes)) {  // it grew since the stat
    *error =
        fmt::format("{} is not a regular file of at most {} bytes", path, kMaxProfileFileBytes);
    return false;
  }
  return true;
}

}  // namespace

const DeviceProfile& emu0_profile() {
  static const DeviceProfile profile = make_emu0();
  return profile;
}

std::optional<DeviceProfile> builtin_profile(std::string_view name) {
  if (name == "emu0") return make_emu0();
  if (name == kRxe.name) return make_real(kRxe);
  if (name == kMlx5.name) return make_real(kMlx5);
  return std::nullopt;
}

std::optional<DeviceProfile> parse_profile(std::string_view text, const std::string& origin,
                                           std::string* error) {
  DeviceProfile p = make_emu0();
  p.name = origin;
  int line_no = 0;
  bool seen_setting = false;
  auto fail = [&](const std::string& reason) -> std::optional<DeviceProfile> {
    *error = fmt::format("{}:{}: {}", origin, line_no, reason);
    return std::nullopt;
  };
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return fail("expected `key = value`");
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    if (key == "base") {
      if (seen_setting) return fail("`base` must come before every other key");
      auto base = builtin_profile(value);
      if (!base) return fail(fmt::format("unknown base profile '{}' (emu0, rxe, mlx5)", value));
      p = *base;
      p.name = origin;
      continue;
    }
    seen_setting = true;
    if (key == "fw_ver") {
      if (value.size() >= sizeof(p.attr.fw_ver)) return fail("fw_ver is longer than 63 bytes");
      set_fw_ver(p.attr, value);
      continue;
    }
    const NumericKey* found = nullptr;
    for (const NumericKey& k : kNumericKeys) {
      if (key == k.name) found = &k;
    }
    if (found == nullptr) return fail(fmt::format("unknown key '{}'", key));
    uint64_t number = 0;
    if (!parse_number(value, found->max, &number)) {
      return fail(fmt::format("{} = '{}' is not a number from 0 to {}", key, value, found->max));
    }
    if (key == "active_width" && !valid_width(number)) {
      return fail(fmt::format("active_width {} is not 1, 2, 4, 8 or 16", number));
    }
    if (key == "active_speed" && !valid_speed(number)) {
      return fail(fmt::format("active_speed {} is not a power of two up to 128", number));
    }
    found->set(p, number);
  }
  return p;
}

std::vector<std::string> clamp_to_engine(DeviceProfile& p) {
  std::vector<std::string> notes;
  const ibv_device_attr& e = emu0_profile().attr;
  ibv_device_attr& a = p.attr;
  clamp_limit("max_mr_size", a.max_mr_size, e.max_mr_size, notes);
  clamp_limit("max_qp", a.max_qp, e.max_qp, notes);
  clamp_limit("max_qp_wr", a.max_qp_wr, e.max_qp_wr, notes);
  clamp_limit("max_sge", a.max_sge, e.max_sge, notes);
  clamp_limit("max_sge_rd", a.max_sge_rd, e.max_sge_rd, notes);
  clamp_limit("max_cq", a.max_cq, e.max_cq, notes);
  clamp_limit("max_cqe", a.max_cqe, e.max_cqe, notes);
  clamp_limit("max_mr", a.max_mr, e.max_mr, notes);
  clamp_limit("max_pd", a.max_pd, e.max_pd, notes);
  clamp_limit("max_qp_rd_atom", a.max_qp_rd_atom, e.max_qp_rd_atom, notes);
  clamp_limit("max_res_rd_atom", a.max_res_rd_atom, e.max_res_rd_atom, notes);
  clamp_limit("max_qp_init_rd_atom", a.max_qp_init_rd_atom, e.max_qp_init_rd_atom, notes);
  clamp_limit("max_mw", a.max_mw, e.max_mw, notes);
  clamp_limit("max_mcast_grp", a.max_mcast_grp, e.max_mcast_grp, notes);
  clamp_limit("max_mcast_qp_attach", a.max_mcast_qp_attach, e.max_mcast_qp_attach, notes);
  clamp_limit("max_total_mcast_qp_attach", a.max_total_mcast_qp_attach, e.max_total_mcast_qp_attach,
              notes);
  clamp_limit("max_ah", a.max_ah, e.max_ah, notes);
  clamp_limit("max_srq", a.max_srq, e.max_srq, notes);
  clamp_limit("max_srq_wr", a.max_srq_wr, e.max_srq_wr, notes);
  clamp_limit("max_srq_sge", a.max_srq_sge, e.max_srq_sge, notes);
  clamp_limit("max_pkeys", a.max_pkeys, e.max_pkeys, notes);
  clamp_limit("max_msg_sz", p.port.max_msg_sz, emu0_profile().port.max_msg_sz, notes);
  if (a.atomic_cap > e.atomic_cap) {
    notes.push_back("atomic_cap: emu0's atomics are atomic within the HCA only: IBV_ATOMIC_HCA");
    a.atomic_cap = e.atomic_cap;
  }
  if (uint32_t dropped = a.device_cap_flags & ~e.device_cap_flags) {
    notes.push_back(fmt::format("device_cap_flags 0x{:x} are not emu0's: dropped", dropped));
    a.device_cap_flags &= e.device_cap_flags;
  }
  if (uint32_t dropped = p.port.port_cap_flags & ~kHonouredPortCapFlags) {
    notes.push_back(fmt::format("port_cap_flags 0x{:x} are not emu0's: dropped", dropped));
    p.port.port_cap_flags &= kHonouredPortCapFlags;
  }
  if (uint64_t kept = a.page_size_cap & e.page_size_cap; kept != a.page_size_cap) {
    notes.push_back(fmt::format("page_size_cap 0x{:x}: emu0 takes pages of 0x{:x}", a.page_size_cap,
                                e.page_size_cap));
    a.page_size_cap = kept != 0 ? kept : e.page_size_cap;
  }
  // The node, not the profile, decides these.
  a.node_guid = e.node_guid;
  a.sys_image_guid = e.sys_image_guid;
  a.phys_port_cnt = e.phys_port_cnt;
  return notes;
}

DeviceProfile resolve_profile(const char* value, std::string* error,
                              std::vector<std::string>* notes) {
  error->clear();
  notes->clear();
  if (value == nullptr || *value == '\0') return emu0_profile();
  std::optional<DeviceProfile> profile = builtin_profile(value);
  if (!profile) {
    if (std::strchr(value, '/') == nullptr) {
      *error = fmt::format("'{}' is neither a profile (emu0, rxe, mlx5) nor a file path", value);
      return emu0_profile();
    }
    std::string text;
    if (!read_profile_file(value, &text, error)) return emu0_profile();
    profile = parse_profile(text, value, error);
    if (!profile) return emu0_profile();
  }
  *notes = clamp_to_engine(*profile);
  return *profile;
}

const DeviceProfile& active_profile() {
  static const DeviceProfile profile = [] {
    const char* value = std::getenv("EMURDMA_PROFILE");
    std::string error;
    std::vector<std::string> notes;
    DeviceProfile p = resolve_profile(value, &error, &notes);
    if (!error.empty()) {
      spdlog::error("EMURDMA_PROFILE={}: {}; emu0 reports its own profile", value, error);
    }
    // One line for all the clamps: every process of a job prints it.
    if (!notes.empty())
      spdlog::warn("EMURDMA_PROFILE={}: clamped to what emu0 honours: {}", value,
                   fmt::join(notes, "; "));
    return p;
  }();
  return profile;
}

}  // namespace emu
