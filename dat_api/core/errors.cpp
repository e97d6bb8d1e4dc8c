#include "dat_api/core/errors.h"

#include <cerrno>

namespace dat_api {

DAT_RETURN from_errno(int err, DAT_RETURN_SUBTYPE resource) {
  switch (err) {
    case 0:
      return DAT_SUCCESS;
    case ENOMEM:
    case ENOSPC:
    case EAGAIN:
      return dat_error(DAT_INSUFFICIENT_RESOURCES, resource);
    case EOPNOTSUPP:
    case ENOSYS:
      return dat_error(DAT_MODEL_NOT_SUPPORTED);
    case EACCES:
    case EPERM:
      return dat_error(DAT_PRIVILEGES_VIOLATION);
    default:
      return dat_error(DAT_INTERNAL_ERROR);
  }
}

}  // namespace dat_api
