// Consumer Notification Objects (CNOs): one wake-up for a set of EVDs of one IA.
//
// A CNO is untriggered or triggered. An EVD that has a CNO triggers it when an event arrives
// while the EVD is enabled and nobody waits on it in dat_evd_wait (a waiter on the EVD
// preempts the CNO, as the dat_cno_wait page says). Triggering remembers the EVD (the hint
// dat_cno_wait and dat_cno_trigger return), makes the CNO's eventfd readable and calls the OS
// wait proxy agent once (the page: after it is invoked it is no longer associated). A trigger
// of an already triggered CNO changes nothing but the remembered EVD (the latest one).
// dat_cno_wait and dat_cno_trigger consume the triggered state: the CNO is untriggered again
// and its fd is no longer readable.
//
// Events of an EVD backed by a verbs CQ (DTO and RMR-bind completions) reach its queue only when
// something harvests the CQ: dat_cno_wait harvests the attached ones before it sleeps and every
// millisecond while it sleeps, so a completion triggers the CNO within about a millisecond. The
// fd of dat_cno_fd_create is made readable only by events that reach an EVD's queue (posted
// events, and completions once harvested).
//
// The eventfd is the blocking primitive of dat_cno_wait (a real descriptor wait with a
// timeout) and, for a CNO made by dat_cno_fd_create, the descriptor handed to the consumer to
// poll. A trigger writes it only on the untriggered -> triggered transition.
#pragma once

#include <poll.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "dat_api/core/evd.h"
#include "dat_api/core/ia.h"

namespace dat_api {

class Cno : public Object {
 public:
  static constexpr Kind kKind = Kind::kCno;
  // `fd_proxy`: made by dat_cno_fd_create (its proxy is the eventfd, which the consumer polls).
  Cno(std::shared_ptr<Ia> ia, const DAT_OS_WAIT_PROXY_AGENT& agent, bool fd_proxy);
  ~Cno() override;
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const std::shared_ptr<Ia>& ia() const { return ia_; }

  // An EVD of this CNO received an event it must notify (see the header comment).
  void trigger(DAT_EVD_HANDLE evd);

  // dat_cno_wait: blocks until triggered, the timeout (microseconds) expires, the CNO dies
  // (freed, IA closed) or its last EVD is freed (success with a null handle, as the page says).
  DAT_RETURN wait(DAT_TIMEOUT timeout, DAT_EVD_HANDLE* evd);
  // dat_cno_trigger: the EVD that triggered the CNO (null when it is not triggered), and the
  // CNO untriggered again.
  DAT_EVD_HANDLE take_trigger();

  void query(DAT_CNO_PARAM* out);
  DAT_RETURN modify_agent(const DAT_OS_WAIT_PROXY_AGENT& agent);

  // EVDs feeding this CNO (dat_evd_create, dat_evd_modify_cno, dat_evd_free); dat_cno_free
  // refuses while any is attached. When the last one detaches because it was freed, waiters
  // return with a null handle.
  // The EVD is named by its handle, so that a wait never follows a freed EVD.
  void attach_evd(DAT_EVD_HANDLE evd);
  void detach_evd(DAT_EVD_HANDLE evd, bool evd_freed);
  bool in_use() const { return evds_.load() != 0; }

  // dat_cno_free or dat_ia_close: waiters return DAT_INVALID_STATE (CNO_DEAD).
  void kill();

 private:
  void drain_fd_locked();
  void wake_fd_locked();

  std::shared_ptr<Ia> ia_;
  const bool fd_proxy_;
  int fd_ = -1;
  std::atomic<int> evds_{0};

  // DTO EVDs keep their completions in a verbs CQ until something harvests them: a waiter
  // harvests the attached EVDs that have one and arms their CQs, then sleeps on their
  // completion channels beside fd_. Fills `channels` (at most kMaxWatched; `watched` holds
  // their EVDs alive meanwhile) and returns how many.
  static constexpr size_t kMaxWatched = 16;
  size_t arm_attached(pollfd* channels, std::shared_ptr<Evd>* watched);

  std::mutex mutex_;
  std::vector<DAT_EVD_HANDLE> attached_;
  DAT_OS_WAIT_PROXY_AGENT agent_{};
  bool triggered_ = false;
  DAT_EVD_HANDLE triggered_evd_ = DAT_HANDLE_NULL;
  bool dead_ = false;
  int waiters_ = 0;  // threads in dat_cno_wait
};

// The hooks evd.cpp calls (implemented in cno.cpp).
// The CNO named by `handle` for an EVD of `ia`: null handle -> ok with null; a handle that is
// not a live CNO of that IA -> DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_CNO).
DAT_RETURN cno_for_evd(DAT_CNO_HANDLE handle, const Ia& ia, std::shared_ptr<Cno>* out);

namespace api {
// cno.cpp: the dat_cno_* entry points (their DAT_PROVIDER slots are filled in
// rmr_cno_provider_slots.cpp).
DAT_RETURN cno_create(DAT_IA_HANDLE ia, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE* cno);
DAT_RETURN cno_fd_create(DAT_IA_HANDLE ia, DAT_FD* fd, DAT_CNO_HANDLE* cno);
DAT_RETURN cno_modify_agent(DAT_CNO_HANDLE cno, DAT_OS_WAIT_PROXY_AGENT agent);
DAT_RETURN cno_query(DAT_CNO_HANDLE cno, DAT_CNO_PARAM_MASK mask, DAT_CNO_PARAM* param);
DAT_RETURN cno_free(DAT_CNO_HANDLE cno);
DAT_RETURN cno_wait(DAT_CNO_HANDLE cno, DAT_TIMEOUT timeout, DAT_EVD_HANDLE* evd);
DAT_RETURN cno_trigger(DAT_CNO_HANDLE cno, DAT_EVD_HANDLE* evd);
}  // namespace api

}  // namespace dat_api
