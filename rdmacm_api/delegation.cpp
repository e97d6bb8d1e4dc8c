// Ids on real RDMA devices, handed to the system librdmacm (delegation.h).
#include "rdmacm_api/delegation.h"

#include <fcntl.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <cstring>

#include "cm/cm_log.h"
#include "rdmacm_api/cm_thread.h"
#include "rdmacm_api/event_channel.h"
#include "rdmacm_api/id.h"
#include "rdmacm_api/socket_address.h"

namespace rdmacm_api {

class SystemChannel : public std::enable_shared_from_this<SystemChannel> {
 public:
  // A system event channel whose events reach the program's channels, or nullptr (errno set).
  static std::shared_ptr<SystemChannel> create(const system_cm::Library& l) {
    rdma_event_channel* channel = l.create_event_channel();
    if (channel == nullptr) {
      errno = *l.errno_location();
      return nullptr;
    }
    // Drained until EAGAIN on the CM thread, which must never block.
    int flags = ::fcntl(channel->fd, F_GETFL);
    ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK);
    auto out = std::shared_ptr<SystemChannel>(new SystemChannel(l, channel));
    run_on_cm_thread([&out] {
      out->fd_ = std::make_unique<boost::asio::posix::stream_descriptor>(cm_io(), out->api()->fd);
      out->watch();
    });
    return out;
  }

  rdma_event_channel* api() const { return channel_; }

  ~SystemChannel() {
    // The watch ends first (the fd stays the system library's), then the channel: every id on
    // it is destroyed by now, since each holds this object.
    run_on_cm_thread([this] {
      if (fd_) fd_->release();
      fd_.reset();
    });
    library_.destroy_event_channel(channel_);
  }

 private:
  SystemChannel(const system_cm::Library& l, rdma_event_channel* channel)
      : library_(l), channel_(channel) {}

  void watch() {
    std::weak_ptr<SystemChannel> weak = weak_from_this();
    fd_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [weak](const boost::system::error_code& ec) {
                      auto self = weak.lock();
                      if (!self || ec || !self->fd_) return;
                      self->drain();
                      if (self->fd_) self->watch();
                    });
  }

  void drain() {
    rdma_cm_event* event = nullptr;
    while (library_.get_cm_event(channel_, &event) == 0) {
      cm::logger().debug("rdma_cm: the system librdmacm reports {} (status {})",
                         static_cast<int>(event->event), event->status);
      if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        on_request(event);
      } else {
        on_event(event);
      }
    }
  }

  // An event as the program's channel holds it: the system event's fields, its private data
  // copied (the system event is acked at once).
  static EventRecord* copy_event(Id& owner, rdma_cm_id* subject, const rdma_cm_event& e) {
    EventRecord* record = new_event(owner, subject, e.event, e.status);
    record->event.param = e.param;
    // conn and ud both start with the private data's pointer and length.
    const rdma_conn_param& conn = e.param.conn;
    if (conn.private_data != nullptr && conn.private_data_len != 0) {
      std::memcpy(record->private_data, conn.private_data, conn.private_data_len);
      record->event.param.conn.private_data = record->private_data;
    }
    return record;
  }

  static void follow_state(Id& id, rdma_cm_event_type type) {
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        id.state = IdState::kAddrResolved;
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED:
        id.state = IdState::kRouteResolved;
        break;
      case RDMA_CM_EVENT_ESTABLISHED:
        id.state = IdState::kConnected;
        break;
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_REJECTED:
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_CONNECT_ERROR:
        id.state = IdState::kDisconnected;
        break;
      default:
        break;
    }
  }

  void on_event(rdma_cm_event* event) {
    auto* id = static_cast<Id*>(event->id->context);
    if (id != nullptr) {
      follow_state(*id, event->event);
      delegation::mirror(*id);
      EventRecord* record = copy_event(*id, &id->api, *event);
      library_.ack_cm_event(event);
      to_channel(id->api.channel)->push(record);
      return;
    }
    library_.ack_cm_event(event);  // the id was destroyed meanwhile
  }

  // A connection request on a system listener: a new id of the program's, as ours are made.
  void on_request(rdma_cm_event* event) {
    auto* listen = static_cast<Id*>(event->listen_id->context);
    rdma_cm_id* request = event->id;
    rdma_cm_id* created = nullptr;
    if (listen == nullptr ||
        create_id(listen->sync ? nullptr : listen->api.channel, &created, listen->api.context,
                  listen->api.ps, listen->api.qp_type) != 0) {
      library_.ack_cm_event(event);
      library_.reject(request, nullptr, 0);
      library_.destroy_id(request);
      return;
    }
    Id& id = *to_id(created);
    id.system.id = request;
    id.system.channel = shared_from_this();
    request->context = &id;
    id.state = IdState::kConnecting;
    delegation::mirror(id);
    EventRecord* record = copy_event(*listen, &id.api, *event);
    record->event.listen_id = &listen->api;
    library_.ack_cm_event(event);
    to_channel(listen->api.channel)->push(record);
  }

  const system_cm::Library& library_;
  rdma_event_channel* const channel_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> fd_;  // CM thread
};

