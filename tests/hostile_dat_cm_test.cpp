// Issue 22, the DAT connection manager against hostile peers (docs/security.md): with a job
// secret every CM connection proves it first (cm/cm_handshake.h), without one the soft
// device's CM listens on 127.0.0.1 only; with or without, a connection that brings no request
// is closed after 5 s, at most 64 may wait, and a frame with bytes after its body is refused.
// The attacker is a raw TCP client on loopback speaking the CM's frames (docs/wire.md).
//
// The secret is read when an IA opens (EMURDMA_SECRET, set here per test), so two IAs of one
// process can hold different secrets.
#include <arpa/inet.h>
#include <dat2/udat.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/dat_test_util.h"

namespace {

using namespace dat_test;

constexpr DAT_TIMEOUT kWait = 5'000'000;  // 5 s: every wait for an event is bounded
constexpr DAT_TIMEOUT kQuiet = 500'000;   // how long "no event came" is watched
constexpr const char* kSecret = "hostile-dat-cm-test-secret-0123456789";
constexpr const char* kOtherSecret = "another-job-secret-that-is-not-this-one";

using Bytes = std::vector<uint8_t>;
using Block = std::array<uint8_t, 32>;

// --- The CM's frames, written by hand (docs/wire.md, "Connection manager") ---------------

enum FrameType : uint8_t { kReq = 1, kAuth = 9, kAuthReply = 10, kAuthProof = 11 };

Bytes Frame(uint8_t type, const Bytes& body, size_t announced) {
  Bytes f = {'E', 'M', 'C', 'M', 2, type, 0, 0};  // version 2
  for (int i = 3; i >= 0; --i) f.push_back(static_cast<uint8_t>(announced >> (8 * i)));
  f.insert(f.end(), body.begin(), body.end());
  return f;
}
Bytes Frame(uint8_t type, const Bytes& body) {
  return Frame(type, body, body.size());
}

// A well-formed REQ for `conn_qual` from and to 127.0.0.1, no private data.
Bytes ReqBody(uint16_t conn_qual) {
  // QP info: qpn, psn, gid, read depths, retry counts, flow control, SRQ
  Bytes b(4 + 4 + 16 + 2 + 2 + 2, 0);
  b[3] = 0x12;
  b.push_back(2);     // QP type IBV_QPT_RC
  b.push_back(0x01);  // port space RDMA_PS_TCP (u16)
  b.push_back(0x06);
  for (int i = 7; i >= 0; --i) b.push_back(static_cast<uint8_t>(uint64_t{conn_qual} >> (8 * i)));
  const Bytes address = {0, AF_INET, 0x12, 0x34, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  b.insert(b.end(), address.begin(), address.end());  // source
  b.insert(b.end(), address.begin(), address.end());  // destination
  b.push_back(0);                                     // private data length (u16)
  b.push_back(0);
  return b;
}

Block Hmac(const char* secret, const char* label, const Block& active, const Block& passive) {
  Bytes message(label, label + std::strlen(label) + 1);
  message.insert(message.end(), active.begin(), active.end());
  message.insert(message.end(), passive.begin(), passive.end());
  Block out{};
  unsigned len = 0;
  HMAC(EVP_sha256(), secret, static_cast<int>(std::strlen(secret)), message.data(), message.size(),
       out.data(), &len);
  return out;
}

// --- A raw TCP client -------------------------------------------------------------------------

struct RawClient {
  int fd = -1;
  explicit RawClient(uint16_t port, const char* host = "127.0.0.1") {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, host, &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd);
      fd = -1;
    }
  }
  ~RawClient() {
    if (fd >= 0) close(fd);
  }
  bool connected() const { return fd >= 0; }
  bool Send(const Bytes& b) const {
    return ::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  // Reads exactly n bytes within timeout_ms; false on EOF, error or timeout.
  bool Read(uint8_t* out, size_t n, int timeout_ms = 5000) const {
    size_t got = 0;
    while (got < n) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) != 1) return false;
      const ssize_t r = ::recv(fd, out + got, n - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  // True when the peer closes the connection within timeout_ms (EOF or reset; any bytes the
  // peer sent before are skipped).
  bool ClosedByPeer(int timeout_ms) const {
    uint8_t buf[256];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) != 1) return false;
      const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r <= 0) return true;
    }
  }
  // Reads an AUTH_REPLY: the passive side's nonce and proof.
  bool ReadAuthReply(Block* nonce, Block* proof) const {
    uint8_t header[12];
    if (!Read(header, sizeof header)) return false;
    if (header[5] != kAuthReply || header[11] != 64) return false;
    return Read(nonce->data(), 32) && Read(proof->data(), 32);
  }
};

