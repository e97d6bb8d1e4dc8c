#include "transports/auto/auto_transport.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <optional>

#include "transports/loopback/loopback_transport.h"
#include "transports/shm/shm_gid.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/test_support.h"

namespace transports {

namespace {

// The loopback link from this node to itself, seen under the node's own GID (a UD receive
// reports the sender's GID: it must be the one the program knows).
class SelfLink : public Link, public std::enable_shared_from_this<SelfLink> {
 public:
  SelfLink(std::shared_ptr<Link> inner, const Gid& gid) : inner_(std::move(inner)), gid_(gid) {}
  bool send(const FrameHeader& h, const iovec* iov, size_t iovcnt) override {
    return inner_->send(h, iov, iovcnt);
  }
  const Gid& peer() const override { return gid_; }
  bool up() const override { return inner_->up(); }
  bool farewell() const override { return inner_->farewell(); }
  std::shared_ptr<Link> shared() override { return weak_from_this().lock(); }
  const Link* inner() const { return inner_.get(); }

 private:
  std::shared_ptr<Link> inner_;
  Gid gid_;
};

// Between the loopback transport and the node: frames from ourselves arrive on SelfLink.
class LoopbackSink : public FrameSink {
 public:
  void set(FrameSink* sink, SelfLink* self) {
    self_ = self;
    sink_.store(sink, std::memory_order_release);
  }
  void on_frame(Link& from, const FrameHeader& h, PayloadSource& payload) override {
    FrameSink* sink = sink_.load(std::memory_order_acquire);
    if (sink != nullptr) sink->on_frame(&from == self_->inner() ? *self_ : from, h, payload);
  }
  void on_link_down(Link& link) override {
    FrameSink* sink = sink_.load(std::memory_order_acquire);
    if (sink != nullptr) sink->on_link_down(&link == self_->inner() ? *self_ : link);
  }

 private:
  std::atomic<FrameSink*> sink_{nullptr};
  SelfLink* self_ = nullptr;
};

class AutoTransport : public Transport {
 public:
  AutoTransport(std::unique_ptr<Transport> over_shm, std::unique_ptr<Transport> over_tcp,
                TransportChoice choice)
      : loopback_(loopback::make_loopback_transport()),
        shm_(std::move(over_shm)),
        tcp_(std::move(over_tcp)),
        choice_(choice),
        gid_(shm_ ? shm_->local_gid() : tcp_->local_gid()),
        self_(std::make_shared<SelfLink>(loopback_->connect(loopback_->local_gid()), gid_)) {}

  std::string name() const override {
    switch (choice_) {
      case TransportChoice::kShm:
        return "shm";
      case TransportChoice::kTcp:
        return "tcp";
      default:
        return "auto";
    }
  }
  Gid local_gid() const override { return gid_; }

  void set_sink(FrameSink* sink) override {
    loopback_sink_.set(sink, self_.get());
    loopback_->set_sink(sink ? &loopback_sink_ : nullptr);
    if (shm_) shm_->set_sink(sink);
    if (tcp_) tcp_->set_sink(sink);
  }

  std::shared_ptr<Link> connect(const Gid& peer) override {
    // Ourselves, or another node of this process (tests build several).
    if (peer == gid_) return self_;
    if (auto link = loopback_->connect(peer)) return link;
    const auto shm_peer = shm::address_of(peer);
    const bool same_host = shm_peer && shm_peer->host_tag == shm::local_host_tag();
    if (shm_ && same_host && choice_ != TransportChoice::kTcp) {
      if (auto link = shm_->connect(peer)) return link;
      if (choice_ == TransportChoice::kShm) return nullptr;
      spdlog::info("auto: shared memory to a same-host peer failed; trying TCP");
    }
    if (!tcp_ || choice_ == TransportChoice::kShm) return nullptr;
    // The TCP part of the GID: bytes 8-15 (shm_gid.h).
    Gid tcp_peer = peer;
    std::fill(tcp_peer.raw.begin(), tcp_peer.raw.begin() + 8, 0);
    return tcp_->connect(tcp_peer);
  }

