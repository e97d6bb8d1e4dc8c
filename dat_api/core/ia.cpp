// dat_ia_open / dat_ia_query / dat_ia_close, the IA object and its asynchronous-event reader.
#include "dat_api/core/ia.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/job_secret.h"
#include "cm/cm_addresses.h"
#include "dat_api/cm/cm_teardown.h"
#include "dat_api/core/cno.h"
#include "dat_api/core/entry_points.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/evd.h"
#include "dat_api/core/lmr.h"
#include "dat_api/core/log.h"
#include "dat_api/core/srq.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

namespace {

// The transport is a property of the verbs library's process-wide node, fixed when the first
// device is opened. The first IA opened in a process therefore decides it; a later IA naming
// another transport gets the first one (logged).
std::mutex g_transport_mutex;
std::string g_transport_in_use;
bool g_device_opened = false;

void select_transport(const IaConfig& config) {
  std::lock_guard<std::mutex> guard(g_transport_mutex);
  if (!g_device_opened) {
    g_device_opened = true;
    if (!config.transport.empty()) {
      // Set before ibv_get_device_list / ibv_open_device: the verbs library reads it when it
      // creates its node.
      setenv("EMURDMA_TRANSPORT", config.transport.c_str(), 1);
    }
    const char* t = std::getenv("EMURDMA_TRANSPORT");
    g_transport_in_use = t != nullptr ? t : "auto";
    log_debug("IA {}: EMURDMA_TRANSPORT={}", config.ia_name, g_transport_in_use);
    return;
  }
  if (!config.transport.empty() && config.transport != g_transport_in_use) {
    log_warn(
        "IA {} asks for transport {}, but this process already uses {} (the first IA "
        "opened decides)",
        config.ia_name, config.transport, g_transport_in_use);
  }
}

ibv_context* open_device(const std::string& name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  ibv_context* context = nullptr;
  for (int i = 0; i < n; ++i) {
    const char* device_name = ibv_get_device_name(list[i]);
    if (device_name != nullptr && name == device_name) {
      context = ibv_open_device(list[i]);
      break;
    }
  }
  ibv_free_device_list(list);
  return context;
}

DAT_COUNT clamp_count(uint64_t v) {
  return static_cast<DAT_COUNT>(std::min<uint64_t>(v, INT_MAX));
}

DAT_SEG_LENGTH clamp_seg(uint64_t v) {
  return static_cast<DAT_SEG_LENGTH>(std::min<uint64_t>(v, UINT32_MAX));
}

void fill_ia_attr(Ia& ia, DAT_IA_ATTR* a) {
  const ibv_device_attr& d = ia.device_attr();
  std::memset(a, 0, sizeof(*a));
  std::strncpy(a->adapter_name, ia.config()->ia_name.c_str(), DAT_NAME_MAX_LENGTH - 1);
  std::strncpy(a->vendor_name, "emurdma", DAT_NAME_MAX_LENGTH - 1);
  a->hardware_version_major = d.hw_ver;
  a->hardware_version_minor = 0;
  a->firmware_version_major = 0;
  a->firmware_version_minor = 0;
  a->ia_address_ptr = ia.address();
  a->max_eps = d.max_qp;
  a->max_dto_per_ep = d.max_qp_wr;
  a->max_rdma_read_per_ep_in = d.max_qp_rd_atom;
  a->max_rdma_read_per_ep_out = d.max_qp_init_rd_atom;
  a->max_evds = d.max_cq;  // software queues, but DTO EVDs will each hold a verbs CQ
  a->max_evd_qlen = kMaxEvdQlen;
  a->max_iov_segments_per_dto = d.max_sge;
  a->max_lmrs = d.max_mr;
  a->max_lmr_block_size = clamp_seg(d.max_mr_size);
  a->max_lmr_virtual_address = UINT64_MAX;
  a->max_pzs = d.max_pd;
  a->max_message_size = kMaxMessageSize;  // the engine carries messages up to 2 GiB
  a->max_rdma_size = kMaxMessageSize;
  a->max_rmrs = d.max_mw;  // H3: RMRs are memory windows (0 on a device without them)
  a->max_rmr_target_address = d.max_mw != 0 ? UINT64_MAX : 0;
  a->max_srqs = d.max_srq;
  a->max_ep_per_srq = d.max_qp;
  a->max_recv_per_srq = d.max_srq_wr;
  a->max_iov_segments_per_rdma_read = d.max_sge_rd != 0 ? d.max_sge_rd : d.max_sge;
  a->max_iov_segments_per_rdma_write = d.max_sge;
  a->max_rdma_read_in = clamp_count(static_cast<uint64_t>(d.max_qp_rd_atom) * d.max_qp);
  a->max_rdma_read_out = clamp_count(static_cast<uint64_t>(d.max_qp_init_rd_atom) * d.max_qp);
  a->max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
  a->max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
  a->zb_supported = DAT_FALSE;
  ext_fill_ia_attr(a);  // the IB extensions (ext_attrs.cpp)
  a->num_transport_attr = 0;
  a->transport_attr = nullptr;
  a->num_vendor_attr = 0;
  a->vendor_attr = nullptr;
}

void fill_provider_attr(Ia& ia, DAT_PROVIDER_ATTR* p) {
  std::memset(static_cast<void*>(p), 0, sizeof(*p));  // const member: no assignment
  std::strncpy(p->provider_name, "emurdma", DAT_NAME_MAX_LENGTH - 1);
  p->provider_version_major = 0;
  p->provider_version_minor = 1;
  // The registry closes the provider under the key (name, version, thread safety) it opened it
  // with, and takes version and thread safety from this answer: they must echo the dat.conf
  // entry. (The provider is thread-safe whatever the entry says; Debian's headers make every
  // consumer ask for a non-thread-safe provider, so our entries say nonthreadsafe.)
  p->dapl_version_major = ia.config()->info.dapl_version_major;
  p->dapl_version_minor = ia.config()->info.dapl_version_minor;
  p->is_thread_safe = ia.config()->info.is_thread_safe;
  p->lmr_mem_types_supported = static_cast<DAT_MEM_TYPE>(DAT_MEM_TYPE_VIRTUAL | DAT_MEM_TYPE_LMR);
  p->iov_ownership_on_return = DAT_IOV_CONSUMER;
  p->dat_qos_supported = DAT_QOS_BEST_EFFORT;
  p->completion_flags_supported = static_cast<DAT_COMPLETION_FLAGS>(
      DAT_COMPLETION_DEFAULT_FLAG | DAT_COMPLETION_SUPPRESS_FLAG |
      DAT_COMPLETION_SOLICITED_WAIT_FLAG | DAT_COMPLETION_UNSIGNALLED_FLAG |
      DAT_COMPLETION_BARRIER_FENCE_FLAG);
  p->max_private_data_size = 256;
  p->supports_multipath = DAT_FALSE;
  p->ep_creator = DAT_PSP_CREATES_EP_NEVER;
  p->pz_support = DAT_PZ_UNIQUE;
  p->optimal_buffer_alignment = DAT_OPTIMAL_ALIGNMENT;
  // EVDs are software queues: every stream can feed every EVD. The member is declared const
  // in udat.h, so it is written through its address.
  auto* merging = const_cast<DAT_BOOLEAN*>(&p->evd_stream_merging_supported[0][0]);
  std::fill(merging, merging + 36, DAT_TRUE);
  p->srq_supported = DAT_TRUE;
  p->srq_watermarks_supported = DAT_TRUE;
  p->srq_ep_pz_difference_supported = DAT_FALSE;
  // Exact counts on emu0; a real HCA's SRQ answers DAT_VALUE_UNKNOWN per field.
  p->srq_info_supported = DAT_TRUE;
  p->ep_recv_info_supported = DAT_FALSE;
  p->lmr_sync_req = DAT_FALSE;  // memory is coherent: the sync calls only validate
  p->dto_async_return_guaranteed = DAT_FALSE;
  p->rdma_write_for_rdma_read_req = DAT_FALSE;
  p->rdma_read_lmr_rmr_context_exposure = DAT_FALSE;
  p->rmr_scope_supported = DAT_RMR_SCOPE_EP;
  p->is_signal_safe = DAT_FALSE;
  p->ha_supported = DAT_FALSE;
  p->ha_loadbalancing = DAT_HA_LB_NONE;
  p->num_provider_specific_attr = static_cast<DAT_COUNT>(ia.provider_attrs().size());
  p->provider_specific_attr = const_cast<DAT_NAMED_ATTR*>(ia.provider_attrs().data());
}

using GetIaHandleFn = DAT_RETURN (*)(DAT_IA_HANDLE, DAT_IA_HANDLE*);

GetIaHandleFn registry_get_ia_handle() {
  static GetIaHandleFn fn = [] {
    void* lib = dlopen("libdat2.so.2", RTLD_LAZY | RTLD_NOLOAD);
    void* sym = dlsym(lib != nullptr ? lib : RTLD_DEFAULT, "dats_get_ia_handle");
    if (lib != nullptr) dlclose(lib);
    return reinterpret_cast<GetIaHandleFn>(sym);
  }();
  return fn;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Ia

Ia::Ia(const IaConfig* config, ibv_context* context)
    : Object(kKind), config_(config), context_(context) {
  // Read once per IA: its connection manager authenticates every connection with it.
  base::JobSecretResult found = base::job_secret_from_environment();
  cm_secret_ = std::move(found.secret);
  cm_secret_error_ = std::move(found.error);
  // The address the connection manager listens on (cm/cm_addresses.h): on the soft device
  // without a job secret, loopback only, as the verbs TCP transport chooses its listener.
  address_ = cm::listen_address(soft_device() && cm_secret_.empty());
}

Ia::~Ia() {
  stop_async_thread();
  if (stop_fd_ >= 0) close(stop_fd_);
  if (context_ != nullptr && ibv_close_device(context_) != 0) {
    log_warn("ibv_close_device failed: {}", std::strerror(errno));
  }
}

DAT_IA_HANDLE Ia::consumer_handle() {
  DAT_IA_HANDLE cached = consumer_handle_.load(std::memory_order_acquire);
  if (cached != nullptr) return cached;
  GetIaHandleFn get = registry_get_ia_handle();
  if (get != nullptr) {
    // The registry's integers start at 1 and are reused lowest first; a process rarely has
    // more than a few IAs open.
    for (uintptr_t i = 1; i < 4096; ++i) {
      DAT_IA_HANDLE mapped = nullptr;
      if (get(reinterpret_cast<DAT_IA_HANDLE>(i), &mapped) == DAT_SUCCESS && mapped == handle()) {
        consumer_handle_.store(reinterpret_cast<DAT_IA_HANDLE>(i), std::memory_order_release);
        return reinterpret_cast<DAT_IA_HANDLE>(i);
      }
    }
  }
  return handle();
}

void Ia::build_provider_attrs() {
  ibv_port_attr port{};
  int mtu_bytes = 1024;
  if (ibv_query_port(context_, static_cast<uint8_t>(config_->port), &port) == 0 &&
      port.active_mtu >= IBV_MTU_256 && port.active_mtu <= IBV_MTU_4096) {
    mtu_bytes = 128 << static_cast<int>(port.active_mtu);
  }
  std::vector<std::pair<const char*, std::string>> attrs = {
      {"DAT_IB_PROVIDER_NAME", "emurdma"},
      {"DAT_IB_DEVICE_NAME", config_->device},
      {"DAT_IB_PORT_NUMBER", std::to_string(config_->port)},
      {"DAT_IB_TRANSPORT_MTU", std::to_string(mtu_bytes)},
      {"DAT_IB_RDMA_READ", "TRUE"},
  };
  for (auto& a : ext_provider_attrs(device_attr_)) attrs.push_back(std::move(a));
  attr_strings_.clear();
  attr_strings_.reserve(2 * attrs.size());  // no reallocation: the pointers below stay
  for (const auto& [name, value] : attrs) {
    attr_strings_.emplace_back(name);
    attr_strings_.emplace_back(value);
  }
  provider_attrs_.clear();
  for (size_t i = 0; i < attr_strings_.size(); i += 2) {
    provider_attrs_.push_back({attr_strings_[i].c_str(), attr_strings_[i + 1].c_str()});
  }
}

void Ia::add_child(const std::shared_ptr<Object>& child) {
  children_.push_back(child);
  count_child(counters, child->kind(), true);
}

void Ia::remove_child(const Object* child) {
  const auto end = std::remove_if(children_.begin(), children_.end(),
                                  [child](const auto& c) { return c.get() == child; });
  // Counted once: a child some other path already removed is not freed twice.
  if (end != children_.end()) count_child(counters, child->kind(), false);
  children_.erase(end, children_.end());
}

std::shared_ptr<Evd> Ia::async_evd() const {
  std::lock_guard<std::mutex> guard(async_evd_mutex_);
  return async_evd_;
}

void Ia::set_async_evd(std::shared_ptr<Evd> evd, bool owned) {
  std::lock_guard<std::mutex> guard(async_evd_mutex_);
  async_evd_ = std::move(evd);
  async_evd_owned_ = owned;
}

void Ia::deliver_async(const DAT_EVENT& event) {
  std::shared_ptr<Evd> evd = async_evd();
  if (!evd) {
    log_debug("IA {}: asynchronous event 0x{:x} dropped: the IA has no async EVD", config_->ia_name,
              static_cast<unsigned>(event.event_number));
    return;
  }
  if (!evd->post(event)) {
    log_warn("IA {}: async EVD full, event 0x{:x} lost", config_->ia_name,
             static_cast<unsigned>(event.event_number));
  }
}

void Ia::pump_async_events() {
  std::lock_guard<std::mutex> guard(pump_mutex_);
  for (;;) {
    ibv_async_event ev{};
    if (ibv_get_async_event(context_, &ev) != 0) return;  // EAGAIN: nothing more now
    // Copy what we need, then acknowledge at once: ibv_destroy_srq (and the other destroys)
    // wait until every event naming the object has been acknowledged.
    ibv_event_type type = ev.event_type;
    ibv_srq* srq = nullptr;
    void* srq_context = nullptr;
    if (type == IBV_EVENT_SRQ_LIMIT_REACHED || type == IBV_EVENT_SRQ_ERR) {
      srq = ev.element.srq;
      srq_context = srq != nullptr ? srq->srq_context : nullptr;
    }
    // A QP's context is its EP's DAT handle (looked up below, never dereferenced).
    void* qp_context = nullptr;
    if (type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR ||
        type == IBV_EVENT_QP_ACCESS_ERR || type == IBV_EVENT_PATH_MIG_ERR ||
        type == IBV_EVENT_QP_LAST_WQE_REACHED) {
      qp_context = ev.element.qp != nullptr ? ev.element.qp->qp_context : nullptr;
    }
    ibv_ack_async_event(&ev);
    count_async_error(type);

    switch (type) {
      case IBV_EVENT_SRQ_LIMIT_REACHED: {
        // srq_context is the SRQ's DAT handle: looked up, never dereferenced, so an event for
        // an SRQ freed meanwhile is dropped safely.
        if (auto s = Handles::get<Srq>(srq_context)) s->on_limit_reached(srq);
        break;
      }
      case IBV_EVENT_SRQ_ERR: {
        if (auto s = Handles::get<Srq>(srq_context); s && s->srq == srq) {
          DAT_EVENT e{};
          e.event_number = DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR;
          e.event_data.asynch_error_event_data.dat_handle = s->handle();
          e.event_data.asynch_error_event_data.reason = DAT_SRQ_TRANSFER_TO_ERROR;
          deliver_async(e);
        }
        break;
      }
      case IBV_EVENT_DEVICE_FATAL: {
        DAT_EVENT e{};
        e.event_number = DAT_ASYNC_ERROR_IA_CATASTROPHIC;
        e.event_data.asynch_error_event_data.dat_handle = consumer_handle();
        e.event_data.asynch_error_event_data.reason = DAT_IA_CATASTROPHIC_ERROR;
        deliver_async(e);
        break;
      }
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED: {
        // The EP's QP went to the error state (for an SRQ EP, Last WQE Reached says so once
        // the QP takes no more SRQ buffers): the EP is broken, as the OpenFabrics providers
        // report it and dapl2-utils' dtestsrq expects after a disconnect. Once per connection:
        // the connection manager may have reported it already (ep_qp_to_error_locked).
        if (auto ep = Handles::get<Ep>(qp_context)) {
          std::lock_guard<std::mutex> guard(ep->mutex);
          ep_report_broken_locked(*ep);
        }
        break;
      }
      default:
        // CQ events and the informational QP events (COMM_EST, SQ_DRAINED) have no DAT event.
        log_debug("IA {}: verbs async event {} not mapped yet", config_->ia_name,
                  ibv_event_type_str(type));
        break;
    }
  }
}

void Ia::count_async_error(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      counters.add(DCNT_IA_ASYNC_QP_ERROR);
      break;
    case IBV_EVENT_CQ_ERR:
      counters.add(DCNT_IA_ASYNC_CQ_ERROR);
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_DEVICE_FATAL:
      break;
    default:  // informational events (limits, last WQE, port changes) are not errors
      return;
  }
  counters.add(DCNT_IA_ASYNC_ERROR);
}

void Ia::start_async_thread() {
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return;
  async_thread_ = std::thread([this] { async_loop(); });
}

void Ia::stop_async_thread() {
  if (!async_thread_.joinable()) return;
  if (std::this_thread::get_id() == async_thread_.get_id()) {
    // The reader itself dropped the last reference (an event for an object freed meanwhile):
    // it returns to its loop only to find the stop request below.
    async_thread_.detach();
    return;
  }
  uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof(one)) != sizeof(one)) {
    log_warn("IA {}: cannot stop the async reader: {}", config_->ia_name, std::strerror(errno));
  }
  async_thread_.join();
}

