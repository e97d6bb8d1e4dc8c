// Accepting streams and reading their preamble within bounds (cm_preamble_acceptor.h).
#include "cm/cm_preamble_acceptor.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>

#include "base/drop_counter.h"
#include "cm/cm_log.h"

namespace cm {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// Descriptors beyond two are not taken: one is all a hand-over may carry, two tell "too many".
constexpr size_t kMaxDescriptorsTaken = 2;
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

}  // namespace

void close_stream(ArrivedStream& stream) {
  if (stream.fd >= 0) ::close(stream.fd);
  stream.fd = -1;
  close_all(stream.descriptors);
}

bool send_verdict(int fd, Verdict verdict) {
  const VerdictBytes bytes = encode_verdict(verdict);
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(bytes.size());
}

bool send_preamble(int fd, const Preamble& preamble, const int* descriptors, size_t count) {
  constexpr size_t kMaxSent = 4;
  if (count > kMaxSent) {
    errno = EINVAL;
    return false;
  }
  const PreambleBytes bytes = encode_preamble(preamble);
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSent)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), descriptors, sizeof(int) * count);
  }
  const ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent >= 0 && sent != static_cast<ssize_t>(bytes.size())) errno = EMSGSIZE;
  return sent == static_cast<ssize_t>(bytes.size());
}

struct PreambleAcceptor::Impl {
  explicit Impl(asio::io_context& io) : io(io), listener(io), retry(io) {}
  asio::io_context& io;
  asio::posix::stream_descriptor listener;
  asio::steady_timer retry;  // after EMFILE and the like: accept again later, do not spin
};

struct PreambleAcceptor::Waiting {
  Waiting(asio::io_context& io, int fd) : stream(io, fd), deadline(io) {}
  asio::posix::stream_descriptor stream;
  asio::steady_timer deadline;
  sockaddr_storage peer{};
  PreambleBytes bytes{};
  size_t got = 0;
  std::vector<int> descriptors;
  bool descriptors_cut = false;
  bool done = false;
};

std::shared_ptr<PreambleAcceptor> PreambleAcceptor::start(asio::io_context& io, int listen_fd,
                                                          std::string what, AcceptorLimits limits,
                                                          OnPreamble on_preamble) {
  auto acceptor = std::make_shared<PreambleAcceptor>(io, listen_fd, std::move(what), limits,
                                                     std::move(on_preamble));
  acceptor->arm();
  return acceptor;
}

PreambleAcceptor::PreambleAcceptor(asio::io_context& io, int listen_fd, std::string what,
                                   AcceptorLimits limits, OnPreamble on_preamble)
    : impl_(std::make_unique<Impl>(io)),
      what_(std::move(what)),
      limits_(limits),
      on_preamble_(std::move(on_preamble)) {
  impl_->listener.assign(listen_fd);
}

PreambleAcceptor::~PreambleAcceptor() {
  close();
}

void PreambleAcceptor::close() {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  impl_->listener.close(ignored);
  impl_->retry.cancel();
  for (auto& w : waiting_) {
    w->done = true;
    w->deadline.cancel();
    w->stream.close(ignored);
    close_all(w->descriptors);
  }
  waiting_.clear();
}

void PreambleAcceptor::arm() {
  if (closed_) return;
  impl_->listener.async_wait(asio::posix::descriptor_base::wait_read,
                             [self = shared_from_this()](const error_code& ec) {
                               if (ec || self->closed_) return;
                               self->accept_ready();
                             });
}

void PreambleAcceptor::accept_ready() {
  while (!closed_) {
    if (static_cast<int>(waiting_.size()) >= limits_.max_pending) {
      // Later connections wait in the kernel's backlog until a waiting stream finishes.
      paused_ = true;
      log_refusal(refusals_.pauses,
                  "{}: {} connections are waiting for their preamble already; accepting paused",
                  what_, waiting_.size());
      return;
    }
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    const int fd = ::accept4(impl_->listener.native_handle(), reinterpret_cast<sockaddr*>(&peer),
                             &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      log_refusal(refusals_.accept_failures, "{}: accept failed: {}; trying again in {} ms", what_,
                  std::strerror(errno), kAcceptRetry.count());
      impl_->retry.expires_after(kAcceptRetry);
      impl_->retry.async_wait([self = shared_from_this()](const error_code& ec) {
        if (!ec && !self->closed_) self->accept_ready();
      });
      return;
    }
    auto w = std::make_shared<Waiting>(impl_->io, fd);
    w->peer = peer;
    waiting_.push_back(w);
    w->deadline.expires_after(limits_.preamble_timeout);
    w->deadline.async_wait([self = shared_from_this(), w](const error_code& ec) {
      if (ec || w->done) return;
      log_refusal(self->refusals_.timeouts,
                  "{}: a connection sent no preamble within {} ms; closed", self->what_,
                  self->limits_.preamble_timeout.count());
      self->finish(w);
    });
    read_ready(w);
  }
  arm();
}

void PreambleAcceptor::read_ready(const std::shared_ptr<Waiting>& w) {
  while (!w->done && w->got < w->bytes.size()) {
    // Exactly the preamble's bytes: what follows belongs to the CM protocol.
    iovec iov{w->bytes.data() + w->got, w->bytes.size() - w->got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptorsTaken)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(w->stream.native_handle(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      w->stream.async_wait(asio::posix::descriptor_base::wait_read,
                           [self = shared_from_this(), w](const error_code& ec) {
                             if (ec || w->done) return;
                             self->read_ready(w);
                           });
      return;
    }
    // Descriptors came even with an error or an end of stream: take them to close them.
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        w->descriptors.push_back(fd);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) w->descriptors_cut = true;
    if (n <= 0) {
      log_refusal(
          refusals_.early_closes, "{}: a connection {} before its preamble; closed", what_,
          n == 0 ? std::string("ended") : "failed (" + std::string(std::strerror(errno)) + ")");
      finish(w);
      return;
    }
    w->got += static_cast<size_t>(n);
  }
  if (w->done) return;
  ArrivedStream arrived;
  arrived.peer = w->peer;
  arrived.check = decode_preamble(w->bytes.data(), &arrived.preamble);
  arrived.descriptors = std::move(w->descriptors);
  w->descriptors.clear();
  arrived.descriptors_cut = w->descriptors_cut;
  arrived.refusals = &refusals_;
  arrived.fd = w->stream.release();
  finish(w);
  if (!closed_) {
    on_preamble_(std::move(arrived));
  } else {
    close_stream(arrived);
  }
}

void PreambleAcceptor::finish(const std::shared_ptr<Waiting>& w) {
  w->done = true;
  w->deadline.cancel();
  error_code ignored;
  w->stream.close(ignored);
  close_all(w->descriptors);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), w), waiting_.end());
  if (paused_ && !closed_ && static_cast<int>(waiting_.size()) < limits_.max_pending) {
    paused_ = false;
    logger().debug("{}: accepting again", what_);
    // Not inline: finish may run inside accept_ready's own loop.
    asio::post(impl_->io, [self = shared_from_this()] {
      if (!self->closed_) self->accept_ready();
    });
  }
}

}  // namespace cm