void SetSecret(const char* secret) {
  unsetenv("EMURDMA_SECRET_FILE");
  if (secret != nullptr) {
    setenv("EMURDMA_SECRET", secret, 1);
  } else {
    unsetenv("EMURDMA_SECRET");
  }
}

// One IA with a PZ, a CR EVD, a PSP on a free qualifier, and a connection-side EP.
struct Ia {
  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE cr_evd = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE dto_evd = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE conn_evd = DAT_HANDLE_NULL;
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL conn_qual = 0;
  sockaddr_in address{};

  // Opens the IA under `secret` (read at open) and listens.
  DAT_RETURN Open(const char* secret) {
    SetSecret(secret);
    DAT_RETURN r = dat_ia_open(const_cast<char*>("emu0"), 16, &async_evd, &ia);
    if (r != DAT_SUCCESS) return r;
    if ((r = dat_pz_create(ia, &pz)) != DAT_SUCCESS) return r;
    if ((r = dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd)) != DAT_SUCCESS) {
      return r;
    }
    if ((r = dat_evd_create(ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto_evd)) != DAT_SUCCESS) {
      return r;
    }
    r = dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn_evd);
    if (r != DAT_SUCCESS) return r;
    if ((r = dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, nullptr, &ep)) != DAT_SUCCESS) {
      return r;
    }
    DAT_IA_ATTR attr{};
    r = dat_ia_query(ia, nullptr, DAT_IA_FIELD_IA_ADDRESS_PTR, &attr, 0, nullptr);
    if (r != DAT_SUCCESS) return r;
    std::memcpy(&address, attr.ia_address_ptr, sizeof address);
    return dat_psp_create_any(ia, &conn_qual, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp);
  }
  ~Ia() {
    if (ia != DAT_HANDLE_NULL) dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
  }
  std::string Host() const {
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &address.sin_addr, host, sizeof host);
    return host;
  }
  // The next event on `evd` within `timeout`; its number, or 0 when none came.
  static DAT_EVENT_NUMBER NextEvent(DAT_EVD_HANDLE evd, DAT_TIMEOUT timeout,
                                    DAT_EVENT* out = nullptr) {
    DAT_EVENT ev{};
    DAT_COUNT nmore = 0;
    if (dat_evd_wait(evd, timeout, 1, &ev, &nmore) != DAT_SUCCESS) return DAT_EVENT_NUMBER{};
    if (out != nullptr) *out = ev;
    return ev.event_number;
  }
};

class HostileDatCm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("DAT_OVERRIDE"), nullptr) << "run through ctest: it sets DAT_OVERRIDE";
    unsetenv("EMURDMA_TCP_ADDR");
  }
  void TearDown() override { SetSecret(nullptr); }

  // Sends AUTH(nonce) and reads the AUTH_REPLY.
  static void Challenge(const RawClient& client, const Block& nonce, Block* passive_nonce,
                        Block* passive_proof) {
    ASSERT_TRUE(client.Send(Frame(kAuth, Bytes(nonce.begin(), nonce.end()))));
    ASSERT_TRUE(client.ReadAuthReply(passive_nonce, passive_proof))
        << "the CM answers an AUTH with its AUTH_REPLY";
  }
  // Sends `proof` as the AUTH_PROOF, then a REQ; the server must close the connection and post
  // no request.
  static void ExpectProofRefused(const Ia& server, const RawClient& client, const Block& proof) {
    ASSERT_TRUE(client.Send(Frame(kAuthProof, Bytes(proof.begin(), proof.end()))));
    client.Send(Frame(kReq, ReqBody(server.conn_qual)));  // may meet a closed socket already
    EXPECT_TRUE(client.ClosedByPeer(4000));
    EXPECT_EQ(Ia::NextEvent(server.cr_evd, kQuiet), DAT_EVENT_NUMBER{});
  }
  // An IA under each secret; the client's connect to the server's PSP must end
  // NON_PEER_REJECTED (docs/usage.md), and the server must see no request.
  static void ExpectConnectRefused(const char* server_secret, const char* client_secret) {
    Ia server, client;
    ASSERT_DAT(DAT_SUCCESS, server.Open(server_secret));
    ASSERT_DAT(DAT_SUCCESS, client.Open(client_secret));
    ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, reinterpret_cast<sockaddr*>(&server.address),
                                           server.conn_qual, kWait, 0, nullptr, DAT_QOS_BEST_EFFORT,
                                           DAT_CONNECT_DEFAULT_FLAG));
    EXPECT_EQ(Ia::NextEvent(client.conn_evd, kWait), DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
    EXPECT_EQ(Ia::NextEvent(server.cr_evd, kQuiet), DAT_EVENT_NUMBER{});
  }
};

