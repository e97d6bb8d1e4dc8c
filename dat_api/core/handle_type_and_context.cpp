// dat_get_handle_type and the consumer context of any handle.
#include "dat_api/core/entry_points.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/ia.h"

namespace dat_api::api {

namespace {

DAT_HANDLE_TYPE type_of(Kind kind) {
  switch (kind) {
    case Kind::kIa:
      return DAT_HANDLE_TYPE_IA;
    case Kind::kPz:
      return DAT_HANDLE_TYPE_PZ;
    case Kind::kLmr:
      return DAT_HANDLE_TYPE_LMR;
    case Kind::kEvd:
      return DAT_HANDLE_TYPE_EVD;
    case Kind::kSrq:
      return DAT_HANDLE_TYPE_SRQ;
    case Kind::kEp:
      return DAT_HANDLE_TYPE_EP;
    case Kind::kCr:
      return DAT_HANDLE_TYPE_CR;
    case Kind::kPsp:
      return DAT_HANDLE_TYPE_PSP;
    case Kind::kRsp:
      return DAT_HANDLE_TYPE_RSP;
    case Kind::kRmr:
      return DAT_HANDLE_TYPE_RMR;
    case Kind::kCno:
      return DAT_HANDLE_TYPE_CNO;
    case Kind::kCsp:
      return DAT_HANDLE_TYPE_CSP;
    case Kind::kNone:
      break;
  }
  return DAT_HANDLE_TYPE_IA;  // unreachable: kNone objects are never published
}

}  // namespace

// The handle is the first argument; an invalid one is DAT_INVALID_HANDLE with the positional
// subtype, since it may name an object of any type.
DAT_RETURN set_consumer_context(DAT_HANDLE handle, DAT_CONTEXT context) {
  auto object = Handles::lookup(handle);
  if (!object) return invalid_handle(DAT_INVALID_HANDLE1);
  object->set_consumer_context(context);
  return DAT_SUCCESS;
}

DAT_RETURN get_consumer_context(DAT_HANDLE handle, DAT_CONTEXT* context) {
  auto object = Handles::lookup(handle);
  if (!object) return invalid_handle(DAT_INVALID_HANDLE1);
  if (context == nullptr) return invalid_arg(2);
  *context = object->consumer_context();
  return DAT_SUCCESS;
}

DAT_RETURN get_handle_type(DAT_HANDLE handle, DAT_HANDLE_TYPE* type) {
  auto object = Handles::lookup(handle);
  if (!object) return invalid_handle(DAT_INVALID_HANDLE1);
  if (type == nullptr) return invalid_arg(2);
  *type = type_of(object->kind());
  return DAT_SUCCESS;
}

}  // namespace dat_api::api
