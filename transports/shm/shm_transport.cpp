// The shared-memory transport's face: progress (a program's poll) and the ACK deferral flag it
// sets, make_shm_transport and the options from the environment. The class is in
// shm_transport_impl.h, its receiver thread in shm_receiver_thread.cpp.
#include "transports/shm/shm_transport.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "transports/shm/shm_gid.h"
#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_transport_impl.h"
#include "transports/shm/shm_wire.h"
#include "transports/test_support.h"

namespace transports::shm {

namespace {

// Send-queue inline data is always copied into the ring, so no frame references memory a
// destroyed QP frees: release_payloads(kWait) has nothing to wait for.
static_assert(kFrameInlineBytes <= kMappedMin);

std::atomic<uint32_t> next_instance{1};

// Set while this thread delivers frames inside Transport::progress (a poll).
thread_local bool t_in_progress = false;

}  // namespace

bool ShmTransport::draining_in_progress() const {
  return t_in_progress;
}

size_t ShmTransport::progress() {
  // Tells the receiver thread how hard programs poll, so that it keeps out of the way of a
  // busy poller (transports/common/program_polls.h).
  const uint64_t polls = program_polls_.note_poll();
  const LinkReaderSection reading;  // of active_, which the receiver thread may shrink
  // ACKs held by an earlier poll go now: the program did not send them with a post.
  if (answers_held_.load(std::memory_order_relaxed)) send_held_answers(polls, false);
  t_in_progress = true;
  const size_t delivered = drain_all(nullptr);
  t_in_progress = false;
  if (delivered != 0) program_deliveries_.note_poll();
  return delivered;
}

ShmOptions shm_options_from_environment() {
  ShmOptions o;
  const char* single = std::getenv("EMURDMA_SHM_SINGLE_COPY");
  if (single != nullptr && std::string(single) == "0") o.single_copy = false;
  o.map_shared = shm::shared_mapping_enabled(std::getenv("EMURDMA_SHM_MAP"));
  return o;
}

std::unique_ptr<Transport> make_shm_transport(const ShmOptions& options) {
  ShmAddress address;
  address.host_tag = local_host_tag();
  address.pid = static_cast<uint32_t>(::getpid());
  std::string why;
  for (int attempt = 0; attempt < 64; ++attempt) {
    address.instance = options.instance;
    if (address.instance == 0) {
      do {
        address.instance = static_cast<uint16_t>(next_instance.fetch_add(1));
      } while (address.instance == 0);
    }
    const int fd = listen_at(socket_name(address), &why);
    if (fd >= 0) {
      try {
        return std::make_unique<ShmTransport>(options, fd, address);
      } catch (const std::exception& e) {
        ::close(fd);
        spdlog::error("shm: {}", e.what());
        return nullptr;
      }
    }
    if (options.instance != 0) break;  // a chosen instance is not replaced by another
  }
  spdlog::error("shm: cannot open the attach socket: {}", why);
  return nullptr;
}

bool shm_drop_connections(Transport& t) {
  auto* shm = dynamic_cast<ShmTransport*>(&t);
  if (shm == nullptr) return false;
  shm->drop_connections();
  return true;
}

}  // namespace transports::shm
