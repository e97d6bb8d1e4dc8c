// The composition root: the one engine node of this process, built on the transport the
// environment chooses (transports/from_environment.h). The faces (verbs_api/, the tests'
// programs) open their contexts on it; the engine itself never picks a transport.
#pragma once

#include "emu/node.h"

namespace process {

// Created on first use, lives until the process exits; a forked child builds its own on its
// first use (it never uses the one it inherited). Throws std::system_error (EACCES) when
// no transport may be opened: a secret set but refused (transports/from_environment.h).
emu::Node& node();

}  // namespace process
