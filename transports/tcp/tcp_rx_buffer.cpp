// TcpRxBuffer: the receive buffer's memory, from the heap when small, mapped with transparent
// huge pages when large (tcp_rx_buffer.h).
#include "transports/tcp/tcp_rx_buffer.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "transports/common/receive_memory.h"

namespace transports::tcp {

namespace {

// Memory for a buffer of `size` bytes; throws std::bad_alloc, leaving nothing behind.
uint8_t* allocate_bytes(size_t size, bool mapped) {
  if (!mapped) return new uint8_t[size];
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::madvise(p, size, MADV_HUGEPAGE);  // advisory: fine if refused
  return static_cast<uint8_t*>(p);
}

void free_bytes(uint8_t* p, size_t size, bool mapped) {
  if (p == nullptr) return;
  if (mapped) {
    ::munmap(p, size);
  } else {
    delete[] p;
  }
}

}  // namespace

void TcpRxBuffer::allocate(size_t size) {
  data_ = allocate_bytes(size, size > kRxKeep);
  size_ = size;
  mapped_ = size > kRxKeep;
  ReceiveMemory::add(size);
}

void TcpRxBuffer::release() {
  free_bytes(data_, size_, mapped_);
  ReceiveMemory::remove(size_);
  data_ = nullptr;
  size_ = 0;
}

void TcpRxBuffer::resize(size_t size, size_t keep) {
  if (mapped_ && size > kRxKeep && keep <= size_) {
    // A mapped buffer that grows (a large frame arriving): the kernel moves its pages, nothing
    // is copied, and the pages already touched stay.
    void* p = ::mremap(data_, size_, size, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, size, MADV_HUGEPAGE);  // advisory: fine if refused
    ReceiveMemory::remove(size_);       // the same pages, grown
    ReceiveMemory::add(size);
    data_ = static_cast<uint8_t*>(p);
    size_ = size;
    return;
  }
  // The new memory first: on std::bad_alloc the buffer stays as it was.
  uint8_t* fresh = allocate_bytes(size, size > kRxKeep);
  if (keep != 0) std::memcpy(fresh, data_, keep);
  free_bytes(data_, size_, mapped_);
  ReceiveMemory::add(size);
  ReceiveMemory::remove(size_);
  data_ = fresh;
  size_ = size;
  mapped_ = size > kRxKeep;
}

}  // namespace transports::tcp
