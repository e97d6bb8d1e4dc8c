// TcpLink's receiving side (tcp_link.h): reading the connection (poll from any thread,
// read_as_io_thread from the io thread), receiving a large payload in place, parsing the
// receive buffer into HELLO, GOODBYE, LANE and frames, and delivering them.
//
// Receiving: the io thread waits for readability and reads (tcp_link_naps.cpp); a large RDMA
// WRITE whose target the engine accepts before its payload has arrived
// (FrameSink::direct_target) is received straight into that memory, a large payload longer
// than its frame could be delivered with (FrameSink::payload_room) is read and dropped as it
// arrives, the rest goes through the receive buffer (TcpRxBuffer). poll() lets any other thread
// (Transport::progress, i.e. polling calls) read and deliver first. One reader at a time per
// connection (the receive lock), so each QP's frames are delivered in order. A lane frame's payload
// (tcp_bulk_lane.cpp) is read here from the lane, a piece at a time, while the connection is read
// on past it: frames of other QPs go ahead of it, its own QP's wait (TcpWaitingFrames).
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "base/tsan_sync.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_link_internal.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

namespace {

// A polling caller's read budget (kIoReadBudget: the io thread's, tcp_link_internal.h).
constexpr size_t kPollReadBudget = 1024 * 1024;

// Payloads at least this large are received in place when the engine accepts their target
// (FrameSink::direct_target): one copy (the kernel's) instead of two, and are discarded as
// they arrive when longer than the engine's FrameSink::payload_room. Smaller ones cost less
// through the receive buffer, where one recv takes many frames.
constexpr size_t kPlaceMin = FrameSink::kPayloadRoomMin;
constexpr size_t kDiscardBytes = 64 * 1024;

}  // namespace

size_t TcpLink::poll(bool stop_before_answers) {
  if (state_.load(std::memory_order_acquire) != kReady) return 0;
  ReadResult r;
  {
    std::unique_lock lock(rx_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || !rx_open_) return 0;
    // Only while the io thread naps: the bytes left in the buffer raise no readiness event,
    // and the nap's end (the program stopped polling) reads them; an io thread waiting for
    // readability would not.
    stop_before_answers_ = stop_before_answers && io_napping_.load(std::memory_order_acquire);
    returns_at_delivery_ = true;
    r = read_locked(kPollReadBudget);
    returns_at_delivery_ = false;
    stop_before_answers_ = false;
    if (r.frames != 0) {
      // One writer at a time (under the receive lock): no read-modify-write needed.
      program_frames_.store(program_frames_.load(std::memory_order_relaxed) + r.frames,
                            std::memory_order_relaxed);
    }
  }
  watch_lane_from_any_thread();
  if (!r.main_held) unpark_main_from_any_thread();
  if (r.failure != Failure::kNone) {
    // The socket is closed by the io thread, which owns it.
    asio::post(io_, [self = shared_from_this(), r] {
      self->report_failure(r);
      self->close(true);
    });
  }
  return r.frames;
}

void TcpLink::read_waiting() {
  if (state_.load(std::memory_order_acquire) != kReady) return;
  ReadResult r;
  {
    std::lock_guard lock(rx_mutex_);
    if (!rx_open_) return;
    r = read_locked(kPollReadBudget);
  }
  watch_lane_from_any_thread();
  if (!r.main_held) unpark_main_from_any_thread();
  if (r.failure != Failure::kNone) {
    asio::post(io_, [self = shared_from_this(), r] {
      self->report_failure(r);
      self->close(true);
    });
  }
}

ptrdiff_t TcpLink::read_as_io_thread() {
  ReadResult r;
  {
    std::lock_guard lock(rx_mutex_);
    if (!rx_open_) return -1;
    r = read_locked(kIoReadBudget);
  }
  io_read_held_ = r.main_held;
  if (r.failure == Failure::kLaneHello) {
    // Only the io thread reads a connection before its HELLO: the socket is ours to give.
    error_code ec;
    const int fd = socket_.release(ec);
    uint64_t unlogged = 0;
    if (!ec && !owner_.adopt_lane(r.lane_gid, r.lane_token, r.lane_proof, fd) &&
        owner_.stranger_logs().bad_lane.count_and_should_log(&unlogged)) {
      spdlog::warn(
          "tcp: a bulk lane from {} names no connection here or fails its proof; "
          "closing it{}",
          remote_, base::unlogged_note(unlogged));
    }
  }
  if (r.failure != Failure::kNone) {
    report_failure(r);
    close(true);
    return -1;
  }
  return static_cast<ptrdiff_t>(r.frames);
}

