// TcpLink's io thread watching the connection (tcp_link.h): its wait for readability, and its
// naps beside a busy-polling program (when to nap and for how long: TcpNapPolicy,
// tcp_nap_policy.h; here, acting on its answers: the socket out of the reactor and back, the
// nap timer, the held-back ACKs).
//
// While the program busy-polls, the io thread stands aside: it waits for neither readability
// nor writability (the socket leaves the reactor's epoll set, which reports every arrival and
// every freed room whether or not anyone waits; the lanes are in it only while this thread
// waits on them) and only looks again after a nap (1 ms, doubling to 8 ms while the program
// keeps up; ended when the program arms a CQ), because an io thread woken per frame takes a
// core from the polling program (two processes and their io threads on two cores) and
// multiplies the latency. Once the program stops polling, the io thread waits for readability
// again and takes back what waits to be written.
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>

#include <boost/asio/post.hpp>
#include <chrono>

#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_link_internal.h"

namespace transports::tcp {

void TcpLink::wait_readable() {
  // One wait at a time: a parked wait may be re-armed by the naps' end and by a hold's end.
  if (main_wait_armed_) return;
  main_wait_armed_ = true;
  const uint64_t armed = ++main_wait_generation_;
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this(), armed](const error_code& ec) {
                       // A wait cancelled by a nap may end after a newer one was armed.
                       if (armed == self->main_wait_generation_) self->main_wait_armed_ = false;
                       self->on_readable(ec);
                     });
}

void TcpLink::on_readable(const error_code& ec) {
  if (ec || closed_) return;
  if (read_as_io_thread() < 0) return;
  const TcpNapPolicy::Next next = nap_policy_.after_read(
      owner_.program_polls(), [] { return std::chrono::steady_clock::now(); });
  if (next.action == TcpNapPolicy::Action::kNap && nap(next.length)) return;
  if (io_read_held_) {
    // Parked while the reader holds the connection (tcp_link.h, main_parked_): the lane's wait
    // or a program's poll ends the hold and re-arms it; if one ended it meanwhile, now.
    main_parked_.store(true);
    if (!main_held_now_.load()) unpark_main_wait();
    wait_lane_if_needed();
    return;
  }
  // Re-arming re-checks readiness, so data left behind by the budget is picked up at once.
  wait_readable();
  wait_lane_if_needed();
}

void TcpLink::unpark_main_wait() {
  if (main_parked_.exchange(false)) wait_readable();
}

void TcpLink::unpark_main_from_any_thread() {
  if (!main_parked_.load() || !main_parked_.exchange(false)) return;
  asio::post(io_, [self = shared_from_this()] {
    // Napping, the socket is out of the reactor: the naps' end arms the wait (watch_again).
    if (!self->closed_ && !self->released_) self->wait_readable();
  });
}

size_t TcpLink::bytes_waiting() const {
  int bytes = 0;
  if (::ioctl(fd_, FIONREAD, &bytes) != 0) return 1;  // let a read find out
  return bytes > 0 ? static_cast<size_t>(bytes) : 0;
}

bool TcpLink::nap(std::chrono::microseconds length) {
  if (!released_) {
    {
      std::lock_guard lock(tx_mutex_);
      napping_ = true;
    }
    // Out of the reactor's epoll set: bytes arriving raise no wake-up of this thread at all
    // (edge-triggered epoll reports every arrival, whether or not a wait is queued). A
    // writability wait pending is cancelled: bytes queued behind a full socket are left to the
    // program's polls (pump) until the naps end (flush, watch_again).
    socket_.release();
    main_wait_armed_ = false;  // cancelled; its handler, still to run, is of an older generation
    ++main_wait_generation_;
    released_ = true;
    io_napping_.store(true, std::memory_order_release);
  }
  nap_timer_.expires_after(length);
  nap_timer_.async_wait([self = shared_from_this()](const error_code& ec) { self->after_nap(ec); });
  return true;
}

bool TcpLink::end_naps() {
  if (!released_) return true;
  nap_timer_.cancel();
  released_ = false;
  io_napping_.store(false, std::memory_order_release);
  nap_policy_.naps_ended();
  error_code ec;
  socket_.assign(asio::ip::tcp::v4(), fd_, ec);
  if (ec) {
    // The descriptor is still ours: close() closes it.
    released_ = true;
    spdlog::warn("tcp: connection with {}: cannot watch it again: {}", remote_, ec.message());
    close(true);
    return false;
  }
  // No ACK is held back from here on: those held go now.
  int error = 0;
  {
    std::lock_guard lock(tx_mutex_);
    napping_ = false;
    if (!held_.empty() && up_.load(std::memory_order_relaxed)) {
      const iovec part{held_wire_, encode_held_locked()};
      error = write_or_queue_locked(&part, 1, 1, part.iov_len);
    }
    held_.clear();
  }
  if (error != 0) {
    fail_from_any_thread(error);
    return false;
  }
  return true;
}

void TcpLink::after_nap(const error_code& ec) {
  if (ec || closed_ || !released_) return;
  const uint64_t polls = owner_.program_polls();
  const auto now = std::chrono::steady_clock::now();
  // A nap that cannot be taken falls to the step after it (nap_refused): a recheck, a miss.
  for (TcpNapPolicy::Next next =
           nap_policy_.after_nap(polls, now, program_frames_.load(std::memory_order_relaxed),
                                 [this] { return bytes_waiting(); });
       next.action != TcpNapPolicy::Action::kWatch; next = nap_policy_.nap_refused(now)) {
    if (next.action == TcpNapPolicy::Action::kNap) {
      // ACKs held since before the program's previous poll go now: none is late by more
      // than about a nap.
      send_held(polls, false);
    }
    if (nap(next.length)) return;
  }
  watch_again();
}

void TcpLink::watch_again() {
  if (!end_naps()) return;
  // Arm, then read: readiness is edge-triggered, so bytes that arrived during the naps raised
  // no event that anyone waits for; this read takes them, and anything arriving after the arm
  // raises one.
  wait_readable();
  if (read_as_io_thread() < 0) return;
  wait_lane_if_needed();
  // Writes left to the program's polls while napping come back to this thread.
  bool main_left = false, lane_left = false;
  {
    std::lock_guard lock(tx_mutex_);
    main_left = write_armed_;
    lane_left = lane_sender_.flush_armed_locked();
  }
  if (main_left) flush();
  if (lane_left) lane_flush();
}

void TcpLink::wake_from_nap() {
  if (!io_napping_.load(std::memory_order_acquire)) return;
  asio::post(io_, [self = shared_from_this()] {
    if (self->closed_ || !self->released_) return;
    self->watch_again();
  });
}

}  // namespace transports::tcp
