// An open device context: the factory and owner of PDs, MRs, CQs, SRQs, QPs and AHs, and the
// queue of its asynchronous events. Every call validates its arguments and returns 0 or the
// errno value rdma-core documents for the failure.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "emu/async_events.h"
#include "emu/objects.h"

namespace emu {

class Node;
class Cq;
class CompChannel;
class Srq;
class Qp;
struct Mw;

class Context {
 public:
  explicit Context(Node& node);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Node& node() { return node_; }

  static const ibv_device_attr& device_attr();
  int query_port(uint8_t port_num, ibv_port_attr* out) const;
  int query_gid(uint8_t port_num, int index, ibv_gid* out) const;
  int query_pkey(uint8_t port_num, int index, uint16_t* out) const;

  int alloc_pd(Pd** out);
  int dealloc_pd(Pd* pd);

  int reg_mr(Pd* pd, void* addr, size_t length, int access, Mr** out);
  int dereg_mr(Mr* mr);
  // ibv_rereg_mr(3) in place: the keys stay; on failure the region is unchanged.
  int rereg_mr(Mr* mr, int flags, Pd* pd, void* addr, size_t length, int access);

  // Shared PD import (ibv_import_pd(3), ibv_import_mr(3)): a handle names a PD (its `handle`)
  // or an MR (its lkey) of this context; ENOENT when it names none. Each import is one more
  // owner: dealloc_pd / dereg_mr by any owner, or unimport, releases one share, and the last
  // owner's dealloc / dereg destroys the object (EBUSY while it is in use, as for any).
  int import_pd(uint32_t handle, Pd** out);
  int import_mr(Pd* pd, uint32_t handle, Mr** out);
  void unimport_pd(Pd* pd);
  void unimport_mr(Mr* mr);

  // Memory windows (mw.h).
  int alloc_mw(Pd* pd, ibv_mw_type type, Mw** out);
  int dealloc_mw(Mw* mw);

  int create_comp_channel(CompChannel** out);
  int destroy_comp_channel(CompChannel* channel);

  int create_cq(int cqe, void* cq_context, CompChannel* channel, int comp_vector, Cq** out);
  int destroy_cq(Cq* cq);

  int create_srq(Pd* pd, const ibv_srq_init_attr& init, Srq** out);
  int destroy_srq(Srq* srq);

  int create_qp(Pd* pd, const QpInitAttr& init, Qp** out);
  int destroy_qp(Qp* qp);

  int create_ah(Pd* pd, const ibv_ah_attr& attr, Ah** out);
  int destroy_ah(Ah* ah);

  AsyncEventQueue& async_events() { return async_events_; }
  void raise(const AsyncEvent& event) { async_events_.push(event); }

 private:
  Node& node_;
  AsyncEventQueue async_events_;
  std::mutex objects_mutex_;  // creation and destruction only
  std::vector<std::unique_ptr<Srq>> retired_srqs_;
  // Under objects_mutex_: the handles imports look up, and the owners each import added.
  bool release_import_share(const void* object);
  int destroy_pd_locked(Pd* pd);
  std::unordered_map<uint32_t, Pd*> pds_by_handle_;
  std::unordered_map<uint32_t, Mr*> mrs_by_handle_;
  std::unordered_map<const void*, int> import_shares_;
  uint32_t next_pd_handle_ = 0;
  int pd_count_ = 0, mr_count_ = 0, cq_count_ = 0, srq_count_ = 0, qp_count_ = 0, ah_count_ = 0,
      mw_count_ = 0;
};

}  // namespace emu
