// The accepting half that the gateway's TCP port and every held rdma_cm port share: accepts
// streams on a listening socket and reads the fixed-size preamble each must open with,
// bounded as docs/security.md asks: at most `max_pending` streams waiting for their preamble
// (beyond, it stops accepting, and later connections wait in the kernel's backlog, until one
// finishes), each for at most `preamble_timeout`, never more than the preamble's bytes read,
// at most two descriptors taken from a unix stream (more are closed by the kernel). Every
// stream closed for its behaviour, and every pause, is a log line (at most one a second per
// kind). Runs on one io_context; create, use and close it on that io_context's thread.
#pragma once

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/drop_counter.h"
#include "cm/cm_rendezvous_wire.h"

namespace cm {

struct AcceptorLimits {
  std::chrono::milliseconds preamble_timeout{5000};
  int max_pending = 64;
};

// The refusals of one accepting socket: a counter, and at most a log line a second, per kind,
// so that a flood of one kind neither floods the log nor hides another kind or socket.
struct Refusals {
  base::DropCounter timeouts;  // the acceptor's own
  base::DropCounter early_closes;
  base::DropCounter pauses;
  base::DropCounter accept_failures;
  base::DropCounter garbage;  // its owner's, on the preambles it is given
  base::DropCounter bad_descriptors;
  base::DropCounter verdict_failures;
  base::DropCounter hand_over_failures;
};

// A stream whose preamble arrived. Every descriptor here is the callee's to keep or close.
struct ArrivedStream {
  int fd = -1;  // the accepted stream, non-blocking, close-on-exec, positioned after the preamble
  sockaddr_storage peer{};  // accept's peer address
  PreambleCheck check = PreambleCheck::kGarbage;
  Preamble preamble;             // when check is kGood
  std::vector<int> descriptors;  // SCM_RIGHTS that came with the preamble (unix streams)
  bool descriptors_cut = false;  // more came than are taken (the rest closed by the kernel)
  Refusals* refusals = nullptr;  // the socket's, for the callee's lines (valid in the callback)
};

// Closes the stream and every descriptor it brought.
void close_stream(ArrivedStream& stream);
// Writes a verdict to a fresh stream (8 bytes fit in any socket buffer: no waiting); false
// when it could not be written whole.
bool send_verdict(int fd, Verdict verdict);

// Sends a preamble on a fresh unix stream with `count` (at most 4) descriptors attached
// (SCM_RIGHTS), without waiting (12 bytes fit in any socket buffer); false unless it went
// whole (errno set).
bool send_preamble(int fd, const Preamble& preamble, const int* descriptors, size_t count);

class PreambleAcceptor : public std::enable_shared_from_this<PreambleAcceptor> {
 public:
  using OnPreamble = std::function<void(ArrivedStream&&)>;

  // Takes `listen_fd` (listening, non-blocking) and starts accepting. `what` names the
  // listener in log lines ("gateway port 4791", "rdma_cm port 262/5000").
  static std::shared_ptr<PreambleAcceptor> start(boost::asio::io_context& io, int listen_fd,
                                                 std::string what, AcceptorLimits limits,
                                                 OnPreamble on_preamble);
  ~PreambleAcceptor();

  // Closes the listening socket and every waiting stream; no OnPreamble afterwards.
  void close();
  int pending() const { return static_cast<int>(waiting_.size()); }
  bool paused() const { return paused_; }

  struct Waiting;
  PreambleAcceptor(boost::asio::io_context& io, int listen_fd, std::string what,
                   AcceptorLimits limits, OnPreamble on_preamble);

 private:
  void arm();
  void accept_ready();
  void read_ready(const std::shared_ptr<Waiting>& w);
  void finish(const std::shared_ptr<Waiting>& w);  // drops it from waiting_, resumes accepting

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string what_;
  AcceptorLimits limits_;
  OnPreamble on_preamble_;
  std::vector<std::shared_ptr<Waiting>> waiting_;
  Refusals refusals_;
  bool paused_ = false;
  bool closed_ = false;
};

}  // namespace cm
