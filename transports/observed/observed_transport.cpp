#include "transports/observed/observed_transport.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace transports {

namespace {

// An inbound payload read by the engine, of which the first bytes (as many as the tap wants)
// are kept for the tap as they pass.
class TeePayload final : public PayloadSource {
 public:
  TeePayload(PayloadSource& inner, std::vector<uint8_t>& kept, size_t wanted)
      : PayloadSource(inner.discarded()), inner_(inner), kept_(kept), wanted_(wanted) {
    kept_.clear();
  }
  size_t size() const override { return inner_.size(); }
  void read(void* dst, size_t len) override {
    inner_.read(dst, len);
    const size_t keep = std::min(len, wanted_ - kept_.size());
    if (keep != 0 && !discarded()) {
      const auto* p = static_cast<const uint8_t*>(dst);
      kept_.insert(kept_.end(), p, p + keep);
    }
  }
  void skip(size_t len) override { inner_.skip(len); }
  bool commit_read() override { return inner_.commit_read(); }

 private:
  PayloadSource& inner_;
  std::vector<uint8_t>& kept_;
  size_t wanted_;
};

size_t iov_bytes(const iovec* iov, size_t iovcnt) {
  size_t n = 0;
  for (size_t i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

}  // namespace

ObservedTransport::ObservedTransport(std::unique_ptr<Transport> inner,
                                     std::unique_ptr<FrameTap> tap,
                                     std::unique_ptr<LinkFaultPolicy> faults)
    : inner_(std::move(inner)),
      gid_(inner_->local_gid()),
      tap_(std::move(tap)),
      faults_(std::move(faults)),
      held_([this](HeldFrame& f) { deliver_held(f); }) {}

ObservedTransport::~ObservedTransport() {
  inner_->set_sink(nullptr);
  held_.stop();
  // The wrappers let go of their inner links before the inner transport goes: a link must not
  // outlive its transport (a TCP link's timers live in the transport's io_context), as the
  // transport's own table of links does not. The tap goes last.
  {
    std::lock_guard lock(links_mutex_);
    links_.clear();
  }
  inner_.reset();
}

void ObservedTransport::set_sink(FrameSink* sink) {
  if (sink == nullptr) {
    // No delivery may start once this returns: the inner transport's first, then held frames.
    inner_->set_sink(nullptr);
    held_.stop();
    sink_.store(nullptr, std::memory_order_release);
    return;
  }
  sink_.store(sink, std::memory_order_release);
  inner_->set_sink(this);
}

std::shared_ptr<ObservedLink> ObservedTransport::wrap(Link& inner, std::shared_ptr<Link> owner) {
  std::lock_guard lock(links_mutex_);
  auto [it, added] = links_.try_emplace(inner.id());
  if (added) {
    it->second = std::make_shared<ObservedLink>(*this, inner, std::move(owner), next_ordinal_++);
  } else if (owner) {
    it->second->adopt(std::move(owner));
  }
  return it->second;
}

std::shared_ptr<Link> ObservedTransport::connect(const Gid& peer) {
  std::shared_ptr<Link> inner = inner_->connect(peer);
  if (!inner) return nullptr;
  Link& ref = *inner;
  return wrap(ref, std::move(inner));
}

ObservedLink& ObservedTransport::wrapper_of(Link& inner) {
  struct Last {
    const ObservedTransport* owner = nullptr;
    uint64_t inner_id = 0;
    uint64_t forgotten = 0;
    ObservedLink* link = nullptr;
  };
  thread_local Last last;
  const uint64_t forgotten = links_forgotten_.load(std::memory_order_acquire);
  if (last.owner == this && last.inner_id == inner.id() && last.forgotten == forgotten) {
    return *last.link;
  }
  std::shared_ptr<ObservedLink> w = wrap(inner, inner.shared());
  last = Last{this, inner.id(), forgotten, w.get()};
  return *w;
}

bool ObservedTransport::send_on(ObservedLink& link, const FrameHeader& header, const iovec* iov,
                                size_t iovcnt) {
  if (faults_ && faults_->outbound_lost(link.ordinal(), header, LinkFaultPolicy::Clock::now())) {
    return true;  // taken, and lost on the way: the link is down in the plan
  }
  if (!link.inner().send(header, iov, iovcnt)) return false;
  if (tap_) {
    const TappedFrame f{TapDirection::kOutbound, &gid_, &link.peer(), &header, iov, iovcnt,
                        iov_bytes(iov, iovcnt)};
    tap_->frame(f);
  }
  return true;
}

bool ObservedLink::send(const FrameHeader& header, const iovec* iov, size_t iovcnt) {
  return owner_.send_on(*this, header, iov, iovcnt);
}

void ObservedTransport::deliver(ObservedLink& link, const FrameHeader& header,
                                PayloadSource& payload) {
  FrameSink* sink = sink_.load(std::memory_order_acquire);
  if (sink == nullptr) return;
  if (!tap_) {
    sink->on_frame(link, header, payload);
    return;
  }
  thread_local std::vector<uint8_t> kept;
  const size_t length = payload.size();
  TeePayload tee(payload, kept, std::min(length, tap_->payload_bytes_wanted()));
  sink->on_frame(link, header, tee);
  const iovec shown{kept.data(), kept.size()};
  const TappedFrame f{TapDirection::kInbound, &gid_, &link.peer(), &header, &shown, 1, length};
  tap_->frame(f);
}

bool ObservedTransport::copy_payload(PayloadSource& payload, std::vector<uint8_t>* out) {
  out->resize(payload.size());
  payload.read(out->data(), out->size());
  return !payload.discarded() && payload.commit_read();
}

void ObservedTransport::on_frame(Link& from, const FrameHeader& header, PayloadSource& payload) {
  ObservedLink& link = wrapper_of(from);
  if (!faults_) {
    deliver(link, header, payload);
    return;
  }
  const FaultVerdict v = faults_->inbound(link.ordinal(), header, LinkFaultPolicy::Clock::now());
  if (v.drop) return;  // the transport discards what is left unread
  const bool hold = (v.reorder || v.delay.count() > 0) && link.owns_inner();
  if (!hold && !v.duplicate) {
    deliver(link, header, payload);
  } else {
    HeldFrame copy;
    copy.header = header;
    // A payload the transport discarded, or withdrew while it was copied, is a lost frame.
    if (!copy_payload(payload, &copy.payload)) return;
    if (hold) {
      copy.link = link.shared_from_this();
      copy.after_next = v.reorder;
      // A reordered frame waits for the link's next one, but not for ever.
      copy.due = LinkFaultPolicy::Clock::now() +
                 (v.reorder ? std::max<std::chrono::nanoseconds>(v.delay, kReorderLimit) : v.delay);
      if (v.duplicate) {
        LocalPayload first(copy.payload.data(), copy.payload.size());
        deliver(link, header, first);
      }
      held_.hold(std::move(copy));
    } else {
      for (int i = 0; i < 2; ++i) {
        LocalPayload p(copy.payload.data(), copy.payload.size());
        deliver(link, header, p);
      }
    }
  }
  if (held_.any_after_next()) held_.release_after_next(link.ordinal());
}

void ObservedTransport::deliver_held(HeldFrame& frame) {
  LocalPayload p(frame.payload.data(), frame.payload.size());
  deliver(*frame.link, frame.header, p);
}

bool ObservedTransport::direct_target(Link& from, const FrameHeader& header, DirectTarget* target) {
  // A frame the plan may still lose or hold must not have written its payload into the
  // target before that is decided: it goes through the transport's buffer instead.
  if (faults_) return false;
  FrameSink* sink = sink_.load(std::memory_order_acquire);
  return sink != nullptr && sink->direct_target(wrapper_of(from), header, target);
}

uint64_t ObservedTransport::payload_room(Link& from, const FrameHeader& header) {
  FrameSink* sink = sink_.load(std::memory_order_acquire);
  return sink == nullptr ? 0 : sink->payload_room(wrapper_of(from), header);
}

bool ObservedTransport::hold_region(uint32_t region_key) {
  FrameSink* sink = sink_.load(std::memory_order_acquire);
  return sink != nullptr && sink->hold_region(region_key);
}

void ObservedTransport::release_region(uint32_t region_key) {
  if (FrameSink* sink = sink_.load(std::memory_order_acquire)) sink->release_region(region_key);
}

bool ObservedTransport::poll_satisfied() const {
  FrameSink* sink = sink_.load(std::memory_order_acquire);
  return sink != nullptr && sink->poll_satisfied();
}

bool ObservedTransport::in_program_poll() const {
  FrameSink* sink = sink_.load(std::memory_order_acquire);
  return sink != nullptr && sink->in_program_poll();
}

void ObservedTransport::on_link_down(Link& link) {
  ObservedLink& w = wrapper_of(link);
  std::shared_ptr<ObservedLink> keep = w.shared_from_this();
  held_.forget(w.ordinal());
  if (FrameSink* sink = sink_.load(std::memory_order_acquire)) sink->on_link_down(w);
  std::lock_guard lock(links_mutex_);
  links_.erase(link.id());
  links_forgotten_.fetch_add(1, std::memory_order_release);
}

}  // namespace transports
