// TcpLink's opening handshake (tcp_link.h; docs/wire.md, "TCP handshake"):
//
//   dialer                                     acceptor
//   HELLO(gid_d, nonce_d, secret?)        ->
//                                         <-   HELLO(gid_a, nonce_a, secret?, proof_a)
//   PROOF(proof_d)   (with a secret)      ->
//                                         <-   WELCOME   (the owner keeps the connection)
//
// proof_a = HMAC(secret, "emurdma-v3 acceptor" | nonce_d | nonce_a | gid_d | gid_a) and
// proof_d the same with "emurdma-v3 dialer": each side proves it holds the secret over a
// nonce the other just drew, under its own role label (one proof is never the other's). The
// acceptor checks that the dialer's GID names the address the connection comes from, and the
// dialer that the acceptor's GID is the one it dialed. Both must agree on having a secret. The
// acceptor acts on nothing but a PROOF before the proof checks, and the dialer is ready only
// at the WELCOME: no frame crosses before both ends know who they talk to.
#include <spdlog/spdlog.h>

#include <optional>

#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_link_internal.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

namespace {

const char* secret_mismatch(bool ours) {
  return ours ? "the peer has no secret and this process has one (EMURDMA_SECRET_FILE or "
                "EMURDMA_SECRET): refused"
              : "the peer has a secret and this process has none (set EMURDMA_SECRET_FILE or "
                "EMURDMA_SECRET as the peer does): refused";
}

}  // namespace

void TcpLink::start() {
  if (!random_nonce(&nonce_)) {
    spdlog::error("tcp: no random bytes for the handshake with {}; closing", remote_);
    close(true);
    return;
  }
  if (dialed_) {
    tcp_wire::Hello ours;
    ours.gid = local_;
    ours.has_secret = !secret_.empty();
    ours.nonce = nonce_;
    uint8_t hello[kHelloBytes];
    tcp_wire::encode_hello(ours, hello);
    if (!send_handshake_unit(hello, sizeof hello)) {
      spdlog::warn("tcp: sending the HELLO to {} failed", remote_);
      close(true);
      return;
    }
  } else {
    arm_hello_timeout();
  }
  wait_readable();
}

void TcpLink::arm_hello_timeout() {
  hello_timer_.expires_after(owner_.hello_timeout());
  hello_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->closed_ || self->ready()) return;
    ReadResult r;
    r.failure = Failure::kTimedOut;
    self->report_failure(r);
    self->close(true);
  });
}

bool TcpLink::send_handshake_unit(const uint8_t* unit, size_t len) {
  const iovec part{const_cast<uint8_t*>(unit), len};
  std::lock_guard lock(tx_mutex_);
  if (!up_.load(std::memory_order_relaxed)) return false;
  return write_or_queue_locked(&part, 1, 1, len) == 0;
}

bool TcpLink::answer_hello() {
  uint8_t welcome[tcp_wire::kWelcomeBytes];
  tcp_wire::encode_welcome(welcome);
  if (!send_handshake_unit(welcome, sizeof welcome)) return false;
  state_.store(kReady, std::memory_order_release);
  hello_timer_.cancel();
  return true;
}

TcpLink::HandshakeStep TcpLink::handshake_locked(ReadResult* r) {
  const size_t avail = rx_end_ - rx_begin_;
  const uint8_t* p = rx_.data() + rx_begin_;
  auto fail = [r](const char* why) {
    r->failure = Failure::kBadHello;
    r->reason = why;
    return HandshakeStep::kFailed;
  };
  auto need = [this, avail](size_t n) {
    if (avail >= n) return false;
    make_room_locked(n);
    return true;
  };
  switch (handshake_) {
    case Handshake::kAwaitHello: {
      // A peer of another version is refused on its first bytes, not after a timeout.
      if (avail >= tcp_wire::kHelloPrefixBytes) {
        if (const char* why = tcp_wire::check_hello_prefix(p)) return fail(why);
      }
      if (need(kHelloBytes)) return HandshakeStep::kNeedMore;
      tcp_wire::Hello hello;
      if (const char* why = tcp_wire::decode_hello(p, &hello)) return fail(why);
      rx_begin_ += kHelloBytes;
      return dialed_ ? on_acceptor_hello_locked(hello, r) : on_dialer_hello_locked(hello, r);
    }
    case Handshake::kAwaitProof: {
      if (need(tcp_wire::kProofBytes)) return HandshakeStep::kNeedMore;
      Mac proof;
      if (const char* why = tcp_wire::decode_proof(p, &proof)) return fail(why);
      rx_begin_ += tcp_wire::kProofBytes;
      const Mac expected = dialer_proof(secret_, transcript_);
      if (!same_mac(expected.data(), proof.data())) {
        return fail("wrong PROOF: the peer does not hold this job's secret");
      }
      session_ = session_key(secret_, transcript_);
      return decide_locked(r);
    }
    case Handshake::kAwaitWelcome: {
      if (need(tcp_wire::kWelcomeBytes)) return HandshakeStep::kNeedMore;
      if (const char* why = tcp_wire::decode_welcome(p)) return fail(why);
      rx_begin_ += tcp_wire::kWelcomeBytes;
      handshake_ = Handshake::kDone;
      state_.store(kReady, std::memory_order_release);
      owner_.on_hello(*this);
      return HandshakeStep::kContinue;
    }
    case Handshake::kDone:
      break;
  }
  return HandshakeStep::kContinue;
}

