// rpoll and rselect: rsockets and ordinary descriptors together. An rsocket's readiness comes
// from its own progress (completions, rdma_cm events); the wait is a poll(2) on the
// descriptors underneath (CM channel, completion channel) and the program's own.
#include <poll.h>
#include <rdma/rsocket.h>

#include <chrono>
#include <vector>

#include "rdmacm_api/export.h"
#include "rdmacm_api/rsockets/socket.h"

using namespace rdmacm_api;
using namespace rdmacm_api::rsockets;

namespace {

constexpr int kWaitSliceMs = 100;  // a bound on a wait another thread's progress may shorten

// Fills revents of every entry now; returns how many have some. With `arm`, the rsockets'
// CQs are armed first and `waits` collects what to poll; `unarmed` is then set when a CQ's
// notification came (and was consumed) meanwhile, so the wait must not start yet.
int check(pollfd* fds, nfds_t count, bool arm_them, std::vector<pollfd>* waits,
          bool* unarmed = nullptr) {
  int ready = 0;
  std::vector<pollfd> plain;
  std::vector<nfds_t> plain_index;
  for (nfds_t i = 0; i < count; ++i) {
    fds[i].revents = 0;
    if (fds[i].fd < 0) continue;
    SocketPtr s = find_socket(fds[i].fd);
    if (s == nullptr) {
      plain.push_back({fds[i].fd, fds[i].events, 0});
      plain_index.push_back(i);
      continue;
    }
    std::lock_guard lock(s->mutex);
    if (arm_them) arm(*s);
    fds[i].revents = poll_events(*s, fds[i].events);
    if (unarmed != nullptr && s->cq != nullptr && !s->cq_armed) *unarmed = true;
    if (waits != nullptr) {
      int under[2];
      int n = wait_descriptors(*s, under);
      for (int k = 0; k < n; ++k) waits->push_back({under[k], POLLIN, 0});
    }
  }
  if (!plain.empty()) {
    poll(plain.data(), plain.size(), 0);
    for (size_t k = 0; k < plain.size(); ++k) {
      fds[plain_index[k]].revents = plain[k].revents;
      if (waits != nullptr) waits->push_back({plain[k].fd, plain[k].events, 0});
    }
  }
  for (nfds_t i = 0; i < count; ++i)
    if (fds[i].revents != 0) ++ready;
  return ready;
}

}  // namespace

RDMACM_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  if (fds == nullptr && nfds != 0) return fail(EFAULT);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
  for (;;) {
    int ready = check(fds, nfds, false, nullptr);
    if (ready != 0 || timeout == 0) return ready;
    std::vector<pollfd> waits;
    bool unarmed = false;
    ready = check(fds, nfds, true, &waits, &unarmed);
    if (ready != 0) return ready;
    if (unarmed) continue;
    int slice = kWaitSliceMs;
    if (timeout > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) return 0;
      slice = static_cast<int>(std::min<long>(left, slice));
    }
    if (poll(waits.data(), waits.size(), slice) < 0 && errno == EINTR) return -1;
  }
}

RDMACM_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                          timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) return fail(EINVAL);
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds; ++fd) {
    short events = 0;
    if (readfds != nullptr && FD_ISSET(fd, readfds)) events |= POLLIN;
    if (writefds != nullptr && FD_ISSET(fd, writefds)) events |= POLLOUT;
    if (exceptfds != nullptr && FD_ISSET(fd, exceptfds)) events |= POLLPRI;
    if (events != 0) fds.push_back({fd, events, 0});
  }
  int ms =
      timeout == nullptr ? -1 : static_cast<int>(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
  int ready = rpoll(fds.data(), fds.size(), ms);
  if (ready < 0) return ready;
  if (readfds != nullptr) FD_ZERO(readfds);
  if (writefds != nullptr) FD_ZERO(writefds);
  if (exceptfds != nullptr) FD_ZERO(exceptfds);
  int bits = 0;
  for (const auto& p : fds) {
    if (readfds != nullptr && (p.events & POLLIN) && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(p.fd, readfds);
      ++bits;
    }
    if (writefds != nullptr && (p.events & POLLOUT) && (p.revents & (POLLOUT | POLLERR))) {
      FD_SET(p.fd, writefds);
      ++bits;
    }
    if (exceptfds != nullptr && (p.events & POLLPRI) && (p.revents & POLLPRI)) {
      FD_SET(p.fd, exceptfds);
      ++bits;
    }
  }
  return bits;
}
