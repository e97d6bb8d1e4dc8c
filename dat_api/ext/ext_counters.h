// The counter operations of the IB extension (DAT_QUERY_COUNTERS_OP, DAT_PRINT_COUNTERS_OP,
// DAT_IB_START/STOP_COUNTERS_OP), advertised by the DAT_COUNTERS provider attribute. The
// counts themselves are kept by the objects (core/counters.h); this room reads them, adds the
// device's diagnostic counters emu0 knows, prints and resets. Files: ext_counters.cpp (the
// operations), ext_counters_diag.cpp (DCNT_IA_DIAG_* from emu_query_counters),
// counter_names.cpp (the names printed).
#pragma once

#include <cstdarg>
#include <cstdint>

#include "dat_api/core/counters.h"

namespace dat_api {

class Ia;

// The enumerators' names, index for index (counter_names.cpp).
extern const char* const kIaCounterNames[DCNT_IA_ALL_COUNTERS];
extern const char* const kEpCounterNames[DCNT_EP_ALL_COUNTERS];
extern const char* const kEvdCounterNames[DCNT_EVD_ALL_COUNTERS];

// The extension operations, with the va_list after the operation number (ext_ops.cpp calls
// them). `handle`: an IA, EP or EVD (query, print); an IA (start, stop).
DAT_RETURN ext_query_counters(DAT_HANDLE handle, va_list args);
DAT_RETURN ext_print_counters(DAT_HANDLE handle, va_list args);
DAT_RETURN ext_start_stop_counters(DAT_HANDLE handle, va_list args);

// Whether IA counter `index` is one of DCNT_IA_DIAG_*, read from the device.
bool ia_diag_counter(int index);
// The value of DIAG counter `index` of the IA's device since the IA's last reset of it; 0
// when the device cannot tell (a real HCA, EMURDMA_COUNTERS=0). `reset`: counts from now on
// start at 0.
uint64_t ia_read_diag(Ia& ia, int index, bool reset);

}  // namespace dat_api
