// Memory mapped shared (read-write) from a memfd, as a program that wants its peers to map its
// buffers allocates it. The descriptor stays open while mapped: a transport may re-open the
// object through /proc/self/fd to hand it on.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace emu_test {

class MemfdBuffer {
 public:
  MemfdBuffer(const std::string& name, size_t bytes) : size_(bytes) {
    fd_ = ::memfd_create(name.c_str(), MFD_CLOEXEC);
    if (fd_ < 0) {
      error_ = "memfd_create " + name + ": " + std::strerror(errno);
      return;
    }
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
      error_ = "ftruncate " + name + ": " + std::strerror(errno);
      return;
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      error_ = "mmap " + name + ": " + std::strerror(errno);
      return;
    }
    data_ = static_cast<uint8_t*>(p);
  }
  ~MemfdBuffer() {
    if (data_ != nullptr) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MemfdBuffer(const MemfdBuffer&) = delete;
  MemfdBuffer& operator=(const MemfdBuffer&) = delete;

  // nullptr when creating or mapping the memfd failed (error() says why).
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  size_t size_;
  std::string error_;
};

}  // namespace emu_test
