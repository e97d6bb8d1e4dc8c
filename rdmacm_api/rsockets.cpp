// rsockets (<rdma/rsocket.h>): exported with librdmacm's versions so that programs linked to
// them load, but not offered: each call fails with ENOSYS (docs/usage.md says why).
#include <rdma/rsocket.h>

#include "rdmacm_api/export.h"

using namespace rdmacm_api;

RDMACM_EXPORT int rsocket(int, int, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rbind(int, const sockaddr*, socklen_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rlisten(int, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int raccept(int, sockaddr*, socklen_t*) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rconnect(int, const sockaddr*, socklen_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rshutdown(int, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rclose(int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rrecv(int, void*, size_t, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rrecvmsg(int, msghdr*, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rsend(int, const void*, size_t, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rsendmsg(int, const msghdr*, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rread(int, void*, size_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rreadv(int, const iovec*, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rwrite(int, const void*, size_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT ssize_t rwritev(int, const iovec*, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rpoll(pollfd*, nfds_t, int) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rselect(int, fd_set*, fd_set*, fd_set*, timeval*) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rgetpeername(int, sockaddr*, socklen_t*) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rgetsockname(int, sockaddr*, socklen_t*) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int rfcntl(int, int, ...) {
  return fail(ENOSYS);
}
RDMACM_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT int riounmap(int, void*, size_t) {
  return fail(ENOSYS);
}
RDMACM_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) {
  return static_cast<size_t>(fail(ENOSYS));
}