namespace delegation {
namespace {

// Sets the id options the program chose before the system id existed.
void apply_options(const system_cm::Library& l, const Id& id, rdma_cm_id* system) {
  auto set = [&](int name, const void* value, size_t size) {
    l.set_option(system, RDMA_OPTION_ID, name, const_cast<void*>(value), size);
  };
  int reuse = id.options.reuse_addr ? 1 : 0;
  if (reuse != 0) set(RDMA_OPTION_ID_REUSEADDR, &reuse, sizeof reuse);
  int af_only = id.options.af_only ? 1 : 0;
  if (af_only != 0) set(RDMA_OPTION_ID_AFONLY, &af_only, sizeof af_only);
  if (id.options.tos) set(RDMA_OPTION_ID_TOS, &*id.options.tos, sizeof(uint8_t));
  if (id.options.ack_timeout) {
    set(RDMA_OPTION_ID_ACK_TIMEOUT, &*id.options.ack_timeout, sizeof(uint8_t));
  }
}

// A system id for `owner` on `channel`, with the owner's options. nullptr with errno set.
rdma_cm_id* make_system_id(const system_cm::Library& l, Id& owner, SystemChannel& channel) {
  rdma_cm_id* system = nullptr;
  if (l.create_id(channel.api(), &system, &owner, owner.api.ps) != 0) {
    errno = *l.errno_location();
    return nullptr;
  }
  system->qp_type = owner.api.qp_type;  // rdma_create_ep's may differ from the port space's
  apply_options(l, owner, system);
  return system;
}

}  // namespace

bool real_device_address(const sockaddr* addr) {
  if (addr == nullptr || is_wildcard(addr) || is_loopback(addr)) return false;
  const system_cm::Library* l = system_cm::library();
  if (l == nullptr) return false;
  rdma_cm_id* probe = nullptr;
  if (l->create_id(nullptr, &probe, nullptr, RDMA_PS_TCP) != 0) return false;
  sockaddr_storage any_port{};
  copy_address(addr, &any_port);
  set_port(reinterpret_cast<sockaddr*>(&any_port), 0);
  const bool owned =
      l->bind_addr(probe, reinterpret_cast<sockaddr*>(&any_port)) == 0 && probe->verbs != nullptr;
  l->destroy_id(probe);
  return owned;
}

int delegate(Id& id) {
  const system_cm::Library* l = system_cm::library();
  if (l == nullptr) return ENODEV;
  std::shared_ptr<SystemChannel> channel = SystemChannel::create(*l);
  if (!channel) return errno;
  rdma_cm_id* system = make_system_id(*l, id, *channel);
  if (system == nullptr) return errno;
  id.system.id = system;
  id.system.channel = std::move(channel);
  cm::logger().debug("rdma_cm: an id on a real device's address: the system librdmacm serves it");
  return 0;
}

const system_cm::Library* of(const Id& id) {
  return id.system.id != nullptr ? system_cm::library() : nullptr;
}

void mirror(Id& id) {
  const rdma_cm_id* s = id.system.id;
  if (s == nullptr) return;
  id.api.verbs = s->verbs;
  id.api.pd = s->pd;
  id.api.qp = s->qp;
  id.api.srq = s->srq;
  id.api.send_cq = s->send_cq;
  id.api.recv_cq = s->recv_cq;
  id.api.send_cq_channel = s->send_cq_channel;
  id.api.recv_cq_channel = s->recv_cq_channel;
  id.api.port_num = s->port_num;
  id.api.route = s->route;  // path_rec stays the system library's (release() forgets it)
}

void listen_beside(Id& id, int backlog) {
  const system_cm::Library* l = system_cm::library();
  if (l == nullptr || id.system.listener != nullptr) return;
  std::shared_ptr<SystemChannel> channel = SystemChannel::create(*l);
  if (!channel) return;
  rdma_cm_id* listener = make_system_id(*l, id, *channel);
  if (listener == nullptr) return;
  sockaddr_storage address{};
  copy_address(&id.api.route.addr.src_addr, &address);
  if (l->bind_addr(listener, reinterpret_cast<sockaddr*>(&address)) != 0 ||
      l->listen(listener, backlog) != 0) {
    cm::logger().info("rdma_cm: real devices do not listen on port {} ({}): emu0 does",
                      port_of(&id.api.route.addr.src_addr), std::strerror(*l->errno_location()));
    l->destroy_id(listener);
    return;
  }
  id.system.listener = listener;
  id.system.listener_channel = std::move(channel);
  cm::logger().debug("rdma_cm: listening on port {} of the real devices too (family {})",
                     port_of(&id.api.route.addr.src_addr), address.ss_family);
}

void release(Id& id) {
  if (id.system.id == nullptr && id.system.listener == nullptr) return;
  const system_cm::Library* l = system_cm::library();
  // From now on the CM thread drops this id's system events (their context is gone).
  run_on_cm_thread([&id] {
    if (id.system.id != nullptr) id.system.id->context = nullptr;
    if (id.system.listener != nullptr) id.system.listener->context = nullptr;
  });
  if (id.system.id != nullptr) l->destroy_id(id.system.id);
  if (id.system.listener != nullptr) l->destroy_id(id.system.listener);
  id.system.id = nullptr;
  id.system.listener = nullptr;
  id.api.route.path_rec = nullptr;
  id.api.route.num_paths = 0;
  id.api.qp = nullptr;
  id.system.listener_channel.reset();
  id.system.channel.reset();
}

}  // namespace delegation
}  // namespace rdmacm_api
