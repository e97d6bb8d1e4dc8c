// A link's side channel: the Unix socket of its handshake, kept open, which carries the
// messages of shm_wire.h's SocketMessage beside the rings: a goodbye (this end closes in
// order), the peer's proof that it can read our memory (kProof), and the shared objects
// (memfd, shared file) handed to the peer once it proved that, or from it and mapped here.
// Its end tells the link that the peer is gone.
//
// The link's locks guard it: what sends (send, share, forget_shared) runs under the link's
// send lock, what reads (read, mapping) under its drain lock, and close() under both.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "transports/shm/shared_memory.h"
#include "transports/shm/shm_mapping_budget.h"
#include "transports/shm/shm_side_message.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

class SideChannel {
 public:
  // An object of the peer's that we map.
  struct Mapping {
    const uint8_t* base = nullptr;
    uint64_t size = 0;
    uint32_t pins = 0;       // large writes being copied from it (pin)
    bool forgotten = false;  // the peer forgot it while pinned: unmapped at the last unpin
  };

  // `budget`: what all the transport's links may map together (shm_mapping_budget.h).
  SideChannel(int socket_fd, MappingBudget& budget) : socket_fd_(socket_fd), budget_(budget) {}
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;

  int fd() const { return socket_fd_; }
  // Whether the peer's goodbye arrived.
  bool farewell() const { return farewell_.load(std::memory_order_acquire); }

  // Send lock. One message, with `fd` (when >= 0) as SCM_RIGHTS; never waits.
  bool send(SocketMessageType type, uint32_t object, int fd);
  // Send lock. Hands the object to the peer unless it has it; false when it could not, or
  // when the peer has not proved that it could read our memory anyway (peer_proved()): a
  // descriptor of the whole object is more than cross-memory attach gives a peer without
  // ptrace access.
  bool share(const SharedObject& object);
  // Whether the peer proved it can read our memory (a kProof with our nonce, or
  // mark_peer_proved after the dialer checked the acceptor's proof in the handshake).
  bool peer_proved() const { return peer_proved_.load(std::memory_order_acquire); }
  void mark_peer_proved() { peer_proved_.store(true, std::memory_order_release); }
  // Send lock. Whether the peer was handed the object: it is then no longer counted as
  // handed, and the caller tells the peer to forget it.
  bool forget_shared(uint32_t object);

  // Drain lock. Takes the messages waiting on the socket; false when it ended, or when the
  // peer shared more than this end maps for it (refusal() then says so).
  bool read(short revents);
  // Why the peer's messages were refused (it shared beyond the mapping limits, or sent a wrong
  // proof), or nullptr.
  const char* refusal() const { return refusal_.load(std::memory_order_acquire); }
  // Drain lock. Our mapping of the peer's object, or nullptr.
  const Mapping* mapping(uint32_t object) const {
    auto it = peer_objects_.find(object);
    return it == peer_objects_.end() || it->second.forgotten ? nullptr : &it->second;
  }
  // Drain lock. Keeps a mapped object mapped while a large write is copied from it across
  // drain passes (ShmBulkWrite): a forget that comes meanwhile unmaps it at the last unpin.
  void pin(uint32_t object);
  void unpin(uint32_t object);

  // Both locks. Closes the socket and unmaps the peer's objects.
  void close();

 private:
  // A decoded message (shm_side_message.h) with the descriptor it came with (closed here
  // unless mapped); a malformed one is a link error.
  void take(const SideMessage& m, int fd);
  // A kProof: the peer may be handed our objects if it holds our nonce; else a link error.
  void take_proof(const ProbeNonce& nonce);
  // A share: the object mapped read-only, within the limits.
  void map_shared(uint32_t object, int fd);
  // Unmaps a peer's object and gives its bytes back to the budgets.
  void unmap(std::unordered_map<uint32_t, Mapping>::iterator it);

  int socket_fd_;
  MappingBudget& budget_;
  uint64_t mapped_bytes_ = 0;  // of peer_objects_ (drain lock)
  std::atomic<const char*> refusal_{nullptr};
  std::atomic<bool> farewell_{false};
  std::atomic<bool> peer_proved_{false};
  std::vector<uint32_t> objects_shared_;                // handed to the peer (send lock)
  std::unordered_map<uint32_t, Mapping> peer_objects_;  // by the peer's id (drain lock)
};

}  // namespace transports::shm
