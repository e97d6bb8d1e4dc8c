// SideChannel (shm_side_channel.h): the messages on a link's Unix socket. A goodbye tells the
// peer this end closes in order; a proof shows that the peer may read our memory (only then is
// it handed objects); a shared object (memfd, shared file) is handed over with
// SCM_RIGHTS before the first record that names it, and forgotten when its last registration
// ends. The receiver thread reads the socket when it is readable (ShmLink::socket_ended); a
// drain that meets a record naming an object it has not mapped reads it too.
#include "transports/shm/shm_side_channel.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_side_message.h"

namespace transports::shm {

bool SideChannel::send(SocketMessageType type, uint32_t object, int fd) {
  const SocketMessage m{type, {}, object};
  // A SOCK_SEQPACKET socket: the message goes whole or not at all. Never waits: a socket whose
  // buffer the peer does not empty refuses it, and the caller goes without (payloads then
  // travel another way).
  return send_message(socket_fd_, &m, sizeof m, &fd, fd >= 0 ? 1 : 0, /*wait=*/false);
}

bool SideChannel::read(short revents) {
  if (socket_fd_ < 0) return false;
  bool reset_seen = false;
  for (;;) {
    // Room for the largest message (a proof): a longer one is cut short, and refused.
    alignas(ProofMessage) uint8_t m[sizeof(ProofMessage)];
    // At most one descriptor is ever sent with a message; any more are closed.
    int fd = -1;
    int nfds = 0;
    bool cut = false;
    const ssize_t n = receive_now(socket_fd_, m, sizeof m, &fd, 1, &nfds, &cut);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return (revents & (POLLHUP | POLLERR | POLLNVAL)) == 0;
    if (n < 0 && errno == ECONNRESET && !reset_seen) {
      // The peer closed with messages of ours unread: Linux says so once, ahead of the
      // messages the peer had sent (its goodbye among them), which are still to be read.
      reset_seen = true;
      continue;
    }
    if (n <= 0 || refusal() != nullptr) {
      if (fd >= 0) ::close(fd);
      return false;
    }
    take(decode_side_message(m, static_cast<size_t>(n), cut), fd);
    if (refusal() != nullptr) return false;
  }
}

void SideChannel::take(const SideMessage& m, int fd) {
  switch (m.kind) {
    case SideMessageKind::kGoodbye:
      farewell_.store(true, std::memory_order_release);
      break;
    case SideMessageKind::kShareObject:
      if (fd >= 0 && peer_objects_.count(m.object) == 0) map_shared(m.object, fd);  // never reused
      break;
    case SideMessageKind::kForgetObject: {
      auto it = peer_objects_.find(m.object);
      if (it == peer_objects_.end()) break;
      if (it->second.pins != 0) {
        it->second.forgotten = true;  // a large write still reads it: unmapped by unpin
        break;
      }
      unmap(it);
      break;
    }
    case SideMessageKind::kProof:
      take_proof(m.nonce);
      break;
    case SideMessageKind::kMalformed:
      spdlog::warn("shm: the peer sent {} on the side channel", m.why);
      refusal_.store("the peer sent a malformed side-channel message", std::memory_order_release);
      break;
    case SideMessageKind::kForeign:
      break;  // a later version's message: nothing this end must act on
  }
  if (fd >= 0) ::close(fd);  // a mapping keeps its object
}

void SideChannel::unmap(std::unordered_map<uint32_t, Mapping>::iterator it) {
  ::munmap(const_cast<uint8_t*>(it->second.base), it->second.size);
  budget_.give_back(it->second.size);
  mapped_bytes_ -= it->second.size;
  peer_objects_.erase(it);
}

void SideChannel::pin(uint32_t object) {
  auto it = peer_objects_.find(object);
  if (it != peer_objects_.end()) ++it->second.pins;
}

void SideChannel::unpin(uint32_t object) {
  auto it = peer_objects_.find(object);
  if (it == peer_objects_.end() || it->second.pins == 0) return;
  if (--it->second.pins == 0 && it->second.forgotten) unmap(it);
}

void SideChannel::take_proof(const ProbeNonce& nonce) {
  if (proof_matches(nonce)) {
    peer_proved_.store(true, std::memory_order_release);
    return;
  }
  spdlog::warn("shm: the peer's proof that it can read our memory is wrong");
  refusal_.store("the peer sent a wrong proof that it can read our memory",
                 std::memory_order_release);
}

void SideChannel::map_shared(uint32_t object, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) return;
  const auto bytes = static_cast<uint64_t>(st.st_size);
  // Each mapping costs address space and a map entry: a peer gets a bounded share of both.
  if (peer_objects_.size() >= kMaxObjectsPerLink || bytes > kMaxBytesPerLink - mapped_bytes_ ||
      !budget_.take(bytes)) {
    spdlog::warn(
        "shm: the peer shares one object too many or too large ({} bytes, after {} "
        "objects of {} bytes): beyond what this process maps",
        bytes, peer_objects_.size(), mapped_bytes_);
    refusal_.store("the peer shared more objects, or larger ones, than this process maps for it",
                   std::memory_order_release);
    return;
  }
  void* base = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    budget_.give_back(bytes);
    // The frames that name it are read with process_vm_readv instead, when we may.
    spdlog::warn("shm: cannot map an object the peer shares ({} bytes): {}", bytes,
                 std::strerror(errno));
    return;
  }
  peer_objects_[object] = Mapping{static_cast<const uint8_t*>(base), bytes};
  mapped_bytes_ += bytes;
}

bool SideChannel::share(const SharedObject& object) {
  if (!peer_proved()) return false;
  if (std::find(objects_shared_.begin(), objects_shared_.end(), object.id) != objects_shared_.end())
    return true;
  // Sent before any record names it: the peer finds it on the socket when it reads the record.
  if (!send(kShareObject, object.id, object.fd)) return false;
  objects_shared_.push_back(object.id);
  return true;
}

bool SideChannel::forget_shared(uint32_t object) {
  auto it = std::find(objects_shared_.begin(), objects_shared_.end(), object);
  if (it == objects_shared_.end()) return false;
  objects_shared_.erase(it);
  return true;
}

void SideChannel::close() {
  if (socket_fd_ >= 0) ::close(socket_fd_);
  socket_fd_ = -1;
  for (const auto& [id, object] : peer_objects_) {
    ::munmap(const_cast<uint8_t*>(object.base), object.size);
    budget_.give_back(object.size);
  }
  peer_objects_.clear();
  mapped_bytes_ = 0;
}

}  // namespace transports::shm
