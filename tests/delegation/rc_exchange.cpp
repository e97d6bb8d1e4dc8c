#include "tests/delegation/rc_exchange.h"

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/delegation/check.h"
#include "tests/ibv_rc_qp.h"

namespace delegation {
namespace {

constexpr size_t kMessage = 4096;

bool poll_one(ibv_cq* cq, ibv_wc* wc) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) return false;
    if (n == 1) return true;
  }
  return false;
}

}  // namespace

void rc_exchange(ibv_device* device, const Serving& serving) {
  const char* name =
      forwarded(serving, "ibv_get_device_name", 1, [&] { return ibv_get_device_name(device); });
  std::printf("RC exchange on %s\n", name != nullptr ? name : "(null)");

  ibv_context* ctx =
      forwarded(serving, "ibv_open_device", 1, [&] { return ibv_open_device(device); });
  DELEGATION_CHECK(ctx != nullptr, "ibv_open_device(%s) failed", name);
  if (ctx == nullptr) return;
  DELEGATION_CHECK(ctx->device == device, "context->device is not the listed device");
  // The inline verbs never pass through our exported functions: they call the context's ops,
  // so the serving library is the one these addresses belong to.
  DELEGATION_CHECK(
      address_in_file(reinterpret_cast<const void*>(ctx->ops.post_send), serving.library),
      "ops.post_send of %s does not point into %s", name, serving.library.c_str());
  DELEGATION_CHECK(
      address_in_file(reinterpret_cast<const void*>(ctx->ops.poll_cq), serving.library),
      "ops.poll_cq of %s does not point into %s", name, serving.library.c_str());

  ibv_device_attr dev_attr{};
  const int qd =
      forwarded(serving, "ibv_query_device", 1, [&] { return ibv_query_device(ctx, &dev_attr); });
  DELEGATION_CHECK(qd == 0, "ibv_query_device: %d", qd);
  ibv_port_attr port{};
  DELEGATION_CHECK(ibv_query_port(ctx, 1, &port) == 0, "ibv_query_port failed");
  DELEGATION_CHECK(port.state == IBV_PORT_ACTIVE, "port 1 state %d", static_cast<int>(port.state));
  ibv_gid gid{};
  const int qg =
      forwarded(serving, "ibv_query_gid", 1, [&] { return ibv_query_gid(ctx, 1, 0, &gid); });
  DELEGATION_CHECK(qg == 0, "ibv_query_gid: %d", qg);

  ibv_pd* pd = forwarded(serving, "ibv_alloc_pd", 1, [&] { return ibv_alloc_pd(ctx); });
  DELEGATION_CHECK(pd != nullptr && pd->context == ctx, "ibv_alloc_pd");
  std::vector<char> send_buf(kMessage), recv_buf(kMessage, 0);
  for (size_t i = 0; i < kMessage; ++i) send_buf[i] = static_cast<char>('a' + i % 26);
  // The access flags are spelled as a constant expression: verbs.h's ibv_reg_mr macro calls
  // ibv_reg_mr only when __builtin_constant_p says so (even at -O0), else ibv_reg_mr_iova2.
  ibv_mr* smr = forwarded(serving, "ibv_reg_mr", 1, [&] {
    return ibv_reg_mr(pd, send_buf.data(), kMessage,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  });
  ibv_mr* rmr = forwarded(serving, "ibv_reg_mr", 1, [&] {
    return ibv_reg_mr(pd, recv_buf.data(), kMessage,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  });
  DELEGATION_CHECK(smr != nullptr && rmr != nullptr, "ibv_reg_mr");
  DELEGATION_CHECK(smr == nullptr || smr->context == ctx, "mr->context");
  ibv_comp_channel* channel = forwarded(serving, "ibv_create_comp_channel", 1,
                                        [&] { return ibv_create_comp_channel(ctx); });
  DELEGATION_CHECK(channel != nullptr && channel->context == ctx, "ibv_create_comp_channel");
  ibv_cq* cq = forwarded(serving, "ibv_create_cq", 1,
                         [&] { return ibv_create_cq(ctx, 16, nullptr, channel, 0); });
  DELEGATION_CHECK(cq != nullptr && cq->context == ctx, "ibv_create_cq");
  if (pd == nullptr || smr == nullptr || rmr == nullptr || channel == nullptr || cq == nullptr) {
    return;
  }
  DELEGATION_CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");

  ibv_qp_init_attr qia = ibv_rc::qp_init_attr(cq);
  ibv_qp* a = forwarded(serving, "ibv_create_qp", 1, [&] { return ibv_create_qp(pd, &qia); });
  ibv_qp* b = forwarded(serving, "ibv_create_qp", 1, [&] { return ibv_create_qp(pd, &qia); });
  DELEGATION_CHECK(a != nullptr && b != nullptr, "ibv_create_qp");
  if (a == nullptr || b == nullptr) return;
  DELEGATION_CHECK(a->context == ctx && a->context->device == device, "qp->context->device");

  const int modified = forwarded(serving, "ibv_modify_qp", 6, [&] {
    int rc = ibv_rc::to_init(a) | ibv_rc::to_init(b);
    rc |= ibv_rc::to_rtr(a, b->qp_num, gid) | ibv_rc::to_rtr(b, a->qp_num, gid);
    return rc | ibv_rc::to_rts(a) | ibv_rc::to_rts(b);
  });
  DELEGATION_CHECK(modified == 0, "connecting the QPs through the device's own GID failed");

  const ibv_sge rsge{reinterpret_cast<uintptr_t>(recv_buf.data()), kMessage, rmr->lkey};
  DELEGATION_CHECK(ibv_rc::post_recv(b, 2, rsge) == 0, "ibv_post_recv");
  const ibv_sge ssge{reinterpret_cast<uintptr_t>(send_buf.data()), kMessage, smr->lkey};
  DELEGATION_CHECK(ibv_rc::post_send(a, IBV_WR_SEND, 1, ssge) == 0, "ibv_post_send");

  // The completion event: the channel's descriptor becomes readable, then the event is read
  // and acknowledged through our library, which must hand both to the stand-in.
  pollfd readable{channel->fd, POLLIN, 0};
  DELEGATION_CHECK(::poll(&readable, 1, 20000) == 1, "the completion channel stayed silent 20 s");
  ibv_cq* event_cq = nullptr;
  void* event_context = nullptr;
  const int got = forwarded(serving, "ibv_get_cq_event", 1,
                            [&] { return ibv_get_cq_event(channel, &event_cq, &event_context); });
  DELEGATION_CHECK(got == 0 && event_cq == cq, "ibv_get_cq_event");
  if (got == 0) {
    forwarded(serving, "ibv_ack_cq_events", 1, [&] {
      ibv_ack_cq_events(cq, 1);
      return 0;
    });
  }

  bool saw_send = false, saw_recv = false;
  for (int i = 0; i < 2; ++i) {
    ibv_wc wc{};
    if (!poll_one(cq, &wc)) {
      DELEGATION_CHECK(false, "no completion within 20 s");
      break;
    }
    DELEGATION_CHECK(wc.status == IBV_WC_SUCCESS, "wr_id %llu status %s",
                     static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status));
    if (wc.wr_id == 1) saw_send = wc.opcode == IBV_WC_SEND;
    if (wc.wr_id == 2) saw_recv = wc.opcode == IBV_WC_RECV && wc.byte_len == kMessage;
  }
  DELEGATION_CHECK(saw_send && saw_recv, "send and receive completions");
  DELEGATION_CHECK(std::memcmp(send_buf.data(), recv_buf.data(), kMessage) == 0,
                   "received bytes differ from the sent ones");

  // Destroyed by the library that created them: a second libc heap lives in the stand-in's
  // namespace, and its objects must never reach our free().
  DELEGATION_CHECK(forwarded(serving, "ibv_destroy_qp", 2,
                             [&] { return ibv_destroy_qp(a) | ibv_destroy_qp(b); }) == 0,
                   "ibv_destroy_qp");
  DELEGATION_CHECK(forwarded(serving, "ibv_destroy_cq", 1, [&] { return ibv_destroy_cq(cq); }) == 0,
                   "ibv_destroy_cq");
  DELEGATION_CHECK(forwarded(serving, "ibv_destroy_comp_channel", 1,
                             [&] { return ibv_destroy_comp_channel(channel); }) == 0,
                   "ibv_destroy_comp_channel");
  DELEGATION_CHECK(forwarded(serving, "ibv_dereg_mr", 2,
                             [&] { return ibv_dereg_mr(smr) | ibv_dereg_mr(rmr); }) == 0,
                   "ibv_dereg_mr");
  DELEGATION_CHECK(forwarded(serving, "ibv_dealloc_pd", 1, [&] { return ibv_dealloc_pd(pd); }) == 0,
                   "ibv_dealloc_pd");
  DELEGATION_CHECK(
      forwarded(serving, "ibv_close_device", 1, [&] { return ibv_close_device(ctx); }) == 0,
      "ibv_close_device");
  std::printf("RC exchange on %s: %zu bytes sent and received\n", name, kMessage);
}

}  // namespace delegation
