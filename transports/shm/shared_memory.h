// Registered memory that a peer process can map instead of reading it with process_vm_readv:
// memory that this process maps MAP_SHARED from one object (a memfd, a tmpfs or /dev/shm file
// from shm_open, a hugetlbfs file, a plain file, shared anonymous memory). At registration the
// range is looked up in this process's mappings (/proc/self/maps) and a read-only descriptor
// of its object is opened, which the transport can hand to a peer; at send time
// SharedRanges::find tells whether a payload lies in such a range and where in its object.
//
// EMURDMA_SHM_MAP=0 turns this off (shared_mapping_enabled; the transport then never calls
// SharedRanges::add).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "base/process_maps.h"

namespace transports::shm {

// An object (memfd, file, shared anonymous memory) that this process maps MAP_SHARED, opened
// read-only so that a peer can be handed its descriptor and map it.
struct SharedObject {
  uint32_t id = 0;    // unique in this process, never reused (starts at 1)
  int fd = -1;        // read-only, close-on-exec; closed by the destructor
  uint64_t size = 0;  // fstat st_size at registration
  dev_t dev = 0;
  ino_t ino = 0;

  SharedObject() = default;
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  ~SharedObject();
};

// Where a piece of registered memory lies in its object.
struct SharedPiece {
  std::shared_ptr<const SharedObject> object;
  uint64_t offset = 0;  // of the piece's first byte within the object
};

// What /proc/self/maps tells about the object behind a range of memory.
struct SharedMapping {
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t object_offset = 0;  // file offset of the range's first byte
  // The mapping (VMA) that holds the range's first byte, as named in /proc/self/map_files.
  uintptr_t vma_begin = 0;
  uintptr_t vma_end = 0;
  // The path column, with its " (deleted)" suffix if any ("/memfd:name (deleted)" for a memfd,
  // "/dev/zero (deleted)" for shared anonymous memory).
  std::string path;
};

// Finds the mapping(s) of /proc/self/maps covering [addr, addr+len): every byte must be covered
// by mappings flagged shared ('s' in the perms column) of the same (device, inode) whose file
// offsets are contiguous with their addresses (adjacent VMAs of one object, e.g. split by
// mprotect, are merged). nullopt otherwise (private, anonymous-private, partly unmapped,
// several objects, len == 0; with base::MapsSource::kQuery, also when the kernel cannot be asked).
std::optional<SharedMapping> find_shared_mapping(const void* addr, size_t len,
                                                 base::MapsSource source = base::MapsSource::kAny);

// The same, for callers that want the object's identity only. On success *dev, *ino and
// *object_offset (file offset of addr) are set.
bool locate_shared_mapping(const void* addr, size_t len, dev_t* dev, ino_t* ino,
                           uint64_t* object_offset);

// Opens a read-only, close-on-exec descriptor of the object of `mapping`; -1 if no way works.
// Ways, in order: /proc/self/map_files/<begin>-<end> of the mapping (needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE: works as root, and is the only way to shared anonymous memory or a
// memfd whose descriptors are all closed); any descriptor this process has open on the object,
// re-opened through /proc/self/fd/N (so the program's own descriptor and its file position are
// never shared); the mapping's path when the object has not been deleted. Whatever opened
// must be a regular file (memfd, shmem and hugetlbfs objects are) of the same device and inode.
int open_shared_object(const SharedMapping& mapping);

// Whether mapping registered memory for peers is on, given the value of EMURDMA_SHM_MAP
// (nullptr when unset): everything but "0" leaves it on.
bool shared_mapping_enabled(const char* env_value);

// The process's registry: registration ranges that a peer may map. Thread-safe.
class SharedRanges {
 public:
  SharedRanges() = default;
  SharedRanges(const SharedRanges&) = delete;
  SharedRanges& operator=(const SharedRanges&) = delete;

  // Called at memory registration. If the range is shareable, records it and returns a nonzero
  // token; objects are shared among ranges (one SharedObject per (dev, ino) while any range of
  // it is registered). Returns 0 when it is not shareable (nothing recorded), also when the
  // range reaches past the object's end as its SharedObject recorded it.
  uint64_t add(const void* addr, size_t len);
  // Ends a registration. Returns the object id whose last range this was (its SharedObject is
  // dropped from the registry; links may still hold shared_ptrs), or 0.
  uint32_t remove(uint64_t token);
  // Whether [addr, addr+len) lies inside one recorded range; the piece's object and offset.
  // A read lock and a map lookup: no allocation.
  bool find(const void* addr, size_t len, SharedPiece* out) const;
  size_t size() const;  // registered ranges

 private:
  struct Range {
    uint64_t token = 0;
    uintptr_t end = 0;           // one past the last byte
    uint64_t object_offset = 0;  // of the range's first byte
    std::shared_ptr<const SharedObject> object;
  };
  struct ObjectEntry {
    std::shared_ptr<const SharedObject> object;
    size_t ranges = 0;
  };
  // Records a range of `object` (under the write lock); 0 when the range reaches past the end
  // the object had when it was opened.
  uint64_t record_locked(const void* addr, size_t len, uint64_t object_offset,
                         const std::shared_ptr<const SharedObject>& object);
  using RangesByBegin = std::multimap<uintptr_t, Range>;

  void recompute_longest();  // after a removal

  mutable std::shared_mutex mutex_;
  RangesByBegin by_begin_;
  std::unordered_map<uint64_t, RangesByBegin::iterator> by_token_;
  // By id: every object some range holds. By (device, inode): the one new ranges of that
  // object join, the latest opened (an object that grew is opened again, under a new id, for
  // ranges past its old end; ranges of the old one keep it).
  std::unordered_map<uint32_t, ObjectEntry> objects_;
  std::map<std::pair<dev_t, ino_t>, std::shared_ptr<const SharedObject>> current_;
  uint64_t next_token_ = 1;
  // Length of the longest recorded range: find() looks back from a piece only that far.
  uintptr_t longest_ = 0;
};

}  // namespace transports::shm
