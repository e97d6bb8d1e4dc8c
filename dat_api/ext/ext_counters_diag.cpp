// The IA's DCNT_IA_DIAG_* counters, from the device counters of emu0 (emu_query_counters,
// scope EMU_COUNTERS_DEVICE: every QP's counts summed, destroyed ones included). Each DIAG
// counter is the receive (RQ: this side as responder) or send (SQ: this side as requester)
// queue's count of one error kind, as the ConnectX diagnostic counters dapl reads:
//   RQ_RAE  remote access errors answered       resp_remote_access_errors
//   RQ_OOS  out-of-sequence requests             out_of_seq_request
//   RQ_RIRE invalid requests answered            resp_invalid_request
//   RQ_UDSDPRD UD datagrams dropped (no receive) out_of_buffer
//   SQ_RAE  remote access errors received        req_remote_access_errors
//   SQ_RIRE invalid request NAKs received        req_remote_invalid_request
//   SQ_RREE remote operation errors received     req_remote_operation_errors
//   SQ_TREE transport retries exceeded           retry_exceeded_err
//   SQ_OOS  out-of-sequence NAKs received: emu0's responder drops a request ahead of sequence
//           without a NAK (the requester's timer retries), so this stays 0.
// The device counts from the process's start (every IA of the process shares it); a reset takes
// the value as the IA's baseline, so the IA reports what happened since.
#include <cstring>

#include "dat_api/core/ia.h"
#include "dat_api/core/verbs_extension.h"
#include "dat_api/ext/ext_counters.h"
#include "verbs_api/emurdma_verbs.h"

namespace dat_api {

namespace {

constexpr int kFirstDiag = DCNT_IA_DIAG_ERR_RQ_RAE;

// The emu0 counter behind each DIAG counter, in enum order (nullptr: none).
constexpr const char* kSource[DCNT_IA_ALL_COUNTERS - kFirstDiag] = {
    "resp_remote_access_errors",    // RQ_RAE
    "out_of_seq_request",           // RQ_OOS
    "resp_invalid_request",         // RQ_RIRE
    "out_of_buffer",                // RQ_UDSDPRD
    "req_remote_access_errors",     // SQ_RAE
    nullptr,                        // SQ_OOS
    "req_remote_invalid_request",   // SQ_RIRE
    "req_remote_operation_errors",  // SQ_RREE
    "retry_exceeded_err",           // SQ_TREE
};

using QueryFn = decltype(&emu_query_counters);

// The device's current value of `name`; 0 when it cannot tell.
uint64_t device_value(ibv_context* context, const char* name) {
  static QueryFn fn = reinterpret_cast<QueryFn>(verbs_extension_symbol("emu_query_counters"));
  if (fn == nullptr || context == nullptr || name == nullptr) return 0;
  constexpr size_t kMax = 128;  // more than the device scope's counters (emu/counters.h)
  emu_counter out[kMax];
  size_t count = kMax;
  if (fn(context, EMU_COUNTERS_DEVICE, nullptr, out, &count) != 0) return 0;  // EOPNOTSUPP...
  for (size_t i = 0; i < count && i < kMax; ++i) {
    if (out[i].name != nullptr && std::strcmp(out[i].name, name) == 0) return out[i].value;
  }
  return 0;
}

}  // namespace

bool ia_diag_counter(int index) {
  return index >= kFirstDiag && index < DCNT_IA_ALL_COUNTERS;
}

uint64_t ia_read_diag(Ia& ia, int index, bool reset) {
  const size_t slot = static_cast<size_t>(index);
  const uint64_t now = device_value(ia.context(), kSource[index - kFirstDiag]);
  // The IA's own counter of a DIAG index holds the device's value at the last reset.
  const uint64_t base = reset ? ia.counters.exchange(slot, now) : ia.counters.get(slot);
  return now >= base ? now - base : 0;
}

}  // namespace dat_api
