#include "transports/loopback/loopback_transport.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/mpsc_ring.h"
#include "base/spin_lock.h"

namespace transports::loopback {

namespace {

constexpr size_t kMaxNodes = 64;
constexpr size_t kMaxIov = 16;
constexpr size_t kQueueDepth = 16384;

class LoopbackTransport;

// Set while this thread drains the fabric: only the drainer sends answers.
thread_local bool t_draining = false;

struct Item {
  uint32_t src = 0;
  uint32_t dst = 0;
  FrameHeader header;
  uint32_t iovcnt = 0;
  iovec iov[kMaxIov];
  uint8_t* owned = nullptr;  // a datagram's copied payload (iov[0]), freed after delivery
};

// Reads a payload out of the sender's iovecs, in order.
class IovSource : public PayloadSource {
 public:
  IovSource(const iovec* iov, uint32_t n) : iov_(iov), n_(n) {
    for (uint32_t i = 0; i < n; ++i) left_ += iov[i].iov_len;
  }
  size_t size() const override { return left_; }
  void read(void* dst, size_t len) override { walk(static_cast<uint8_t*>(dst), len); }
  void skip(size_t len) override { walk(nullptr, len); }

 private:
  void walk(uint8_t* dst, size_t len) {
    while (len > 0 && i_ < n_) {
      size_t chunk = std::min(len, iov_[i_].iov_len - off_);
      if (dst != nullptr) {
        std::memcpy(dst, static_cast<const uint8_t*>(iov_[i_].iov_base) + off_, chunk);
        dst += chunk;
      }
      off_ += chunk;
      len -= chunk;
      left_ -= chunk;
      if (off_ == iov_[i_].iov_len) {
        ++i_;
        off_ = 0;
      }
    }
  }
  const iovec* iov_;
  uint32_t n_;
  uint32_t i_ = 0;
  size_t off_ = 0;
  size_t left_ = 0;
};

// Answers are pushed only by the thread that drains the fabric, so they need no lock; they
// are never refused (transport.h), so this queue grows in the rare case it fills.
class AnswerQueue {
 public:
  AnswerQueue() : items_(1024) {}
  void push(const Item& it) {
    if (count_ == items_.size()) grow();
    items_[(head_ + count_) % items_.size()] = it;
    ++count_;
  }
  bool pop(Item* out) {
    if (count_ == 0) return false;
    *out = items_[head_];
    head_ = (head_ + 1) % items_.size();
    --count_;
    return true;
  }
  bool empty() const { return count_ == 0; }

 private:
  void grow() {
    std::vector<Item> bigger(items_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = items_[(head_ + i) % items_.size()];
    items_.swap(bigger);
    head_ = 0;
  }
  std::vector<Item> items_;
  size_t head_ = 0;
  size_t count_ = 0;
};

class Fabric {
 public:
  static Fabric& instance() {
    static Fabric fabric;
    return fabric;
  }

  uint32_t attach(LoopbackTransport* t) {
    std::lock_guard lock(attach_mutex_);
    for (uint32_t i = 0; i < kMaxNodes; ++i) {
      if (nodes_[i].load() == nullptr) {
        nodes_[i].store(t);
        return i;
      }
    }
    return UINT32_MAX;
  }

  void detach(uint32_t index) {
    nodes_[index].store(nullptr);
    // The drainer may be delivering to it: wait until it is done.
    std::lock_guard lock(drain_lock_);
  }

  LoopbackTransport* node(uint32_t index) const {
    return index < kMaxNodes ? nodes_[index].load(std::memory_order_acquire) : nullptr;
  }

  bool push(const Item& it) {
    if (is_answer(it.header.op) && t_draining) {
      answers_.push(it);
      return true;
    }
    return requests_.try_push(it);
  }

  size_t drain();

  // Delivers everything queued, waiting for a concurrent drainer if need be.
  void deliver_all() {
    drain_lock_.lock();
    drain_lock_.unlock();
    drain();
    // A drainer that started after our drain gave way may still run: wait it out too.
    drain_lock_.lock();
    drain_lock_.unlock();
  }

 private:
  std::atomic<LoopbackTransport*> nodes_[kMaxNodes] = {};
  std::mutex attach_mutex_;
  base::MpscRing<Item> requests_{kQueueDepth};
  base::SpinLock drain_lock_;
  AnswerQueue answers_;
};

class LoopbackLink : public Link, public std::enable_shared_from_this<LoopbackLink> {
 public:
  LoopbackLink(uint32_t src, uint32_t dst, const Gid& peer) : src_(src), dst_(dst), peer_(peer) {}

  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) override {
    if (iovcnt > kMaxIov) return false;
    Item it;
    it.src = src_;
    it.dst = dst_;
    it.header = header;
    it.iovcnt = static_cast<uint32_t>(iovcnt);
    for (size_t i = 0; i < iovcnt; ++i) it.iov[i] = iov[i];
    if ((header.flags & kFrameDatagram) != 0 && iovcnt > 0) {
      // A datagram (UC, UD) is complete for its sender when send() returns: copy its bytes.
      size_t total = 0;
      for (size_t i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
      it.owned = new uint8_t[total == 0 ? 1 : total];
      IovSource(iov, static_cast<uint32_t>(iovcnt)).read(it.owned, total);
      it.iovcnt = 1;
      it.iov[0] = iovec{it.owned, total};
    }
    if (Fabric::instance().push(it)) return true;
    delete[] it.owned;
    return false;
  }
  const Gid& peer() const override { return peer_; }
  bool up() const override { return Fabric::instance().node(dst_) != nullptr; }
  std::shared_ptr<Link> shared() override { return weak_from_this().lock(); }

 private:
  uint32_t src_;
  uint32_t dst_;
  Gid peer_;
};

class LoopbackTransport : public Transport {
 public:
  LoopbackTransport() {
    index_ = Fabric::instance().attach(this);
    if (index_ == UINT32_MAX) throw std::runtime_error("loopback fabric: too many nodes");
    gid_ = gid_of(index_);
  }
  ~LoopbackTransport() override { Fabric::instance().detach(index_); }

