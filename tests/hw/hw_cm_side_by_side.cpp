// One process, rdma_cm on two devices side by side (tests/hw/suite.sh, check
// rdmacm.side_by_side): a wildcard listener, and two connections to it from the same process,
// one to 127.0.0.1 (emu0: our connection manager) and one to rxe0's address (the kernel's
// rdma_cm through the system librdmacm, to which our librdmacm.so.1 hands real devices'
// addresses). Both connections are open at once; on each a message goes each way, and each id
// must sit on the device its address belongs to.
//
// Output: progress lines (indented), then one line per rule, "ok <rule>" or
// "FAILED <rule>: <details>"; exit status 1 if any failed.
// Linked to the system librdmacm like any rdma_cm program; run on ours through emurdma run.
//   hw_cm_side_by_side <rxe0 IPv4 address> <port>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hw_format.h"

namespace {

constexpr size_t kMessage = 64;
int failures = 0;

void rule(bool ok, const std::string& name, const std::string& details = "") {
  if (ok) {
    std::printf("ok %s\n", name.c_str());
  } else {
    ++failures;
    std::printf("FAILED %s: %s\n", name.c_str(), details.c_str());
  }
  std::fflush(stdout);
}

const char* device_of(const rdma_cm_id* id) {
  return id != nullptr && id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : "none";
}

// One side of a connection: its id and registered buffers.
struct End {
  rdma_cm_id* id = nullptr;
  char send[kMessage]{};
  char recv[kMessage]{};
  ibv_mr* send_mr = nullptr;
  ibv_mr* recv_mr = nullptr;

  bool register_and_post() {
    send_mr = rdma_reg_msgs(id, send, sizeof send);
    recv_mr = rdma_reg_msgs(id, recv, sizeof recv);
    return send_mr != nullptr && recv_mr != nullptr &&
           rdma_post_recv(id, nullptr, recv, sizeof recv, recv_mr) == 0;
  }
  // Sends `text`, waits for its completion and for the peer's message. "" or what failed.
  std::string exchange(const std::string& text) {
    std::snprintf(send, sizeof send, "%s", text.c_str());
    ibv_wc wc{};
    if (rdma_post_send(id, nullptr, send, sizeof send, send_mr, IBV_SEND_SIGNALED) != 0)
      return hw::format("rdma_post_send: %s", std::strerror(errno));
    if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS)
      return hw::format("send completion: %s", ibv_wc_status_str(wc.status));
    if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS)
      return hw::format("receive completion: %s", ibv_wc_status_str(wc.status));
    return "";
  }
  void close() {
    if (id == nullptr) return;
    rdma_disconnect(id);
    if (send_mr != nullptr) rdma_dereg_mr(send_mr);
    if (recv_mr != nullptr) rdma_dereg_mr(recv_mr);
    rdma_destroy_ep(id);
    id = nullptr;
  }
};

ibv_qp_init_attr qp_attributes() {
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  return attr;
}

