#include "emu/stat_page.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "emu/limits.h"

namespace emu {

namespace {

// The layout, little-endian (docs/usage.md, "Counters"). Version 1.
constexpr char kMagic[8] = {'E', 'M', 'U', 'S', 'T', 'A', 'T', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 4096;  // the header, then the counter names

struct KindInfo {
  uint32_t counters;
  uint32_t slots;
  uint32_t slot_bytes;         // a u32 id (0: free), a u32 detail, then the counters
  std::atomic<uint32_t> used;  // slots [0, used) may be live: a reader looks no further
  uint64_t slots_offset;
  uint64_t retired_offset;  // the counts of the objects that are gone, summed
};
static_assert(sizeof(KindInfo) == 32);

struct PageHeader {
  alignas(8) char magic[8];  // at offset 0 of a page: aligned for its atomic store
  uint32_t version;
  uint32_t header_bytes;
  uint32_t pid;
  uint32_t kinds;
  uint64_t started_ns;  // CLOCK_REALTIME
  uint8_t gid[16];
  char transport[16];
  uint32_t names_offset;
  uint32_t names_bytes;  // each kind's names NUL-terminated, an empty name after each kind's
  KindInfo kind[StatPage::kKinds];
};
static_assert(sizeof(PageHeader) == 200);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

#define EMU_COUNTER_NAME(name) #name,
constexpr const char* kQpNames[] = {EMU_QP_COUNTERS(EMU_COUNTER_NAME)};
constexpr const char* kCqNames[] = {EMU_CQ_COUNTERS(EMU_COUNTER_NAME)};
constexpr const char* kSrqNames[] = {EMU_SRQ_COUNTERS(EMU_COUNTER_NAME)};
constexpr const char* kDeviceNames[] = {EMU_DEVICE_COUNTERS(EMU_COUNTER_NAME)};
#undef EMU_COUNTER_NAME

struct KindShape {
  const char* const* names;
  uint32_t counters;
  uint32_t slots;
};

constexpr KindShape kShapes[StatPage::kKinds] = {
    {kDeviceNames, static_cast<uint32_t>(DeviceCounter::kCount), 1},
    {kQpNames, static_cast<uint32_t>(QpCounter::kCount), kMaxQp},
    {kCqNames, static_cast<uint32_t>(CqCounter::kCount), kMaxCq},
    {kSrqNames, static_cast<uint32_t>(SrqCounter::kCount), kMaxSrq},
};

size_t slot_bytes(size_t k) {
  return 8 + 8 * size_t{kShapes[k].counters};
}

// Where each kind's slots and retired totals go, and the whole size.
size_t layout(KindInfo* out) {
  size_t at = kHeaderBytes;
  for (size_t k = 0; k < StatPage::kKinds; ++k) {
    out[k].counters = kShapes[k].counters;
    out[k].slots = kShapes[k].slots;
    out[k].slot_bytes = static_cast<uint32_t>(slot_bytes(k));
    out[k].retired_offset = at;
    at += 8 * size_t{kShapes[k].counters};
    out[k].slots_offset = at;
    at += slot_bytes(k) * kShapes[k].slots;
  }
  return (at + 4095) & ~size_t{4095};
}

bool counters_disabled() {
  const char* v = std::getenv("EMURDMA_COUNTERS");
  if (v == nullptr || *v == '\0') return false;
  const std::string s(v);
  if (s == "0" || s == "off" || s == "no" || s == "false") return true;
  if (s != "1" && s != "on" && s != "yes" && s != "true") {
    spdlog::warn(
        "EMURDMA_COUNTERS={} is neither on (1, on, yes, true) nor off (0, off, no, "
        "false): counting",
        s);
  }
  return false;
}

std::atomic<uint32_t> next_node_ordinal{0};

}  // namespace

std::unique_ptr<StatPage> StatPage::create(const Gid& gid, const std::string& transport) {
  if (counters_disabled()) return nullptr;
  KindInfo shape[kKinds];
  const size_t size = layout(shape);
  const char* dir_env = std::getenv("EMURDMA_STAT_DIR");
  const std::string dir = dir_env != nullptr && *dir_env != '\0' ? dir_env : "/dev/shm";
  std::string path = dir + "/emurdma-stat-" + std::to_string(::getpid()) + "-" +
                     std::to_string(next_node_ordinal.fetch_add(1));
  void* base = MAP_FAILED;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Left by an earlier process with our pid, which ended without removing it.
    ::unlink(path.c_str());
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd >= 0) {
    if (::ftruncate(fd, static_cast<off_t>(size)) == 0) {
      base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    const int err = errno;
    ::close(fd);
    if (base == MAP_FAILED) {
      ::unlink(path.c_str());
      errno = err;
    }
  }
  if (base == MAP_FAILED) {
    spdlog::warn(
        "counters: {} could not be made ({}); counting in private memory, which "
        "`emurdma stat` cannot read (EMURDMA_STAT_DIR names another directory)",
        path, std::strerror(errno));
    path.clear();
    base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      spdlog::warn("counters: no memory for them ({}): nothing counts", std::strerror(errno));
      return nullptr;
    }
  }
  std::unique_ptr<StatPage> page(new StatPage(static_cast<uint8_t*>(base), size, std::move(path)));
  page->write_header(gid, transport);
  return page;
}

StatPage::StatPage(uint8_t* base, size_t size, std::string path)
    : base_(base), size_(size), path_(std::move(path)) {}

StatPage::~StatPage() {
  ::munmap(base_, size_);
  // EMURDMA_STAT_KEEP=1: the last counts stay for a look after the process (a CI job's
  // post-mortem, a test's check); `emurdma stat --clean` removes them.
  const char* keep = std::getenv("EMURDMA_STAT_KEEP");
  const bool kept = keep != nullptr && std::string(keep) == "1";
  if (!path_.empty() && !kept) ::unlink(path_.c_str());
}

void StatPage::write_header(const Gid& gid, const std::string& transport) {
  auto* h = reinterpret_cast<PageHeader*>(base_);
  h->version = kVersion;
  h->header_bytes = kHeaderBytes;
  h->pid = static_cast<uint32_t>(::getpid());
  h->kinds = kKinds;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  h->started_ns =
      static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
  std::memcpy(h->gid, gid.raw.data(), sizeof(h->gid));
  std::strncpy(h->transport, transport.c_str(), sizeof(h->transport) - 1);
  layout(h->kind);
  char* names = reinterpret_cast<char*>(base_ + sizeof(PageHeader));
  size_t at = 0;
  for (const KindShape& shape : kShapes) {
    for (uint32_t i = 0; i < shape.counters; ++i) {
      const size_t n = std::strlen(shape.names[i]) + 1;
      std::memcpy(names + at, shape.names[i], n);
      at += n;
    }
    names[at++] = '\0';
  }
  h->names_offset = sizeof(PageHeader);
  h->names_bytes = static_cast<uint32_t>(at);
  // The device's one slot is always live.
  slot_id(Kind::kDevice, 0).store(1, std::memory_order_relaxed);
  h->kind[0].used.store(1, std::memory_order_relaxed);
  // Last, with release: a reader that sees the magic sees the rest (the file is new and was
  // all zeros). A store rather than a fence, which ThreadSanitizer builds refuse.
  uint64_t magic = 0;
  std::memcpy(&magic, kMagic, sizeof(kMagic));
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(h->magic))
      .store(magic, std::memory_order_release);
}

