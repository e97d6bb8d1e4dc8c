// spdlog set-up: the level comes from EMURDMA_LOG (trace, debug, info, warn, error, off;
// default warn), read once. Hot paths log only at debug and below, so they cost one branch.
#pragma once

namespace base {

void init_logging();

}  // namespace base
