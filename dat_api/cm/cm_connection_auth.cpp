// The CM's challenge-response and the bounds of its passive connections (cm/cm_handshake.h), as
// members of Connection run on the IA's CM thread.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

#include "cm/cm_handshake.h"
#include "dat_api/cm/cm_connection.h"
#include "dat_api/cm/cm_service.h"

namespace dat_api {

namespace asio = boost::asio;
using boost::system::error_code;

bool Connection::has_secret() const {
  return !service_->ia().cm_secret().empty();
}

std::string Connection::peer_text() const {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (peer_address.ss_family == 0 && socket_.is_open()) {
    error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    if (!ec) return remote.address().to_string() + ":" + std::to_string(remote.port());
  }
  if (peer_address.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&peer_address);
    inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
    port = ntohs(sin->sin_port);
  } else if (peer_address.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&peer_address);
    inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
    port = ntohs(sin6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void Connection::begin_active_handshake(cm::Message request) {
  if (!base::random_bytes(nonce_.data(), nonce_.size())) {
    fail_handshake("no random bytes for the handshake");
    return;
  }
  held_request_ = std::move(request);
  phase_ = Phase::kAuthenticating;
  cm::Message auth = cm::bare(cm::Type::kAuth);
  auth.nonce = nonce_;
  send(auth);
  read_header();
}

void Connection::enter_unauthenticated() {
  unauthenticated_ = true;
  auto self = shared_from_this();
  timer_.expires_after(cm::kFirstMessageTimeout);
  timer_.async_wait([self](const error_code& ec) {
    if (ec || !self->unauthenticated_) return;
    cm::log_refusal("connection from " + self->peer_text() + " brought no request within " +
                    std::to_string(cm::kFirstMessageTimeout.count()) + " s; closed");
    self->abort();
  });
}

void Connection::leave_unauthenticated() {
  if (!unauthenticated_) return;
  unauthenticated_ = false;
  service_->release_unauthenticated();
}

void Connection::fail_handshake(const std::string& why) {
  cm::log_refusal((role_ == Role::kActive ? "connection to " : "connection from ") + peer_text() +
                  ": " + why + "; closed");
  if (role_ == Role::kActive) {
    // The documented outcome of a peer that does not prove the job secret: the remote
    // consumer is not reachable, DAT_CONNECTION_EVENT_NON_PEER_REJECTED.
    on_active_failure(DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
    return;
  }
  abort();  // no event: nothing reached the program
}

void Connection::on_auth_message(const cm::Message& m) {
  const base::JobSecret& secret = service_->ia().cm_secret();
  if (role_ == Role::kActive) {
    if (m.type != cm::Type::kAuthReply) {
      fail_handshake("the peer answered the AUTH with another frame");
      return;
    }
    peer_nonce_ = m.nonce;
    const cm::Proof expected = cm::passive_proof(secret, nonce_, peer_nonce_);
    if (!base::same_mac(expected.data(), m.proof.data())) {
      fail_handshake("wrong proof: the peer does not hold this job's secret");
      return;
    }
    cm::Message proof = cm::bare(cm::Type::kAuthProof);
    proof.proof = cm::active_proof(secret, nonce_, peer_nonce_);
    phase_ = Phase::kRequested;
    send(proof);
    send(held_request_);
    held_request_ = cm::Message{};
    return;
  }
  if (!awaiting_proof_) {
    if (m.type != cm::Type::kAuth) {
      fail_handshake(m.type == cm::Type::kReq || m.type == cm::Type::kUdReq
                         ? "a request without a proof (the peer has no job secret?)"
                         : "the first frame is not an AUTH");
      return;
    }
    peer_nonce_ = m.nonce;
    if (!base::random_bytes(nonce_.data(), nonce_.size())) {
      fail_handshake("no random bytes for the handshake");
      return;
    }
    cm::Message reply = cm::bare(cm::Type::kAuthReply);
    reply.nonce = nonce_;
    reply.proof = cm::passive_proof(secret, peer_nonce_, nonce_);
    awaiting_proof_ = true;
    send(reply);
    return;
  }
  if (m.type != cm::Type::kAuthProof) {
    fail_handshake("another frame than the AUTH_PROOF");
    return;
  }
  const cm::Proof expected = cm::active_proof(secret, peer_nonce_, nonce_);
  if (!base::same_mac(expected.data(), m.proof.data())) {
    fail_handshake("wrong proof: the peer does not hold this job's secret");
    return;
  }
  awaiting_proof_ = false;
  phase_ = Phase::kCrPending;  // the REQ may come now (still within the first-message bound)
}

}  // namespace dat_api
