// DAT return codes: a type (bits 29-16) and a subtype (bits 15-0) with the error class bit.
// dat_error.h defines the parts but not the macro that joins them in the DAT 2.0 headers
// Debian ships, so every entry point builds its codes through these helpers.
#pragma once

#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dat_api {

// The integer a consumer passed for a DAT enum (flags, masks, types). A C consumer may pass any
// int, but in C++ loading an enum object whose value lies outside the enum's range is
// undefined, so a value is validated through its bytes, never read as the enum first.
template <class E>
auto raw(const E& value) {
  static_assert(std::is_enum_v<E>);
  std::underlying_type_t<E> v;
  std::memcpy(&v, &value, sizeof(v));
  return static_cast<uint64_t>(static_cast<std::make_unsigned_t<decltype(v)>>(v));
}

constexpr DAT_RETURN dat_error(DAT_RETURN_TYPE type, DAT_UINT32 subtype = DAT_NO_SUBTYPE) {
  if (type == DAT_SUCCESS) return DAT_SUCCESS;
  return DAT_CLASS_ERROR | static_cast<DAT_UINT32>(type) | subtype;
}

constexpr DAT_RETURN invalid_handle(DAT_RETURN_SUBTYPE subtype) {
  return dat_error(DAT_INVALID_HANDLE, subtype);
}

// DAT_INVALID_PARAMETER names the argument by position: arg(2) is DAT_INVALID_ARG2.
constexpr DAT_RETURN invalid_arg(int position) {
  return dat_error(DAT_INVALID_PARAMETER, static_cast<DAT_UINT32>(DAT_INVALID_ARG1) +
                                              static_cast<DAT_UINT32>(position - 1));
}

constexpr DAT_RETURN invalid_state(DAT_RETURN_SUBTYPE subtype = DAT_NO_SUBTYPE) {
  return dat_error(DAT_INVALID_STATE, subtype);
}

constexpr DAT_RETURN not_implemented() {
  return dat_error(DAT_NOT_IMPLEMENTED);
}

// A verbs errno value that no rule of the calling entry point explains.
DAT_RETURN from_errno(int err, DAT_RETURN_SUBTYPE resource = DAT_RESOURCE_MEMORY);

}  // namespace dat_api
