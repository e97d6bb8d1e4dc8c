// One CM stream: framing, write queue, handshake and first-message bound (cm_channel.h).
#include "cm/cm_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace cm {

namespace asio = boost::asio;
using boost::system::error_code;

std::shared_ptr<Channel> Channel::create(Socket socket, Role role, Options options,
                                         Handlers handlers) {
  return std::shared_ptr<Channel>(
      new Channel(std::move(socket), role, std::move(options), std::move(handlers)));
}

Channel::Channel(Socket socket, Role role, Options options, Handlers handlers)
    : socket_(std::move(socket)),
      role_(role),
      options_(std::move(options)),
      handlers_(std::move(handlers)),
      first_message_timer_(socket_.get_executor()) {}

Channel::~Channel() = default;

void Channel::start_active(Message first) {
  if (options_.secret.empty()) {
    handshake_ = Handshake::kDone;
    send(first);
  } else {
    if (!base::random_bytes(nonce_.data(), nonce_.size())) {
      fail("no random bytes for the handshake", true);
      return;
    }
    held_first_ = std::move(first);
    handshake_ = Handshake::kAwaitingReply;
    Message auth = bare(Type::kAuth);
    auth.nonce = nonce_;
    send(auth);
  }
  read_header();
}

void Channel::start_passive() {
  handshake_ = options_.secret.empty() ? Handshake::kDone : Handshake::kAwaitingAuth;
  awaiting_first_message_ = true;
  first_message_timer_.expires_after(options_.first_message_timeout);
  first_message_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || !self->awaiting_first_message_) return;
    self->fail("brought no message within " +
                   std::to_string(self->options_.first_message_timeout.count()) + " ms",
               true);
  });
  read_header();
}

void Channel::send(const Message& m) {
  if (ended_ || close_after_write_ || !socket_.is_open()) return;
  out_.push_back(encode(m));
  if (!writing_) write_next();
}

void Channel::close_after_write() {
  if (ended_) return;
  close_after_write_ = true;
  if (!writing_) write_next();
}

void Channel::close() {
  ended_ = true;
  shut();
  handlers_ = Handlers{};  // a handler running now holds its own copy (deliver, end)
}

void Channel::shut() {
  error_code ignored;
  first_message_timer_.cancel();
  awaiting_first_message_ = false;
  if (socket_.is_open()) {
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  out_.clear();
}

void Channel::end(const std::string& why) {
  if (ended_) return;
  ended_ = true;
  shut();
  const auto on_closed = std::move(handlers_.on_closed);
  handlers_ = Handlers{};
  if (on_closed) on_closed(why);
}

void Channel::fail(const std::string& why, bool refusal) {
  if (ended_) return;
  if (refusal) {
    log_refusal((role_ == Role::kActive ? "connection to " : "connection from ") + options_.peer +
                ": " + why + "; closed");
  }
  end(why);
}

void Channel::write_next() {
  if (out_.empty()) {
    writing_ = false;
    if (close_after_write_) end("closed after its last frame");
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self = shared_from_this()](const error_code& ec, size_t) {
                      if (ec) {
                        self->writing_ = false;
                        return;  // the read side reports the broken stream
                      }
                      if (!self->out_.empty()) self->out_.pop_front();
                      self->write_next();
                    });
}

void Channel::read_header() {
  asio::async_read(
      socket_, asio::buffer(header_), [self = shared_from_this()](const error_code& ec, size_t) {
        if (ec) {
          self->on_read_error(ec);
          return;
        }
        Type type{};
        const std::optional<uint32_t> length = parse_header(self->header_.data(), &type);
        if (!length) {
          self->fail("malformed frame header", true);
          return;
        }
        self->read_body(type, *length);
      });
}

