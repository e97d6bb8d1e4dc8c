// Fixed limits of the emulated device. They size the preallocated work-queue slots, so that
// posting never allocates; docs/architecture.md explains the memory each one costs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace emu {

inline constexpr uint32_t kMaxSge = 16;               // scatter/gather entries per work request
inline constexpr uint32_t kMaxInline = kMaxSge * 16;  // inline bytes fit where the SGEs would be
inline constexpr uint32_t kMaxQp = 16384;             // QP table slots per node (QPN low bits)
inline constexpr uint32_t kMaxQpWr = 16384;
inline constexpr uint32_t kMaxCq = 16384;
// libfabric's ofi_rxm opens one verbs CQ of (128 + 128) x FI_UNIVERSE_SIZE (1024) = 262,144
// entries by default, which real HCAs take (mlx5: 4,194,303); room for a universe of 4096. A CQ
// costs 64 bytes per entry, allocated when it is created: only a program that asks pays.
inline constexpr uint32_t kMaxCqe = uint32_t{1} << 20;
inline constexpr uint32_t kMaxMr = 65536;
inline constexpr uint32_t kMaxPd = 16384;
inline constexpr uint32_t kMaxSrq = 4096;
inline constexpr uint32_t kMaxSrqWr = 16384;
inline constexpr uint32_t kMaxAh = 65536;
inline constexpr uint32_t kMaxMw = 16384;  // windows share the region table's slots
inline constexpr uint32_t kMaxQpRdAtomic = 16;
// GID table entries per port. Only index 0 holds a GID (the node's address); the others are
// empty, as a RoCE port's table has room for more addresses than its netdev has (rxe: 1024,
// mlx5: 256): ibv_query_gid gives zeros there, ibv_query_gid_ex ENODATA.
inline constexpr uint32_t kGidTableLength = 16;
inline constexpr uint64_t kMaxMrSize = uint64_t{1} << 40;
inline constexpr uint32_t kMaxMsgSize = uint32_t{1} << 31;
inline constexpr uint32_t kMtuBytes = 4096;     // active MTU, the UD message limit
inline constexpr uint32_t kGrhBytes = 40;       // UD receive buffers start with a GRH
inline constexpr uint32_t kPsnMask = 0xffffff;  // PSNs are 24 bits, as on the wire of IB

}  // namespace emu