// The client's end of a connection to host:port (synchronous ids, as rdma_client does).
std::string connect_to(const char* host, const char* port, End& end) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  if (rdma_getaddrinfo(host, port, &hints, &res) != 0)
    return hw::format("rdma_getaddrinfo %s: %s", host, std::strerror(errno));
  ibv_qp_init_attr attr = qp_attributes();
  int ret = rdma_create_ep(&end.id, res, nullptr, &attr);
  rdma_freeaddrinfo(res);
  if (ret != 0) return hw::format("rdma_create_ep %s: %s", host, std::strerror(errno));
  if (!end.register_and_post()) return "registering or posting the receive failed";
  if (rdma_connect(end.id, nullptr) != 0)
    return hw::format("rdma_connect %s: %s", host, std::strerror(errno));
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <rxe0 IPv4 address> <port>\n", argv[0]);
    return 2;
  }
  const char* real_address = argv[1];
  const char* port = argv[2];

  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  rdma_cm_id* listener = nullptr;
  ibv_qp_init_attr attr = qp_attributes();
  if (rdma_getaddrinfo("0.0.0.0", port, &hints, &res) != 0 ||
      rdma_create_ep(&listener, res, nullptr, &attr) != 0 || rdma_listen(listener, 4) != 0) {
    rule(false, "a wildcard listener", std::strerror(errno));
    return 1;
  }
  rdma_freeaddrinfo(res);
  std::printf("  listening on 0.0.0.0:%s\n", port);

  // The passive ends: two requests accepted, each answering the message it gets.
  End accepted[2];
  std::string server_error;
  std::thread server([&] {
    for (End& end : accepted) {
      if (rdma_get_request(listener, &end.id) != 0) {
        server_error = hw::format("rdma_get_request: %s", std::strerror(errno));
        return;
      }
      if (!end.register_and_post() || rdma_accept(end.id, nullptr) != 0) {
        server_error = hw::format("accept: %s", std::strerror(errno));
        return;
      }
    }
  });

  End to_emu, to_real;
  std::string emu_error = connect_to("127.0.0.1", port, to_emu);
  std::printf("  127.0.0.1: %s, id on %s\n", emu_error.empty() ? "connected" : emu_error.c_str(),
              device_of(to_emu.id));
  std::string real_error = connect_to(real_address, port, to_real);
  std::printf("  %s: %s, id on %s\n", real_address,
              real_error.empty() ? "connected" : real_error.c_str(), device_of(to_real.id));
  server.join();
  rule(server_error.empty(), "the listener accepts both requests", server_error);
  rule(emu_error.empty() && std::strcmp(device_of(to_emu.id), "emu0") == 0,
       "a connection to 127.0.0.1 is on emu0",
       emu_error.empty() ? hw::format("on %s", device_of(to_emu.id)) : emu_error);
  rule(real_error.empty() && std::strcmp(device_of(to_real.id), "rxe0") == 0,
       hw::format("a connection to %s is on rxe0", real_address),
       real_error.empty() ? hw::format("on %s", device_of(to_real.id)) : real_error);

  // Both connections open: a message each way on each; the passive end (the accepted id whose
  // peer port is the client's) on the same device.
  if (emu_error.empty() && real_error.empty() && server_error.empty()) {
    for (End* client : {&to_emu, &to_real}) {
      End* peer = nullptr;
      for (End& end : accepted) {
        if (rdma_get_dst_port(end.id) == rdma_get_src_port(client->id)) peer = &end;
      }
      const std::string device = device_of(client->id);
      if (peer == nullptr || std::strcmp(device_of(peer->id), device.c_str()) != 0) {
        rule(false, "messages both ways on " + device,
             hw::format("the accepted id is on %s", peer ? device_of(peer->id) : "nothing"));
        continue;
      }
      std::string error;
      std::thread answer([&] { error = peer->exchange("pong from " + device); });
      std::string mine = client->exchange("ping to " + device);
      answer.join();
      const bool ok = mine.empty() && error.empty() &&
                      std::string(peer->recv) == "ping to " + device &&
                      std::string(client->recv) == "pong from " + device;
      rule(ok, "messages both ways on " + device + " with the other connection open",
           hw::format("client: %s; server: %s; got '%s' and '%s'", mine.c_str(), error.c_str(),
                      client->recv, peer->recv));
    }
  }
  // Every end disconnects at once: on a kernel device the side that disconnects first waits for
  // its peer's rdma_disconnect (the DREP) before DISCONNECTED, as rdma_disconnect(3) allows.
  std::vector<std::thread> closing;
  for (End* end : {&to_emu, &to_real, &accepted[0], &accepted[1]}) {
    closing.emplace_back([end] { end->close(); });
  }
  for (std::thread& t : closing) t.join();
  rdma_destroy_ep(listener);
  return failures == 0 ? 0 : 1;
}
