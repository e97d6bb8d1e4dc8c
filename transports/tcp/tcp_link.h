// One TCP connection to a peer process: the Link the engine sends on, and the reader that
// turns the byte stream back into frames. Every socket operation runs on the transport's io
// thread; send() may be called from any thread and only appends to an outgoing queue.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu/transport.h"

namespace emu {

class TcpLink;

// What a connection reports to the transport that owns it (always on the io thread).
class TcpLinkOwner {
 public:
  virtual ~TcpLinkOwner() = default;
  // The peer's HELLO arrived: link.peer() is now known.
  virtual void on_hello(TcpLink& link) = 0;
  virtual void deliver(TcpLink& link, const FrameHeader& header, PayloadSource& payload) = 0;
  // The connection failed or was closed by the peer; called once.
  virtual void on_down(TcpLink& link) = 0;
};

class TcpLink : public Link, public std::enable_shared_from_this<TcpLink> {
 public:
  // A dialed connection knows its peer (expected_peer); an accepted one learns it from the
  // HELLO. The HELLO carrying `local` is the first thing queued for sending.
  TcpLink(TcpLinkOwner& owner, boost::asio::io_context& io, boost::asio::ip::tcp::socket socket,
          const Gid& local, const Gid* expected_peer);
  ~TcpLink() override;

  // io thread: starts reading and writing.
  void start();
  // io thread: closes the connection without reporting it (transport shutdown).
  void shutdown();
  // io thread: closes the connection as a failure would (reported to the owner).
  void abort();

  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) override;
  const Gid& peer() const override { return peer_; }
  bool up() const override { return up_.load(std::memory_order_acquire); }

  bool dialed() const { return dialed_; }
  bool hello_done() const { return hello_done_.load(std::memory_order_acquire); }
  const std::string& remote() const { return remote_; }

 private:
  void read_more();
  void on_read(const boost::system::error_code& ec, size_t n);
  // Consumes the complete frames in the receive buffer; false once the connection failed.
  bool parse();
  void make_room(size_t frame_bytes);
  void write_next();
  void on_write(const boost::system::error_code& ec, size_t n);
  // Marks the link down and closes the socket; reports it to the owner when `report`.
  void close(bool report);

  TcpLinkOwner& owner_;
  boost::asio::io_context& io_;
  std::unique_ptr<boost::asio::ip::tcp::socket> socket_;  // null once closed (io thread)
  const bool dialed_;
  Gid peer_;
  std::string remote_;  // "a.b.c.d:port" of the socket's other end
  std::atomic<bool> up_{true};
  std::atomic<bool> hello_done_{false};

  // Outgoing bytes: senders append to out_pending_ under out_mutex_; the io thread swaps it
  // with out_writing_ and writes that. write_active_ is true while a write chain runs.
  std::mutex out_mutex_;
  std::vector<uint8_t> out_pending_;
  bool write_active_ = true;  // the chain start() begins sends the HELLO
  std::vector<uint8_t> out_writing_;
  size_t out_off_ = 0;

  // Incoming bytes (io thread): rx_[rx_begin_, rx_end_) is received, not yet consumed.
  std::unique_ptr<uint8_t[]> rx_;
  size_t rx_size_ = 0;
  size_t rx_begin_ = 0;
  size_t rx_end_ = 0;
};

}  // namespace emu
