// A bulk lane's descriptor (TcpBulkLaneSender's and TcpBulkLaneReceiver's, tcp_bulk_lane.h), on
// the io thread only. It is in the reactor (its socket object open) only while the io thread
// waits on it: a descriptor in the reactor's edge-triggered epoll set wakes the io thread at every
// arrival and every freed room, waited on or not (tcp_bulk_lane.h tells how often that was). The
// rest of the time it is held as a plain descriptor.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>

namespace transports::tcp {

class TcpLaneSocket {
 public:
  // The descriptor held outside the reactor; -1 when none (or while it is in the reactor
  // before release()).
  int fd() const { return owned_fd_; }
  // Takes fd, held outside the reactor (an accepted lane).
  void hold(boost::asio::io_context& io, int fd) {
    owned_fd_ = fd;
    socket_ = std::make_unique<boost::asio::ip::tcp::socket>(io);
  }
  // Takes fd into the reactor (a dialed lane, waiting for its LANE_OK); on failure fd stays
  // the caller's.
  void assign(boost::asio::io_context& io, int fd, boost::system::error_code& ec) {
    socket_ = std::make_unique<boost::asio::ip::tcp::socket>(io);
    socket_->assign(boost::asio::ip::tcp::v4(), fd, ec);
    if (ec) socket_.reset();
  }
  // Takes the descriptor out of the reactor for good (until enter()).
  void release(boost::system::error_code& ec) {
    const int fd = socket_->release(ec);
    if (!ec) owned_fd_ = fd;
  }
  // Whether the descriptor is in the reactor now (a wait is armed).
  bool in_reactor() const { return socket_->is_open(); }
  // Into the reactor for one wait (on socket()), out again with leave().
  void enter(boost::system::error_code& ec) {
    socket_->assign(boost::asio::ip::tcp::v4(), owned_fd_, ec);
  }
  // A wait ended: the descriptor leaves the reactor again (unless close() closed it).
  void leave() {
    boost::system::error_code ignored;
    if (socket_->is_open()) (void)socket_->release(ignored);
  }
  boost::asio::ip::tcp::socket& socket() { return *socket_; }
  // Closes the descriptor wherever it is.
  void close() {
    if (socket_ != nullptr && socket_->is_open()) {
      boost::system::error_code ignored;
      socket_->shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
      socket_->close(ignored);
    } else if (owned_fd_ >= 0) {
      ::shutdown(owned_fd_, SHUT_RDWR);
      ::close(owned_fd_);
    }
    owned_fd_ = -1;
  }

 private:
  std::unique_ptr<boost::asio::ip::tcp::socket> socket_;
  int owned_fd_ = -1;
};

}  // namespace transports::tcp
