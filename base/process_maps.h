// This process's memory mappings (the VMAs of /proc/self/maps), read mapping by mapping for the
// slow paths that need them: registration checks that a range is mapped with the access it
// grants (as the kernel's pinning would), and the shm transport finds the object behind
// memory mapped shared. Where the kernel has it (Linux 6.11), each mapping is asked for by
// address with the PROCMAP_QUERY ioctl (a few microseconds for a range); otherwise the whole
// text is read and parsed (tens of microseconds, growing with the number of mappings).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string_view>

namespace base {

// One mapping, as a line of /proc/self/maps shows it.
struct ProcessMapping {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool readable = false;
  bool writable = false;
  bool shared = false;  // MAP_SHARED ('s' in the perms column)
  uint64_t offset = 0;  // file offset of begin
  dev_t dev = 0;        // the super block's device, as maps prints it
  ino_t ino = 0;        // 0 for anonymous private memory
  // The path column, " (deleted)" suffix included; valid during the visit only.
  std::string_view path;
};

// kQuery: the kernel's PROCMAP_QUERY only; kText: the text only; kAny: the query where the
// kernel answers it, else the text.
enum class MapsSource { kAny, kQuery, kText };

// Whether this kernel answers PROCMAP_QUERY (asked once, then remembered).
bool maps_query_supported();

// Visits, in address order, the mappings that end above `from` (the first one covers `from`,
// or is the next one above it) until `visit` returns false or none is left. False when the
// mappings could not be read: no /proc, or kQuery on a kernel without the query.
bool visit_mappings(uintptr_t from, MapsSource source,
                    const std::function<bool(const ProcessMapping&)>& visit);

}  // namespace base
