// One CM stream (docs/wire.md, "Connection manager"): a connected stream socket, TCP or
// AF_UNIX, carrying framed CM messages (cm_wire.h) between two processes, on its owner's
// io_context. It reads header and body within their bounds, queues writes, closes after the
// last write when asked, runs the job secret's challenge-response in either role
// (cm_handshake.h) and, on the passive side, the first-message timeout. What the messages
// mean (connection states, events) is its owner's: a face's connection (the DAT face's
// dat_api::Connection, the rdma_cm face's) composes a Channel and gets its messages and its
// end through two handlers.
//
// Every member runs on the io_context's thread. The handlers hold what they capture (usually
// the owner, strongly) while the channel is open and are dropped when it closes, so an owner
// that holds its channel makes no lasting cycle; a handler may close the channel, or drop the
// owner's last reference to it, from within.
#pragma once

#include <array>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/job_secret.h"
#include "cm/cm_handshake.h"
#include "cm/cm_wire.h"

namespace cm {

class Channel : public std::enable_shared_from_this<Channel> {
 public:
  // A TCP socket converts to it by move (Socket(std::move(tcp_socket))); an AF_UNIX stream
  // fd handed over by another process is adopted with adopt_stream_fd.
  using Socket = boost::asio::generic::stream_protocol::socket;
  enum class Role { kActive, kPassive };

  struct Handlers {
    // A checked message, after the handshake when there is a secret.
    std::function<void(const Message&)> on_message;
    // The stream ended by itself (EOF, reset, a malformed or refused frame, a failed
    // handshake, the first-message timeout) or after close_after_write's last frame: once,
    // never after close(). `why` is for the owner's own log line; a refusal of what the peer
    // sent is logged already (log_refusal).
    std::function<void(const std::string& why)> on_closed;
  };

  struct Options {
    base::JobSecret secret;  // empty: no handshake, the first message comes first
    std::string peer;        // names the other end in log lines ("10.0.0.2:7471")
    // Passive: the first message (after the peer's proof) must come within this.
    std::chrono::milliseconds first_message_timeout = kFirstMessageTimeout;
  };

  static std::shared_ptr<Channel> create(Socket socket, Role role, Options options,
                                         Handlers handlers);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Active: sends `first` (after the handshake, with a secret) and reads.
  void start_active(Message first);
  // Passive: reads; the first message must come within the first-message timeout.
  void start_passive();
  // Queues a frame (nothing once closed or closing).
  void send(const Message& m);
  // Closes once every queued frame is written; on_closed follows.
  void close_after_write();
  // Closes now, dropping queued frames; no on_closed.
  void close();
  bool is_open() const { return socket_.is_open(); }
  const std::string& peer() const { return options_.peer; }

 private:
  Channel(Socket socket, Role role, Options options, Handlers handlers);
  void read_header();
  void read_body(Type type, uint32_t length);
  void on_read_error(const boost::system::error_code& ec);
  void deliver(const Message& m);
  void on_handshake_message(const Message& m);
  // A rate-limited refusal line (when `refusal`), then the end.
  void fail(const std::string& why, bool refusal);
  void end(const std::string& why);
  void write_next();
  void shut();

  enum class Handshake { kNone, kAwaitingReply, kAwaitingAuth, kAwaitingProof, kDone };

  Socket socket_;
  const Role role_;
  Options options_;
  Handlers handlers_;
  Handshake handshake_ = Handshake::kNone;
  boost::asio::steady_timer first_message_timer_;
  bool awaiting_first_message_ = false;
  std::array<uint8_t, kHeaderSize> header_{};
  std::vector<uint8_t> body_;
  std::deque<std::vector<uint8_t>> out_;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool ended_ = false;  // closed, or ended with on_closed: nothing more happens
  Nonce nonce_{};
  Nonce peer_nonce_{};
  std::optional<Message> held_first_;  // active: sent once the passive side proved itself
};

// An AF_UNIX (or any) connected stream socket fd as a Channel::Socket on `io`, which owns it
// from then on; nothing (and the fd closed) when it is not a stream socket.
std::optional<Channel::Socket> adopt_stream_fd(boost::asio::io_context& io, int fd);

}  // namespace cm
