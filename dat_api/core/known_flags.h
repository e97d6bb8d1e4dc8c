// The DAT flag sets the provider accepts: a bit outside them is DAT_INVALID_PARAMETER. Shared
// by the LMR, RMR and DTO entry points, which check the same sets.
#pragma once

#include <dat2/udat.h>

#include <cstdint>

namespace dat_api {

// Remote atomic access: the IB extension's privilege (dat_ib_extensions.h names it
// DAT_IB_MEM_PRIV_REMOTE_ATOMIC), the first bit of the extension range.
inline constexpr DAT_UINT32 kRemoteAtomicPriv = DAT_MEM_PRIV_EXTENSION_BASE;
inline constexpr uint64_t kKnownPrivileges = DAT_MEM_PRIV_ALL_FLAG | kRemoteAtomicPriv;

// Every DAT 2.0 completion flag of a posted DTO or bind.
inline constexpr uint64_t kKnownCompletionFlags =
    DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
    DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG |
    DAT_COMPLETION_EVD_THRESHOLD_FLAG | DAT_COMPLETION_LMR_INVALIDATE_FENCE_FLAG;

}  // namespace dat_api
