// A one-node test wire: every frame a node sends comes back to the same node, its payload
// copied when the frame is sent (as a transport over shared memory or TCP must), delivered in
// order from progress(), by polling calls and by the node's progress thread. The loopback
// transport reads the sender's memory only at delivery, which hides when a request left; here
// a request transmitted too early carries the bytes of that moment. A test may also drop or
// hold frames: the silence of a frozen peer or of a lost answer, which no real transport of
// ours produces (they deliver every frame or report the link down); or deliver a frame whose
// payload does not stand (PayloadSource::commit_read fails), as shm delivers a by-reference
// record its sender revoked while it was read.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu/transport.h"

namespace emu_test {

// A frame's payload held in a vector, read front to back; `stands` is what commit_read says.
class VectorPayload : public emu::PayloadSource {
 public:
  explicit VectorPayload(const std::vector<uint8_t>& v, bool stands = true)
      : v_(v), stands_(stands) {}
  size_t size() const override { return v_.size() - off_; }
  void read(void* dst, size_t len) override {
    std::memcpy(dst, v_.data() + off_, len);
    off_ += len;
  }
  void skip(size_t len) override { off_ += len; }
  bool commit_read() override { return stands_; }

 private:
  const std::vector<uint8_t>& v_;
  const bool stands_;
  size_t off_ = 0;
};

class TestWire : public emu::Transport, public emu::Link {
 public:
  // kWithdraw: delivered with a payload whose commit_read fails, its bytes kWithdrawnByte (what
  // the sender's program wrote after it took the memory back). kRefuse: send() returns false,
  // as a link without room does (a request is then sent again later); not counted in sent().
  enum class Action { kDeliver, kDrop, kHold, kWithdraw, kRefuse };
  static constexpr uint8_t kWithdrawnByte = 0xee;
  // Decides each frame's fate at send, under the wire's lock (it must not call the engine).
  using Filter = std::function<Action(const emu::FrameHeader&)>;

  // tag: a byte that tells wires apart in their GIDs.
  explicit TestWire(uint8_t tag = 1) {
    gid_.raw = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 't', 'e', 's', 't', 0, 0, 0, tag};
  }
  std::string name() const override { return "test-wire"; }
  emu::Gid local_gid() const override { return gid_; }
  void set_sink(emu::FrameSink* sink) override {
    std::lock_guard lock(mutex_);
    sink_ = sink;
  }
  std::shared_ptr<emu::Link> connect(const emu::Gid& peer) override {
    if (peer == gid_) return std::shared_ptr<emu::Link>(std::shared_ptr<void>(), this);
    return nullptr;
  }
  size_t progress() override {
    size_t delivered = 0;
    for (;;) {
      Frame f;
      emu::FrameSink* sink;
      {
        std::lock_guard lock(mutex_);
        if (draining_ || frames_.empty()) return delivered;
        draining_ = true;
        f = std::move(frames_.front());
        frames_.pop_front();
        sink = sink_;
      }
      Bytes payload(f.bytes, !f.withdrawn);
      if (sink != nullptr) sink->on_frame(*this, f.header, payload);
      ++delivered;
      std::lock_guard lock(mutex_);
      draining_ = false;
    }
  }
  // Payloads are copied at send: nothing to release. Delivering on this thread what waits is
  // finishing (a concurrent drainer delivers the rest before it lets go).
  void finish_deliveries() override { progress(); }
  void release_payloads(Release, uint32_t) override {}
  bool send(const emu::FrameHeader& header, const iovec* iov, size_t iovcnt) override {
    Frame f;
    f.header = header;
    for (size_t i = 0; i < iovcnt; ++i) {
      const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
      f.bytes.insert(f.bytes.end(), p, p + iov[i].iov_len);
    }
    std::lock_guard lock(mutex_);
    Action a = filter_ ? filter_(header) : Action::kDeliver;
    if (a == Action::kRefuse) {
      ++refused_;
      return false;
    }
    sent_.push_back(header);
    if (a == Action::kWithdraw) {
      std::fill(f.bytes.begin(), f.bytes.end(), kWithdrawnByte);
      f.withdrawn = true;
    }
    if (a == Action::kDeliver || a == Action::kWithdraw) frames_.push_back(std::move(f));
    if (a == Action::kHold) held_.push_back(std::move(f));
    return true;
  }
  const emu::Gid& peer() const override { return gid_; }
  bool up() const override { return true; }
  // What the link says of its peer's reading (Link::frames_unread): set by the test.
  bool frames_unread() override { return behind.load(); }
  std::atomic<bool> behind{false};

  void set_filter(Filter f) {
    std::lock_guard lock(mutex_);
    filter_ = std::move(f);
  }
  // Every frame sent so far, delivered or not, in order.
  std::vector<emu::FrameHeader> sent() {
    std::lock_guard lock(mutex_);
    return sent_;
  }
  size_t held() {
    std::lock_guard lock(mutex_);
    return held_.size();
  }
  size_t refused() {
    std::lock_guard lock(mutex_);
    return refused_;
  }
  // Delivers the held frames (in their order) from the next progress, and stops filtering.
  void release() {
    std::lock_guard lock(mutex_);
    filter_ = nullptr;
    for (Frame& f : held_) frames_.push_back(std::move(f));
    held_.clear();
  }

 private:
  struct Frame {
    emu::FrameHeader header;
    std::vector<uint8_t> bytes;
    bool withdrawn = false;
  };
  using Bytes = VectorPayload;

  emu::Gid gid_;
  std::mutex mutex_;
  emu::FrameSink* sink_ = nullptr;
  Filter filter_;
  std::deque<Frame> frames_;
  std::deque<Frame> held_;
  std::vector<emu::FrameHeader> sent_;
  size_t refused_ = 0;
  bool draining_ = false;
};

}  // namespace emu_test
