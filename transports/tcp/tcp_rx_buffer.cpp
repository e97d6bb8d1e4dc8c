// TcpRxBuffer: the receive buffer's memory, from the heap when small, mapped with transparent
// huge pages when large (tcp_rx_buffer.h).
#include "transports/tcp/tcp_rx_buffer.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

namespace transports::tcp {

void TcpRxBuffer::allocate(size_t size) {
  size_ = size;
  mapped_ = size > kRxKeep;
  if (!mapped_) {
    data_ = new uint8_t[size];
    return;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::madvise(p, size, MADV_HUGEPAGE);  // advisory: fine if refused
  data_ = static_cast<uint8_t*>(p);
}

void TcpRxBuffer::release() {
  if (data_ == nullptr) return;
  if (mapped_) {
    ::munmap(data_, size_);
  } else {
    delete[] data_;
  }
  data_ = nullptr;
}

void TcpRxBuffer::resize(size_t size, size_t keep) {
  uint8_t* old = data_;
  const size_t old_size = size_;
  const bool old_mapped = mapped_;
  data_ = nullptr;
  allocate(size);
  if (keep != 0) std::memcpy(data_, old, keep);
  if (old_mapped) {
    ::munmap(old, old_size);
  } else {
    delete[] old;
  }
}

}  // namespace transports::tcp
