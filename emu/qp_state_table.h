// The QP state machine of the InfiniBand specification (chapter 10.3): which transitions
// exist for each transport type, and which attributes each one requires or permits.
#pragma once

#include <infiniband/verbs.h>

namespace emu {

struct TransitionMasks {
  int required = 0;
  int optional = 0;
};

// Returns false when the transition cur -> next does not exist for type.
bool qp_transition(ibv_qp_type type, ibv_qp_state cur, ibv_qp_state next, TransitionMasks* out);

}  // namespace emu
