// A memcpy that survives SIGBUS from its source: for copying out of objects another process
// maps shared and may shrink (ftruncate) under us. Reading a page past an object's new end
// raises SIGBUS, which would kill this process for the other's doing; RDMA hardware would
// fail only the transfer.
#pragma once

#include <cstddef>

namespace transports::shm {

// Copies len bytes from src to dst as memcpy does (the ranges must not overlap), and returns
// true; returns false when reading src raised SIGBUS, dst's bytes then being unspecified
// (the caller decides what to fill them with). A SIGBUS that is not from reading src in a
// guarded copy of this thread goes to whatever handled SIGBUS before the first call.
bool guarded_copy(void* dst, const void* src, size_t len);

}  // namespace transports::shm
