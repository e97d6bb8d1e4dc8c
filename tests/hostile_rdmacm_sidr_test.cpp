// SIDR under attack (docs/security.md, "rdma_cm connections"): a requester and a listener that
// speak the CM wire by hand (cm/) against our librdmacm.so.1's datagram ids. What no honest
// peer sends (private data beyond the SIDR fields) closes that stream with a log line; the
// program sees no request, or its request ends UNREACHABLE; the listener keeps serving.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cm/cm_rendezvous.h"
#include "cm/cm_wire.h"
#include "tests/cm_rendezvous_support.h"
#include "tests/rdmacm_test_util.h"

namespace {

using std::chrono::seconds;

constexpr uint16_t kUdpPs = RDMA_PS_UDP;

// What the process writes to stderr (the CM's log lines) while this lives.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()), saved_(::dup(2)) {
    std::fflush(stderr);
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    std::fclose(file_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  std::string text() {
    std::fflush(stderr);
    std::string out;
    char buffer[512];
    ssize_t n = 0;
    off_t at = 0;
    while ((n = ::pread(::fileno(file_), buffer, sizeof buffer, at)) > 0) {
      out.append(buffer, static_cast<size_t>(n));
      at += n;
    }
    return out;
  }

 private:
  FILE* file_;
  int saved_;
};

void make_blocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
}

bool send_frame(int fd, const cm::Message& m) {
  const std::vector<uint8_t> frame = cm::encode(m);
  return ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size());
}

// The next frame on `fd` (within 5 s), parsed; nothing on EOF or a malformed frame.
std::optional<cm::Message> read_frame(int fd) {
  uint8_t header[cm::kHeaderSize];
  if (!cm_test::read_exactly(fd, header, sizeof header)) return std::nullopt;
  cm::Type type{};
  const std::optional<uint32_t> length = cm::parse_header(header, &type);
  if (!length) return std::nullopt;
  std::vector<uint8_t> body(*length);
  if (!cm_test::read_exactly(fd, body.data(), body.size())) return std::nullopt;
  return cm::parse_body(type, body.data(), body.size());
}

// True when the other side closes `fd` within 5 s without sending a byte.
bool closed_without_answer(int fd) {
  if (!cm_test::readable_within(fd, seconds(5))) return false;
  char byte = 0;
  return ::recv(fd, &byte, 1, 0) == 0;
}

// A hand-made SIDR request for 127.0.0.1:port with `private_data` bytes.
cm::Message sidr_request(uint16_t port, size_t private_data) {
  cm::Message m = cm::bare(cm::Type::kUdReq);
  m.qp.qpn = 0x77;
  m.qp_type = cm::QpType::kUd;
  m.port_space = cm::PortSpace::kUdp;
  m.service = port;
  m.source = cm_test::ipv4("127.0.0.1", 40000);
  m.destination = cm_test::ipv4("127.0.0.1", port);
  m.private_data.assign(private_data, 0x5a);
  return m;
}

// A stream to the holder of (RDMA_PS_UDP, port) on this host, past the rendezvous.
int dial(uint16_t port) {
  boost::asio::io_context io;
  const sockaddr_storage to = cm_test::ipv4("127.0.0.1", port);
  int fd = -1;
  bool done = false;
  cm::async_dial(io, cm_test::sa(to), kUdpPs, port, seconds(5), [&](std::error_code ec, int s) {
    EXPECT_FALSE(ec) << ec.message();
    fd = s;
    done = true;
  });
  EXPECT_TRUE(cm_test::run_until(io, [&] { return done; }));
  if (fd >= 0) make_blocking(fd);
  return fd;
}

}  // namespace