TcpLink::ReadResult TcpLink::read_locked(size_t budget) {
  ReadResult r = read_some_locked(budget);
  r.main_held = main_held_;
  main_held_now_.store(main_held_);
  if (rx_out_of_memory_ && r.failure == Failure::kNone) {
    r.failure = Failure::kBadFrame;
    r.reason = "no memory for the frame being received";
    rx_open_ = false;
  }
  return r;
}

TcpLink::ReadResult TcpLink::read_some_locked(size_t budget) {
  ReadResult r;
  size_t got = 0;
  // Frames a poll left parsed-but-undelivered (it stopped before an answer) come first.
  if ((!placing_ || reads_past_locked()) && !main_held_ && rx_end_ != rx_begin_) {
    r.frames += parse_locked(&r);
    if (r.failure != Failure::kNone || r.stopped_early || rx_out_of_memory_) return r;
  }
  for (;;) {
    // Whether the lane has more for the payload being placed (read on after the connection).
    bool lane_has_more = false;
    if (placing_) {
      // Past its part on the connection, the payload is read from the lane a piece at a time,
      // the connection looked at between two (frames of other QPs need not wait for it all).
      const bool past = reads_past_locked();
      const size_t limit = past ? std::min(budget, got + lane_pieces_.next()) : budget;
      const PlaceStep step = place_locked(limit, &got, &r);
      if (step == PlaceStep::kFailed) break;
      if (step == PlaceStep::kDone) {
        ++r.frames;
        // The frames that waited for it, then those that followed it in the buffer.
        r.frames += resume_after_placing_locked();
        if (!rx_out_of_memory_) r.frames += parse_locked(&r);
        if (r.failure != Failure::kNone || rx_out_of_memory_) break;
        if (r.stopped_early || got >= budget) return r;
        continue;
      }
      if (got >= budget || !past) return r;
      lane_has_more = step == PlaceStep::kBudget;
      if (main_held_) {
        if (lane_has_more) continue;
        return r;
      }
    }
    const bool was_placing = placing_;
    const size_t frames_before = r.frames;
    const size_t want = std::min(rx_.size() - rx_end_, budget - got);
    const ssize_t n = ::recv(fd_, rx_.data() + rx_end_, want, MSG_DONTWAIT);
    if (n > 0) {
      rx_end_ += static_cast<size_t>(n);
      got += static_cast<size_t>(n);
      r.frames += parse_locked(&r);
      if (r.failure != Failure::kNone || rx_out_of_memory_) break;
      if (r.stopped_early) return r;
      if (placing_ && was_placing && reads_past_locked() && r.frames != frames_before) {
        // Frames went ahead of the payload: a program's poll returns with their completions
        // (the lane is read on at its next poll), in small pieces while such frames come.
        lane_pieces_.small_frames(r.frames - frames_before);
        if (returns_at_delivery_) return r;
      }
      // A payload goes on (one just begun may have bytes in already); else drained for now.
      if (placing_) continue;
      if (static_cast<size_t>(n) < want || got >= budget) return r;
      continue;
    }
    if (n == 0) {
      r.failure = Failure::kPeerClosed;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (lane_has_more) continue;
      return r;
    }
    r.failure = Failure::kSocketError;
    r.error = errno;
    break;
  }
  // Nothing more is read from a failing connection.
  rx_open_ = false;
  return r;
}

TcpLink::PlaceStep TcpLink::place_locked(size_t budget, size_t* got, ReadResult* r) {
  // Both parts are read as they come, each never past its own end (what follows on either
  // socket belongs to later frames).
  bool main_waits = placing_main_done_ == placing_main_len_;
  bool lane_waits = placing_lane_done_ == placing_lane_len_;
  while (!(main_waits && lane_waits)) {
    if (*got >= budget) return PlaceStep::kBudget;
    struct Part {
      int fd;
      size_t offset;
      size_t len;
      size_t* done;
      bool* waits;
    };
    const Part parts[] = {{fd_, 0, placing_main_len_, &placing_main_done_, &main_waits},
                          {lane_receiver_.fd_locked(), placing_main_len_, placing_lane_len_,
                           &placing_lane_done_, &lane_waits}};
    for (const Part& part : parts) {
      if (*part.waits) continue;
      const size_t want = std::min(part.len - *part.done, budget - *got);
      if (want == 0) break;
      const ssize_t n = receive_placed_locked(part.fd, part.offset + *part.done, want);
      if (n > 0) {
        *got += static_cast<size_t>(n);
        *part.done += static_cast<size_t>(n);
        if (*part.done == part.len) *part.waits = true;
        continue;
      }
      if (n == 0) {
        r->failure = Failure::kPeerClosed;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // Nothing more for now: the other part may still have bytes.
        if (placing_main_done_ + placing_lane_done_ < placing_main_len_ + placing_lane_len_) {
          *part.waits = true;
        }
        continue;
      } else {
        r->failure = Failure::kSocketError;
        r->error = errno;
      }
      return PlaceStep::kFailed;
    }
  }
  if (placing_main_done_ == placing_main_len_ && placing_lane_done_ == placing_lane_len_) {
    finish_placing_locked();
    return PlaceStep::kDone;
  }
  return PlaceStep::kDrained;
}

