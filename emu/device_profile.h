// What emu0 says it is: the attributes, limits and vendor ids that ibv_query_device(_ex) and
// ibv_query_port report. The default profile is emu0's own (the engine's limits); a named one
// (EMURDMA_PROFILE=rxe|mlx5) or a file of `key = value` lines makes emu0 report what a real
// device reports, clamped to what the engine can honour (docs/usage.md, "Device profiles").
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace emu {

// The completion timestamp clock of ibv_query_device_ex (hca_core_clock, kHz): completion
// timestamps (emu/cq.h, completion_clock_ns) count nanoseconds, a 1 GHz device clock, and
// completion_timestamp_mask is then all 64 bits.
inline constexpr uint64_t kHcaCoreClockKhz = 1'000'000;

// The vendor ids of emu0's own profile. 0x02E00D is the first three bytes of emu0's node GUID
// (0x02e00dfffe000001): an OUI with the locally-administered bit set, which the IEEE never
// assigns, so it names no real vendor; soft-RoCE (0xFFFFFF) and siw (0x626D74) also use
// values outside the assigned range. Middleware keys its device tables on the PCI ids of
// sysfs, which a soft device does not have (UCX 1.13: uct_ib_device_spec), so this selects
// no vendor-specific path anywhere.
inline constexpr uint32_t kEmu0VendorId = 0x02E00D;
inline constexpr uint32_t kEmu0VendorPartId = 1;

// The port attributes a profile may change; the rest belong to the engine (one GID, one
// P_Key, RoCE, MTU 4096, active).
struct PortProfile {
  uint32_t port_cap_flags = 0;
  uint32_t max_msg_sz = 0;
  uint8_t active_width = 0;
  uint8_t active_speed = 0;
};

struct DeviceProfile {
  std::string name;        // "emu0", "rxe", "mlx5" or the file's path
  ibv_device_attr attr{};  // node_guid, sys_image_guid and phys_port_cnt are always emu0's
  PortProfile port;
};

// emu0's own profile: the engine's limits and capabilities, the ceiling of every other one.
const DeviceProfile& emu0_profile();

// A built-in profile as the real device reports it (before clamping), or nullopt.
std::optional<DeviceProfile> builtin_profile(std::string_view name);

// Parses the file form: `key = value` lines, `#` comments, blank lines; `base = <name>` (first)
// starts from a built-in profile, else from emu0's. On a bad line returns nullopt and sets
// *error to "<origin>:<line>: <reason>".
std::optional<DeviceProfile> parse_profile(std::string_view text, const std::string& origin,
                                           std::string* error);

// Lowers every limit above emu0's to emu0's and drops the capability bits the engine lacks;
// returns one line per change, for the log.
std::vector<std::string> clamp_to_engine(DeviceProfile& profile);

// The profile EMURDMA_PROFILE names (nullptr or "" = emu0): a built-in name or a file path.
// An unknown name or a bad file gives emu0's own profile and sets *error (the reason); clamps
// are reported in *notes. Pure: the caller logs.
DeviceProfile resolve_profile(const char* value, std::string* error,
                              std::vector<std::string>* notes);

// The process's profile: EMURDMA_PROFILE resolved once, its error and clamps logged once.
const DeviceProfile& active_profile();

}  // namespace emu
