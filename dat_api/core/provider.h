// Registry glue: the DAT_PROVIDER table registered with libdat2 for each dat.conf entry, and
// what the entry's instance data configures.
//
// The registry loads this library when an IA name of ours is first opened and calls
// dat_provider_init(info, instance_data) once per IA name (info->ia_name is the dat.conf
// name: emu0, emu0-shm, emu0-tcp; instance_data is the entry's quoted ia_params, for us
// "<device> <port> <transport>", e.g. "emu0 1 shm"). Each IA name gets its own table because
// the registry finds the name to close by reading device_name from the table an IA handle
// leads to. After the last close of a name the registry calls dat_provider_fini and dlcloses
// us; the library is linked -z nodelete, so our state (and every handle) survives that.
#pragma once

#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>

#include <string>

namespace dat_api {

struct IaConfig {
  std::string ia_name;  // the dat.conf name
  std::string device;   // the verbs device to open, "emu0"
  int port = 1;
  std::string transport;  // EMURDMA_TRANSPORT for the verbs library; empty = leave as set
  DAT_PROVIDER_INFO info{};
  const DAT_PROVIDER* provider = nullptr;
};

// The configuration registered for an IA name, or null when the name is not ours.
const IaConfig* find_ia_config(const char* ia_name);

// The DAT_PROVIDER of the registered IA name (never null for a name find_ia_config knows).
const DAT_PROVIDER* provider_for(const char* ia_name);

}  // namespace dat_api