size_t TcpLink::parse_locked(ReadResult* r) {
  size_t frames = 0;
  bool delivered_request = false;
  for (;;) {
    const size_t avail = rx_end_ - rx_begin_;
    const uint8_t* p = rx_.data() + rx_begin_;
    if (handshake_ == Handshake::kAwaitHello && !dialed_ && avail >= 4 && tcp_wire::is_lane(p)) {
      // A peer's bulk lane: handed over to the connection it belongs to (read_as_io_thread),
      // if it comes from the address its GID names.
      if (avail < tcp_wire::kLaneHelloBytes) {
        make_room_locked(tcp_wire::kLaneHelloBytes);
        return frames;
      }
      const char* why =
          tcp_wire::decode_lane_hello(p, &r->lane_gid, &r->lane_token, &r->lane_proof);
      if (why == nullptr && avail != tcp_wire::kLaneHelloBytes) {
        why = "bytes after LANE_HELLO before LANE_OK";
      }
      const std::optional<TcpEndpoint> ep = tcp_endpoint_of(r->lane_gid);
      if (why == nullptr && (!ep || ep->ipv4 != remote_ipv4_)) {
        why = "LANE_HELLO whose GID names another address than the connection comes from";
      }
      r->failure = why == nullptr ? Failure::kLaneHello : Failure::kBadHello;
      r->reason = why;
      return frames;
    }
    if (handshake_ != Handshake::kDone) {
      const HandshakeStep step = handshake_locked(r);
      if (step != HandshakeStep::kContinue) return frames;
      continue;
    }
    if (avail >= 4 && tcp_wire::is_goodbye(p)) {
      if (placing_) {
        // The end comes after every frame, also those whose payload is still on the lane.
        main_held_ = true;
        return frames;
      }
      if (avail < tcp_wire::kGoodbyeBytes) {
        make_room_locked(tcp_wire::kGoodbyeBytes);
        return frames;
      }
      if (const char* why = tcp_wire::decode_goodbye(p)) {
        r->failure = Failure::kBadFrame;
        r->reason = why;
        return frames;
      }
      rx_begin_ += tcp_wire::kGoodbyeBytes;
      farewell_.store(true, std::memory_order_release);
      continue;
    }
    if (avail >= 4 && tcp_wire::is_lane(p)) {
      if (avail < tcp_wire::kLaneBytes) {
        make_room_locked(tcp_wire::kLaneBytes);
        return frames;
      }
      uint64_t token = 0;
      const char* why = tcp_wire::decode_lane(p, &token);
      if (why == nullptr && !lane_receiver_.names_attached_lane_locked(token)) {
        why = "LANE names no bulk lane attached to this connection";
      }
      if (why != nullptr) {
        r->failure = Failure::kBadFrame;
        r->reason = why;
        return frames;
      }
      rx_begin_ += tcp_wire::kLaneBytes;
      lane_receiver_.announced_locked();
      continue;
    }
    if (avail < kFrameHeaderBytes) {
      make_room_locked(kFrameHeaderBytes);
      return frames;
    }
    FrameHeader h;
    uint32_t len = 0;
    uint32_t lane_bytes = 0;
    if (const char* why = tcp_wire::decode_header(p, &h, &len, &lane_bytes)) {
      r->failure = Failure::kBadFrame;
      r->reason = why;
      return frames;
    }
    if (lane_bytes != 0 && !lane_receiver_.carries_lane_bytes_locked()) {
      r->failure = Failure::kBadFrame;
      r->reason = "lane bytes in a frame, but no bulk lane was announced";
      return frames;
    }
    const size_t need = kFrameHeaderBytes + size_t{len};
    if (placing_) {
      // Read past the payload on the lane: a frame that must keep its order behind it waits.
      const PastPlaced past = read_past_placed_locked(h, len, lane_bytes, need);
      if (past == PastPlaced::kStop) return frames;
      if (past == PastPlaced::kWaits) continue;
    } else if (lane_bytes != 0) {
      // Its payload is all on the lane: the frames behind it are read on.
      start_placing_locked(h, len, lane_bytes);
      if (rx_out_of_memory_) return frames;
      continue;
    }
    if (avail < need) {
      if (!direct_declined_ && len >= kPlaceMin && start_placing_locked(h, len, 0)) {
        return frames;
      }
      make_room_locked(need);
      return frames;
    }
    if (stop_before_answers_ && delivered_request && is_answer(h.op)) {
      // A program's poll that delivered a request returns its completion now; the answers
      // behind it (the peer's held ACKs) wait in the buffer for the next read.
      r->stopped_early = true;
      return frames;
    }
    LocalPayload payload(p + kFrameHeaderBytes, len);
    base::tsan_acquire(tsan_key_);
    owner_.deliver(*this, h, payload);
    rx_begin_ += need;
    direct_declined_ = false;
    delivered_request |= is_request(h.op);
    ++frames;
  }
}