TcpLink::HandshakeStep TcpLink::on_dialer_hello_locked(const tcp_wire::Hello& hello,
                                                       ReadResult* r) {
  auto fail = [r](const char* why) {
    r->failure = Failure::kBadHello;
    r->reason = why;
    return HandshakeStep::kFailed;
  };
  // The GID is where we would dial the peer: it must be where the connection comes from
  // (any port: the dialer's is ephemeral), or anyone could speak for anyone.
  const std::optional<TcpEndpoint> ep = tcp_endpoint_of(hello.gid);
  if (!ep) return fail("the HELLO names no TCP GID");
  if (ep->ipv4 != remote_ipv4_) {
    return fail("the HELLO's GID names another address than the connection comes from");
  }
  peer_ = hello.gid;
  const bool ours = !secret_.empty();
  transcript_.dialer_nonce = hello.nonce;
  transcript_.acceptor_nonce = nonce_;
  transcript_.dialer_gid = hello.gid;
  transcript_.acceptor_gid = local_;
  // Our HELLO goes even to a peer that disagrees on the secret: its log then says why.
  tcp_wire::Hello answer;
  answer.gid = local_;
  answer.has_secret = ours;
  answer.nonce = nonce_;
  if (ours && hello.has_secret) answer.proof = acceptor_proof(secret_, transcript_);
  uint8_t unit[kHelloBytes];
  tcp_wire::encode_hello(answer, unit);
  if (!send_handshake_unit(unit, sizeof unit)) {
    r->failure = Failure::kSocketError;
    r->error = EPIPE;
    return HandshakeStep::kFailed;
  }
  if (hello.has_secret != ours) return fail(secret_mismatch(ours));
  if (ours) {
    handshake_ = Handshake::kAwaitProof;
    return HandshakeStep::kContinue;
  }
  return decide_locked(r);
}

TcpLink::HandshakeStep TcpLink::on_acceptor_hello_locked(const tcp_wire::Hello& hello,
                                                         ReadResult* r) {
  auto fail = [r](const char* why) {
    r->failure = Failure::kBadHello;
    r->reason = why;
    return HandshakeStep::kFailed;
  };
  if (!(hello.gid == peer_)) return fail("the peer dialed answers with another GID than dialed");
  const bool ours = !secret_.empty();
  if (hello.has_secret != ours) return fail(secret_mismatch(ours));
  transcript_.dialer_nonce = nonce_;
  transcript_.acceptor_nonce = hello.nonce;
  transcript_.dialer_gid = local_;
  transcript_.acceptor_gid = peer_;
  if (ours) {
    const Mac expected = acceptor_proof(secret_, transcript_);
    if (!same_mac(expected.data(), hello.proof.data())) {
      return fail(
          "wrong proof in the acceptor's HELLO: the peer does not hold this job's "
          "secret");
    }
    session_ = session_key(secret_, transcript_);
    uint8_t unit[tcp_wire::kProofBytes];
    tcp_wire::encode_proof(dialer_proof(secret_, transcript_), unit);
    if (!send_handshake_unit(unit, sizeof unit)) {
      r->failure = Failure::kSocketError;
      r->error = EPIPE;
      return HandshakeStep::kFailed;
    }
  }
  answered_.store(true, std::memory_order_release);
  handshake_ = Handshake::kAwaitWelcome;
  return HandshakeStep::kContinue;
}

TcpLink::HandshakeStep TcpLink::decide_locked(ReadResult* r) {
  handshake_ = Handshake::kDone;
  // The owner answers with the WELCOME (answer_hello) if it keeps the connection.
  if (!owner_.on_hello(*this)) {
    r->failure = Failure::kRefused;
    return HandshakeStep::kFailed;
  }
  return HandshakeStep::kContinue;
}

}  // namespace transports::tcp