std::atomic<uint32_t>& StatPage::slot_id(Kind kind, uint32_t slot) const {
  const auto k = static_cast<size_t>(kind);
  const KindInfo& info = reinterpret_cast<const PageHeader*>(base_)->kind[k];
  return *reinterpret_cast<std::atomic<uint32_t>*>(base_ + info.slots_offset +
                                                   size_t{slot} * info.slot_bytes);
}

std::atomic<uint64_t>* StatPage::counters_of(Kind kind, uint32_t slot) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<uint8_t*>(&slot_id(kind, slot)) +
                                                  8);
}

std::atomic<uint64_t>* StatPage::retired(Kind kind) const {
  const KindInfo& info =
      reinterpret_cast<const PageHeader*>(base_)->kind[static_cast<size_t>(kind)];
  return reinterpret_cast<std::atomic<uint64_t>*>(base_ + info.retired_offset);
}

std::atomic<uint64_t>* StatPage::acquire(Kind kind, uint32_t id, uint32_t detail) {
  const auto k = static_cast<size_t>(kind);
  auto* h = reinterpret_cast<PageHeader*>(base_);
  std::lock_guard lock(mutex_);
  uint32_t slot;
  if (!free_[k].empty()) {
    slot = free_[k].back();
    free_[k].pop_back();
  } else if (used_[k] < kShapes[k].slots) {
    slot = used_[k]++;
    h->kind[k].used.store(used_[k], std::memory_order_release);
  } else {
    if (!full_logged_[k]) {
      full_logged_[k] = true;
      spdlog::warn("counters: all {} slots of kind {} are taken; later objects count nothing",
                   kShapes[k].slots, k);
    }
    return nullptr;
  }
  std::atomic<uint64_t>* values = counters_of(kind, slot);
  for (uint32_t i = 0; i < kShapes[k].counters; ++i) values[i].store(0, std::memory_order_relaxed);
  std::memcpy(reinterpret_cast<uint8_t*>(values) - 4, &detail, sizeof(detail));
  slot_id(kind, slot).store(id, std::memory_order_release);
  return values;
}

