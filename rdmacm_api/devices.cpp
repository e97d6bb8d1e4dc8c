// rdma_get_devices / rdma_free_devices and the process's open devices (devices.h).
#include "rdmacm_api/devices.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "rdmacm_api/export.h"
#include "rdmacm_api/system_rdmacm.h"

namespace rdmacm_api {
namespace {

struct OpenDevice {
  ibv_context* context;
  ibv_pd* pd;  // the default PD, allocated on first use
};

struct DeviceTable {
  std::mutex mutex;
  bool opened = false;
  std::vector<OpenDevice> devices;
};

// Never destroyed: the contexts stay open for the process's life, as librdmacm's do until exit.
DeviceTable& device_table() {
  static DeviceTable* t = new DeviceTable;
  return *t;
}

constexpr const char* kSoftDevice = "emu0";

}  // namespace

int init_devices() {
  DeviceTable& t = device_table();
  std::lock_guard lock(t.mutex);
  if (!t.opened) {
    // Real devices' contexts are the system librdmacm's when it serves them (delegation.h):
    // the ids it makes for them hold those, and a PD of another context would not do.
    const system_cm::Library* system = system_cm::library();
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (list == nullptr) return ENODEV;
    for (int i = 0; i < count; ++i) {
      if (system != nullptr && std::strcmp(ibv_get_device_name(list[i]), kSoftDevice) != 0)
        continue;
      if (ibv_context* context = ibv_open_device(list[i])) t.devices.push_back({context, nullptr});
    }
    ibv_free_device_list(list);
    if (system != nullptr) {
      int system_count = 0;
      if (ibv_context** contexts = system->get_devices(&system_count)) {
        for (int i = 0; i < system_count; ++i) t.devices.push_back({contexts[i], nullptr});
        system->free_devices(contexts);  // the contexts stay open: the list alone is freed
      }
    }
    t.opened = true;
  }
  return t.devices.empty() ? ENODEV : 0;
}

std::vector<ibv_context*> device_contexts() {
  DeviceTable& t = device_table();
  std::lock_guard lock(t.mutex);
  std::vector<ibv_context*> contexts;
  for (const OpenDevice& d : t.devices) contexts.push_back(d.context);
  return contexts;
}

ibv_context* emu_device() {
  if (init_devices() != 0) return nullptr;
  for (ibv_context* context : device_contexts()) {
    if (std::strcmp(ibv_get_device_name(context->device), kSoftDevice) == 0) return context;
  }
  return nullptr;
}

ibv_pd* default_pd(ibv_context* context) {
  DeviceTable& t = device_table();
  std::lock_guard lock(t.mutex);
  for (OpenDevice& d : t.devices) {
    if (d.context != context) continue;
    if (d.pd == nullptr) d.pd = ibv_alloc_pd(context);
    return d.pd;
  }
  return nullptr;
}

}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  ibv_context** list = nullptr;
  std::vector<ibv_context*> contexts;
  if (init_devices() == 0) {
    contexts = device_contexts();
    list = static_cast<ibv_context**>(std::calloc(contexts.size() + 1, sizeof(ibv_context*)));
    if (list != nullptr) std::memcpy(list, contexts.data(), contexts.size() * sizeof(ibv_context*));
  } else {
    errno = ENODEV;
  }
  if (num_devices != nullptr)
    *num_devices = list != nullptr ? static_cast<int>(contexts.size()) : 0;
  return list;
}

RDMACM_EXPORT void rdma_free_devices(ibv_context** list) {
  std::free(list);
}
