#include "base/process_maps.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <string>

namespace base {

namespace {

// All of /proc/self/maps. It is generated as it is read, so one buffer and as few reads as
// possible give the most consistent picture; false when it cannot be opened.
bool read_own_maps(std::string* text) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char chunk[16384];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text->append(chunk, static_cast<size_t>(got));
  }
  ::close(fd);
  return true;
}

// Reads a number in `base` at the front of *text and the one separator after it.
template <typename Number>
bool take_number(std::string_view* text, int base, char separator, Number* value) {
  const auto [rest, error] =
      std::from_chars(text->data(), text->data() + text->size(), *value, base);
  if (error != std::errc() || rest == text->data() + text->size() || *rest != separator) {
    return false;
  }
  text->remove_prefix(static_cast<size_t>(rest - text->data()) + 1);
  return true;
}

// One line: "begin-end perms offset major:minor inode   path".
bool parse_maps_line(std::string_view text, ProcessMapping* line) {
  unsigned dev_major = 0;
  unsigned dev_minor = 0;
  unsigned long long inode = 0;
  if (!take_number(&text, 16, '-', &line->begin) || !take_number(&text, 16, ' ', &line->end)) {
    return false;
  }
  if (text.size() < 5 || text[4] != ' ') return false;
  line->readable = text[0] == 'r';
  line->writable = text[1] == 'w';
  line->shared = text[3] == 's';
  text.remove_prefix(5);
  if (!take_number(&text, 16, ' ', &line->offset) || !take_number(&text, 16, ':', &dev_major) ||
      !take_number(&text, 16, ' ', &dev_minor)) {
    return false;
  }
  // The inode is the last column when there is no path: no separator after it then.
  const auto [rest, error] = std::from_chars(text.data(), text.data() + text.size(), inode, 10);
  if (error != std::errc()) return false;
  text.remove_prefix(static_cast<size_t>(rest - text.data()));
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  line->dev = makedev(dev_major, dev_minor);
  line->ino = static_cast<ino_t>(inode);
  line->path = text;
  return true;
}

bool visit_text(uintptr_t from, const std::function<bool(const ProcessMapping&)>& visit) {
  std::string maps;
  if (!read_own_maps(&maps)) return false;
  size_t line_start = 0;
  while (line_start < maps.size()) {
    size_t line_end = maps.find('\n', line_start);
    if (line_end == std::string::npos) line_end = maps.size();
    ProcessMapping line;
    const bool parsed =
        parse_maps_line(std::string_view(maps).substr(line_start, line_end - line_start), &line);
    line_start = line_end + 1;
    if (!parsed || line.end <= from) continue;  // the lines come in address order
    if (!visit(line)) break;
  }
  return true;
}

// The kernel's PROCMAP_QUERY ioctl on /proc/<pid>/maps (Linux 6.11, uapi <linux/fs.h>), declared
// here with the kernel's layout because the headers of the machine that builds us may predate
// it.
struct ProcmapQuery {
  uint64_t size;         // in: sizeof(ProcmapQuery)
  uint64_t query_flags;  // in: kProcmapCoveringOrNext
  uint64_t query_addr;   // in
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;  // kProcmapVma*
  uint64_t vma_page_size;
  uint64_t vma_offset;  // file offset of vma_start
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;  // in: room at vma_name_addr; out: the name's length with its NUL
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104, "the kernel's struct procmap_query");
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kProcmapVmaReadable = 0x01;
constexpr uint64_t kProcmapVmaWritable = 0x02;
constexpr uint64_t kProcmapVmaShared = 0x08;
constexpr uint64_t kProcmapCoveringOrNext = 0x10;

enum class QuerySupport : int { kUnknown, kYes, kNo };
std::atomic<QuerySupport> query_support{QuerySupport::kUnknown};

// What visit_query ended with.
enum class QueryEnd {
  kDone,        // the visitor stopped, or no mapping is left
  kUnanswered,  // the kernel did not answer (no such query, a name that did not fit)
  kNoProc,      // /proc/self/maps did not open
};

// Visits by PROCMAP_QUERY; on kUnanswered, *resume_from is where the text should go on.
QueryEnd visit_query(uintptr_t from, const std::function<bool(const ProcessMapping&)>& visit,
                     uintptr_t* resume_from) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return QueryEnd::kNoProc;
  QueryEnd end = QueryEnd::kDone;
  char name[PATH_MAX + 64];
  uintptr_t next = from;
  for (;;) {
    ProcmapQuery query{};
    query.size = sizeof query;
    query.query_flags = kProcmapCoveringOrNext;
    query.query_addr = next;
    query.vma_name_addr = reinterpret_cast<uintptr_t>(name);
    query.vma_name_size = sizeof name;
    if (::ioctl(fd, kProcmapQuery, &query) != 0) {
      if (errno == ENOENT) {  // no mapping at or above `next`: an answer
        query_support.store(QuerySupport::kYes, std::memory_order_relaxed);
        break;
      }
      // ENOTTY (EINVAL on some kernels) before Linux 6.11: never asked again. Anything else
      // (a name too long): the text answers this time.
      if (errno == ENOTTY || errno == EINVAL) {
        query_support.store(QuerySupport::kNo, std::memory_order_relaxed);
      }
      *resume_from = next;
      end = QueryEnd::kUnanswered;
      break;
    }
    query_support.store(QuerySupport::kYes, std::memory_order_relaxed);
    ProcessMapping mapping;
    mapping.begin = query.vma_start;
    mapping.end = query.vma_end;
    mapping.readable = (query.vma_flags & kProcmapVmaReadable) != 0;
    mapping.writable = (query.vma_flags & kProcmapVmaWritable) != 0;
    mapping.shared = (query.vma_flags & kProcmapVmaShared) != 0;
    mapping.offset = query.vma_offset;
    mapping.dev = makedev(query.dev_major, query.dev_minor);
    mapping.ino = static_cast<ino_t>(query.inode);
    mapping.path = std::string_view(name, query.vma_name_size > 0 ? query.vma_name_size - 1 : 0);
    next = mapping.end;
    if (!visit(mapping)) break;
  }
  ::close(fd);
  return end;
}

}  // namespace

bool maps_query_supported() {
  if (query_support.load(std::memory_order_relaxed) == QuerySupport::kUnknown) {
    uintptr_t resume_from = 0;
    (void)visit_query(
        0, [](const ProcessMapping&) { return false; }, &resume_from);
  }
  return query_support.load(std::memory_order_relaxed) == QuerySupport::kYes;
}

bool visit_mappings(uintptr_t from, MapsSource source,
                    const std::function<bool(const ProcessMapping&)>& visit) {
  if (source == MapsSource::kText ||
      (source == MapsSource::kAny &&
       query_support.load(std::memory_order_relaxed) == QuerySupport::kNo)) {
    return visit_text(from, visit);
  }
  uintptr_t resume_from = from;
  switch (visit_query(from, visit, &resume_from)) {
    case QueryEnd::kDone:
      return true;
    case QueryEnd::kNoProc:
      return false;
    case QueryEnd::kUnanswered:
      break;
  }
  // Where the query stopped answering, the text goes on (the mappings visited so far ended
  // at or below resume_from, so none is visited twice).
  return source == MapsSource::kAny && visit_text(resume_from, visit);
}

}  // namespace base