// --- With a secret: nothing is acted on before the peer's proof -------------------------------

TEST_F(HostileDatCm, RequestWithoutProofIsClosedAndNoEventReachesTheProgram) {
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(kSecret));
  RawClient attacker(server.conn_qual, server.Host().c_str());
  ASSERT_TRUE(attacker.connected());
  ASSERT_TRUE(attacker.Send(Frame(kReq, ReqBody(server.conn_qual))));
  EXPECT_TRUE(attacker.ClosedByPeer(4000)) << "a request without a proof must be disconnected";
  EXPECT_EQ(Ia::NextEvent(server.cr_evd, kQuiet), DAT_EVENT_NUMBER{})
      << "no DAT_CONNECTION_REQUEST_EVENT for an unauthenticated request";
}

TEST_F(HostileDatCm, WrongProofIsClosedAndNoEventReachesTheProgram) {
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(kSecret));
  RawClient attacker(server.conn_qual, server.Host().c_str());
  ASSERT_TRUE(attacker.connected());
  Block nonce{}, passive_nonce{}, passive_proof{};
  nonce.fill(0x5a);
  ASSERT_NO_FATAL_FAILURE(Challenge(attacker, nonce, &passive_nonce, &passive_proof));
  // A proof under another secret.
  ExpectProofRefused(server, attacker,
                     Hmac(kOtherSecret, "emurdma-dat-cm active", nonce, passive_nonce));
}

TEST_F(HostileDatCm, ReflectedProofIsRefused) {
  // The passive side's own proof sent back as the active side's: the role labels differ.
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(kSecret));
  RawClient attacker(server.conn_qual, server.Host().c_str());
  ASSERT_TRUE(attacker.connected());
  Block nonce{}, passive_nonce{}, passive_proof{};
  nonce.fill(0x33);
  ASSERT_NO_FATAL_FAILURE(Challenge(attacker, nonce, &passive_nonce, &passive_proof));
  ExpectProofRefused(server, attacker, passive_proof);
}

TEST_F(HostileDatCm, RightProofFromARawClientIsARequest) {
  // The frames above are the protocol: the same client with the right proof is heard (so the
  // refusals above are the proof's doing, not a malformed frame's).
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(kSecret));
  RawClient client(server.conn_qual, server.Host().c_str());
  ASSERT_TRUE(client.connected());
  Block nonce{}, passive_nonce{}, passive_proof{};
  nonce.fill(0x77);
  ASSERT_NO_FATAL_FAILURE(Challenge(client, nonce, &passive_nonce, &passive_proof));
  EXPECT_EQ(passive_proof, Hmac(kSecret, "emurdma-dat-cm passive", nonce, passive_nonce));
  const Block proof = Hmac(kSecret, "emurdma-dat-cm active", nonce, passive_nonce);
  ASSERT_TRUE(client.Send(Frame(kAuthProof, Bytes(proof.begin(), proof.end()))));
  ASSERT_TRUE(client.Send(Frame(kReq, ReqBody(server.conn_qual))));
  EXPECT_EQ(Ia::NextEvent(server.cr_evd, kWait), DAT_CONNECTION_REQUEST_EVENT);
}

TEST_F(HostileDatCm, NoncesAreFreshPerConnection) {
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(kSecret));
  Block nonce{}, first{}, second{}, proof{};
  for (Block* out : {&first, &second}) {
    RawClient client(server.conn_qual, server.Host().c_str());
    ASSERT_TRUE(client.connected());
    ASSERT_NO_FATAL_FAILURE(Challenge(client, nonce, out, &proof));
  }
  EXPECT_NE(first, second);
}

// --- Two IAs: the same secret connects, different secrets fail cleanly ----------------------

TEST_F(HostileDatCm, TwoIasWithTheSameSecretConnect) {
  Ia server, client;
  ASSERT_DAT(DAT_SUCCESS, server.Open(kSecret));
  ASSERT_DAT(DAT_SUCCESS, client.Open(kSecret));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, reinterpret_cast<sockaddr*>(&server.address),
                                         server.conn_qual, kWait, 0, nullptr, DAT_QOS_BEST_EFFORT,
                                         DAT_CONNECT_DEFAULT_FLAG));
  DAT_EVENT ev{};
  ASSERT_EQ(Ia::NextEvent(server.cr_evd, kWait, &ev), DAT_CONNECTION_REQUEST_EVENT);
  ASSERT_DAT(DAT_SUCCESS,
             dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, server.ep, 0, nullptr));
  EXPECT_EQ(Ia::NextEvent(client.conn_evd, kWait), DAT_CONNECTION_EVENT_ESTABLISHED);
  EXPECT_EQ(Ia::NextEvent(server.conn_evd, kWait), DAT_CONNECTION_EVENT_ESTABLISHED);
}