void Channel::read_body(Type type, uint32_t length) {
  body_.resize(length);
  asio::async_read(
      socket_, asio::buffer(body_),
      [self = shared_from_this(), type](const error_code& ec, size_t) {
        if (ec) {
          self->on_read_error(ec);
          return;
        }
        const std::optional<Message> m = parse_body(type, self->body_.data(), self->body_.size());
        if (!m) {
          self->fail("malformed frame of type " + std::to_string(static_cast<int>(type)), true);
          return;
        }
        if (self->handshake_ == Handshake::kDone) {
          self->deliver(*m);
        } else {
          self->on_handshake_message(*m);
        }
        if (self->socket_.is_open()) self->read_header();
      });
}

void Channel::on_read_error(const error_code& ec) {
  if (ec == asio::error::operation_aborted || ended_) return;  // closed by us
  if (handshake_ != Handshake::kDone && handshake_ != Handshake::kNone) {
    // The other side closed before proving itself: it refused our proof or has another (or
    // no) secret; its own log says which.
    fail("the peer closed the connection during the authentication", true);
    return;
  }
  end(ec == asio::error::eof ? "closed by the peer" : ec.message());
}

void Channel::deliver(const Message& m) {
  if (awaiting_first_message_) {
    awaiting_first_message_ = false;
    first_message_timer_.cancel();
  }
  const auto on_message = handlers_.on_message;  // the handler may close the channel
  if (on_message) on_message(m);
}

void Channel::on_handshake_message(const Message& m) {
  const base::JobSecret& secret = options_.secret;
  switch (handshake_) {
    case Handshake::kAwaitingReply: {
      if (m.type != Type::kAuthReply) {
        fail("the peer answered the AUTH with another frame", true);
        return;
      }
      peer_nonce_ = m.nonce;
      const Proof expected = passive_proof(secret, nonce_, peer_nonce_);
      if (!base::same_mac(expected.data(), m.proof.data())) {
        fail("wrong proof: the peer does not hold this job's secret", true);
        return;
      }
      Message proof = bare(Type::kAuthProof);
      proof.proof = active_proof(secret, nonce_, peer_nonce_);
      handshake_ = Handshake::kDone;
      send(proof);
      if (held_first_) send(*held_first_);
      held_first_.reset();
      return;
    }
    case Handshake::kAwaitingAuth: {
      if (m.type != Type::kAuth) {
        fail(m.type == Type::kReq || m.type == Type::kUdReq
                 ? "a request without a proof (the peer has no job secret?)"
                 : "the first frame is not an AUTH",
             true);
        return;
      }
      peer_nonce_ = m.nonce;
      if (!base::random_bytes(nonce_.data(), nonce_.size())) {
        fail("no random bytes for the handshake", true);
        return;
      }
      Message reply = bare(Type::kAuthReply);
      reply.nonce = nonce_;
      reply.proof = passive_proof(secret, peer_nonce_, nonce_);
      handshake_ = Handshake::kAwaitingProof;
      send(reply);
      return;
    }
    case Handshake::kAwaitingProof: {
      if (m.type != Type::kAuthProof) {
        fail("another frame than the AUTH_PROOF", true);
        return;
      }
      const Proof expected = active_proof(secret, peer_nonce_, nonce_);
      if (!base::same_mac(expected.data(), m.proof.data())) {
        fail("wrong proof: the peer does not hold this job's secret", true);
        return;
      }
      handshake_ = Handshake::kDone;  // the first message may come now, within its bound
      return;
    }
    case Handshake::kNone:
    case Handshake::kDone:
      return;
  }
}

std::optional<Channel::Socket> adopt_stream_fd(asio::io_context& io, int fd) {
  int type = 0;
  int protocol = 0;
  sockaddr_storage local{};
  socklen_t size = sizeof type;
  socklen_t local_size = sizeof local;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) != 0 || type != SOCK_STREAM ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  size = sizeof protocol;
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &size) != 0) protocol = 0;
  Channel::Socket socket(io);
  error_code ec;
  socket.assign(asio::generic::stream_protocol(local.ss_family, protocol), fd, ec);
  if (ec) {
    ::close(fd);
    return std::nullopt;
  }
  return socket;
}

}  // namespace cm
