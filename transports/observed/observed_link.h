// A link of the observing transport: the inner transport's link, shown to the engine under a
// wrapper of its own so that every frame sent on it passes the tap and the fault plan.
#pragma once

#include <memory>
#include <mutex>

#include "transports/common/engine_interface.h"

namespace transports {

class ObservedTransport;

class ObservedLink final : public Link, public std::enable_shared_from_this<ObservedLink> {
 public:
  // inner_owner may be null (a link of a test double, not owned by a shared_ptr): the wrapper
  // then uses `inner` only while the inner transport delivers on it.
  ObservedLink(ObservedTransport& owner, Link& inner, std::shared_ptr<Link> inner_owner,
               uint32_t ordinal)
      : owner_(owner), inner_(inner), inner_owner_(std::move(inner_owner)), ordinal_(ordinal) {}

  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) override;
  const Gid& peer() const override { return inner_.peer(); }
  bool up() const override { return inner_.up(); }
  bool farewell() const override { return inner_.farewell(); }
  bool backlogged() const override { return inner_.backlogged(); }
  bool frames_unread() override { return inner_.frames_unread(); }
  std::shared_ptr<Link> shared() override { return weak_from_this().lock(); }

  uint32_t ordinal() const { return ordinal_; }
  Link& inner() { return inner_; }
  // Whether the wrapper keeps its inner link alive: only then may frames of it be held and
  // delivered later, outside the inner transport's own delivery.
  bool owns_inner() const {
    std::lock_guard lock(owner_mutex_);
    return inner_owner_ != nullptr;
  }
  void adopt(std::shared_ptr<Link> inner_owner) {
    std::lock_guard lock(owner_mutex_);
    if (!inner_owner_) inner_owner_ = std::move(inner_owner);
  }

 private:
  ObservedTransport& owner_;
  Link& inner_;
  mutable std::mutex owner_mutex_;
  std::shared_ptr<Link> inner_owner_;
  const uint32_t ordinal_;
};

}  // namespace transports