TEST_F(HostileDatCm, DifferentSecretsAreNonPeerRejectedWithNoRequest) {
  ExpectConnectRefused(kSecret, kOtherSecret);
}

TEST_F(HostileDatCm, SecretAgainstNoSecretIsNonPeerRejectedBothWays) {
  {
    SCOPED_TRACE("server with a secret, client without");
    ExpectConnectRefused(kSecret, nullptr);
  }
  {
    SCOPED_TRACE("client with a secret, server without");
    ExpectConnectRefused(nullptr, kSecret);
  }
}

// --- Bounds, with or without a secret ---------------------------------------------------------

TEST_F(HostileDatCm, SilentConnectionIsClosedAfterTheTimeout) {
  for (const char* secret : {static_cast<const char*>(nullptr), kSecret}) {
    SCOPED_TRACE(secret != nullptr ? "with a secret" : "without a secret");
    Ia server;
    ASSERT_DAT(DAT_SUCCESS, server.Open(secret));
    RawClient silent(server.conn_qual, server.Host().c_str());
    ASSERT_TRUE(silent.connected());
    // The bound is 5 s; 15 s only stops a hang.
    EXPECT_TRUE(silent.ClosedByPeer(15000)) << "a connection that sends nothing must be closed";
  }
}

TEST_F(HostileDatCm, UnauthenticatedConnectionsAreCapped) {
  // 64 connections may wait for their request; while they do, the listener accepts nothing
  // more (a 65th waits in the kernel's backlog, unread), until one of them goes.
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(nullptr));
  std::vector<std::unique_ptr<RawClient>> waiting;
  for (int i = 0; i < 64; ++i) {
    waiting.push_back(std::make_unique<RawClient>(server.conn_qual));
    ASSERT_TRUE(waiting.back()->connected());
  }
  RawClient extra(server.conn_qual);
  ASSERT_TRUE(extra.connected());
  ASSERT_TRUE(extra.Send(Frame(kReq, ReqBody(server.conn_qual))));
  EXPECT_EQ(Ia::NextEvent(server.cr_evd, kQuiet), DAT_EVENT_NUMBER{})
      << "the 65th connection was read while 64 were waiting";
  waiting.front().reset();  // one place frees: the 65th is heard
  EXPECT_EQ(Ia::NextEvent(server.cr_evd, kWait), DAT_CONNECTION_REQUEST_EVENT);
}

TEST_F(HostileDatCm, TrailingBytesAfterARequestAreRefused) {
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(nullptr));
  RawClient client(server.conn_qual);
  ASSERT_TRUE(client.connected());
  Bytes body = ReqBody(server.conn_qual);
  body.push_back(0xee);  // one byte after the private data, counted in the body length
  ASSERT_TRUE(client.Send(Frame(kReq, body)));
  EXPECT_TRUE(client.ClosedByPeer(4000));
  EXPECT_EQ(Ia::NextEvent(server.cr_evd, kQuiet), DAT_EVENT_NUMBER{});
}

TEST_F(HostileDatCm, WellFormedRequestWithoutSecretIsARequest) {
  // The control of the test above: the same request without the extra byte is heard.
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(nullptr));
  RawClient client(server.conn_qual);
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send(Frame(kReq, ReqBody(server.conn_qual))));
  EXPECT_EQ(Ia::NextEvent(server.cr_evd, kWait), DAT_CONNECTION_REQUEST_EVENT);
}

// --- Without a secret the soft device's CM is not offered to the network ---------------------

// The first IPv4 address of an interface that is up and not loopback, or "".
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, host, sizeof host);
    found = host;
  }
  freeifaddrs(list);
  return found;
}

TEST_F(HostileDatCm, WithoutASecretTheSoftDeviceListensOnLoopbackOnly) {
  Ia server;
  ASSERT_DAT(DAT_SUCCESS, server.Open(nullptr));
  EXPECT_EQ(server.Host(), "127.0.0.1") << "the IA address, as the verbs TCP transport's";
  const std::string outside = NonLoopbackAddress();
  if (outside.empty()) GTEST_SKIP() << "no non-loopback interface to try";
  RawClient from_outside(server.conn_qual, outside.c_str());
  EXPECT_FALSE(from_outside.connected()) << "the PSP answered on " << outside;
}

}  // namespace
