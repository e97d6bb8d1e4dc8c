// Two endpoints of one DAT IA connected to each other through the DAT API alone (a PSP,
// dat_ep_connect, dat_cr_accept), the accepting one taking its receive buffers from an SRQ: the
// set-up shared by the standalone programs tests/demo/dat_srq_walkthrough.cpp and
// tests/hw/hw_dat_srq.cpp. Header-only and free of GoogleTest; it needs libdat2 only, so both
// stay linked like unmodified uDAPL programs. (tests/dat_pair.h is the GoogleTest counterpart.)
#pragma once

#include <dat2/udat.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dat_loopback {

// A DAT call or an awaited event that went wrong; the programs catch it and report its text.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The name of a DAT return code, with its subtype when it has one ("0x........" if unknown).
inline std::string dat_code(DAT_RETURN ret) {
  const char* major = nullptr;
  const char* minor = nullptr;
  if (dat_strerror(ret, &major, &minor) != DAT_SUCCESS || major == nullptr) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%08x", static_cast<unsigned>(ret));
    return hex;
  }
  std::string text = major;
  if (minor != nullptr && *minor != '\0' && DAT_GET_SUBTYPE(ret) != 0) {
    text += " (";
    text += minor;
    text += ")";
  }
  return text;
}

inline void check(DAT_RETURN ret, const char* what) {
  if (ret != DAT_SUCCESS) throw Error(std::string(what) + ": " + dat_code(ret));
}

// Where the programs' set-ups differ.
struct Options {
  DAT_COUNT async_evd_qlen;    // dat_ia_open's
  DAT_COUNT dto_evd_qlen;      // each of the four DTO EVDs'
  DAT_COUNT srq_size;          // max_recv_dtos of the SRQ and of both endpoints
  DAT_VLEN max_message_size;   // the endpoints'
  DAT_TIMEOUT wait_us;         // the bound on every wait (wait, expect_event, the connection)
  const char* endpoint_label;  // the SRQ's endpoint in messages ("established (<label>)")
  // dat_psp_create_any refused: fall back to dat_psp_create on a qualifier made from the pid.
  bool psp_fallback;
};

