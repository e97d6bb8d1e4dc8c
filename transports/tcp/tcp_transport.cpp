#include "transports/tcp/tcp_transport.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "transports/tcp/tcp_dial.h"
#include "transports/tcp/tcp_link.h"

namespace emu {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// How long connect() waits for a peer's listener to accept.
constexpr std::chrono::milliseconds kDialTimeout{2000};

class TcpTransport : public Transport, public TcpLinkOwner {
 public:
  explicit TcpTransport(const TcpEndpoint& listen)
      : work_(asio::make_work_guard(io_)), acceptor_(io_) {
    const tcp::endpoint ep(asio::ip::address_v4(listen.ipv4), listen.port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    TcpEndpoint bound = listen;
    bound.port = acceptor_.local_endpoint().port();
    gid_ = tcp_gid_of(bound);
    spdlog::debug("tcp: listening on {}", to_string(bound));
    accept_next();
    io_thread_ = std::thread([this] { run(); });
  }

  ~TcpTransport() override {
    // On the io thread: stop accepting and close every connection; run() then returns once
    // the cancelled operations have finished.
    asio::post(io_, [this] {
      error_code ignored;
      acceptor_.close(ignored);
      std::vector<std::shared_ptr<TcpLink>> all;
      {
        std::lock_guard lock(links_mutex_);
        all.assign(links_.begin(), links_.end());
        links_.clear();
        canonical_.clear();
      }
      for (auto& link : all) link->shutdown();
    });
    work_.reset();
    io_thread_.join();
  }

  std::string name() const override { return "tcp"; }
  Gid local_gid() const override { return gid_; }

  void set_sink(FrameSink* sink) override {
    // Waits for a delivery in progress: a sink being destroyed is never called afterwards.
    std::lock_guard lock(sink_mutex_);
    sink_ = sink;
  }

  std::shared_ptr<Link> connect(const Gid& peer) override {
    const std::optional<TcpEndpoint> ep = tcp_endpoint_of(peer);
    if (!ep) return nullptr;
    if (auto link = canonical(peer)) return link;
    // One dial at a time, so that two threads asking for the same peer share a connection.
    std::lock_guard dial_lock(dial_mutex_);
    if (auto link = canonical(peer)) return link;
    std::string why;
    const int fd = tcp_dial(*ep, kDialTimeout, &why);
    if (fd < 0) {
      spdlog::warn("tcp: cannot reach {}: {}", to_string(*ep), why);
      return nullptr;
    }
    tcp::socket socket(io_);
    error_code ec;
    socket.assign(tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      spdlog::warn("tcp: cannot use the connection to {}: {}", to_string(*ep), ec.message());
      return nullptr;
    }
    auto link = std::make_shared<TcpLink>(*this, io_, std::move(socket), gid_, &peer);
    std::shared_ptr<Link> result = link;
    {
      std::lock_guard lock(links_mutex_);
      links_.insert(link);
      auto [it, fresh] = canonical_.try_emplace(peer.raw, link);
      if (!fresh) {
        // The peer dialed us meanwhile: keep its connection as the canonical one (ours stays
        // open, the peer may already rely on it).
        if (it->second->up()) {
          result = it->second;
        } else {
          it->second = link;
        }
      }
    }
    asio::post(io_, [link] { link->start(); });
    return result;
  }

  size_t progress() override { return 0; }  // the io thread delivers frames itself
  void quiesce() override {}                // payloads are copied by send()

  void drop_connections() {
    std::promise<void> done;
    asio::post(io_, [this, &done] {
      std::vector<std::shared_ptr<TcpLink>> all;
      {
        std::lock_guard lock(links_mutex_);
        all.assign(links_.begin(), links_.end());
      }
      for (auto& link : all) link->abort();
      done.set_value();
    });
    done.get_future().wait();
  }

  // TcpLinkOwner (io thread)
  void on_hello(TcpLink& link) override {
    if (link.dialed()) return;
    // An accepted connection serves as the peer's link until we have one of our own.
    std::lock_guard lock(links_mutex_);
    auto it = canonical_.find(link.peer().raw);
    if (it != canonical_.end() && it->second->up()) return;
    auto self = std::static_pointer_cast<TcpLink>(link.shared_from_this());
    if (it == canonical_.end()) {
      canonical_.emplace(link.peer().raw, self);
    } else {
      it->second = self;
    }
  }

  void deliver(TcpLink& link, const FrameHeader& header, PayloadSource& payload) override {
    std::lock_guard lock(sink_mutex_);
    if (sink_ != nullptr) sink_->on_frame(link, header, payload);
  }

  void on_down(TcpLink& link) override {
    std::shared_ptr<TcpLink> keep = link.shared_from_this();
    {
      std::lock_guard lock(links_mutex_);
      links_.erase(keep);
      auto it = canonical_.find(link.peer().raw);
      if (it != canonical_.end() && it->second.get() == &link) canonical_.erase(it);
    }
    std::lock_guard lock(sink_mutex_);
    if (sink_ != nullptr) sink_->on_link_down(link);
  }

 private:
  std::shared_ptr<Link> canonical(const Gid& peer) {
    std::lock_guard lock(links_mutex_);
    auto it = canonical_.find(peer.raw);
    if (it != canonical_.end() && it->second->up()) return it->second;
    return nullptr;
  }

  void accept_next() {
    acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;  // shutting down
      if (ec) {
        spdlog::warn("tcp: accept failed: {}", ec.message());
      } else {
        error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        auto link = std::make_shared<TcpLink>(*this, io_, std::move(socket), gid_, nullptr);
        {
          std::lock_guard lock(links_mutex_);
          links_.insert(link);
        }
        link->start();
      }
      accept_next();
    });
  }

  void run() {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("tcp: io thread: {}", e.what());
      }
    }
  }

  asio::io_context io_;  // first: destroyed last
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  Gid gid_;
  std::thread io_thread_;

  std::mutex dial_mutex_;
  std::mutex links_mutex_;
  std::set<std::shared_ptr<TcpLink>> links_;                               // every open connection
  std::map<std::array<uint8_t, 16>, std::shared_ptr<TcpLink>> canonical_;  // by peer GID

  std::mutex sink_mutex_;
  FrameSink* sink_ = nullptr;
};

}  // namespace

bool tcp_drop_connections(Transport& t) {
  auto* tcp = dynamic_cast<TcpTransport*>(&t);
  if (tcp == nullptr) return false;
  tcp->drop_connections();
  return true;
}

std::unique_ptr<Transport> make_tcp_transport(const std::string& listen_spec) {
  const std::optional<TcpEndpoint> ep = parse_tcp_endpoint(listen_spec);
  if (!ep) {
    spdlog::error("tcp: \"{}\" is not an IPv4 address with an optional port", listen_spec);
    return nullptr;
  }
  if (ep->ipv4 == 0) {
    spdlog::error("tcp: cannot listen on 0.0.0.0: the GID must name an address peers can dial");
    return nullptr;
  }
  try {
    return std::make_unique<TcpTransport>(*ep);
  } catch (const std::exception& e) {
    spdlog::error("tcp: cannot listen on {}: {}", listen_spec, e.what());
    return nullptr;
  }
}

}  // namespace emu