TcpLink::PastPlaced TcpLink::read_past_placed_locked(const FrameHeader& h, size_t len,
                                                     size_t lane_bytes, size_t need) {
  const size_t avail = rx_end_ - rx_begin_;
  const bool keeps_order =
      lane_bytes != 0 || h.dst_qpn == placing_header_.dst_qpn || waiting_.holds(h.dst_qpn);
  if (!keeps_order) {
    // Delivered now (once whole in the buffer); one that would be placed itself waits for the
    // placing to end (one payload is placed at a time).
    if (avail >= need || len < kPlaceMin) return PastPlaced::kDeliver;
    main_held_ = true;
    return PastPlaced::kStop;
  }
  const bool movable = lane_bytes != 0 || len <= TcpWaitingFrames::kMaxBytes;
  if (movable && lane_bytes == 0 && avail < need) {
    make_room_locked(need);  // kept once whole
    return PastPlaced::kStop;
  }
  const uint8_t* payload = rx_.data() + rx_begin_ + kFrameHeaderBytes;
  if (!movable ||
      !waiting_.push(h, static_cast<uint32_t>(len), static_cast<uint32_t>(lane_bytes), payload)) {
    main_held_ = true;
    return PastPlaced::kStop;
  }
  rx_begin_ += lane_bytes != 0 ? kFrameHeaderBytes : need;
  return PastPlaced::kWaits;
}

size_t TcpLink::resume_after_placing_locked() {
  main_held_ = false;
  size_t frames = 0;
  while (!placing_ && !waiting_.empty()) {
    const TcpWaitingFrames::Frame f = waiting_.front();
    if (f.lane_bytes != 0) {
      waiting_.pop();
      start_placing_locked(f.header, f.length, f.lane_bytes, false);
      if (rx_out_of_memory_) return frames;
      continue;
    }
    LocalPayload payload(waiting_.payload(f), f.length);
    FrameHeader h = f.header;
    base::tsan_acquire(tsan_key_);
    owner_.deliver(*this, h, payload);
    waiting_.pop();
    ++frames;
  }
  return frames;
}

bool TcpLink::start_placing_locked(const FrameHeader& h, size_t len, size_t lane_bytes,
                                   bool in_buffer) {
  DirectTarget target;
  base::tsan_acquire(tsan_key_);
  const bool direct = h.op == FrameOp::kWrite && owner_.direct_target(*this, h, &target);
  // A payload longer than the frame could be delivered with is never held: a peer cannot make
  // us keep more than its QP could take (a posted receive, an rkey's range, a READ's length).
  const bool discard = !direct && len >= kPlaceMin && len > owner_.payload_room(*this, h);
  if (!direct && !discard && lane_bytes == 0) {
    direct_declined_ = true;
    return false;
  }
  if (!direct && !discard) {
    // Split but not placed: both parts meet in a buffer of their own.
    if (!split_buf_ || split_buf_->size() < len || split_buf_->size() > std::max(len, kRxKeep)) {
      split_buf_.reset();
      try {
        split_buf_ = std::make_unique<TcpRxBuffer>(std::max(len, size_t{1}));
      } catch (const std::bad_alloc&) {
        rx_out_of_memory_ = true;  // read_locked turns it into a link error
        return true;               // nothing placed: the reader stops at the error
      }
    }
  }
  placing_ = true;
  placing_direct_ = direct;
  placing_discarded_ = discard;
  placing_lost_ = false;
  placing_header_ = h;
  placing_target_ = target;
  placing_dest_ = direct ? target.addr : discard ? nullptr : split_buf_->data();
  placing_main_len_ = len - lane_bytes;
  placing_lane_len_ = lane_bytes;
  if (lane_bytes != 0) lane_receiver_.set_part_pending(true);
  placing_lane_done_ = 0;
  placing_main_done_ = 0;
  if (!in_buffer) return true;  // a lane frame that waited: all of it comes on the lane
  // The part already buffered moves now; what follows it in the buffer stays there.
  const size_t buffered = std::min(rx_end_ - rx_begin_ - kFrameHeaderBytes, placing_main_len_);
  placing_main_done_ = buffered;
  // A discarded payload's buffered part is consumed below, copied nowhere.
  if (buffered != 0 && !discard) {
    const uint8_t* from = rx_.data() + rx_begin_ + kFrameHeaderBytes;
    if (!direct) {
      std::memcpy(placing_dest_, from, buffered);
    } else if (FrameSink* holder = owner_.hold_region(target.region_key)) {
      std::memcpy(placing_dest_, from, buffered);
      owner_.release_region(holder, target.region_key);
    } else {
      placing_lost_ = true;
    }
  }
  rx_begin_ += kFrameHeaderBytes + buffered;
  if (rx_begin_ == rx_end_) {
    rx_begin_ = rx_end_ = 0;
    if (rx_.size() > kRxKeep) rx_.resize(kRxInitial, 0);
  }
  return true;
}