void StatPage::set_id(std::atomic<uint64_t>* values, uint32_t id) {
  if (values == nullptr) return;
  reinterpret_cast<std::atomic<uint32_t>*>(reinterpret_cast<uint8_t*>(values) - 8)
      ->store(id, std::memory_order_release);
}

void StatPage::release(Kind kind, std::atomic<uint64_t>* values) {
  if (values == nullptr) return;
  const auto k = static_cast<size_t>(kind);
  std::atomic<uint64_t>* gone = retired(kind);
  std::lock_guard lock(mutex_);
  for (uint32_t i = 0; i < kShapes[k].counters; ++i) {
    gone[i].fetch_add(values[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  auto* id = reinterpret_cast<std::atomic<uint32_t>*>(reinterpret_cast<uint8_t*>(values) - 8);
  id->store(0, std::memory_order_release);
  const KindInfo& info = reinterpret_cast<const PageHeader*>(base_)->kind[k];
  const size_t offset = reinterpret_cast<uint8_t*>(id) - base_ - info.slots_offset;
  free_[k].push_back(static_cast<uint32_t>(offset / info.slot_bytes));
}

bool StatPage::read(Kind kind, uint32_t id, uint64_t* out) const {
  const auto k = static_cast<size_t>(kind);
  const uint32_t used =
      reinterpret_cast<const PageHeader*>(base_)->kind[k].used.load(std::memory_order_acquire);
  for (uint32_t slot = 0; slot < used; ++slot) {
    if (slot_id(kind, slot).load(std::memory_order_acquire) != id) continue;
    const std::atomic<uint64_t>* values = counters_of(kind, slot);
    for (uint32_t i = 0; i < kShapes[k].counters; ++i) {
      out[i] = values[i].load(std::memory_order_relaxed);
    }
    return true;
  }
  return false;
}

void StatPage::totals(Kind kind, uint64_t* out) const {
  const auto k = static_cast<size_t>(kind);
  const std::atomic<uint64_t>* gone = retired(kind);
  for (uint32_t i = 0; i < kShapes[k].counters; ++i)
    out[i] = gone[i].load(std::memory_order_relaxed);
  const uint32_t used =
      reinterpret_cast<const PageHeader*>(base_)->kind[k].used.load(std::memory_order_acquire);
  for (uint32_t slot = 0; slot < used; ++slot) {
    if (slot_id(kind, slot).load(std::memory_order_acquire) == 0) continue;
    const std::atomic<uint64_t>* values = counters_of(kind, slot);
    for (uint32_t i = 0; i < kShapes[k].counters; ++i) {
      out[i] += values[i].load(std::memory_order_relaxed);
    }
  }
}

size_t StatPage::counter_count(Kind kind) {
  return kShapes[static_cast<size_t>(kind)].counters;
}

const char* StatPage::counter_name(Kind kind, size_t index) {
  const KindShape& s = kShapes[static_cast<size_t>(kind)];
  return index < s.counters ? s.names[index] : nullptr;
}

}  // namespace emu
