// rsockets under docs/security.md: a raw rdma_cm peer (our public rdma_* and verbs calls)
// speaks the rsockets protocol (rdmacm_api/rsockets/wire.h) with forged fields. The victim
// rsocket fails with ECONNRESET and a log line; the process lives, and other sockets work.
#include <sys/mman.h>

#include <thread>

#include "rdmacm_api/rsockets/wire.h"
#include "tests/rdmacm_test_util.h"
#include "tests/rsockets_test_util.h"

using namespace rdmacm_test;
using namespace rsockets_test;
namespace wire = rdmacm_api::rsockets;

namespace {

// What the process writes to stderr (the library's refusals) while this lives.
struct StderrCapture {
  StderrCapture() { testing::internal::CaptureStderr(); }
  std::string text() {
    if (!taken_) {
      text_ = testing::internal::GetCapturedStderr();
      taken_ = true;
    }
    return text_;
  }
  ~StderrCapture() { text(); }
  bool taken_ = false;
  std::string text_;
};

// Refusals are logged at most once a second process-wide (cm::log_refusal): the line is
// expected of the first refusal in the process, as each test is under ctest (one process a test).
void expect_logged(StderrCapture& log, const char* text) {
  static bool first_in_process = true;
  if (first_in_process) {
    EXPECT_NE(log.text().find(text), std::string::npos) << log.text();
  }
  first_in_process = false;
}

constexpr uint32_t kRawReceives = 8;
constexpr uint32_t kRawMessage = 4096;

// A raw rdma_cm listener on 127.0.0.1 that accepts one rsockets connection with `announce` as
// its private data, then sends what a test forges.
struct RawPeer {
  AsyncId listen;
  rdma_cm_id* id = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(64 * 1024);
  ibv_mr* mr = nullptr;
  uint16_t port = 0;
  wire::ConnectData victim{};

