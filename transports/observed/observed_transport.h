// The observing transport: wraps the process's transport when a frame tap (EMURDMA_PCAP) or a
// fault plan (EMURDMA_FAULTS) is configured, and only then, so that neither costs anything
// otherwise. Every frame sent passes the tap after the inner link took it; every frame
// received is judged by the plan (lost, delivered twice, held back) below the engine's
// reliability layer, so that RC retransmission, timeouts and flushes run for real, and each
// delivery passes the tap. Links are wrapped one to one (ObservedLink): the engine sees only
// wrappers, in frames, link-downs and connect().
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transports/common/engine_interface.h"
#include "transports/observed/fault_policy.h"
#include "transports/observed/frame_tap.h"
#include "transports/observed/held_frames.h"
#include "transports/observed/observed_link.h"

namespace transports {

class ObservedTransport final : public Transport, private FrameSink {
 public:
  // tap and faults may each be null (not both, or there is nothing to observe).
  ObservedTransport(std::unique_ptr<Transport> inner, std::unique_ptr<FrameTap> tap,
                    std::unique_ptr<LinkFaultPolicy> faults);
  ~ObservedTransport() override;

  Transport& inner() { return *inner_; }
  LinkFaultPolicy* faults() { return faults_.get(); }

  // Transport
  std::string name() const override { return inner_->name(); }
  Gid local_gid() const override { return gid_; }
  void set_sink(FrameSink* sink) override;
  std::shared_ptr<Link> connect(const Gid& peer) override;
  size_t progress() override { return inner_->progress(); }
  void poll_found_nothing() override { inner_->poll_found_nothing(); }
  void send_held() override { inner_->send_held(); }
  void finish_deliveries() override { inner_->finish_deliveries(); }
  void release_payloads(Release how, uint32_t qpn) override { inner_->release_payloads(how, qpn); }
  uint64_t register_memory(const void* addr, size_t length) override {
    return inner_->register_memory(addr, length);
  }
  void unregister_memory(uint64_t token) override { inner_->unregister_memory(token); }

  // The longest a reordered frame waits for the link's next frame.
  static constexpr std::chrono::milliseconds kReorderLimit{2};

  // ObservedLink::send
  bool send_on(ObservedLink& link, const FrameHeader& header, const iovec* iov, size_t iovcnt);

 private:
  // FrameSink (the inner transport's)
  void on_frame(Link& from, const FrameHeader& header, PayloadSource& payload) override;
  bool direct_target(Link& from, const FrameHeader& header, DirectTarget* target) override;
  uint64_t payload_room(Link& from, const FrameHeader& header) override;
  bool hold_region(uint32_t region_key) override;
  void release_region(uint32_t region_key) override;
  bool poll_satisfied() const override;
  bool in_program_poll() const override;
  void on_link_down(Link& link) override;

  // The wrapper of an inner link, made the first time the link is seen.
  ObservedLink& wrapper_of(Link& inner);
  std::shared_ptr<ObservedLink> wrap(Link& inner, std::shared_ptr<Link> owner);
  // Hands one frame to the engine and shows it to the tap.
  void deliver(ObservedLink& link, const FrameHeader& header, PayloadSource& payload);
  void deliver_held(HeldFrame& frame);
  // Reads the whole payload into a copy; false when the frame is lost meanwhile.
  static bool copy_payload(PayloadSource& payload, std::vector<uint8_t>* out);

  std::unique_ptr<Transport> inner_;
  const Gid gid_;
  std::unique_ptr<FrameTap> tap_;
  std::unique_ptr<LinkFaultPolicy> faults_;
  std::atomic<FrameSink*> sink_{nullptr};

  // The wrappers of the inner links that are up, by inner link id; a link that goes down is
  // forgotten here (the engine may still hold its wrapper, which keeps the inner link alive).
  // Each delivering thread remembers its last lookup, valid while no link went down since.
  std::mutex links_mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<ObservedLink>> links_;
  uint32_t next_ordinal_ = 0;
  std::atomic<uint64_t> links_forgotten_{0};

  HeldFrames held_;
};

}  // namespace transports
