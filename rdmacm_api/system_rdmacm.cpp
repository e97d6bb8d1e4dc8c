// The system librdmacm (system_rdmacm.h).
#include "rdmacm_api/system_rdmacm.h"

#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "cm/cm_log.h"
#include "verbs_api/emurdma_verbs.h"

namespace rdmacm_api::system_cm {
namespace {

constexpr const char* kSoftDevice = "emu0";

// Whether the device list (ours: emu0 first, then the system's devices unless
// EMURDMA_DEVICES=soft) names a device that is not emu0.
bool has_real_device() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) return false;
  bool found = false;
  for (int i = 0; i < count && !found; ++i) {
    found = std::strcmp(ibv_get_device_name(list[i]), kSoftDevice) != 0;
  }
  ibv_free_device_list(list);
  return found;
}

template <class F>
bool resolve(void* handle, const char* name, F*& out) {
  out = reinterpret_cast<F*>(::dlsym(handle, name));
  if (out == nullptr)
    cm::logger().warn("the system librdmacm has no {}: real HCAs are not offered", name);
  return out != nullptr;
}

const Library* load() {
  if (!has_real_device()) return nullptr;
  // Linked by name to "libibverbs.so.1", which is ours when emurdma runs the program (and the
  // system's at link time): looked up, not linked.
  using SystemLibrary = decltype(&emu_system_library);
  auto* system_library =
      reinterpret_cast<SystemLibrary>(::dlsym(RTLD_DEFAULT, "emu_system_library"));
  if (system_library == nullptr) return nullptr;
  void* handle = system_library("librdmacm.so.1");
  if (handle == nullptr) return nullptr;
  static Library l;
  bool ok =
      resolve(handle, "rdma_create_event_channel", l.create_event_channel) &&
      resolve(handle, "rdma_destroy_event_channel", l.destroy_event_channel) &&
      resolve(handle, "rdma_get_cm_event", l.get_cm_event) &&
      resolve(handle, "rdma_ack_cm_event", l.ack_cm_event) &&
      resolve(handle, "rdma_create_id", l.create_id) &&
      resolve(handle, "rdma_destroy_id", l.destroy_id) &&
      resolve(handle, "rdma_bind_addr", l.bind_addr) &&
      resolve(handle, "rdma_resolve_addr", l.resolve_addr) &&
      resolve(handle, "rdma_resolve_route", l.resolve_route) &&
      resolve(handle, "rdma_listen", l.listen) && resolve(handle, "rdma_connect", l.connect) &&
      resolve(handle, "rdma_accept", l.accept) && resolve(handle, "rdma_reject", l.reject) &&
      resolve(handle, "rdma_disconnect", l.disconnect) &&
      resolve(handle, "rdma_establish", l.establish) && resolve(handle, "rdma_notify", l.notify) &&
      resolve(handle, "rdma_set_option", l.set_option) &&
      resolve(handle, "rdma_create_qp", l.create_qp) &&
      resolve(handle, "rdma_create_qp_ex", l.create_qp_ex) &&
      resolve(handle, "rdma_destroy_qp", l.destroy_qp) &&
      resolve(handle, "rdma_create_srq", l.create_srq) &&
      resolve(handle, "rdma_create_srq_ex", l.create_srq_ex) &&
      resolve(handle, "rdma_destroy_srq", l.destroy_srq) &&
      resolve(handle, "rdma_init_qp_attr", l.init_qp_attr) &&
      resolve(handle, "rdma_join_multicast", l.join_multicast) &&
      resolve(handle, "rdma_join_multicast_ex", l.join_multicast_ex) &&
      resolve(handle, "rdma_leave_multicast", l.leave_multicast) &&
      resolve(handle, "rdma_set_local_ece", l.set_local_ece) &&
      resolve(handle, "rdma_get_remote_ece", l.get_remote_ece) &&
      resolve(handle, "rdma_reject_ece", l.reject_ece) &&
      resolve(handle, "rdma_get_devices", l.get_devices) &&
      resolve(handle, "rdma_free_devices", l.free_devices) &&
      resolve(handle, "__errno_location", l.errno_location);
  return ok ? &l : nullptr;
}

}  // namespace

int result(const Library& l, int returned) {
  if (returned == 0) return 0;
  errno = *l.errno_location();
  return -1;
}

const Library* library() {
  static const Library* const l = load();
  return l;
}

}  // namespace rdmacm_api::system_cm