  RawPeer() {
    sockaddr_in a = ipv4("127.0.0.1", 0);
    EXPECT_EQ(rdma_bind_addr(listen.id, as_sockaddr(a)), 0) << strerror(errno);
    EXPECT_EQ(rdma_listen(listen.id, 1), 0) << strerror(errno);
    port = ntohs(rdma_get_src_port(listen.id));
  }
  // Takes the victim's request; with `accept_data` nullptr the real announcement is sent.
  void accept(const uint8_t* accept_data = nullptr) {
    rdma_cm_event* event = next_event(listen.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(event, nullptr);
    id = event->id;
    EXPECT_TRUE(
        wire::decode(event->param.conn.private_data, event->param.conn.private_data_len, victim));
    rdma_ack_cm_event(event);
    cq = ibv_create_cq(id->verbs, 32, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr attr = signaled_qp(IBV_QPT_RC);
    attr.send_cq = attr.recv_cq = cq;
    attr.cap.max_recv_wr = kRawReceives;
    ASSERT_EQ(rdma_create_qp(id, nullptr, &attr), 0) << strerror(errno);
    mr = ibv_reg_mr(id->pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    for (uint32_t i = 0; i < kRawReceives; ++i) {
      ibv_sge sge{reinterpret_cast<uintptr_t>(buffer.data()) + i * kRawMessage, kRawMessage,
                  mr->lkey};
      ibv_recv_wr wr{}, *bad = nullptr;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ASSERT_EQ(ibv_post_recv(id->qp, &wr, &bad), 0);
    }
    uint8_t data[wire::kConnectDataBytes];
    wire::encode(wire::ConnectData{kRawMessage, kRawReceives, 1}, data);
    rdma_conn_param param{};
    param.private_data = accept_data != nullptr ? accept_data : data;
    param.private_data_len = sizeof data;
    ASSERT_EQ(rdma_accept(id, &param), 0) << strerror(errno);
    rdma_cm_event* established = next_event(listen.channel, RDMA_CM_EVENT_ESTABLISHED);
    if (established != nullptr) rdma_ack_cm_event(established);
  }
  // A SEND (with immediate `imm` unless `with_imm` is false) of `payload`.
  void send(uint32_t imm, const std::vector<uint8_t>& payload, bool with_imm = true) {
    ASSERT_LE(payload.size(), 32 * 1024u);
    uint8_t* from = buffer.data() + 32 * 1024;
    if (!payload.empty()) memcpy(from, payload.data(), payload.size());
    ibv_sge sge{reinterpret_cast<uintptr_t>(from), static_cast<uint32_t>(payload.size()), mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.imm_data = imm;
    wr.sg_list = &sge;
    wr.num_sge = payload.empty() ? 0 : 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(id->qp, &wr, &bad), 0) << strerror(errno);
  }
  ~RawPeer() {
    if (id != nullptr) {
      rdma_disconnect(id);
      rdma_destroy_qp(id);
    }
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (id != nullptr) rdma_destroy_id(id);
  }
};

// An rsocket (RDMA_IOMAPSIZE 1) connected to `peer`, blocking.
int connect_victim(RawPeer& peer, const uint8_t* accept_data = nullptr, int* error = nullptr) {
  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  set_int(fd, SOL_RDMA, RDMA_IOMAPSIZE, 1);
  std::thread t([&] { peer.accept(accept_data); });
  sockaddr_in a = ipv4("127.0.0.1", peer.port);
  int r = rconnect(fd, as_sockaddr(a), sizeof a);
  if (error != nullptr) *error = r == 0 ? 0 : errno;
  t.join();
  return fd;
}

std::vector<uint8_t> advert(uint32_t index, uint64_t offset, uint64_t length) {
  std::vector<uint8_t> v(wire::kIomapAdvertBytes);
  wire::encode(wire::IomapAdvert{index, 0x1234, offset, length, 0x10000}, v.data());
  return v;
}

struct Forgery {
  const char* name;
  uint32_t imm;
  std::vector<uint8_t> payload;
  bool with_imm = true;
  const char* logged;
};

void PrintTo(const Forgery& f, std::ostream* os) {
  *os << f.name;
}

class RsocketsHostile : public ::testing::TestWithParam<Forgery> {};

TEST_P(RsocketsHostile, ForgedMessageResetsTheVictimOnly) {
  const Forgery& f = GetParam();
  StderrCapture log;
  RawPeer peer;
  int victim = connect_victim(peer);
  if (std::string(f.name) == "DataAfterFin")
    peer.send(wire::make_immediate(wire::MessageType::kFin, 0), {});
  peer.send(f.imm, f.payload, f.with_imm);
  pollfd p{victim, POLLIN, 0};
  ASSERT_EQ(rpoll(&p, 1, 10000), 1);
  char b;
  // Reads end in the reset (after an end of stream the forgery may have sent first).
  EXPECT_TRUE(eventually([&] { return rrecv(victim, &b, 1, 0) == -1; }));
  EXPECT_EQ(errno, ECONNRESET);
  EXPECT_TRUE(p.revents & (POLLERR | POLLHUP | POLLIN));
  EXPECT_FAILS_WITH(rsend(victim, "x", 1, 0), ECONNRESET);
  EXPECT_EQ(rclose(victim), 0);
  // Another connection in the same process still works.
  Connected c(AF_INET);
  EXPECT_EQ(rsend(c.client, "ok", 2, 0), 2);
  EXPECT_EQ(receive_all(c.server, 2).size(), 2u);
  expect_logged(log, f.logged);
}

uint32_t imm(wire::MessageType t, uint32_t credits = 0) {
  return wire::make_immediate(t, credits);
}

INSTANTIATE_TEST_SUITE_P(
    Forged, RsocketsHostile,
    ::testing::Values(
        Forgery{"CreditOverflow",
                imm(wire::MessageType::kCredits, 1000),
                {},
                true,
                "credits above the buffers the peer announced"},
        Forgery{"CreditFieldFull",
                imm(wire::MessageType::kData, wire::kMaxCreditsField),
                {1},
                true,
                "credits above the buffers the peer announced"},
        Forgery{"IomapIndexOutOfTable", imm(wire::MessageType::kIomapAdd), advert(1, 0, 4096), true,
                "an iomap advertisement out of bounds"},
        Forgery{"IomapWindowWraps", imm(wire::MessageType::kIomapAdd),
                advert(0, wire::kMaxIomapEnd - 10, 100), true,
                "an iomap advertisement out of bounds"},
        Forgery{"IomapEmptyWindow", imm(wire::MessageType::kIomapAdd), advert(0, 0, 0), true,
                "an iomap advertisement out of bounds"},
        Forgery{"IomapShortAdvert", imm(wire::MessageType::kIomapAdd),
                std::vector<uint8_t>(wire::kIomapAdvertBytes - 1), true,
                "an iomap advertisement out of bounds"},
        Forgery{"IomapRemoveOutOfTable",
                imm(wire::MessageType::kIomapRemove),
                {0, 0, 0, 9},
                true,
                "an iomap removal out of bounds"},
        Forgery{"OversizedMessage", imm(wire::MessageType::kData),
                std::vector<uint8_t>(32 * 1024, 1), true, "connection reset"},
        Forgery{"UnknownType", htobe32(9u << 28), {}, true, "an unknown message type"},
        Forgery{"NoImmediate", 0, {1, 2, 3}, false, "a message without immediate data"},
        Forgery{"FinWithPayload",
                imm(wire::MessageType::kFin),
                {1},
                true,
                "a malformed or repeated FIN"},
        Forgery{
            "DataAfterFin", imm(wire::MessageType::kData), {1}, true, "data after the peer's FIN"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RsocketsHostileSetup, AcceptWithForeignPrivateDataIsRefused) {
  StderrCapture log;
  RawPeer peer;
  uint8_t foreign[wire::kConnectDataBytes] = {'e', 'R', 2};  // another version
  int error = 0;
  int victim = connect_victim(peer, foreign, &error);
  EXPECT_EQ(error, ECONNREFUSED);
  EXPECT_EQ(rclose(victim), 0);
  expect_logged(log, "refused the peer's accept");
}

TEST(RsocketsHostileSetup, RequestWithForeignPrivateDataIsRejectedAndTheListenerLives) {
  StderrCapture log;
  Listener l(AF_INET);
  AsyncId raw;
  resolve_towards(raw, l.port);
  uint8_t oversized[wire::kConnectDataBytes];
  wire::encode(wire::ConnectData{wire::kMaxMessageBytes * 2, 8, 0}, oversized);
  rdma_conn_param param{};
  param.private_data = oversized;
  param.private_data_len = sizeof oversized;
  ibv_qp_init_attr attr = signaled_qp(IBV_QPT_RC);
  ASSERT_EQ(rdma_create_qp(raw.id, nullptr, &attr), 0) << strerror(errno);
  ASSERT_EQ(rdma_connect(raw.id, &param), 0) << strerror(errno);
  // The listener takes the request in raccept, refuses it, and goes on to the next.
  int accepted = -1;
  std::thread t([&] { accepted = raccept(l.fd, nullptr, nullptr); });
  raw.expect_event(RDMA_CM_EVENT_REJECTED, 28);  // the kernel's consumer-defined reason
  int client = connect_to(l);
  t.join();
  EXPECT_GE(accepted, 0);
  EXPECT_EQ(rsend(client, "k", 1, 0), 1);
  EXPECT_EQ(receive_all(accepted, 1).size(), 1u);
  rclose(client);
  rclose(accepted);
  rdma_destroy_qp(raw.id);
  expect_logged(log, "refused a connection request");
}

}  // namespace
