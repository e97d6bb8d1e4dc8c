// dat_extension_op for the IB extensions: decodes the variable arguments of each operation
// (their order is the dat_ib_post_* macros' of dat_ib_extensions.h), validates them and posts
// through the endpoint's send queue like a core DTO (dto_post.cpp: post_request), with the
// extended operation recorded so that its completion becomes a DAT_IB_DTO_EVENT.
//
// Argument positions in DAT_INVALID_PARAMETER subtypes count the dat_extension_op call: the
// handle is ARG1, the operation ARG2, the macro's next argument ARG3, and so on.
#include <arpa/inet.h>

#include "dat_api/core/errors.h"
#include "dat_api/ep/dto.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ext/ext_counters.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

namespace {

constexpr DAT_SEG_LENGTH kAtomicSize = sizeof(uint64_t);  // IB atomics act on 64 bits

// The completion flags travel as a promoted enum: read as an integer, checked through its
// bits before it becomes a DAT_COMPLETION_FLAGS.
bool read_flags(va_list args, DAT_COMPLETION_FLAGS* flags) {
  const unsigned bits = va_arg(args, unsigned);
  if (!dto_known_flag_bits(bits)) return false;
  *flags = static_cast<DAT_COMPLETION_FLAGS>(bits);
  return true;
}

// dat_ib_post_rdma_write_immed(ep, size, lbuf, cookie, rbuf, idata, flags)
DAT_RETURN rdma_write_immed(const std::shared_ptr<Ep>& ep, va_list args) {
  const DAT_COUNT segments = va_arg(args, DAT_COUNT);
  const DAT_LMR_TRIPLET* local = va_arg(args, DAT_LMR_TRIPLET*);
  const DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
  const DAT_RMR_TRIPLET* remote = va_arg(args, DAT_RMR_TRIPLET*);
  const DAT_UINT32 immed = va_arg(args, DAT_UINT32);
  DAT_COMPLETION_FLAGS flags{};
  if (remote == nullptr) return invalid_arg(6);
  if (!read_flags(args, &flags)) return invalid_arg(8);
  RequestExt ext;
  ext.op = ExtOp::kRdmaWriteImmed;
  ext.imm_data = htonl(immed);
  ext.segments_arg = 3;
  return post_request(
      ep, {segments, local, cookie, flags, remote, IBV_WR_RDMA_WRITE_WITH_IMM, DAT_DTO_RDMA_WRITE},
      &ext);
}

// The common part of both atomics: `local_arg` is the position of the local triplet (the
// cookie, the remote triplet and the flags follow it).
DAT_RETURN atomic(const std::shared_ptr<Ep>& ep, va_list args, int local_arg, ExtOp op,
                  uint64_t compare_add, uint64_t swap) {
  const DAT_LMR_TRIPLET* local = va_arg(args, DAT_LMR_TRIPLET*);
  const DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
  const DAT_RMR_TRIPLET* remote = va_arg(args, DAT_RMR_TRIPLET*);
  DAT_COMPLETION_FLAGS flags{};
  if (local == nullptr) return invalid_arg(local_arg);
  if (remote == nullptr) return invalid_arg(local_arg + 2);
  if (!read_flags(args, &flags)) return invalid_arg(local_arg + 3);
  // The original value lands in 8 bytes of the local segment; the target is 8 naturally
  // aligned bytes (IBA 9.4.5: a misaligned atomic is an invalid request).
  if (local->segment_length < kAtomicSize || remote->segment_length < kAtomicSize) {
    return dat_error(DAT_LENGTH_ERROR);
  }
  if (remote->virtual_address % kAtomicSize != 0) return invalid_arg(local_arg + 2);
  if (ep->ia()->device_attr().atomic_cap == IBV_ATOMIC_NONE) {
    return dat_error(DAT_MODEL_NOT_SUPPORTED);
  }
  DAT_LMR_TRIPLET sink = *local;
  sink.segment_length = kAtomicSize;
  RequestExt ext;
  ext.op = op;
  ext.compare_add = compare_add;
  ext.swap = swap;
  ext.segments_arg = local_arg - 1;  // never named: one segment, checked above
  const ibv_wr_opcode opcode =
      op == ExtOp::kCmpAndSwap ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
  // The IOV limit of an RDMA read applies: data come back into local memory.
  return post_request(ep, {1, &sink, cookie, flags, remote, opcode, DAT_DTO_RDMA_READ}, &ext);
}

}  // namespace

DAT_RETURN ext_extension_op(DAT_HANDLE handle, DAT_EXTENDED_OP op, va_list args) {
  switch (op) {
    case DAT_IB_RDMA_WRITE_IMMED_OP:
    case DAT_IB_CMP_AND_SWAP_OP:
    case DAT_IB_FETCH_AND_ADD_OP:
    case DAT_IB_UD_SEND_OP:
    case DAT_IB_UD_CM_FREE_OP:
    case DAT_IB_UD_AH_FREE_OP:
      break;
    // The counters (advertised: DAT_COUNTERS) take an IA, EP or EVD: ext_counters.cpp.
    case DAT_IB_QUERY_COUNTERS_OP:
      return ext_query_counters(handle, args);
    case DAT_IB_PRINT_COUNTERS_OP:
      return ext_print_counters(handle, args);
    case DAT_IB_START_COUNTERS_OP:
    case DAT_IB_STOP_COUNTERS_OP:
      return ext_start_stop_counters(handle, args);
    default:
      // Collectives (not advertised either) and numbers the extension does not define.
      if (op >= DAT_IB_COLLECTIVE_CREATE_MEMBER_OP && op <= DAT_IB_COLLECTIVE_BARRIER_OP) {
        return not_implemented();
      }
      return invalid_arg(2);
  }
  auto ep = Handles::get<Ep>(handle);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  switch (op) {
    case DAT_IB_RDMA_WRITE_IMMED_OP:
      return rdma_write_immed(ep, args);
    case DAT_IB_CMP_AND_SWAP_OP: {
      const DAT_UINT64 compare = va_arg(args, DAT_UINT64);
      const DAT_UINT64 swap = va_arg(args, DAT_UINT64);
      return atomic(ep, args, 5, ExtOp::kCmpAndSwap, compare, swap);
    }
    case DAT_IB_FETCH_AND_ADD_OP: {
      const DAT_UINT64 add = va_arg(args, DAT_UINT64);
      return atomic(ep, args, 4, ExtOp::kFetchAndAdd, add, 0);
    }
    case DAT_IB_UD_SEND_OP:
      return ext_post_send_ud(ep, args);
    case DAT_IB_UD_CM_FREE_OP:
      return ext_ud_cm_free(ep, args);
    default:  // DAT_IB_UD_AH_FREE_OP
      return ext_ud_ah_free(ep, args);
  }
}

}  // namespace dat_api
