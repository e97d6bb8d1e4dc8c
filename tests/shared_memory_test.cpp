// Registered memory that a peer could map (transports/shm/shared_memory.h): which mappings
// count as shareable, the object offset of a piece, that the descriptor handed out shows the
// program's bytes, and the registry's bookkeeping of ranges and objects.
#include "transports/shm/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace transports::shm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

size_t page_size() {
  return static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

uint8_t* as_bytes(void* p) {
  return static_cast<uint8_t*>(p);
}

// A mapping that unmaps itself.
struct Mapping {
  void* base = MAP_FAILED;
  size_t len = 0;

  Mapping(size_t length, int prot, int flags, int fd, off_t offset, void* at = nullptr)
      : len(length) {
    base = ::mmap(at, length, prot, flags, fd, offset);
  }
  ~Mapping() {
    if (ok()) ::munmap(base, len);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  bool ok() const { return base != MAP_FAILED; }
  uint8_t* bytes() const { return as_bytes(base); }
};

// A memfd of `size` bytes; -1 on failure.
int make_memfd(size_t size) {
  const int fd = ::memfd_create("shared_memory_test", MFD_CLOEXEC);
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A memfd's descriptor, closed at the end (-1 when creation failed).
struct MemfdDescriptor {
  int fd;
  ~MemfdDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// A memfd of object_bytes, mapped shared and read-write: mapped_bytes of it (all by default)
// from offset. The descriptor is a base, so that it exists before the mapping is made.
struct MemfdMapping : MemfdDescriptor, Mapping {
  explicit MemfdMapping(size_t object_bytes, size_t mapped_bytes = 0, off_t offset = 0)
      : MemfdDescriptor{make_memfd(object_bytes)},
        Mapping(mapped_bytes != 0 ? mapped_bytes : object_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, offset) {}
};

// Whether this process may open /proc/self/map_files entries (root, or CAP_SYS_ADMIN /
// CAP_CHECKPOINT_RESTORE): the only way to an object that no descriptor or path leads to.
bool map_files_openable() {
  const size_t page = page_size();
  Mapping probe(page, PROT_READ, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!probe.ok()) return false;
  char path[80];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx",
                reinterpret_cast<unsigned long>(probe.base),
                reinterpret_cast<unsigned long>(probe.bytes() + page));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

void write_pattern(uint8_t* at, size_t len, uint8_t seed) {
  for (size_t i = 0; i < len; ++i) at[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
}

// Maps the piece's object read-only, as a peer would, and checks that it shows `expected`
// (len bytes) at the piece's offset.
void expect_object_shows(const SharedPiece& piece, const uint8_t* expected, size_t len) {
  ASSERT_NE(piece.object, nullptr);
  ASSERT_GE(piece.object->fd, 0);
  ASSERT_LE(piece.offset + len, piece.object->size);
  EXPECT_EQ(::fcntl(piece.object->fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  Mapping view(piece.object->size, PROT_READ, MAP_SHARED, piece.object->fd, 0);
  ASSERT_TRUE(view.ok()) << std::strerror(errno);
  EXPECT_EQ(std::memcmp(view.bytes() + piece.offset, expected, len), 0);
}

TEST(SharedMemory, AMemfdMappingIsShareableAndItsOffsetIsKnown) {
  MemfdMapping memory(4 * kMiB);
  ASSERT_TRUE(memory.ok());

  SharedRanges ranges;
  const uint64_t token = ranges.add(memory.bytes() + kMiB, kMiB);
  EXPECT_NE(token, 0u);
  EXPECT_EQ(ranges.size(), 1u);

  const size_t delta = 12345;
  const size_t piece_len = 64 * 1024;
  write_pattern(memory.bytes() + kMiB + delta, piece_len, 3);
  SharedPiece piece;
  ASSERT_TRUE(ranges.find(memory.bytes() + kMiB + delta, piece_len, &piece));
  EXPECT_EQ(piece.offset, kMiB + delta);
  EXPECT_EQ(piece.object->size, 4 * kMiB);
  EXPECT_NE(piece.object->id, 0u);
  expect_object_shows(piece, memory.bytes() + kMiB + delta, piece_len);

  // Bytes written after registration show too: the object is shared, not a copy.
  write_pattern(memory.bytes() + kMiB + delta, piece_len, 99);
  expect_object_shows(piece, memory.bytes() + kMiB + delta, piece_len);

  // The descriptor handed out is not the program's.
  EXPECT_NE(piece.object->fd, memory.fd);
}

TEST(SharedMemory, AMemfdWhoseDescriptorIsClosedIsShareableWhereMapFilesOpens) {
  MemfdMapping memory(2 * kMiB);
  ASSERT_TRUE(memory.ok());
  ::close(memory.fd);  // only the mapping leads to the memfd now
  memory.fd = -1;
  write_pattern(memory.bytes(), memory.len, 11);

  SharedRanges ranges;
  const uint64_t token = ranges.add(memory.bytes(), memory.len);
  if (!map_files_openable()) {
    EXPECT_EQ(token, 0u) << "without map_files nothing leads to a closed memfd";
    return;
  }
  ASSERT_NE(token, 0u);
  SharedPiece piece;
  ASSERT_TRUE(ranges.find(memory.bytes() + 4096, 8192, &piece));
  EXPECT_EQ(piece.offset, 4096u);
  expect_object_shows(piece, memory.bytes() + 4096, 8192);
}

TEST(SharedMemory, AShmOpenFileMappedSharedIsShareable) {
  const std::string name = "/emurdma_shared_memory_test_" + std::to_string(::getpid());
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, 1 * kMiB), 0);
  Mapping memory(kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_TRUE(memory.ok());
  write_pattern(memory.bytes(), memory.len, 5);

  // The file still has its name: without map_files, the path in /proc/self/maps opens it.
  SharedRanges ranges;
  const uint64_t token = ranges.add(memory.bytes() + 8192, 65536);
  ::shm_unlink(name.c_str());
  ASSERT_NE(token, 0u);
  SharedPiece piece;
  ASSERT_TRUE(ranges.find(memory.bytes() + 8192 + 100, 9000, &piece));
  EXPECT_EQ(piece.offset, 8192u + 100);
  expect_object_shows(piece, memory.bytes() + 8192 + 100, 9000);
}

TEST(SharedMemory, AShmOpenFileMappedPrivatelyIsNotShareable) {
  const std::string name = "/emurdma_shared_memory_test_p" + std::to_string(::getpid());
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ::shm_unlink(name.c_str());
  ASSERT_EQ(::ftruncate(fd, 1 * kMiB), 0);
  Mapping memory(kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ASSERT_TRUE(memory.ok());
  write_pattern(memory.bytes(), memory.len, 5);  // private copies of the pages now

  SharedRanges ranges;
  EXPECT_EQ(ranges.add(memory.bytes(), memory.len), 0u);
  EXPECT_EQ(ranges.size(), 0u);
  SharedPiece piece;
  EXPECT_FALSE(ranges.find(memory.bytes(), 8192, &piece));
  ::close(fd);
}

TEST(SharedMemory, MallocedAndPrivateAnonymousMemoryIsNotShareable) {
  std::vector<uint8_t> heap(4 * kMiB, 1);
  Mapping anonymous(kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(anonymous.ok());
  anonymous.bytes()[0] = 1;
  int on_stack[1024] = {};

  SharedRanges ranges;
  EXPECT_EQ(ranges.add(heap.data(), heap.size()), 0u);
  EXPECT_EQ(ranges.add(anonymous.base, anonymous.len), 0u);
  EXPECT_EQ(ranges.add(on_stack, sizeof on_stack), 0u);
  EXPECT_EQ(ranges.size(), 0u);
  SharedPiece piece;
  EXPECT_FALSE(ranges.find(heap.data(), 8192, &piece));
  EXPECT_FALSE(ranges.find(anonymous.base, 8192, &piece));
}

TEST(SharedMemory, SharedAnonymousMemoryIsShareableWhereMapFilesOpens) {
  Mapping memory(2 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(memory.ok());
  write_pattern(memory.bytes(), memory.len, 21);

  SharedRanges ranges;
  const uint64_t token = ranges.add(memory.bytes() + kMiB, kMiB);
  if (!map_files_openable()) {
    EXPECT_EQ(token, 0u) << "without map_files nothing leads to shared anonymous memory";
    return;
  }
  ASSERT_NE(token, 0u);
  SharedPiece piece;
  ASSERT_TRUE(ranges.find(memory.bytes() + kMiB + 512, 16384, &piece));
  EXPECT_EQ(piece.offset, kMiB + 512);
  expect_object_shows(piece, memory.bytes() + kMiB + 512, 16384);
}

TEST(SharedMemory, ARangePartlyOutsideASharedMappingIsNotShareable) {
  const size_t page = page_size();
  MemfdMapping memory(2 * page);
  ASSERT_TRUE(memory.ok());
  // The second page becomes private anonymous memory.
  ASSERT_EQ(::munmap(memory.bytes() + page, page), 0);
  void* replaced = ::mmap(memory.bytes() + page, page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(replaced, memory.bytes() + page);

  SharedRanges ranges;
  EXPECT_EQ(ranges.add(memory.bytes() + page / 2, page), 0u);
  EXPECT_EQ(ranges.add(memory.bytes(), 2 * page), 0u);
  EXPECT_NE(ranges.add(memory.bytes(), page), 0u);  // the first page alone still is
}

TEST(SharedMemory, ARangeOverAHoleOrTwoObjectsIsNotShareable) {
  const size_t page = page_size();
  const int first_fd = make_memfd(2 * page);
  const int second_fd = make_memfd(2 * page);
  ASSERT_GE(first_fd, 0);
  ASSERT_GE(second_fd, 0);
  Mapping memory(3 * page, PROT_READ | PROT_WRITE, MAP_SHARED, first_fd, 0);
  ASSERT_TRUE(memory.ok());
  // Page 1 of the first object sits where the second object's page 1 would: offsets that
  // continue the addresses, another object.
  void* other = ::mmap(memory.bytes() + page, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       second_fd, static_cast<off_t>(page));
  ASSERT_EQ(other, memory.bytes() + page);
  ASSERT_EQ(::munmap(memory.bytes() + 2 * page, page), 0);  // and a hole after it

  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t offset = 0;
  EXPECT_FALSE(locate_shared_mapping(memory.bytes(), 2 * page, &dev, &ino, &offset));
  EXPECT_FALSE(locate_shared_mapping(memory.bytes() + page, 2 * page, &dev, &ino, &offset));
  EXPECT_FALSE(locate_shared_mapping(memory.bytes(), 0, &dev, &ino, &offset));
  ASSERT_TRUE(locate_shared_mapping(memory.bytes() + page + 8, 64, &dev, &ino, &offset));
  EXPECT_EQ(offset, page + 8);
  struct stat st {};
  ASSERT_EQ(::fstat(second_fd, &st), 0);
  EXPECT_EQ(dev, st.st_dev);
  EXPECT_EQ(ino, st.st_ino);
  ::munmap(memory.bytes() + page, page);
  memory.len = page;  // what is left of the first mapping
  ::close(first_fd);
  ::close(second_fd);
}

TEST(SharedMemory, ARangeAcrossAnMprotectSplitIsShareableWithItsOffset) {
  const size_t page = page_size();
  const int fd = make_memfd(8 * page);
  ASSERT_GE(fd, 0);
  // Mapped from object offset 2 pages, so that file offsets and mapping offsets differ.
  Mapping memory(4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(2 * page));
  ASSERT_TRUE(memory.ok());
  write_pattern(memory.bytes(), memory.len, 77);
  ASSERT_EQ(::mprotect(memory.bytes() + 2 * page, 2 * page, PROT_READ), 0);  // two VMAs now
  ::close(fd);

  SharedRanges ranges;
  const uint64_t token = ranges.add(memory.bytes() + page, 2 * page);
  if (!map_files_openable()) {
    EXPECT_EQ(token, 0u);
    return;
  }
  ASSERT_NE(token, 0u);
  SharedPiece piece;
  ASSERT_TRUE(ranges.find(memory.bytes() + page + 100, page, &piece));
  EXPECT_EQ(piece.offset, 3 * page + 100);
  expect_object_shows(piece, memory.bytes() + page + 100, page);
}

TEST(SharedMemory, RegistrationsOfOneObjectShareItsSharedObject) {
  MemfdMapping memory(4 * kMiB);
  ASSERT_TRUE(memory.ok());

  SharedRanges ranges;
  const uint64_t first = ranges.add(memory.bytes(), kMiB);
  const uint64_t second = ranges.add(memory.bytes() + 2 * kMiB, kMiB);
  ASSERT_NE(first, 0u);
  ASSERT_NE(second, 0u);
  EXPECT_NE(first, second);
  SharedPiece in_first;
  SharedPiece in_second;
  ASSERT_TRUE(ranges.find(memory.bytes(), 8192, &in_first));
  ASSERT_TRUE(ranges.find(memory.bytes() + 2 * kMiB, 8192, &in_second));
  EXPECT_EQ(in_first.object, in_second.object);
  const uint32_t id = in_first.object->id;

  EXPECT_EQ(ranges.remove(first), 0u);  // the second range still holds the object
  EXPECT_FALSE(ranges.find(memory.bytes(), 8192, &in_first));
  EXPECT_TRUE(ranges.find(memory.bytes() + 2 * kMiB, 8192, &in_second));
  EXPECT_EQ(ranges.remove(second), id);
  EXPECT_EQ(ranges.remove(second), 0u);  // already gone
  EXPECT_EQ(ranges.size(), 0u);
  SharedPiece none;
  EXPECT_FALSE(ranges.find(memory.bytes() + 2 * kMiB, 8192, &none));
  // A link that still holds the object can still map it.
  EXPECT_GE(::fcntl(in_second.object->fd, F_GETFD), 0);

  const uint64_t again = ranges.add(memory.bytes() + 2 * kMiB, kMiB);
  ASSERT_NE(again, 0u);
  SharedPiece renewed;
  ASSERT_TRUE(ranges.find(memory.bytes() + 2 * kMiB, 8192, &renewed));
  EXPECT_NE(renewed.object->id, id);
  EXPECT_NE(renewed.object, in_second.object);
}

TEST(SharedMemory, FindRefusesAPiecePastItsRangeEnd) {
  MemfdMapping memory(4 * kMiB);
  ASSERT_TRUE(memory.ok());

  SharedRanges ranges;
  ASSERT_NE(ranges.add(memory.bytes() + kMiB, kMiB), 0u);
  SharedPiece piece;
  EXPECT_TRUE(ranges.find(memory.bytes() + 2 * kMiB - 8192, 8192, &piece));  // ends at the end
  EXPECT_FALSE(ranges.find(memory.bytes() + 2 * kMiB - 8192, 8193, &piece));
  EXPECT_FALSE(ranges.find(memory.bytes() + kMiB - 1, 8192, &piece));  // starts before it
  EXPECT_FALSE(ranges.find(memory.bytes() + 2 * kMiB, 8192, &piece));  // just after it
  EXPECT_FALSE(ranges.find(memory.bytes() + kMiB, 0, &piece));
}

TEST(SharedMemory, OverlappingRegistrationsAreEachFound) {
  MemfdMapping memory(4 * kMiB);
  ASSERT_TRUE(memory.ok());

  SharedRanges ranges;
  const uint64_t whole = ranges.add(memory.bytes(), 4 * kMiB);
  const uint64_t inner = ranges.add(memory.bytes() + kMiB, kMiB);
  const uint64_t twice = ranges.add(memory.bytes() + kMiB, kMiB);  // the same buffer again
  ASSERT_NE(whole, 0u);
  ASSERT_NE(inner, 0u);
  ASSERT_NE(twice, 0u);
  EXPECT_EQ(ranges.size(), 3u);

  // A piece that only the whole range holds, behind the inner ranges' start.
  SharedPiece piece;
  ASSERT_TRUE(ranges.find(memory.bytes() + kMiB + 4096, 2 * kMiB, &piece));
  EXPECT_EQ(piece.offset, kMiB + 4096);

  EXPECT_EQ(ranges.remove(whole), 0u);
  EXPECT_FALSE(ranges.find(memory.bytes() + kMiB + 4096, 2 * kMiB, &piece));
  ASSERT_TRUE(ranges.find(memory.bytes() + kMiB + 4096, 8192, &piece));
  EXPECT_EQ(piece.offset, kMiB + 4096);
  EXPECT_EQ(ranges.remove(twice), 0u);
  EXPECT_TRUE(ranges.find(memory.bytes() + kMiB + 4096, 8192, &piece));
  EXPECT_EQ(ranges.remove(inner), piece.object->id);
  EXPECT_FALSE(ranges.find(memory.bytes() + kMiB + 4096, 8192, &piece));
}

// Memory mapped past the object's end is refused (touching it would fault, here and in a
// peer). Once the object grows, a region past its old end is registered under a new object
// (opened again, with its new size) while the old region keeps the old one; each object's id is
// given back when its own last region goes.
TEST(SharedMemory, MemoryPastTheObjectsEndIsShareableOnlyOnceTheObjectGrows) {
  const size_t page = page_size();
  MemfdMapping memory(2 * page, 4 * page);
  ASSERT_TRUE(memory.ok());
  SharedRanges ranges;
  EXPECT_EQ(ranges.add(memory.bytes() + page, 2 * page), 0u);
  const uint64_t old_region = ranges.add(memory.bytes(), 2 * page);
  ASSERT_NE(old_region, 0u);
  ASSERT_EQ(::ftruncate(memory.fd, static_cast<off_t>(4 * page)), 0);
  const uint64_t new_region = ranges.add(memory.bytes() + 2 * page, 2 * page);
  ASSERT_NE(new_region, 0u) << "a region past the object's old end was refused after it grew";
  SharedPiece old_piece, new_piece;
  ASSERT_TRUE(ranges.find(memory.bytes(), page, &old_piece));
  ASSERT_TRUE(ranges.find(memory.bytes() + 3 * page, page, &new_piece));
  EXPECT_NE(old_piece.object->id, new_piece.object->id);
  EXPECT_EQ(new_piece.offset, 3 * page);
  EXPECT_GE(new_piece.object->size, 4 * page);
  const uint32_t old_id = old_piece.object->id, new_id = new_piece.object->id;
  old_piece = new_piece = SharedPiece{};
  EXPECT_EQ(ranges.remove(old_region), old_id);
  EXPECT_EQ(ranges.remove(new_region), new_id);
}

// What a process without map_files privileges can share: a memfd it still has a descriptor
// of, and a shm_open file that still has its name. Empty when all is well, else what failed.
std::string check_ways_without_map_files() {
  const int fd = make_memfd(kMiB);
  if (fd < 0) return "memfd_create failed";
  Mapping memfd_memory(kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (!memfd_memory.ok()) return "mmap of the memfd failed";
  write_pattern(memfd_memory.bytes(), kMiB, 31);
  if (::lseek(fd, 777, SEEK_SET) != 777) return "lseek failed";
  SharedRanges ranges;
  if (ranges.add(memfd_memory.bytes(), kMiB) == 0) return "memfd with a descriptor not shared";
  SharedPiece piece;
  if (!ranges.find(memfd_memory.bytes() + 4096, 8192, &piece)) return "memfd piece not found";
  if (piece.object->fd == fd) return "the program's own descriptor was handed out";
  if ((::fcntl(piece.object->fd, F_GETFL) & O_ACCMODE) != O_RDONLY) return "not read-only";
  if (::lseek(piece.object->fd, 0, SEEK_CUR) != 0) return "the program's file position shared";
  if (::lseek(fd, 0, SEEK_CUR) != 777) return "the program's file position moved";
  Mapping memfd_view(kMiB, PROT_READ, MAP_SHARED, piece.object->fd, 0);
  if (!memfd_view.ok() ||
      std::memcmp(memfd_view.bytes() + 4096, memfd_memory.bytes() + 4096, 8192) != 0) {
    return "the memfd's descriptor does not show the program's bytes";
  }

  const std::string name = "/emurdma_shared_memory_test_c" + std::to_string(::getpid());
  const int other_fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (other_fd < 0) return "shm_open failed";
  const bool sized = ::ftruncate(other_fd, kMiB) == 0;
  Mapping shm_memory(kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, other_fd, 0);
  ::close(other_fd);  // only the name leads to it now
  const uint64_t token = sized && shm_memory.ok() ? ranges.add(shm_memory.bytes(), kMiB) : 0;
  ::shm_unlink(name.c_str());
  if (token == 0) return "shm_open file with a name not shared";
  write_pattern(shm_memory.bytes(), kMiB, 41);
  if (!ranges.find(shm_memory.bytes() + 8192, 8192, &piece)) return "shm piece not found";
  Mapping shm_view(kMiB, PROT_READ, MAP_SHARED, piece.object->fd, 0);
  if (!shm_view.ok() ||
      std::memcmp(shm_view.bytes() + 8192, shm_memory.bytes() + 8192, 8192) != 0) {
    return "the shm file's descriptor does not show the program's bytes";
  }
  ::close(fd);
  return "";
}

TEST(SharedMemory, WithoutMapFilesDescriptorsAndNamesStillLeadToTheObject) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Root gives up its capabilities with its user id (nobody), and with them map_files.
    if (::geteuid() == 0 &&
        (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)) {
      std::fprintf(stderr, "could not become nobody\n");
      ::_exit(2);
    }
    ::prctl(PR_SET_DUMPABLE, 1);  // as an ordinary program's /proc/self is
    const std::string failed = check_ways_without_map_files();
    if (!failed.empty()) std::fprintf(stderr, "%s\n", failed.c_str());
    ::_exit(failed.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

// Both ways of reading the mappings (the kernel's PROCMAP_QUERY, the text of /proc/self/maps)
// must give the same answer, field by field, for every kind of range the rules tell apart.
void expect_query_and_text_agree(const void* addr, size_t len, const char* what) {
  SCOPED_TRACE(what);
  const std::optional<SharedMapping> text = find_shared_mapping(addr, len, base::MapsSource::kText);
  const std::optional<SharedMapping> query =
      find_shared_mapping(addr, len, base::MapsSource::kQuery);
  const std::optional<SharedMapping> any = find_shared_mapping(addr, len);
  ASSERT_EQ(query.has_value(), text.has_value());
  ASSERT_EQ(any.has_value(), text.has_value());
  if (!text) return;
  for (const SharedMapping* other : {&*query, &*any}) {
    EXPECT_EQ(other->dev, text->dev);
    EXPECT_EQ(other->ino, text->ino);
    EXPECT_EQ(other->object_offset, text->object_offset);
    EXPECT_EQ(other->vma_begin, text->vma_begin);
    EXPECT_EQ(other->vma_end, text->vma_end);
    EXPECT_EQ(other->path, text->path);
  }
}

TEST(SharedMemory, TheKernelsAnswerAndTheTextOfMapsAgreeOnEveryKindOfRange) {
  const size_t page = page_size();
  MemfdMapping memfd(8 * page, 6 * page, static_cast<off_t>(page));  // from object offset 1 page
  ASSERT_TRUE(memfd.ok());
  const int other_fd = make_memfd(4 * page);
  ASSERT_GE(other_fd, 0);
  Mapping privately(4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, other_fd, 0);
  Mapping shared_anonymous(4 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  Mapping private_anonymous(4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(privately.ok() && shared_anonymous.ok() && private_anonymous.ok());
  std::vector<uint8_t> heap(kMiB, 3);
  int on_stack[256] = {};

  if (!base::maps_query_supported()) {
    // (tests/process_maps_test.cpp holds the kernel to having it from 6.11.) The text alone.
    EXPECT_FALSE(find_shared_mapping(memfd.base, page, base::MapsSource::kQuery).has_value());
    ASSERT_TRUE(find_shared_mapping(memfd.base, page).has_value());
    EXPECT_EQ(find_shared_mapping(memfd.base, page)->object_offset, page);
    ::close(other_fd);
    return;
  }

  expect_query_and_text_agree(memfd.base, memfd.len, "a whole memfd mapping");
  expect_query_and_text_agree(memfd.bytes() + page + 100, 2 * page, "inside a memfd mapping");
  expect_query_and_text_agree(memfd.bytes() + 5 * page, 2 * page, "past its end");
  ASSERT_EQ(::mprotect(memfd.bytes() + 2 * page, page, PROT_READ), 0);  // three VMAs now
  expect_query_and_text_agree(memfd.base, memfd.len, "across an mprotect split");
  expect_query_and_text_agree(privately.base, page, "a memfd mapped privately");
  expect_query_and_text_agree(shared_anonymous.bytes() + page, 2 * page, "shared anonymous");
  expect_query_and_text_agree(private_anonymous.base, page, "private anonymous");
  expect_query_and_text_agree(heap.data(), heap.size(), "the heap");
  expect_query_and_text_agree(on_stack, sizeof on_stack, "the stack");
  expect_query_and_text_agree(memfd.base, 0, "no bytes");
  // A hole: the memfd's last page unmapped, then a range over it, and one starting in it.
  ASSERT_EQ(::munmap(memfd.bytes() + 5 * page, page), 0);
  memfd.len = 5 * page;
  expect_query_and_text_agree(memfd.bytes() + 4 * page, 2 * page, "into a hole");
  expect_query_and_text_agree(memfd.bytes() + 5 * page, page, "in a hole");
  // Another object right after: offsets continue the addresses, the object does not.
  void* other = ::mmap(memfd.bytes() + 5 * page, page, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED, other_fd, static_cast<off_t>(page));
  ASSERT_EQ(other, memfd.bytes() + 5 * page);
  expect_query_and_text_agree(memfd.bytes() + 4 * page, 2 * page, "across two objects");
  expect_query_and_text_agree(other, page, "the other object alone");
  ::munmap(other, page);
  ::close(other_fd);
}

TEST(SharedMemory, SharedMappingIsOnUnlessTheVariableIsZero) {
  EXPECT_TRUE(shared_mapping_enabled(nullptr));
  EXPECT_TRUE(shared_mapping_enabled(""));
  EXPECT_TRUE(shared_mapping_enabled("1"));
  EXPECT_FALSE(shared_mapping_enabled("0"));
}

}  // namespace
}  // namespace transports::shm
