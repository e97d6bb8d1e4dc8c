// The symbols of our verbs extension (verbs_api/emurdma_verbs.h: emu_query_srq_counts,
// emu_query_counters), looked up at run time as that header advises, so that the same
// provider binary also runs on the system's libibverbs (a real HCA), where they are absent.
#pragma once

namespace dat_api {

// The address of `name` in the loaded libibverbs.so.1; null when that library has none.
void* verbs_extension_symbol(const char* name);

}  // namespace dat_api
