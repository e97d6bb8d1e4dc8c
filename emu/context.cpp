#include "emu/context.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/process_maps.h"
#include "emu/comp_channel.h"
#include "emu/cq.h"
#include "emu/device_profile.h"
#include "emu/limits.h"
#include "emu/mw.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"

namespace emu {

namespace {

constexpr int kSupportedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_MW_BIND;

// Registration pins memory in the kernel (ib_umem_get), which fails with EFAULT unless every
// page is mapped readable, and writable when the region grants any write access. The
// mappings and their permissions are this process's (a slow path, as in the kernel).
bool range_is_accessible(const void* addr, size_t length, bool need_write) {
  if (length == 0) return true;
  uintptr_t want = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = want + length;
  bool ok = false;
  const bool read =
      base::visit_mappings(want, base::MapsSource::kAny, [&](const base::ProcessMapping& mapping) {
        // A hole before the rest of the range, or a mapping without the access: refused.
        if (mapping.begin > want || !mapping.readable || (need_write && !mapping.writable)) {
          return false;
        }
        want = mapping.end;
        ok = want >= end;
        return !ok;
      });
  return ok || !read;  // mappings that cannot be read: let the access itself decide
}

// A profile (device_profile.h) may advertise lower limits than the engine's own; they are
// enforced as a device enforces what it advertises. As rxe does, the receive queue's limits
// do not apply to a QP whose receives come from an SRQ.
bool within_profile(const QpInitAttr& init) {
  const ibv_device_attr& limits = Context::device_attr();
  const auto max_wr = static_cast<uint32_t>(limits.max_qp_wr);
  const auto max_sge = static_cast<uint32_t>(limits.max_sge);
  if (init.cap.max_send_wr > max_wr || init.cap.max_send_sge > max_sge) return false;
  return init.srq != nullptr ||
         (init.cap.max_recv_wr <= max_wr && init.cap.max_recv_sge <= max_sge);
}

}  // namespace

Context::Context(Node& node) : node_(node) {
  node_.add_context(this);
}

Context::~Context() {
  node_.remove_context(this);
}

const ibv_device_attr& Context::device_attr() {
  return active_profile().attr;
}

int Context::query_port(uint8_t port_num, ibv_port_attr* out) const {
  if (port_num != 1 || out == nullptr) return EINVAL;
  *out = ibv_port_attr{};
  out->state = IBV_PORT_ACTIVE;
  out->max_mtu = IBV_MTU_4096;
  out->active_mtu = IBV_MTU_4096;
  out->gid_tbl_len = kGidTableLength;
  const PortProfile& profile = active_profile().port;
  out->port_cap_flags = profile.port_cap_flags;
  out->max_msg_sz = profile.max_msg_sz;
  out->bad_pkey_cntr = 0;
  out->qkey_viol_cntr = 0;
  out->pkey_tbl_len = 1;
  out->lid = 0;  // RoCE: no LIDs
  out->sm_lid = 0;
  out->lmc = 0;
  out->max_vl_num = 1;
  out->sm_sl = 0;
  out->subnet_timeout = 0;
  out->init_type_reply = 0;
  out->active_width = profile.active_width;
  out->active_speed = profile.active_speed;
  out->phys_state = 5;  // LinkUp
  out->link_layer = IBV_LINK_LAYER_ETHERNET;
  out->flags = IBV_QPF_GRH_REQUIRED;  // as every RoCE port reports: the GID is the address
  return 0;
}

int Context::query_gid(uint8_t port_num, int index, ibv_gid* out) const {
  if (port_num != 1 || index < 0 || static_cast<uint32_t>(index) >= kGidTableLength ||
      out == nullptr)
    return EINVAL;
  if (index != 0) {
    *out = ibv_gid{};  // an empty entry reads as zeros, as the kernel's sysfs gives it
    return 0;
  }
  Gid gid = node_.gid();
  std::memcpy(out->raw, gid.raw.data(), sizeof(out->raw));
  return 0;
}

int Context::query_pkey(uint8_t port_num, int index, uint16_t* out) const {
  if (port_num != 1 || index != 0 || out == nullptr) return EINVAL;
  *out = 0xffff;  // the default full-membership partition
  return 0;
}

int Context::alloc_pd(Pd** out) {
  if (out == nullptr) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  if (pd_count_ >= device_attr().max_pd) return ENOMEM;
  auto* pd = new Pd(*this);
  do {
    pd->handle = ++next_pd_handle_;
  } while (pds_by_handle_.count(pd->handle) != 0);  // after a wrap, skip the live ones
  pds_by_handle_.emplace(pd->handle, pd);
  *out = pd;
  ++pd_count_;
  return 0;
}

int Context::dealloc_pd(Pd* pd) {
  if (pd == nullptr || &pd->context != this) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  if (release_import_share(pd)) return 0;  // another owner keeps it
  return destroy_pd_locked(pd);
}

int Context::destroy_pd_locked(Pd* pd) {
  if (pd->use_count.load() != 0) return EBUSY;
  pds_by_handle_.erase(pd->handle);
  delete pd;
  --pd_count_;
  return 0;
}

bool Context::release_import_share(const void* object) {
  auto it = import_shares_.find(object);
  if (it == import_shares_.end()) return false;
  if (--it->second == 0) import_shares_.erase(it);
  return true;
}

int Context::import_pd(uint32_t handle, Pd** out) {
  if (out == nullptr) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  auto it = pds_by_handle_.find(handle);
  if (it == pds_by_handle_.end()) return ENOENT;
  ++import_shares_[it->second];
  *out = it->second;
  return 0;
}

int Context::import_mr(Pd* pd, uint32_t handle, Mr** out) {
  if (pd == nullptr || out == nullptr || &pd->context != this) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  auto it = mrs_by_handle_.find(handle);
  if (it == mrs_by_handle_.end()) return ENOENT;
  if (it->second->pd != pd) return EINVAL;  // the region belongs to another PD
  ++import_shares_[it->second];
  *out = it->second;
  return 0;
}

void Context::unimport_pd(Pd* pd) {
  if (pd == nullptr || &pd->context != this) return;
  std::lock_guard lock(objects_mutex_);
  // The last owner leaving by unimport (the others deallocated it) destroys it if it can.
  if (!release_import_share(pd)) destroy_pd_locked(pd);
}

void Context::unimport_mr(Mr* mr) {
  if (mr == nullptr || mr->pd == nullptr || &mr->pd->context != this) return;
  {
    std::lock_guard lock(objects_mutex_);
    if (release_import_share(mr)) return;
  }
  dereg_mr(mr);  // the last owner
}

namespace {

// The checks of ibv_reg_mr(3) on a region's access and memory, shared with rereg_mr; on
// success *required is the access the region keeps.
int check_region_request(const void* addr, size_t length, int access, int* required) {
  // Optional access bits (IBV_ACCESS_OPTIONAL_RANGE) may be ignored by a device, as rdma-core
  // documents; any other unknown bit is refused.
  *required = access & ~IBV_ACCESS_OPTIONAL_RANGE;
  if ((*required & ~kSupportedAccess) != 0) return EINVAL;
  if ((*required & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(*required & IBV_ACCESS_LOCAL_WRITE)) {
    return EINVAL;  // ibv_reg_mr(3): remote write or atomic requires local write
  }
  uint64_t begin = reinterpret_cast<uint64_t>(addr);
  if (length > Context::device_attr().max_mr_size || begin + length < begin) return EINVAL;
  if (addr == nullptr && length != 0) return EFAULT;
  const bool writable =
      (*required & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) !=
      0;
  if (!range_is_accessible(addr, length, writable)) return EFAULT;
  return 0;
}

}  // namespace

int Context::reg_mr(Pd* pd, void* addr, size_t length, int access, Mr** out) {
  if (pd == nullptr || out == nullptr || &pd->context != this) return EINVAL;
  int required = 0;
  if (int err = check_region_request(addr, length, access, &required)) return err;
  uint64_t begin = reinterpret_cast<uint64_t>(addr);

  auto mr = std::make_unique<Mr>();
  mr->pd = pd;
  mr->addr = begin;
  mr->length = length;
  mr->access = required;
  uint32_t key = node_.mrs().insert(*mr);
  if (key == 0) return ENOMEM;
  mr->lkey = key;
  mr->rkey = key;
  mr->transport_token = node_.register_memory(addr, length);
  pd->use_count.fetch_add(1);
  {
    std::lock_guard lock(objects_mutex_);
    ++mr_count_;
    mrs_by_handle_.emplace(key, mr.get());
  }
  *out = mr.release();
  return 0;
}

int Context::dereg_mr(Mr* mr) {
  if (mr == nullptr || mr->pd == nullptr || &mr->pd->context != this) return EINVAL;
  {
    std::lock_guard lock(objects_mutex_);
    if (release_import_share(mr)) return 0;                    // another owner keeps it
    if (node_.mrs().window_refs(mr->lkey) != 0) return EBUSY;  // windows are bound to it (mw.h)
    mrs_by_handle_.erase(mr->lkey);
  }
  node_.mrs().remove(mr->lkey);
  // A transport may still be sending a READ response straight from the region (zero copy):
  // the program may unmap it as soon as we return.
  node_.release_payloads(Transport::Release::kWait, Transport::kEveryQp);
  if (mr->transport_token != 0) node_.unregister_memory(mr->transport_token);
  mr->pd->use_count.fetch_sub(1);
  delete mr;
  std::lock_guard lock(objects_mutex_);
  --mr_count_;
  return 0;
}

int Context::rereg_mr(Mr* mr, int flags, Pd* pd, void* addr, size_t length, int access) {
  if (mr == nullptr || mr->pd == nullptr || &mr->pd->context != this) return EINVAL;
  constexpr int kFlags =
      IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if (flags == 0 || (flags & ~kFlags) != 0) return EINVAL;
  Mr next = *mr;
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    if (pd == nullptr || &pd->context != this) return EINVAL;
    next.pd = pd;
  }
  const bool translate = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
  if (translate) {
    next.addr = reinterpret_cast<uint64_t>(addr);
    next.length = length;
  }
  const int wanted = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : mr->access;
  if (int err = check_region_request(reinterpret_cast<void*>(next.addr), next.length, wanted,
                                     &next.access)) {
    return err;
  }
  if (translate) next.transport_token = node_.register_memory(addr, length);
  if (int err = node_.mrs().reregister(mr->lkey, next)) {
    if (translate && next.transport_token != 0) node_.unregister_memory(next.transport_token);
    return err;
  }
  if (translate) {
    // A READ response may still be sent straight from the old memory (zero copy): the program
    // may unmap it as soon as we return.
    node_.release_payloads(Transport::Release::kWait, Transport::kEveryQp);
    if (mr->transport_token != 0) node_.unregister_memory(mr->transport_token);
  }
  if (next.pd != mr->pd) {
    next.pd->use_count.fetch_add(1);
    mr->pd->use_count.fetch_sub(1);
  }
  *mr = next;
  return 0;
}

int Context::alloc_mw(Pd* pd, ibv_mw_type type, Mw** out) {
  if (pd == nullptr || out == nullptr || &pd->context != this) return EINVAL;
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return EINVAL;
  {
    std::lock_guard lock(objects_mutex_);
    if (mw_count_ >= device_attr().max_mw) return ENOMEM;
    ++mw_count_;
  }
  auto mw = std::make_unique<Mw>();
  mw->pd = pd;
  mw->type = type;
  uint32_t key = node_.mrs().insert_window(pd);
  if (key == 0) {
    std::lock_guard lock(objects_mutex_);
    --mw_count_;
    return ENOMEM;
  }
  mw->rkey.store(key);
  mw->ibv.rkey = key;  // the verbs layer fills in the rest of ibv
  mw->ibv.type = type;
  pd->use_count.fetch_add(1);
  *out = mw.release();
  return 0;
}

int Context::dealloc_mw(Mw* mw) {
  if (mw == nullptr || mw->pd == nullptr || &mw->pd->context != this) return EINVAL;
  node_.mrs().remove(mw->rkey.load());  // unbinds it: its rkey answers no more
  // A READ response may still be sent from the window's memory.
  node_.release_payloads(Transport::Release::kWait, Transport::kEveryQp);
  mw->pd->use_count.fetch_sub(1);
  delete mw;
  std::lock_guard lock(objects_mutex_);
  --mw_count_;
  return 0;
}

int Context::create_comp_channel(CompChannel** out) {
  if (out == nullptr) return EINVAL;
  *out = new CompChannel();
  return 0;
}

int Context::destroy_comp_channel(CompChannel* channel) {
  if (channel == nullptr) return EINVAL;
  if (channel->use_count.load() != 0) return EBUSY;
  delete channel;
  return 0;
}

int Context::create_cq(int cqe, void* cq_context, CompChannel* channel, int comp_vector, Cq** out) {
  if (out == nullptr || cqe < 1 || cqe > device_attr().max_cqe) return EINVAL;
  if (comp_vector != 0) return EINVAL;  // one completion vector
  std::lock_guard lock(objects_mutex_);
  if (cq_count_ >= device_attr().max_cq) return ENOMEM;
  *out = new Cq(*this, static_cast<uint32_t>(cqe), channel, cq_context);
  if (channel != nullptr) channel->use_count.fetch_add(1);
  ++cq_count_;
  return 0;
}

int Context::destroy_cq(Cq* cq) {
  if (cq == nullptr || &cq->context() != this) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  if (cq->use_count.load() != 0) return EBUSY;
  cq->drain_for_destroy();
  // Notifications and events still queued for it would hand the program a freed CQ.
  if (cq->channel() != nullptr) {
    cq->channel()->forget(cq);
    cq->channel()->use_count.fetch_sub(1);
  }
  async_events_.forget(cq);
  delete cq;
  --cq_count_;
  return 0;
}

int Context::create_srq(Pd* pd, const ibv_srq_init_attr& init, Srq** out) {
  if (pd == nullptr || out == nullptr || &pd->context != this) return EINVAL;
  const ibv_srq_attr& a = init.attr;
  const ibv_device_attr& limits = device_attr();
  if (a.max_wr == 0 || a.max_wr > static_cast<uint32_t>(limits.max_srq_wr) || a.max_sge == 0 ||
      a.max_sge > static_cast<uint32_t>(limits.max_srq_sge)) {
    return EINVAL;
  }
  if (a.srq_limit > a.max_wr) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  if (srq_count_ >= limits.max_srq) return ENOMEM;
  auto* srq = new Srq(*this, pd, a.max_wr, a.max_sge, init.srq_context);
  if (a.srq_limit != 0) {
    ibv_srq_attr arm{};
    arm.srq_limit = a.srq_limit;
    srq->modify(arm, IBV_SRQ_LIMIT);
  }
  pd->use_count.fetch_add(1);
  ++srq_count_;
  *out = srq;
  return 0;
}

int Context::destroy_srq(Srq* srq) {
  if (srq == nullptr || &srq->context() != this) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  if (srq->use_count.load() != 0) return EBUSY;
  // Completions still in CQs keep a pointer to the SRQ for its accounting; they are
  // reaped or dropped with the CQ, so the SRQ must outlive them: it is retired, not freed,
  // and the memory goes when the context closes.
  srq->pd()->use_count.fetch_sub(1);
  async_events_.forget(srq);  // its queued events (SRQ_LIMIT_REACHED) go with it
  srq->stop_counting();
  retired_srqs_.emplace_back(srq);
  --srq_count_;
  return 0;
}

int Context::create_qp(Pd* pd, const QpInitAttr& init, Qp** out) {
  if (pd == nullptr || out == nullptr || &pd->context != this) return EINVAL;
  if (int err = Qp::check_init_attr(init)) return err;
  if (!within_profile(init)) return EINVAL;
  if (&init.send_cq->context() != this || &init.recv_cq->context() != this) return EINVAL;
  if (init.srq != nullptr && &init.srq->context() != this) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  if (qp_count_ >= device_attr().max_qp) return ENOMEM;
  auto qp = std::make_unique<Qp>(*this, pd, init);
  uint32_t qpn = node_.register_qp(qp.get());
  if (qpn == 0) return ENOMEM;
  pd->use_count.fetch_add(1);
  init.send_cq->use_count.fetch_add(1);
  init.recv_cq->use_count.fetch_add(1);
  if (init.srq != nullptr) init.srq->use_count.fetch_add(1);
  ++qp_count_;
  *out = qp.release();
  return 0;
}

int Context::destroy_qp(Qp* qp) {
  if (qp == nullptr || &qp->context() != this) return EINVAL;
  node_.unregister_qp(qp->qpn());
  // Its completions still queued go with it, as mlx4 and mlx5 clean their CQs at destroy: a
  // program never reads a completion of a QP it freed (libfabric's rxm, closing a connection,
  // reads the CQ once more and would repost a receive buffer into the freed endpoint).
  qp->send_cq()->discard_qp(qp->qpn());
  if (qp->recv_cq() != qp->send_cq()) qp->recv_cq()->discard_qp(qp->qpn());
  std::lock_guard lock(objects_mutex_);
  qp->pd()->use_count.fetch_sub(1);
  qp->send_cq()->use_count.fetch_sub(1);
  qp->recv_cq()->use_count.fetch_sub(1);
  if (qp->srq() != nullptr) qp->srq()->use_count.fetch_sub(1);
  async_events_.forget(qp);  // its queued events would name a freed QP
  delete qp;
  --qp_count_;
  return 0;
}

int Context::create_ah(Pd* pd, const ibv_ah_attr& attr, Ah** out) {
  if (pd == nullptr || out == nullptr || &pd->context != this) return EINVAL;
  if (attr.port_num != 1) return EINVAL;
  // RoCE needs a GRH: the destination GID is the only address there is.
  if (!attr.is_global || attr.grh.sgid_index != 0) return EINVAL;
  Gid gid;
  std::memcpy(gid.raw.data(), attr.grh.dgid.raw, gid.raw.size());
  auto link = node_.link_to(gid);
  if (!link) return EHOSTUNREACH;
  std::lock_guard lock(objects_mutex_);
  if (ah_count_ >= device_attr().max_ah) return ENOMEM;
  auto* ah = new Ah();
  ah->pd = pd;
  ah->attr = attr;
  ah->link = std::move(link);
  pd->use_count.fetch_add(1);
  ++ah_count_;
  *out = ah;
  return 0;
}

int Context::destroy_ah(Ah* ah) {
  if (ah == nullptr || ah->pd == nullptr || &ah->pd->context != this) return EINVAL;
  std::lock_guard lock(objects_mutex_);
  ah->pd->use_count.fetch_sub(1);
  delete ah;
  --ah_count_;
  return 0;
}

}  // namespace emu
