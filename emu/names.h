// Names of verbs enumerations for log lines. The engine cannot call libibverbs's own
// ibv_*_str functions: the library it is linked into is libibverbs.
#pragma once

#include <infiniband/verbs.h>

namespace emu {

const char* event_name(ibv_event_type type);
const char* wc_status_name(ibv_wc_status status);

}  // namespace emu
