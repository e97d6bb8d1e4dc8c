// This process's mappings (emu/process_maps.h): the kernel's PROCMAP_QUERY and the text of
// /proc/self/maps must show the same mappings, field by field, and a visit starts and stops
// where its contract says.
#include "base/process_maps.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace emu {
namespace {

size_t page_size() {
  return static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// What a visit saw of one mapping, kept past the visit.
struct Seen {
  uintptr_t begin, end;
  bool readable, writable, shared;
  uint64_t offset;
  dev_t dev;
  ino_t ino;
  std::string path;
  bool operator==(const Seen&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Seen& s) {
  return out << std::hex << s.begin << "-" << s.end << std::dec << " " << (s.readable ? 'r' : '-')
             << (s.writable ? 'w' : '-') << (s.shared ? 's' : 'p') << " off " << s.offset << " ino "
             << s.ino << " '" << s.path << "'";
}

// The mappings from `from` up to (not including) those that begin at or past `until`.
std::vector<Seen> mappings_between(uintptr_t from, uintptr_t until, base::MapsSource source,
                                   bool* read = nullptr) {
  std::vector<Seen> seen;
  seen.reserve(64);
  const bool ok = base::visit_mappings(from, source, [&](const base::ProcessMapping& m) {
    if (m.begin >= until) return false;
    seen.push_back(Seen{m.begin, m.end, m.readable, m.writable, m.shared, m.offset, m.dev, m.ino,
                        std::string(m.path)});
    return true;
  });
  if (read != nullptr) *read = ok;
  return seen;
}

// Linux's version as (major, minor), from uname.
std::pair<int, int> kernel_version() {
  utsname name{};
  int major = 0;
  int minor = 0;
  if (::uname(&name) != 0 || std::sscanf(name.release, "%d.%d", &major, &minor) != 2) return {0, 0};
  return {major, minor};
}

// A window of address space reserved inaccessible, carved with MAP_FIXED into mappings of
// every kind, so that nothing the test allocates lands among them. Unmapped at the end.
class CarvedWindow {
 public:
  static constexpr size_t kPages = 32;

  CarvedWindow() : page_(page_size()) {
    base_ = static_cast<uint8_t*>(
        ::mmap(nullptr, kPages * page_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) return;
    memfd_ = ::memfd_create("process_maps_test", MFD_CLOEXEC);
    if (memfd_ < 0 || ::ftruncate(memfd_, static_cast<off_t>(8 * page_)) != 0) return;
    ok_ = place(0, 3, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 1) &&  // memfd from page 1
          ::mprotect(at(2), page_, PROT_READ) == 0 &&                    // split: 2 VMAs
          ::munmap(at(3), page_) == 0 &&                                 // a hole
          place(4, 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) &&
          place(6, 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) &&
          place(7, 2, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0) &&
          place(9, 1, PROT_READ | PROT_WRITE, MAP_PRIVATE, memfd_, 5) &&
          place(10, 1, PROT_WRITE, MAP_SHARED, memfd_, 6);
  }
  ~CarvedWindow() {
    if (base_ != MAP_FAILED) ::munmap(base_, kPages * page_);
    if (memfd_ >= 0) ::close(memfd_);
  }
  CarvedWindow(const CarvedWindow&) = delete;
  CarvedWindow& operator=(const CarvedWindow&) = delete;

  bool ok() const { return ok_; }
  uint8_t* at(size_t page) const { return base_ + page * page_; }
  uintptr_t address(size_t page) const { return reinterpret_cast<uintptr_t>(at(page)); }

 private:
  bool place(size_t page, size_t pages, int prot, int flags, int fd, size_t offset_pages) {
    return ::mmap(at(page), pages * page_, prot, flags | MAP_FIXED, fd,
                  static_cast<off_t>(offset_pages * page_)) == at(page);
  }

  size_t page_;
  uint8_t* base_ = static_cast<uint8_t*>(MAP_FAILED);
  int memfd_ = -1;
  bool ok_ = false;
};

TEST(ProcessMaps, TheKernelsAnswerAndTheTextShowTheSameMappings) {
  CarvedWindow window;
  ASSERT_TRUE(window.ok()) << std::strerror(errno);
  const uintptr_t from = window.address(0);
  const uintptr_t until = window.address(CarvedWindow::kPages);
  bool read = false;
  const std::vector<Seen> text = mappings_between(from, until, base::MapsSource::kText, &read);
  ASSERT_TRUE(read);
  // What the text shows is what was carved (the kernel may merge neighbours alike, never
  // these): memfd rw, memfd r, hole, private rw, private r, shared anonymous, memfd private,
  // memfd write-only, and the rest of the reservation.
  ASSERT_EQ(text.size(), 8u);
  EXPECT_EQ(text[0].begin, window.address(0));
  EXPECT_EQ(text[0].offset, page_size());
  EXPECT_TRUE(text[0].shared && text[0].readable && text[0].writable);
  EXPECT_NE(text[0].path.find("/memfd:process_maps_test"), std::string::npos) << text[0];
  EXPECT_EQ(text[1].begin, window.address(2));
  EXPECT_TRUE(text[1].readable && !text[1].writable);
  EXPECT_EQ(text[2].begin, window.address(4));  // the hole is no mapping
  EXPECT_TRUE(!text[2].shared && text[2].ino == 0);
  EXPECT_TRUE(text[4].shared && text[4].ino != 0);  // shared anonymous memory has an object
  EXPECT_TRUE(!text[5].shared && text[5].ino == text[0].ino && text[5].offset == 5 * page_size());
  EXPECT_TRUE(!text[6].readable && text[6].writable);
  EXPECT_TRUE(!text[7].readable && !text[7].writable);
  EXPECT_EQ(text[7].end, until);

  if (!base::maps_query_supported()) {
    // Only a kernel before 6.11 may lack the query; the text must then answer alone.
    const auto [major, minor] = kernel_version();
    EXPECT_TRUE(major < 6 || (major == 6 && minor < 11))
        << "Linux " << major << "." << minor << " has PROCMAP_QUERY, yet it did not answer";
    EXPECT_TRUE(mappings_between(from, until, base::MapsSource::kQuery, &read).empty());
    EXPECT_FALSE(read);
    EXPECT_EQ(mappings_between(from, until, base::MapsSource::kAny), text);
    return;
  }
  const std::vector<Seen> query = mappings_between(from, until, base::MapsSource::kQuery, &read);
  ASSERT_TRUE(read);
  EXPECT_EQ(query, text);
  EXPECT_EQ(mappings_between(from, until, base::MapsSource::kAny), text);
}

TEST(ProcessMaps, AVisitStartsAtTheMappingCoveringTheAddressOrElseTheNextOneAbove) {
  CarvedWindow window;
  ASSERT_TRUE(window.ok()) << std::strerror(errno);
  const uintptr_t until = window.address(CarvedWindow::kPages);
  for (base::MapsSource source : {base::MapsSource::kText, base::MapsSource::kQuery, base::MapsSource::kAny}) {
    if (source == base::MapsSource::kQuery && !base::maps_query_supported()) continue;
    SCOPED_TRACE(static_cast<int>(source));
    // Inside the second page of the first mapping: that mapping.
    std::vector<Seen> seen = mappings_between(window.address(1) + 100, until, source);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.front().begin, window.address(0));
    // Inside the hole: the mapping after it.
    seen = mappings_between(window.address(3) + 8, until, source);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.front().begin, window.address(4));
    // A visitor that stops at once sees one mapping.
    int visits = 0;
    EXPECT_TRUE(base::visit_mappings(window.address(0), source, [&](const base::ProcessMapping&) {
      ++visits;
      return false;
    }));
    EXPECT_EQ(visits, 1);
  }
}

}  // namespace
}  // namespace emu