void Ia::async_loop() {
  for (;;) {
    pollfd fds[2] = {{context_->async_fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log_error("IA {}: poll on the verbs async fd failed: {}", config_->ia_name,
                std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents & (POLLERR | POLLNVAL)) return;
    if (fds[0].revents & POLLIN) pump_async_events();
  }
}

// ---------------------------------------------------------------------------------------------
// Entry points

namespace api {

DAT_RETURN ia_open(const DAT_NAME_PTR name, DAT_COUNT async_evd_qlen, DAT_EVD_HANDLE* async_evd,
                   DAT_IA_HANDLE* ia_out) {
  const IaConfig* config = find_ia_config(name);
  if (config == nullptr) return dat_error(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
  if (async_evd == nullptr) return invalid_arg(3);
  if (ia_out == nullptr) return invalid_arg(4);

  std::shared_ptr<Evd> shared_async;
  if (*async_evd == DAT_HANDLE_NULL) {
    if (async_evd_qlen <= 0 || async_evd_qlen > kMaxEvdQlen) return invalid_arg(2);
  } else if (*async_evd != DAT_EVD_ASYNC_EXISTS) {
    // An async EVD of another open instance of this IA, to share.
    shared_async = Handles::get<Evd>(*async_evd);
    if (!shared_async || (shared_async->flags() & DAT_EVD_ASYNC_FLAG) == 0 ||
        shared_async->ia()->config() != config) {
      return invalid_handle(DAT_INVALID_HANDLE_EVD_ASYNC);
    }
  }

  select_transport(*config);
  ibv_context* context = open_device(config->device);
  if (context == nullptr) {
    log_error(
        "IA {}: verbs device {} not found (is LD_LIBRARY_PATH at emurdma's "
        "libibverbs.so.1?)",
        config->ia_name, config->device);
    return dat_error(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
  }
  auto ia = std::make_shared<Ia>(config, context);
  if (ibv_query_device(context, ia->mutable_device_attr()) != 0) {
    return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
  }
  ia->build_provider_attrs();
  // The async reader must never block in ibv_get_async_event: it drains until EAGAIN.
  int fl = fcntl(context->async_fd, F_GETFL);
  if (fl < 0 || fcntl(context->async_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    return dat_error(DAT_INTERNAL_ERROR);
  }

  DAT_HANDLE handle = Handles::publish(ia, config->provider);
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);

  if (*async_evd == DAT_HANDLE_NULL) {
    // The consumer's length is a minimum (dat_ia_open's async_evd_min_qlen): asynchronous
    // events come one per EP or SRQ (an SRQ EP reports EP_BROKEN when it disconnects), so
    // the queue gets room for many more and none is lost because the consumer sized it for
    // a few (dtestsrq passes 8 and waits for one EP_BROKEN per connection).
    auto evd =
        std::make_shared<Evd>(ia, std::max(async_evd_qlen, kMinAsyncEvdQlen), DAT_EVD_ASYNC_FLAG);
    DAT_HANDLE evd_handle = evd->ok() ? Handles::publish(evd, config->provider) : DAT_HANDLE_NULL;
    if (evd_handle == DAT_HANDLE_NULL) {
      Handles::retire(handle, Kind::kIa);
      return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
    }
    evd->users.fetch_add(1);  // the IA's: dat_evd_free refuses it until dat_ia_close
    ia->set_async_evd(evd, true);
    *async_evd = evd_handle;
  } else if (shared_async) {
    shared_async->users.fetch_add(1);
    ia->set_async_evd(shared_async, false);
  }
  ia->start_async_thread();
  *ia_out = handle;
  log_debug("IA {} opened on {} (handle {})", config->ia_name, config->device, handle);
  return DAT_SUCCESS;
}

DAT_RETURN ia_query(DAT_IA_HANDLE ia_handle, DAT_EVD_HANDLE* async_evd, DAT_IA_ATTR_MASK ia_mask,
                    DAT_IA_ATTR* ia_attr, DAT_PROVIDER_ATTR_MASK provider_mask,
                    DAT_PROVIDER_ATTR* provider_attr) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (ia_mask != 0 && ia_attr == nullptr) return invalid_arg(4);
  if (provider_mask != 0 && provider_attr == nullptr) return invalid_arg(6);
  if (async_evd != nullptr) {
    std::shared_ptr<Evd> evd = ia->async_evd();
    *async_evd = evd ? evd->handle() : DAT_EVD_OUT_OF_SCOPE;
  }
  // Every field is filled whatever the masks ask: the pages let a provider return more.
  if (ia_attr != nullptr && ia_mask != 0) fill_ia_attr(*ia, ia_attr);
  if (provider_attr != nullptr && provider_mask != 0) fill_provider_attr(*ia, provider_attr);
  return DAT_SUCCESS;
}

DAT_RETURN ia_close(DAT_IA_HANDLE ia_handle, DAT_CLOSE_FLAGS flags) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (raw(flags) != raw(DAT_CLOSE_ABRUPT_FLAG) && raw(flags) != raw(DAT_CLOSE_GRACEFUL_FLAG)) {
    return invalid_arg(2);
  }
  if (flags == DAT_CLOSE_ABRUPT_FLAG) {
    // Connections go first, without the IA's lock (the connection manager may take it).
    for (const auto& child : ia->children_snapshot()) {
      if (child->kind() == Kind::kEp) cm_on_ep_free(*static_cast<Ep*>(child.get()));
    }
  }
  {
    std::lock_guard<std::mutex> guard(ia->mutex());
    std::vector<std::shared_ptr<Object>> children = ia->children();
    if (flags == DAT_CLOSE_GRACEFUL_FLAG && !children.empty()) {
      return invalid_state(DAT_INVALID_STATE_IA_IN_USE);
    }
    // Unpublished first, under the IA's lock: a second close racing this one finds no IA.
    if (!Handles::retire(ia->handle(), Kind::kIa)) return invalid_handle(DAT_INVALID_HANDLE_IA);
    ia->closed = true;
    // Abrupt: free every child, dependants first (EPs, then the connection manager's and the
    // RMR code's objects, SRQ and LMR, then EVD and PZ). The verbs resources go when the last
    // in-flight call on each lets go of it.
    for (Kind kind : {Kind::kEp, Kind::kCr, Kind::kPsp, Kind::kRsp, Kind::kCsp, Kind::kRmr,
                      Kind::kSrq, Kind::kLmr, Kind::kEvd, Kind::kCno, Kind::kPz}) {
      for (const auto& child : children) {
        if (child->kind() != kind) continue;
        Handles::retire(child->handle(), kind);
        if (kind == Kind::kEp) {
          ep_release(*ia, *static_cast<Ep*>(child.get()));
          continue;  // ep_release left the children
        }
        if (kind == Kind::kEvd) static_cast<Evd*>(child.get())->abort();
        if (kind == Kind::kCno) static_cast<Cno*>(child.get())->kill();  // H3: wakes its waiters
        if (kind == Kind::kSrq) static_cast<Srq*>(child.get())->pz()->users.fetch_sub(1);
        if (kind == Kind::kLmr) static_cast<Lmr*>(child.get())->pz()->users.fetch_sub(1);
        ia->remove_child(child.get());
      }
    }
  }
  cm_on_ia_close(*ia);  // H2 (connection manager): stops the IA's CM thread, frees PSP/RSP/CR
  ia->stop_async_thread();
  if (std::shared_ptr<Evd> evd = ia->async_evd()) {
    evd->users.fetch_sub(1);
    if (ia->owns_async_evd()) {
      Handles::retire(evd->handle(), Kind::kEvd);
      evd->abort();
    }
  }
  ia->set_async_evd(nullptr, false);  // breaks the IA <-> async EVD reference cycle
  log_debug("IA {} closed", ia->config()->ia_name);
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