// The IA, its objects and the two connected endpoints (ep_ with the SRQ, peer_ep_ without).
// A program derives from it; the destructor closes the IA abruptly, which frees every object of
// the IA whatever step failed.
class SrqLoopback {
 protected:
  SrqLoopback(const char* ia_name, const Options& options) : ia_name_(ia_name), o_(options) {}
  ~SrqLoopback() {
    if (ia_ != DAT_HANDLE_NULL) dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG);
  }
  SrqLoopback(const SrqLoopback&) = delete;
  SrqLoopback& operator=(const SrqLoopback&) = delete;

  // Opens the IA and queries `fields` of its attributes, which must include the IA's address:
  // the peer connects to it (copied by its family's size).
  DAT_IA_ATTR open_ia(DAT_IA_ATTR_MASK fields) {
    check(dat_ia_open(ia_name_.data(), o_.async_evd_qlen, &async_evd_, &ia_), "dat_ia_open");
    DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL;
    DAT_IA_ATTR ia_attr{};
    DAT_PROVIDER_ATTR provider_attr{};
    check(dat_ia_query(ia_, &async_evd, fields, &ia_attr, static_cast<DAT_PROVIDER_ATTR_MASK>(0),
                       &provider_attr),
          "dat_ia_query");
    if (ia_attr.ia_address_ptr == nullptr) throw Error("dat_ia_query: no IA address");
    std::memcpy(
        &ia_address_, ia_attr.ia_address_ptr,
        ia_attr.ia_address_ptr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    return ia_attr;
  }

  // The PZ, the EVDs, an LMR over [region, region + size), the SRQ, its endpoint and the peer.
  void create_objects(void* region_start, DAT_VLEN size) {
    check(dat_pz_create(ia_, &pz_), "dat_pz_create");
    const DAT_COUNT dto = o_.dto_evd_qlen;
    check(dat_evd_create(ia_, dto, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &recv_evd_),
          "dat_evd_create(recv)");
    check(dat_evd_create(ia_, dto, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &request_evd_),
          "dat_evd_create(request)");
    check(dat_evd_create(ia_, dto, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &peer_recv_evd_),
          "dat_evd_create(peer recv)");
    check(dat_evd_create(ia_, dto, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &peer_request_evd_),
          "dat_evd_create(peer request)");
    check(dat_evd_create(ia_, 4, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn_evd_),
          "dat_evd_create(connection)");
    check(dat_evd_create(ia_, 4, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &peer_conn_evd_),
          "dat_evd_create(peer connection)");
    check(dat_evd_create(ia_, 4, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd_), "dat_evd_create(CR)");
    DAT_REGION_DESCRIPTION region;
    region.for_va = region_start;
    DAT_RMR_CONTEXT rmr_context = 0;
    DAT_VLEN registered_size = 0;
    DAT_VADDR registered_address = 0;
    check(dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, size, pz_, DAT_MEM_PRIV_ALL_FLAG,
                         DAT_VA_TYPE_VA, &lmr_, &lmr_context_, &rmr_context, &registered_size,
                         &registered_address),
          "dat_lmr_create");
    DAT_SRQ_ATTR srq_attr{};
    srq_attr.max_recv_dtos = o_.srq_size;
    srq_attr.max_recv_iov = 1;
    srq_attr.low_watermark = DAT_SRQ_LW_DEFAULT;
    check(dat_srq_create(ia_, pz_, &srq_attr, &srq_), "dat_srq_create");
    // dat_ep_create_with_srq takes no NULL attributes; the peer uses the same ones.
    DAT_EP_ATTR ep_attr{};
    ep_attr.service_type = DAT_SERVICE_TYPE_RC;
    ep_attr.max_message_size = o_.max_message_size;
    ep_attr.qos = DAT_QOS_BEST_EFFORT;
    ep_attr.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    ep_attr.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    ep_attr.max_recv_dtos = o_.srq_size;
    ep_attr.max_request_dtos = 8;
    ep_attr.max_recv_iov = 1;
    ep_attr.max_request_iov = 1;
    ep_attr.srq_soft_hw = DAT_HW_DEFAULT;
    check(
        dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, conn_evd_, srq_, &ep_attr, &ep_),
        "dat_ep_create_with_srq");
    check(dat_ep_create(ia_, pz_, peer_recv_evd_, peer_request_evd_, peer_conn_evd_, &ep_attr,
                        &peer_ep_),
          "dat_ep_create(peer)");
  }

  // The peer connects to a PSP of this IA (psp_, left to the caller); the SRQ's endpoint
  // accepts. Returns once both endpoints have their ESTABLISHED event; the connection qualifier.
  DAT_CONN_QUAL connect() {
    DAT_CONN_QUAL conn_qual = 0;
    const DAT_RETURN any =
        dat_psp_create_any(ia_, &conn_qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp_);
    if (any != DAT_SUCCESS && o_.psp_fallback) {
      conn_qual = 47300 + static_cast<DAT_CONN_QUAL>(getpid() % 1000);
      check(dat_psp_create(ia_, conn_qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp_),
            "dat_psp_create");
    } else {
      check(any, "dat_psp_create_any");
    }
    check(dat_ep_connect(peer_ep_, reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ia_address_), conn_qual,
                         o_.wait_us, 0, nullptr, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
          "dat_ep_connect");
    DAT_EVENT event = wait(cr_evd_, "connection request");
    if (event.event_number != DAT_CONNECTION_REQUEST_EVENT) {
      throw Error("unexpected event on the CR EVD: " + std::to_string(event.event_number));
    }
    check(dat_cr_accept(event.event_data.cr_arrival_event_data.cr_handle, ep_, 0, nullptr),
          "dat_cr_accept");
    expect_event(conn_evd_, DAT_CONNECTION_EVENT_ESTABLISHED, labelled("established").c_str());
    expect_event(peer_conn_evd_, DAT_CONNECTION_EVENT_ESTABLISHED, "established (peer)");
    return conn_qual;
  }

  // The peer disconnects gracefully; both endpoints get their DISCONNECTED event.
  void disconnect() {
    check(dat_ep_disconnect(peer_ep_, DAT_CLOSE_GRACEFUL_FLAG), "dat_ep_disconnect");
    expect_event(peer_conn_evd_, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnected (peer)");
    expect_event(conn_evd_, DAT_CONNECTION_EVENT_DISCONNECTED, labelled("disconnected").c_str());
  }

  DAT_EVENT wait(DAT_EVD_HANDLE evd, const char* what) {
    DAT_EVENT event;
    DAT_COUNT nmore = 0;
    DAT_RETURN ret = dat_evd_wait(evd, o_.wait_us, 1, &event, &nmore);
    if (ret != DAT_SUCCESS) throw Error(std::string("waiting for ") + what + ": " + dat_code(ret));
    return event;
  }

  void expect_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER number, const char* what) {
    DAT_EVENT event = wait(evd, what);
    if (event.event_number != number) {
      throw Error(std::string(what) + ": event number " + std::to_string(event.event_number));
    }
  }

  static void expect_dto_success(const DAT_EVENT& event, const char* what) {
    if (event.event_number != DAT_DTO_COMPLETION_EVENT ||
        event.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS) {
      throw Error(std::string(what) + ": event " + std::to_string(event.event_number) +
                  ", status " + std::to_string(event.event_data.dto_completion_event_data.status));
    }
  }

  std::string ia_name_;  // non-const: dat_ia_open takes a DAT_NAME_PTR
  DAT_IA_HANDLE ia_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd_ = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE recv_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE request_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE peer_recv_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE peer_request_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE conn_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE peer_conn_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE cr_evd_ = DAT_HANDLE_NULL;
  DAT_LMR_HANDLE lmr_ = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT lmr_context_ = 0;
  DAT_SRQ_HANDLE srq_ = DAT_HANDLE_NULL;
  DAT_EP_HANDLE ep_ = DAT_HANDLE_NULL;
  DAT_EP_HANDLE peer_ep_ = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp_ = DAT_HANDLE_NULL;
  DAT_SOCK_ADDR6 ia_address_{};

 private:
  std::string labelled(const char* event) const {
    return std::string(event) + " (" + o_.endpoint_label + ")";
  }

  Options o_;
};

}  // namespace dat_loopback
