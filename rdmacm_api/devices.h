// The devices rdma_cm ids use: every device of ibv_get_device_list (through whichever
// libibverbs.so.1 the loader bound: ours lists emu0), each opened once per process and shared
// by the ids (id->verbs), with a default PD per context (id->pd, as librdmacm allocates one).
#pragma once

#include <infiniband/verbs.h>

#include <vector>

namespace rdmacm_api {

// Opens the devices on first use. 0, or ENODEV when there is none (librdmacm's ucma_init).
int init_devices();
// The open contexts, in the list's order.
std::vector<ibv_context*> device_contexts();
// The device the soft addresses belong to (emu0), or nullptr.
ibv_context* emu_device();
// The context's default PD (allocated once), or nullptr.
ibv_pd* default_pd(ibv_context* context);

}  // namespace rdmacm_api
