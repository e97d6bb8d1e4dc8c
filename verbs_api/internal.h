// The verbs objects of emu0: each public ibv_* struct is the first member of a wrapper that
// points at its engine object, so the inline verbs of <infiniband/verbs.h> (which call through
// context->ops) reach the engine with one cast. Engine objects point back at their wrapper
// through ApiHandle::api, which is how events and completions are translated.
#pragma once

#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <memory>

// verbs.h turns these names into inline wrappers; this library defines the real functions.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#include "emu/objects.h"
#include "verbs_api/system_verbs.h"

// rdma-core's private interface (libibverbs/driver.h, not installed) that programs such as
// ibv_devinfo still call.
enum ibv_gid_type_sysfs {
  IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
  IBV_GID_TYPE_SYSFS_ROCE_V2,
};
extern "C" {
int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index,
                       enum ibv_gid_type_sysfs* type);
int ibv_dontfork_range(void* base, size_t size);
int ibv_dofork_range(void* base, size_t size);
}

namespace emu {
class Context;
class Cq;
class CompChannel;
class Qp;
class Srq;
}  // namespace emu

namespace verbs_api {

// The one soft device, and whether a device, context or object belongs to it.
ibv_device* emu_device();
inline bool is_emu_device(const ibv_device* device) {
  return device != nullptr && device == emu_device();
}
inline bool is_emu(const ibv_context* context) {
  return context != nullptr && is_emu_device(context->device);
}

struct EmuContext {
  verbs_context vctx;  // its `context` member is what programs hold
  emu::Context* engine = nullptr;
  // An imported context (ibv_import_device) shares the engine context of the one it imports:
  // the last of them to close destroys it.
  std::shared_ptr<emu::Context> engine_owner;
};
static_assert(offsetof(EmuContext, vctx) == 0);

inline EmuContext* to_emu(ibv_context* context) {
  return reinterpret_cast<EmuContext*>(reinterpret_cast<uint8_t*>(context) -
                                       offsetof(verbs_context, context));
}

struct EmuPd {
  ibv_pd pd{};
  emu::Pd* engine = nullptr;
};

struct EmuMr {
  ibv_mr mr{};
  emu::Mr* engine = nullptr;
};

struct EmuChannel {
  ibv_comp_channel channel{};
  emu::CompChannel* engine = nullptr;
};

// Every CQ is an ibv_cq_ex (whose prefix is ibv_cq), so ibv_create_cq_ex needs no other type.
struct EmuCq {
  ibv_cq_ex cq{};
  emu::Cq* engine = nullptr;
  uint32_t comp_events_reported = 0;   // under cq.mutex
  uint32_t async_events_reported = 0;  // under cq.mutex
  ibv_wc current{};                    // the completion start_poll/next_poll made current
  uint64_t current_stamp = 0;          // its completion time, on a CQ with timestamps
};

struct EmuSrq {
  ibv_srq srq{};
  emu::Srq* engine = nullptr;
  uint32_t events_reported = 0;  // under srq.mutex
};

struct WrBatch;  // qp_ex.cpp

struct EmuQp {
  ibv_qp_ex qpx{};  // qpx.qp_base is the ibv_qp programs hold
  emu::Qp* engine = nullptr;
  uint32_t events_reported = 0;  // under qpx.qp_base.mutex
  WrBatch* batch = nullptr;      // the ibv_wr_* API, when created with send_ops_flags
};

inline EmuPd* to_emu(ibv_pd* pd) {
  return reinterpret_cast<EmuPd*>(pd);
}
inline EmuMr* to_emu(ibv_mr* mr) {
  return reinterpret_cast<EmuMr*>(mr);
}
inline EmuChannel* to_emu(ibv_comp_channel* c) {
  return reinterpret_cast<EmuChannel*>(c);
}
inline EmuCq* to_emu(ibv_cq* cq) {
  return reinterpret_cast<EmuCq*>(cq);
}
inline EmuCq* to_emu(ibv_cq_ex* cq) {
  return reinterpret_cast<EmuCq*>(cq);
}
inline EmuSrq* to_emu(ibv_srq* srq) {
  return reinterpret_cast<EmuSrq*>(srq);
}
inline EmuQp* to_emu(ibv_qp* qp) {
  return reinterpret_cast<EmuQp*>(qp);
}
inline EmuQp* to_emu(ibv_qp_ex* qp) {
  return reinterpret_cast<EmuQp*>(qp);
}

// A new context over `engine`, whose command descriptor is cmd_fd (device_list.cpp); and the
// registry that finds the engine context a command descriptor (or a dup of it) names (import.cpp).
ibv_context* new_emu_context(std::shared_ptr<emu::Context> engine, int cmd_fd);
void remember_cmd_fd(int cmd_fd, const std::shared_ptr<emu::Context>& engine);

// The context operations the inline verbs use (context.cpp, objects_*.cpp).
void install_context_ops(EmuContext* ctx);
void install_cq_ex_ops(EmuCq* cq);                                         // cq_ex.cpp
int query_rt_values_op(ibv_context* context, ibv_values_ex* values);       // cq_ex.cpp
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);  // objects_cq.cpp
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);     // objects_qp.cpp
// The ibv_wr_* API of a QP created with send_ops_flags (qp_ex.cpp).
int attach_wr_api(EmuQp* qp, uint64_t send_ops_flags);
void detach_wr_api(EmuQp* qp);

// Sets errno and returns nullptr: the failure convention of the verbs that return objects.
template <typename T = void>
T* fail(int err) {
  errno = err;
  return nullptr;
}

// Waits until `completed` reaches `reported` (both under mutex), as destroy must before it
// frees an object whose events the program has not acknowledged (ibv_ack_cq_events(3)).
void wait_for_acks(pthread_mutex_t* mutex, pthread_cond_t* cond, const uint32_t* completed,
                   const uint32_t* reported);

}  // namespace verbs_api

// Delegates a call on an object of a real HCA: returns what the system library returns, or
// `error_result` with errno = ENOSYS when there is no system library to hand it to. On
// `error_result` the errno the system library set (in its namespace's libc) becomes ours.
#define EMURDMA_DELEGATE(name, version, error_result, ...)                       \
  do {                                                                           \
    auto* system_fn = EMURDMA_SYSTEM_FN(name, version);                          \
    if (system_fn == nullptr) {                                                  \
      errno = ENOSYS;                                                            \
      return error_result;                                                       \
    }                                                                            \
    auto delegated_result = system_fn(__VA_ARGS__);                              \
    if (delegated_result == (error_result)) errno = ::verbs_api::system_errno(); \
    return delegated_result;                                                     \
  } while (0)

// The same for verbs that return an errno value instead of setting errno.
#define EMURDMA_DELEGATE_ERRNO(name, version, ...)      \
  do {                                                  \
    auto* system_fn = EMURDMA_SYSTEM_FN(name, version); \
    if (system_fn == nullptr) return ENOSYS;            \
    return system_fn(__VA_ARGS__);                      \
  } while (0)

#define EMURDMA_EXPORT extern "C" __attribute__((visibility("default")))

// Binds a function defined in this file as name@@IBVERBS_1.1, for the names that also exist as
// name@IBVERBS_1.0 (those are listed in both nodes of libibverbs.map, and the linker would
// otherwise give the unversioned definition the first node's version).
#define EMURDMA_DEFAULT_VERSION_1_1(name) \
  __asm__(".symver " #name "," #name "@@IBVERBS_1.1,remove");
