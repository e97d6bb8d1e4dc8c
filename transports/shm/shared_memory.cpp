#include "transports/shm/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

namespace transports::shm {

namespace {

// Object ids of the whole process, so that two registries never hand out the same one.
std::atomic<uint32_t> next_object_id{1};

// Whether a descriptor opened by one of the ways of open_shared_object is the mapped object.
//
// Found by trying memfd, a memfd whose descriptors were closed, shm_open files (deleted or
// not), shared anonymous memory and a plain file on ext4 through map_files, descriptors and
// paths: the device in /proc/self/maps (the super block's, printed in hex, 00:01 for memfd and
// shared anonymous memory, tmpfs's for /dev/shm) is st_dev of every descriptor of the object,
// so device and inode are both compared. File systems whose stat reports another device than
// the super block's (btrfs subvolumes, overlayfs through a descriptor or path rather than
// map_files) fail the check: their memory is then simply not shareable.
bool is_mapped_object(int fd, const SharedMapping& mapping) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == mapping.dev &&
         st.st_ino == mapping.ino;
}

// Opens `path` read-only and keeps it if it is the mapped object. O_NONBLOCK because what is at
// the path may have been replaced by a FIFO since we looked (an open that would wait for a
// writer); it is cleared again on the kept descriptor.
int open_if_mapped_object(const char* path, const SharedMapping& mapping) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return -1;
  if (!is_mapped_object(fd, mapping)) {
    ::close(fd);
    return -1;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

// The second way of open_shared_object: a descriptor of ours on the object, re-opened.
int reopen_own_descriptor(const SharedMapping& mapping) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (found < 0) {
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    int number = -1;
    const char* name = entry->d_name;
    const auto [rest, error] = std::from_chars(name, name + std::strlen(name), number, 10);
    if (error != std::errc() || *rest != '\0' || number == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(number, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != mapping.dev ||
        st.st_ino != mapping.ino) {
      continue;
    }
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", number);
    found = open_if_mapped_object(path, mapping);
  }
  ::closedir(dir);
  return found;
}

// Folds the mappings (VMAs) that cover [begin, end), taken in address order, into one
// SharedMapping, or refuses them: the rules of find_shared_mapping.
class MappingWalk {
 public:
  enum class Step { kMore, kFound, kRefused };

  MappingWalk(uintptr_t begin, uintptr_t end) : begin_(begin), end_(end), covered_(begin) {}

  // The next mapping in address order, one that ends above every mapping taken so far.
  Step take(const base::ProcessMapping& mapping) {
    if (mapping.begin > covered_ || !mapping.shared || mapping.ino == 0) return Step::kRefused;
    if (covered_ == begin_) {
      found_.dev = mapping.dev;
      found_.ino = mapping.ino;
      found_.object_offset = mapping.offset + (begin_ - mapping.begin);
      found_.vma_begin = mapping.begin;
      found_.vma_end = mapping.end;
      found_.path = mapping.path;
    } else if (mapping.dev != found_.dev || mapping.ino != found_.ino ||
               mapping.offset != found_.object_offset + (mapping.begin - begin_)) {
      return Step::kRefused;  // another object, or another part of this one
    }
    covered_ = mapping.end;
    return covered_ >= end_ ? Step::kFound : Step::kMore;
  }

  SharedMapping& found() { return found_; }

 private:
  const uintptr_t begin_;
  const uintptr_t end_;
  uintptr_t covered_;  // bytes below this are known to be in the object
  SharedMapping found_;
};

}  // namespace

SharedObject::~SharedObject() {
  if (fd >= 0) ::close(fd);
}

std::optional<SharedMapping> find_shared_mapping(const void* addr, size_t len,
                                                 base::MapsSource source) {
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = begin + len;
  if (len == 0 || end < begin) return std::nullopt;
  MappingWalk walk(begin, end);
  MappingWalk::Step step = MappingWalk::Step::kMore;
  base::visit_mappings(begin, source, [&](const base::ProcessMapping& mapping) {
    step = walk.take(mapping);
    return step == MappingWalk::Step::kMore;
  });
  if (step != MappingWalk::Step::kFound) return std::nullopt;
  return std::move(walk.found());
}

bool locate_shared_mapping(const void* addr, size_t len, dev_t* dev, ino_t* ino,
                           uint64_t* object_offset) {
  const std::optional<SharedMapping> mapping = find_shared_mapping(addr, len);
  if (!mapping) return false;
  *dev = mapping->dev;
  *ino = mapping->ino;
  *object_offset = mapping->object_offset;
  return true;
}

int open_shared_object(const SharedMapping& mapping) {
  char path[80];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx",
                static_cast<unsigned long>(mapping.vma_begin),
                static_cast<unsigned long>(mapping.vma_end));
  int fd = open_if_mapped_object(path, mapping);
  if (fd >= 0) return fd;
  fd = reopen_own_descriptor(mapping);
  if (fd >= 0) return fd;
  // A deleted object's path names nothing, or something else ("/dev/zero" for shared
  // anonymous memory): only a path of a live file is worth trying.
  constexpr std::string_view kDeleted = " (deleted)";
  const std::string& shown = mapping.path;
  if (shown.empty() || shown.front() != '/' ||
      (shown.size() >= kDeleted.size() &&
       shown.compare(shown.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0)) {
    return -1;
  }
  return open_if_mapped_object(shown.c_str(), mapping);
}

bool shared_mapping_enabled(const char* env_value) {
  return env_value == nullptr || std::string_view(env_value) != "0";
}

uint64_t SharedRanges::record_locked(const void* addr, size_t len, uint64_t object_offset,
                                     const std::shared_ptr<const SharedObject>& object) {
  if (object_offset + len > object->size) return 0;  // a peer's map would fault
  ObjectEntry& entry = objects_[object->id];
  if (!entry.object) entry.object = object;
  ++entry.ranges;
  const uint64_t token = next_token_++;
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  const auto where = by_begin_.emplace(begin, Range{token, begin + len, object_offset, object});
  by_token_.emplace(token, where);
  longest_ = std::max<uintptr_t>(longest_, len);
  return token;
}

uint64_t SharedRanges::add(const void* addr, size_t len) {
  const std::optional<SharedMapping> mapping = find_shared_mapping(addr, len);
  if (!mapping) return 0;
  const std::pair<dev_t, ino_t> key(mapping->dev, mapping->ino);
  const uint64_t needed = mapping->object_offset + len;
  {
    std::unique_lock lock(mutex_);
    const auto known = current_.find(key);
    if (known != current_.end() && known->second->size >= needed)
      return record_locked(addr, len, mapping->object_offset, known->second);
  }
  // A new object, or one that grew past its size when opened: the descriptor search reads
  // /proc, so it is done without the lock, which the send path's find() takes.
  const int fd = open_shared_object(*mapping);
  if (fd < 0) return 0;
  // Released after the lock when another add wins the race below: its descriptor closes then.
  auto opened = std::make_shared<SharedObject>();
  opened->fd = fd;
  opened->dev = mapping->dev;
  opened->ino = mapping->ino;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  opened->size = static_cast<uint64_t>(st.st_size);

  std::unique_lock lock(mutex_);
  auto& current = current_[key];
  if (current && current->size >= needed)  // another add won
    return record_locked(addr, len, mapping->object_offset, current);
  opened->id = next_object_id.fetch_add(1);
  const uint64_t token = record_locked(addr, len, mapping->object_offset, opened);
  if (token != 0) current = opened;
  if (!current) current_.erase(key);
  return token;
}

uint32_t SharedRanges::remove(uint64_t token) {
  std::shared_ptr<const SharedObject> dropped;  // its descriptor is closed after the lock
  std::unique_lock lock(mutex_);
  const auto found = by_token_.find(token);
  if (found == by_token_.end()) return 0;
  const std::shared_ptr<const SharedObject> object = found->second->second.object;
  by_begin_.erase(found->second);
  by_token_.erase(found);
  recompute_longest();

  const auto entry = objects_.find(object->id);
  if (entry == objects_.end() || --entry->second.ranges > 0) return 0;
  dropped = std::move(entry->second.object);
  objects_.erase(entry);
  const auto current = current_.find({object->dev, object->ino});
  if (current != current_.end() && current->second == dropped) current_.erase(current);
  return dropped->id;
}

bool SharedRanges::find(const void* addr, size_t len, SharedPiece* out) const {
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = begin + len;
  if (len == 0 || end < begin) return false;
  std::shared_lock lock(mutex_);
  // Ranges that begin at or below the piece, nearest first; one that begins further back than
  // the longest range is long cannot reach the piece's end, nor can any before it.
  for (auto it = by_begin_.upper_bound(begin); it != by_begin_.begin();) {
    --it;
    if (end - it->first > longest_) break;
    const Range& range = it->second;
    if (range.end >= end) {
      out->object = range.object;
      out->offset = range.object_offset + (begin - it->first);
      return true;
    }
  }
  return false;
}

size_t SharedRanges::size() const {
  std::shared_lock lock(mutex_);
  return by_begin_.size();
}

void SharedRanges::recompute_longest() {
  longest_ = 0;
  for (const auto& [begin, range] : by_begin_) longest_ = std::max(longest_, range.end - begin);
}

}  // namespace transports::shm