  // Only shared memory lets a peer map our memory.
  uint64_t register_memory(const void* addr, size_t length) override {
    return shm_ ? shm_->register_memory(addr, length) : 0;
  }
  void unregister_memory(uint64_t token) override {
    if (shm_) shm_->unregister_memory(token);
  }

  void send_held() override {
    if (shm_) shm_->send_held();
    if (tcp_) tcp_->send_held();
  }

  void finish_deliveries() override {
    loopback_->finish_deliveries();
    if (shm_) shm_->finish_deliveries();
    if (tcp_) tcp_->finish_deliveries();
  }

  void poll_found_nothing() override {
    if (shm_) shm_->poll_found_nothing();
  }

  size_t progress() override {
    size_t n = loopback_->progress();
    if (shm_) n += shm_->progress();
    if (tcp_) n += tcp_->progress();
    return n;
  }

  void drop_connections() {
    if (shm_) shm::shm_drop_connections(*shm_);
    if (tcp_) tcp::tcp_drop_connections(*tcp_);
  }

  void release_payloads(Release how, uint32_t qpn) override {
    loopback_->release_payloads(how, qpn);
    if (shm_) shm_->release_payloads(how, qpn);
    if (tcp_) tcp_->release_payloads(how, qpn);
  }

 private:
  std::unique_ptr<Transport> loopback_;
  std::unique_ptr<Transport> shm_;
  std::unique_ptr<Transport> tcp_;
  TransportChoice choice_;
  Gid gid_;
  std::shared_ptr<SelfLink> self_;
  LoopbackSink loopback_sink_;
};

}  // namespace

bool drop_connections(Transport& t) {
  if (auto* a = dynamic_cast<AutoTransport*>(&t)) {
    a->drop_connections();
    return true;
  }
  return shm::shm_drop_connections(t) || tcp::tcp_drop_connections(t);
}

std::string default_tcp_listen_address() {
  ifaddrs* list = nullptr;
  std::string found = "127.0.0.1";
  if (::getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN];
    const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text) != nullptr) {
      found = text;
      break;
    }
  }
  ::freeifaddrs(list);
  return found;
}

std::unique_ptr<Transport> make_auto_transport(const std::string& tcp_listen,
                                               TransportChoice choice) {
  // A refused secret fails every choice: shm alone, or loopback, would hide a job
  // misconfigured until its first connection to another host (logged by the call).
  std::optional<tcp::TcpConfig> tcp_config = tcp::tcp_config_from_environment();
  if (!tcp_config) return nullptr;
  std::unique_ptr<Transport> over_tcp;
  if (choice != TransportChoice::kShm) {
    // Without a secret, only loopback unless the user names an address (tcp_config.h).
    const std::string listen = tcp_listen.empty()
                                   ? tcp::tcp_default_listen_address(default_tcp_listen_address())
                                   : tcp_listen;
    over_tcp = tcp::make_tcp_transport(listen, std::move(*tcp_config));
  }
  shm::ShmOptions shm_options = shm::shm_options_from_environment();
  if (over_tcp) {
    // The shm GID carries the TCP listener, so one GID reaches us either way.
    const auto ep = tcp::tcp_endpoint_of(over_tcp->local_gid());
    shm_options.instance = ep->port;
    shm_options.ipv4 = ep->ipv4;
  }
  std::unique_ptr<Transport> over_shm;
  if (choice != TransportChoice::kTcp) over_shm = shm::make_shm_transport(shm_options);
  if (!over_shm && !over_tcp) return nullptr;
  if (!over_tcp && choice == TransportChoice::kTcp) return nullptr;
  if (!over_shm && choice == TransportChoice::kShm) return nullptr;
  return std::make_unique<AutoTransport>(std::move(over_shm), std::move(over_tcp), choice);
}

}  // namespace transports