ssize_t TcpLink::receive_placed_locked(int fd, size_t offset, size_t want) {
  if (!placing_direct_ && !placing_discarded_) {
    return ::recv(fd, placing_dest_ + offset, want, MSG_DONTWAIT);
  }
  if (placing_direct_ && !placing_lost_) {
    if (FrameSink* holder = owner_.hold_region(placing_target_.region_key)) {
      // One non-blocking recv under the hold: deregistration waits for it, never for the
      // network.
      const ssize_t n = ::recv(fd, placing_dest_ + offset, want, MSG_DONTWAIT);
      const int saved = errno;
      owner_.release_region(holder, placing_target_.region_key);
      errno = saved;
      return n;
    }
    // Deregistered under the transfer: nothing more is written there.
    placing_lost_ = true;
  }
  // Bytes nobody keeps (a discarded payload, or the rest of a lost one), a scratch buffer at
  // a time.
  if (!discard_) discard_ = std::make_unique<uint8_t[]>(kDiscardBytes);
  return ::recv(fd, discard_.get(), std::min(want, kDiscardBytes), MSG_DONTWAIT);
}

void TcpLink::finish_placing_locked() {
  placing_ = false;
  lane_receiver_.set_part_pending(false);
  direct_declined_ = false;
  FrameHeader h = placing_header_;
  base::tsan_acquire(tsan_key_);
  if (placing_discarded_) {
    DiscardedPayload payload(placing_main_len_ + placing_lane_len_);
    owner_.deliver(*this, h, payload);
    return;
  }
  if (!placing_direct_) {
    LocalPayload payload(placing_dest_, h.length);
    owner_.deliver(*this, h, payload);
    return;
  }
  // A region deregistered under the transfer: the frame is delivered as a write through a key
  // that names nothing, which the responder refuses (remote access error), reading nothing.
  if (placing_lost_) h.rkey = 0;
  LocalPayload payload(placing_dest_, h.length);
  owner_.deliver(*this, h, payload);
}

void TcpLink::make_room_locked(size_t frame_bytes) {
  const size_t avail = rx_end_ - rx_begin_;
  try {
    if (avail == 0) {
      rx_begin_ = rx_end_ = 0;
      if (rx_.size() > kRxKeep && frame_bytes <= kRxInitial) rx_.resize(kRxInitial, 0);
    }
    if (rx_.size() < frame_bytes) {
      // A frame larger than the buffer: the buffer grows with what has arrived of it (at most
      // doubling each time it fills), never to a size the header merely announces, up to one
      // that holds it whole (given back once it has been delivered and a small frame follows).
      const size_t whole = frame_bytes + (frame_bytes > kRxKeep ? 0 : kRxInitial);
      const size_t grown = std::min(whole, std::max(2 * rx_.size(), avail + kRxInitial));
      if (avail != 0 && rx_begin_ != 0) std::memmove(rx_.data(), rx_.data() + rx_begin_, avail);
      rx_begin_ = 0;
      rx_end_ = avail;
      if (rx_end_ == rx_.size() || grown == whole) rx_.resize(grown, avail);
    } else if (rx_.size() - rx_begin_ < frame_bytes || rx_end_ == rx_.size()) {
      if (avail != 0) std::memmove(rx_.data(), rx_.data() + rx_begin_, avail);
      rx_begin_ = 0;
      rx_end_ = avail;
    }
  } catch (const std::bad_alloc&) {
    rx_out_of_memory_ = true;  // read_locked turns it into a link error
  }
}

}  // namespace transports::tcp
