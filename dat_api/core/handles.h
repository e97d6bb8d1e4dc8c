// DAT handles and the objects behind them.
//
// The registry (libdat2) calls a provider through the handle itself: it reads the first
// pointer-sized word of whatever a handle points at as the DAT_PROVIDER table
// (DAT_HANDLE_TO_PROVIDER). A handle therefore cannot point at an object that may be freed:
// a stale handle would send the registry through freed memory before we could say
// DAT_INVALID_HANDLE. So every handle points at a slot of one region reserved once for the
// life of the process (the library is linked -z nodelete, so the region outlives the
// registry's dlclose). A slot keeps its provider word forever; it holds the object by
// shared_ptr while the handle is live and nothing once it is freed. Validation is a range
// check, an alignment check and a kind check, so a stale, foreign or wrong-type handle that
// reaches us is answered with DAT_INVALID_HANDLE, never a crash. (A wild pointer that is not
// ours crashes inside the registry before we are called; no provider can prevent that.)
//
// Freed slots are reused only after every never-used slot has been handed out, oldest freed
// first, to push back the moment a stale handle names a new object.
#pragma once

#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace dat_api {

enum class Kind : uint32_t {
  kNone = 0,
  kIa,
  kPz,
  kLmr,
  kEvd,
  kSrq,
  kEp,
  kCr,
  kPsp,
  kRsp,
  kRmr,
  kCno,
  kCsp
};

// Base of every object a DAT handle can name. The consumer context lives here so that
// dat_set/get_consumer_context work on any handle.
class Object {
 public:
  explicit Object(Kind kind) : kind_(kind) {}
  virtual ~Object() = default;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  Kind kind() const { return kind_; }
  DAT_HANDLE handle() const { return handle_; }
  void set_handle(DAT_HANDLE h) { handle_ = h; }

  DAT_CONTEXT consumer_context() const {
    DAT_CONTEXT c;
    c.as_64 = context_.load(std::memory_order_acquire);
    return c;
  }
  void set_consumer_context(DAT_CONTEXT c) { context_.store(c.as_64, std::memory_order_release); }

 private:
  const Kind kind_;
  DAT_HANDLE handle_ = DAT_HANDLE_NULL;
  std::atomic<DAT_UINT64> context_{0};
};

class Handles {
 public:
  // Publishes the object under a new handle whose provider word is `provider`.
  // Returns DAT_HANDLE_NULL when the region is exhausted.
  static DAT_HANDLE publish(const std::shared_ptr<Object>& object, const DAT_PROVIDER* provider);

  // The live object named by `handle`, of any kind; null when the handle is not ours or freed.
  static std::shared_ptr<Object> lookup(DAT_HANDLE handle);

  // The live object named by `handle` if it is of type T (T::kKind); null otherwise.
  template <class T>
  static std::shared_ptr<T> get(DAT_HANDLE handle) {
    auto object = lookup(handle);
    if (!object || object->kind() != T::kKind) return nullptr;
    return std::static_pointer_cast<T>(object);
  }

  // Unpublishes the handle (later lookups fail) and returns the object, or null when the
  // handle was not live with that kind. The object itself dies with its last reference.
  static std::shared_ptr<Object> retire(DAT_HANDLE handle, Kind kind);
};

}  // namespace dat_api
