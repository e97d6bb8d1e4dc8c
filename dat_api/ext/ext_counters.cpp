// dat_ib_query_counters / dat_ib_print_counters / dat_ib_start_counter / dat_ib_stop_counter
// (ext_counters.h). Argument positions in DAT_INVALID_PARAMETER subtypes count the
// dat_extension_op call, as in ext_ops.cpp: the handle is ARG1, the operation ARG2, the
// counter ARG3, the output array ARG4.
#include "dat_api/ext/ext_counters.h"

#include <cstdio>

#include "dat_api/core/errors.h"
#include "dat_api/core/evd.h"
#include "dat_api/core/ia.h"
#include "dat_api/ep/ep.h"

namespace dat_api {

namespace {

// One object's counters as the operations see them: its set, the names, the value read (the
// IA's DIAG ones come from the device).
struct View {
  size_t size = 0;
  const char* const* names = nullptr;
  uint64_t (*read)(Object& object, int index, bool reset) = nullptr;
  std::shared_ptr<Object> object;
};

uint64_t read_ia(Object& o, int i, bool reset) {
  auto& ia = static_cast<Ia&>(o);
  if (ia_diag_counter(i)) return ia_read_diag(ia, i, reset);
  return ia.counters.read(static_cast<size_t>(i), reset);
}
uint64_t read_ep(Object& o, int i, bool reset) {
  return static_cast<Ep&>(o).counters.read(static_cast<size_t>(i), reset);
}
uint64_t read_evd(Object& o, int i, bool reset) {
  return static_cast<Evd&>(o).counters.read(static_cast<size_t>(i), reset);
}

// The counters of `handle`, or false when it names no live IA, EP or EVD.
bool view_of(DAT_HANDLE handle, View* v) {
  if (auto ia = Handles::get<Ia>(handle)) {
    *v = {DCNT_IA_ALL_COUNTERS, kIaCounterNames, read_ia, ia};
  } else if (auto ep = Handles::get<Ep>(handle)) {
    *v = {DCNT_EP_ALL_COUNTERS, kEpCounterNames, read_ep, ep};
  } else if (auto evd = Handles::get<Evd>(handle)) {
    *v = {DCNT_EVD_ALL_COUNTERS, kEvdCounterNames, read_evd, evd};
  } else {
    return false;
  }
  return true;
}

// `cntr` names one counter of the view, or (== size) all of them.
bool valid_index(const View& v, int cntr) {
  return cntr >= 0 && static_cast<size_t>(cntr) <= v.size;
}

}  // namespace

// dat_ib_query_counters(handle, cntr, DAT_UINT64* out, int reset): one value in out[0], or
// with _ALL_COUNTERS every counter in out[0..ALL-1].
DAT_RETURN ext_query_counters(DAT_HANDLE handle, va_list args) {
  const int cntr = va_arg(args, int);
  DAT_UINT64* out = va_arg(args, DAT_UINT64*);
  const int reset = va_arg(args, int);
  View v;
  if (!view_of(handle, &v)) return dat_error(DAT_INVALID_HANDLE);  // IA, EP or EVD: no subtype
  if (!valid_index(v, cntr)) return invalid_arg(3);
  if (out == nullptr) return invalid_arg(4);
  if (static_cast<size_t>(cntr) < v.size) {
    out[0] = v.read(*v.object, cntr, reset != 0);
    return DAT_SUCCESS;
  }
  for (size_t i = 0; i < v.size; ++i) out[i] = v.read(*v.object, static_cast<int>(i), reset != 0);
  return DAT_SUCCESS;
}

// dat_ib_print_counters(handle, cntr, int reset): "NAME = value" lines on stdout, one
// counter or every one (zeros too: the consumer sees which counters exist).
DAT_RETURN ext_print_counters(DAT_HANDLE handle, va_list args) {
  const int cntr = va_arg(args, int);
  const int reset = va_arg(args, int);
  View v;
  if (!view_of(handle, &v)) return dat_error(DAT_INVALID_HANDLE);  // IA, EP or EVD: no subtype
  if (!valid_index(v, cntr)) return invalid_arg(3);
  const size_t first = static_cast<size_t>(cntr) < v.size ? static_cast<size_t>(cntr) : 0;
  const size_t end = static_cast<size_t>(cntr) < v.size ? first + 1 : v.size;
  for (size_t i = first; i < end; ++i) {
    const auto value =
        static_cast<unsigned long long>(v.read(*v.object, static_cast<int>(i), reset != 0));
    std::printf(" %s = %llu\n", v.names[i], value);
  }
  std::fflush(stdout);  // the consumer's own lines may follow through another stream
  return DAT_SUCCESS;
}

// dat_ib_start_counter / dat_ib_stop_counter(ia, type): every counter here always runs (the
// increments cost a relaxed add), and the DIAG ones are read from the device when asked, so
// there is nothing to start or stop: a valid IA and type is accepted and changes nothing.
DAT_RETURN ext_start_stop_counters(DAT_HANDLE handle, va_list args) {
  const int type = va_arg(args, int);
  if (!Handles::get<Ia>(handle)) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (type != DCNT_IA_CM && type != DCNT_IA_LNK && type != DCNT_IA_DIAG) return invalid_arg(3);
  return DAT_SUCCESS;
}

}  // namespace dat_api