TEST(HostileRdmaCmSidr, ARequestWithTooMuchPrivateDataIsClosedAndNeverReachesTheProgram) {
  rdmacm_test::AsyncId server(RDMA_PS_UDP);
  sockaddr_in addr = rdmacm_test::ipv4("127.0.0.1", 21211);
  ASSERT_EQ(rdma_bind_addr(server.id, rdmacm_test::as_sockaddr(addr)), 0) << strerror(errno);
  ASSERT_EQ(rdma_listen(server.id, 4), 0) << strerror(errno);
  ASSERT_EQ(fcntl(server.channel->fd, F_SETFL, O_NONBLOCK), 0);

  StderrCapture log;
  const int hostile = dial(21211);
  ASSERT_GE(hostile, 0);
  ASSERT_TRUE(send_frame(hostile, sidr_request(21211, 181)));  // a SIDR REQ carries 180
  EXPECT_TRUE(closed_without_answer(hostile));
  ::close(hostile);
  rdma_cm_event* event = nullptr;
  EXPECT_FAILS_WITH(rdma_get_cm_event(server.channel, &event), EAGAIN);
  EXPECT_NE(log.text().find("SIDR request from this host with 181 bytes of private data"),
            std::string::npos)
      << log.text();

  // The listener still serves: the largest honest request reaches the program.
  const int honest = dial(21211);
  ASSERT_GE(honest, 0);
  ASSERT_TRUE(send_frame(honest, sidr_request(21211, 180)));
  ASSERT_TRUE(cm_test::readable_within(server.channel->fd, seconds(5)));
  ASSERT_EQ(rdma_get_cm_event(server.channel, &event), 0) << strerror(errno);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_EQ(event->param.ud.qp_num, 0x77u);
  rdma_cm_id* child = event->id;
  rdma_ack_cm_event(event);
  ASSERT_EQ(rdma_reject(child, nullptr, 0), 0);
  std::optional<cm::Message> answer = read_frame(honest);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->type, cm::Type::kRej);
  ::close(honest);
  rdma_destroy_id(child);
}

namespace {

// A listener of (RDMA_PS_UDP, port) that answers the library's SIDR request with `answer`;
// the requester's event must be UNREACHABLE -EPROTO with a log line naming `logged`.
void expect_answer_refused(uint16_t port, const cm::Message& answer, const std::string& logged) {
  boost::asio::io_context io;
  std::error_code ec;
  auto reservation = cm::PortReservation::reserve(kUdpPs, port, ec);
  ASSERT_TRUE(reservation) << ec.message();
  cm::ListenerOptions options;
  options.with_gateway = false;
  int stream = -1;
  auto listener = cm::PortListener::listen(
      io, std::move(reservation), [&](int fd, const sockaddr_storage&, bool) { stream = fd; }, ec,
      options);
  ASSERT_TRUE(listener) << ec.message();

  rdmacm_test::AsyncId client(RDMA_PS_UDP);
  rdmacm_test::resolve_towards(client, port);
  StderrCapture log;
  ASSERT_EQ(rdma_connect(client.id, nullptr), 0) << strerror(errno);
  ASSERT_TRUE(cm_test::run_until(io, [&] { return stream >= 0; }));
  make_blocking(stream);
  std::optional<cm::Message> request = read_frame(stream);
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->type, cm::Type::kUdReq);
  ASSERT_TRUE(send_frame(stream, answer));
  client.expect_event(RDMA_CM_EVENT_UNREACHABLE, -EPROTO);
  EXPECT_NE(log.text().find(logged), std::string::npos) << log.text();
  ::close(stream);
}

}  // namespace

TEST(HostileRdmaCmSidr, AReplyWithTooMuchPrivateDataIsUnreachable) {
  cm::Message reply = cm::bare(cm::Type::kUdRep);
  reply.qp.qpn = 0x99;
  reply.qkey = cm::kRdmaUdpQkey;
  reply.private_data.assign(137, 1);  // a SIDR REP carries 136
  expect_answer_refused(21212, reply,
                        "a SIDR reply from the listener with 137 bytes of private data");
}

TEST(HostileRdmaCmSidr, ARejectionWithTooMuchPrivateDataIsUnreachable) {
  cm::Message rej = cm::bare(cm::Type::kRej);
  rej.reason = cm::RejectReason::kConsumerDefined;
  rej.private_data.assign(200, 1);
  expect_answer_refused(21213, rej,
                        "a SIDR rejection from the listener with 200 bytes of private data");
}
