// The system's rdma-core, for devices that are not ours (real HCAs). It is loaded once, on
// first use, with dlmopen(LM_ID_NEWLM) so that its providers bind to it and not to us, and
// every call on one of its objects is handed to it by name and symbol version.
#pragma once

namespace verbs_api {

// EMURDMA_DEVICES: soft = emu0 only, hw = the system's devices only, all (default) = both,
// emu0 first. Read once; an unknown value is logged (error) and taken as all. A build with
// EMURDMA_NO_SYSTEM_VERBS (the delegation test's stand-in) always answers kSoft.
enum class DeviceSelection { kSoft, kHw, kAll };
DeviceSelection device_selection();

// The address of name@version in the system libibverbs, or nullptr when delegation is off
// (EMURDMA_DEVICES=soft), no system library could be loaded, or it lacks the symbol.
// The first call loads the system library (dlmopen of a second libc and rdma-core: about a
// millisecond), so call it only once a system device is wanted, from ibv_get_device_list
// when device_selection() != kSoft; a program on emu0 alone then never loads it.
// The system ibv_get_device_list answers NULL (errno set) on a host without RDMA devices:
// that is zero system devices, not an error to pass on.
void* system_symbol(const char* name, const char* version);

// Another system rdma-core library (librdmacm.so.1) loaded into the system libibverbs' link-map
// namespace, so that the objects it makes are that library's and our forwarding verbs accept
// them; nullptr when delegation is off, the system libibverbs did not load, or `soname` is not
// found in the system's library directories (logged). Loaded once per name.
void* system_companion(const char* soname);

// The calling thread's errno in the system library's namespace, which has a libc (and so an
// errno) of its own: what a failed system call set. EIO when it cannot be read.
int system_errno();

}  // namespace verbs_api

// The system's implementation of a public verb, resolved once: EMURDMA_SYSTEM_FN(ibv_alloc_pd,
// "IBVERBS_1.1") has the type of &ibv_alloc_pd and may be null.
#define EMURDMA_SYSTEM_FN(name, version)                                                 \
  ([] {                                                                                  \
    static auto* const resolved =                                                        \
        reinterpret_cast<decltype(&::name)>(::verbs_api::system_symbol(#name, version)); \
    return resolved;                                                                     \
  }())
