#include "transports/tcp/tcp_link.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>
#include <utility>

#include "transports/tcp/tcp_wire.h"

namespace emu {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp_wire::kFrameHeaderBytes;
using tcp_wire::kHelloBytes;

namespace {

constexpr size_t kRxInitial = 256 * 1024;     // receive buffer of a connection
constexpr size_t kRxKeep = 4 * 1024 * 1024;   // larger buffers are given back once empty
constexpr size_t kOutKeep = 4 * 1024 * 1024;  // likewise for the outgoing queue

// A payload sitting complete in the receive buffer.
class BufferSource : public PayloadSource {
 public:
  BufferSource(const uint8_t* data, size_t len) : p_(data), left_(len) {}
  size_t size() const override { return left_; }
  void read(void* dst, size_t len) override {
    len = std::min(len, left_);
    if (len != 0) std::memcpy(dst, p_, len);
    p_ += len;
    left_ -= len;
  }
  void skip(size_t len) override {
    len = std::min(len, left_);
    p_ += len;
    left_ -= len;
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace

TcpLink::TcpLink(TcpLinkOwner& owner, asio::io_context& io, asio::ip::tcp::socket socket,
                 const Gid& local, const Gid* expected_peer)
    : owner_(owner),
      io_(io),
      socket_(std::make_unique<asio::ip::tcp::socket>(std::move(socket))),
      dialed_(expected_peer != nullptr) {
  if (expected_peer != nullptr) peer_ = *expected_peer;
  error_code ec;
  auto ep = socket_->remote_endpoint(ec);
  remote_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  out_pending_.resize(kHelloBytes);
  tcp_wire::encode_hello(local, out_pending_.data());
}

TcpLink::~TcpLink() = default;

void TcpLink::start() {
  rx_size_ = kRxInitial;
  rx_.reset(new uint8_t[rx_size_]);
  read_more();
  write_next();
}

void TcpLink::shutdown() {
  close(false);
}

void TcpLink::abort() {
  if (socket_) spdlog::warn("tcp: dropping the connection with {}", remote_);
  close(true);
}

bool TcpLink::send(const FrameHeader& header, const iovec* iov, size_t iovcnt) {
  size_t total = 0;
  for (size_t i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  uint8_t head[kFrameHeaderBytes];
  tcp_wire::encode_header(header, static_cast<uint32_t>(total), head);

  std::lock_guard lock(out_mutex_);
  // A dead link drops answers (nobody waits for them) and refuses requests: the QPs on it
  // are moved to error by on_link_down.
  if (!up_.load(std::memory_order_relaxed)) return tcp_wire::is_answer(header.op);
  out_pending_.insert(out_pending_.end(), head, head + kFrameHeaderBytes);
  for (size_t i = 0; i < iovcnt; ++i) {
    const auto* base = static_cast<const uint8_t*>(iov[i].iov_base);
    out_pending_.insert(out_pending_.end(), base, base + iov[i].iov_len);
  }
  if (!write_active_) {
    write_active_ = true;
    // Under the lock: a link that is up belongs to a live transport, whose io_context exists.
    asio::post(io_, [self = shared_from_this()] { self->write_next(); });
  }
  return true;
}

void TcpLink::read_more() {
  socket_->async_read_some(
      asio::buffer(rx_.get() + rx_end_, rx_size_ - rx_end_),
      [self = shared_from_this()](const error_code& ec, size_t n) { self->on_read(ec, n); });
}

void TcpLink::on_read(const error_code& ec, size_t n) {
  if (!socket_) return;  // closed meanwhile
  if (ec) {
    if (ec == asio::error::eof) {
      spdlog::info("tcp: connection with {} closed by the peer", remote_);
    } else {
      spdlog::warn("tcp: connection with {} failed: {}", remote_, ec.message());
    }
    close(true);
    return;
  }
  rx_end_ += n;
  if (parse()) read_more();
}

bool TcpLink::parse() {
  for (;;) {
    const size_t avail = rx_end_ - rx_begin_;
    const uint8_t* p = rx_.get() + rx_begin_;
    if (!hello_done()) {
      if (avail < kHelloBytes) {
        make_room(kHelloBytes);
        return true;
      }
      Gid gid;
      if (const char* why = tcp_wire::decode_hello(p, &gid)) {
        spdlog::error("tcp: bad HELLO from {}: {}; closing the connection", remote_, why);
        close(true);
        return false;
      }
      if (!dialed_) {
        peer_ = gid;
      } else if (!(gid == peer_)) {
        spdlog::warn("tcp: the peer dialed at {} introduces itself with another GID", remote_);
      }
      rx_begin_ += kHelloBytes;
      hello_done_.store(true, std::memory_order_release);
      owner_.on_hello(*this);
      continue;
    }
    if (avail < kFrameHeaderBytes) {
      make_room(kFrameHeaderBytes);
      return true;
    }
    FrameHeader h;
    uint32_t len = 0;
    if (const char* why = tcp_wire::decode_header(p, &h, &len)) {
      spdlog::error(
          "tcp: bad frame from {}: {}; closing the connection, its QPs move to the error state",
          remote_, why);
      close(true);
      return false;
    }
    const size_t need = kFrameHeaderBytes + len;
    if (avail < need) {
      make_room(need);
      return true;
    }
    BufferSource payload(p + kFrameHeaderBytes, len);
    owner_.deliver(*this, h, payload);
    rx_begin_ += need;
    if (!socket_) return false;
  }
}

void TcpLink::make_room(size_t frame_bytes) {
  const size_t avail = rx_end_ - rx_begin_;
  if (avail == 0) {
    rx_begin_ = rx_end_ = 0;
    if (rx_size_ > kRxKeep && frame_bytes <= kRxInitial) {
      rx_size_ = kRxInitial;
      rx_.reset(new uint8_t[rx_size_]);
    }
  }
  if (rx_size_ < frame_bytes) {
    // A frame larger than the buffer: a new buffer that holds it whole.
    const size_t size = frame_bytes + kRxInitial;
    std::unique_ptr<uint8_t[]> bigger(new uint8_t[size]);
    if (avail != 0) std::memcpy(bigger.get(), rx_.get() + rx_begin_, avail);
    rx_ = std::move(bigger);
    rx_size_ = size;
    rx_begin_ = 0;
    rx_end_ = avail;
  } else if (rx_size_ - rx_begin_ < frame_bytes || rx_end_ == rx_size_) {
    if (avail != 0) std::memmove(rx_.get(), rx_.get() + rx_begin_, avail);
    rx_begin_ = 0;
    rx_end_ = avail;
  }
}

void TcpLink::write_next() {
  if (!socket_) return;
  if (out_off_ == out_writing_.size()) {
    out_writing_.clear();
    out_off_ = 0;
    if (out_writing_.capacity() > kOutKeep) std::vector<uint8_t>().swap(out_writing_);
    std::lock_guard lock(out_mutex_);
    if (out_pending_.empty()) {
      write_active_ = false;
      return;
    }
    out_pending_.swap(out_writing_);
  }
  socket_->async_write_some(
      asio::buffer(out_writing_.data() + out_off_, out_writing_.size() - out_off_),
      [self = shared_from_this()](const error_code& ec, size_t n) { self->on_write(ec, n); });
}

void TcpLink::on_write(const error_code& ec, size_t n) {
  if (!socket_) return;
  if (ec) {
    spdlog::warn("tcp: sending to {} failed: {}", remote_, ec.message());
    close(true);
    return;
  }
  out_off_ += n;
  write_next();
}

void TcpLink::close(bool report) {
  {
    std::lock_guard lock(out_mutex_);
    up_.store(false, std::memory_order_release);
    std::vector<uint8_t>().swap(out_pending_);
  }
  if (!socket_) return;
  error_code ignored;
  socket_->shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_->close(ignored);
  socket_.reset();
  if (report) owner_.on_down(*this);
}

}  // namespace emu