  // fe80::/64 link-local prefix, then "emu" and the process id, then the node index: unique
  // per process, and the same process recognises its own nodes.
  static Gid gid_of(uint32_t index) {
    Gid g;
    g.raw[0] = 0xfe;
    g.raw[1] = 0x80;
    g.raw[8] = 'e';
    g.raw[9] = 'm';
    uint32_t pid = static_cast<uint32_t>(::getpid());
    g.raw[10] = static_cast<uint8_t>(pid >> 16);
    g.raw[11] = static_cast<uint8_t>(pid >> 8);
    g.raw[12] = static_cast<uint8_t>(pid);
    g.raw[13] = 0;
    g.raw[14] = static_cast<uint8_t>(index >> 8);
    g.raw[15] = static_cast<uint8_t>(index);
    return g;
  }

  std::string name() const override { return "loopback"; }
  Gid local_gid() const override { return gid_; }
  void set_sink(FrameSink* sink) override { sink_.store(sink); }
  FrameSink* sink() const { return sink_.load(std::memory_order_acquire); }

  std::shared_ptr<Link> connect(const Gid& peer) override {
    for (uint32_t i = 0; i < kMaxNodes; ++i) {
      if (Fabric::instance().node(i) != nullptr && gid_of(i) == peer) return link_to(i);
    }
    return nullptr;
  }

  // The link on which frames from node `from` arrive here (and answers go back).
  std::shared_ptr<Link> link_to(uint32_t to) {
    std::lock_guard lock(links_mutex_);
    if (!links_[to]) links_[to] = std::make_shared<LoopbackLink>(index_, to, gid_of(to));
    return links_[to];
  }
  Link& cached_link_to(uint32_t to) {
    Link* l = cached_[to].load(std::memory_order_acquire);
    if (l == nullptr) {
      l = link_to(to).get();
      cached_[to].store(l, std::memory_order_release);
    }
    return *l;
  }

  size_t progress() override { return Fabric::instance().drain(); }
  // Frames wait in the process-wide queue: delivering it (and waiting out a concurrent
  // drainer) delivers what has arrived, and ends every reference to a sender's memory.
  void finish_deliveries() override { Fabric::instance().deliver_all(); }
  // kCopy never waits and runs under a QP's lock, where delivering could take that lock again:
  // it copies nothing. The queue is in-process and drained by every poll.
  void release_payloads(Release how, uint32_t /*qpn: every QP*/) override {
    if (how == Release::kWait) Fabric::instance().deliver_all();
  }

 private:
  uint32_t index_;
  Gid gid_;
  std::atomic<FrameSink*> sink_{nullptr};
  std::mutex links_mutex_;
  std::shared_ptr<Link> links_[kMaxNodes];
  std::atomic<Link*> cached_[kMaxNodes] = {};
};

size_t Fabric::drain() {
  // Every poll of every node of the process comes here (the automatic transport keeps the
  // loopback for a node's own GID): when nothing is queued, spare it the drain lock's locked
  // instruction on a line all pollers share. Answers are queued only by the drainer and
  // delivered before it lets go of the lock, so none can be waiting now.
  if (requests_.empty()) return 0;
  size_t delivered = 0;
  for (;;) {
    if (!drain_lock_.try_lock()) return delivered;
    t_draining = true;
    Item it;
    for (;;) {
      if (!answers_.pop(&it) && !requests_.try_pop(it)) break;
      LoopbackTransport* dst = node(it.dst);
      FrameSink* sink = dst ? dst->sink() : nullptr;
      if (sink == nullptr) {  // the node is gone: the frame is lost with it
        delete[] it.owned;
        continue;
      }
      IovSource payload(it.iov, it.iovcnt);
      sink->on_frame(dst->cached_link_to(it.src), it.header, payload);
      delete[] it.owned;
      ++delivered;
    }
    t_draining = false;
    drain_lock_.unlock();
    // A frame pushed while we held the lock, by a thread whose own drain gave way to ours.
    if (requests_.empty()) return delivered;
  }
}

}  // namespace

std::unique_ptr<Transport> make_loopback_transport() {
  return std::make_unique<LoopbackTransport>();
}

}  // namespace transports::loopback
