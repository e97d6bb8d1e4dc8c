// The device list: emu0 first (unless EMURDMA_DEVICES=hw), then the system's devices (unless
// EMURDMA_DEVICES=soft), and the verbs that open, close and name a device.
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <system_error>

#include "base/log.h"
#include "emu/context.h"
#include "emu/node.h"
#include "process/process_node.h"
#include "verbs_api/internal.h"

#ifndef EMURDMA_DEVICE_NAME
#define EMURDMA_DEVICE_NAME "emu0"
#endif

namespace verbs_api {

namespace {

ibv_device make_device() {
  ibv_device d{};
  d.node_type = IBV_NODE_CA;
  d.transport_type = IBV_TRANSPORT_IB;  // RoCE devices report the IB transport
  std::snprintf(d.name, sizeof(d.name), "%s", EMURDMA_DEVICE_NAME);
  std::snprintf(d.dev_name, sizeof(d.dev_name), "uverbs_%s", EMURDMA_DEVICE_NAME);
  // No sysfs entry exists for a soft device: reads under these paths fail cleanly.
  std::snprintf(d.dev_path, sizeof(d.dev_path), "/sys/class/infiniband_verbs/uverbs_%s",
                EMURDMA_DEVICE_NAME);
  std::snprintf(d.ibdev_path, sizeof(d.ibdev_path), "/sys/class/infiniband/%s",
                EMURDMA_DEVICE_NAME);
  return d;
}

// A merged list remembers the system list whose devices it holds, which must stay alive (and
// be freed by the system library) as long as the merged list does.
struct ListBlock {
  ibv_device** system_list;
  ibv_device* devices[];  // NULL-terminated, allocated to size
};

ListBlock* block_of(ibv_device** list) {
  return reinterpret_cast<ListBlock*>(reinterpret_cast<uint8_t*>(list) -
                                      offsetof(ListBlock, devices));
}

}  // namespace

ibv_device* emu_device() {
  static ibv_device device = make_device();
  return &device;
}

}  // namespace verbs_api

using namespace verbs_api;

EMURDMA_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  base::init_logging();
  const DeviceSelection selection = device_selection();
  ibv_device** system_list = nullptr;
  int system_count = 0;
  if (selection != DeviceSelection::kSoft) {
    if (auto* fn = EMURDMA_SYSTEM_FN(ibv_get_device_list, "IBVERBS_1.1")) {
      system_list = fn(&system_count);
      if (system_list == nullptr) system_count = 0;
    }
  }
  const int own = selection == DeviceSelection::kHw ? 0 : 1;
  const int total = own + system_count;
  auto* block = static_cast<ListBlock*>(
      std::calloc(1, offsetof(ListBlock, devices) + sizeof(ibv_device*) * (total + 1)));
  if (block == nullptr) {
    if (system_list != nullptr) {
      if (auto* release = EMURDMA_SYSTEM_FN(ibv_free_device_list, "IBVERBS_1.1")) {
        release(system_list);
      }
    }
    errno = ENOMEM;
    return nullptr;
  }
  block->system_list = system_list;
  int n = 0;
  if (own != 0) block->devices[n++] = emu_device();
  for (int i = 0; i < system_count; ++i) block->devices[n++] = system_list[i];
  block->devices[n] = nullptr;
  if (num_devices != nullptr) *num_devices = n;
  return block->devices;
}

EMURDMA_EXPORT void ibv_free_device_list(ibv_device** list) {
  if (list == nullptr) return;
  ListBlock* block = block_of(list);
  if (block->system_list != nullptr) {
    if (auto* release = EMURDMA_SYSTEM_FN(ibv_free_device_list, "IBVERBS_1.1")) {
      release(block->system_list);
    }
  }
  std::free(block);
}

EMURDMA_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  if (device == nullptr) return fail<const char>(EINVAL);
  if (is_emu_device(device)) return device->name;
  EMURDMA_DELEGATE(ibv_get_device_name, "IBVERBS_1.1", nullptr, device);
}

EMURDMA_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  if (device == nullptr) {
    errno = EINVAL;
    return 0;
  }
  if (is_emu_device(device)) return emu::Context::device_attr().node_guid;
  EMURDMA_DELEGATE(ibv_get_device_guid, "IBVERBS_1.1", 0, device);
}

EMURDMA_EXPORT int ibv_get_device_index(ibv_device* device) {
  if (device == nullptr) return -1;
  if (is_emu_device(device)) return 0;
  EMURDMA_DELEGATE(ibv_get_device_index, "IBVERBS_1.9", -1, device);
}

ibv_context* verbs_api::new_emu_context(std::shared_ptr<emu::Context> engine, int cmd_fd) {
  auto* ctx = new (std::nothrow) EmuContext();
  if (ctx == nullptr) return fail<ibv_context>(ENOMEM);
  ctx->engine = engine.get();
  ctx->engine_owner = std::move(engine);
  ibv_context& c = ctx->vctx.context;
  c.device = emu_device();
  c.cmd_fd = cmd_fd;
  c.async_fd = ctx->engine->async_events().fd();
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx->vctx.sz = sizeof(verbs_context);
  install_context_ops(ctx);
  return &c;
}

EMURDMA_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  if (device == nullptr) return fail<ibv_context>(EINVAL);
  if (!is_emu_device(device)) {
    EMURDMA_DELEGATE(ibv_open_device, "IBVERBS_1.1", nullptr, device);
  }
  base::init_logging();
  std::shared_ptr<emu::Context> engine;
  try {
    // The node (and its transport) is created on the first open of emu0.
    engine = std::make_shared<emu::Context>(process::node());
  } catch (const std::system_error& e) {
    // EACCES: the job's secret is refused (logged with the variable and the reason).
    spdlog::error("ibv_open_device({}): {}", device->name, e.what());
    return fail<ibv_context>(e.code().value());
  } catch (const std::exception& e) {
    spdlog::error("ibv_open_device({}): {}", device->name, e.what());
    return fail<ibv_context>(ENODEV);
  }
  // The command descriptor names the context, as a uverbs descriptor does: a dup of it
  // imports the context (ibv_import_device, import.cpp). A memfd has an inode of its own.
  const int cmd_fd = ::memfd_create("emurdma-context", MFD_CLOEXEC);
  if (cmd_fd < 0) {
    const int err = errno;
    spdlog::error("ibv_open_device({}): memfd_create: {}", device->name, std::strerror(err));
    return fail<ibv_context>(err);
  }
  remember_cmd_fd(cmd_fd, engine);
  ibv_context* context = new_emu_context(std::move(engine), cmd_fd);
  if (context == nullptr) ::close(cmd_fd);
  return context;
}

EMURDMA_EXPORT int ibv_close_device(ibv_context* context) {
  if (context == nullptr) return EINVAL;
  if (!is_emu(context)) EMURDMA_DELEGATE_ERRNO(ibv_close_device, "IBVERBS_1.1", context);
  EmuContext* ctx = to_emu(context);
  ::close(context->cmd_fd);
  ctx->engine_owner.reset();  // the last context over the engine destroys it
  pthread_mutex_destroy(&context->mutex);
  delete ctx;
  return 0;
}

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_close_device)
EMURDMA_DEFAULT_VERSION_1_1(ibv_free_device_list)
EMURDMA_DEFAULT_VERSION_1_1(ibv_get_device_guid)
EMURDMA_DEFAULT_VERSION_1_1(ibv_get_device_list)
EMURDMA_DEFAULT_VERSION_1_1(ibv_get_device_name)
EMURDMA_DEFAULT_VERSION_1_1(ibv_open_device)
