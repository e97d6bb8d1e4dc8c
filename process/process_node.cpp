#include "process/process_node.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <system_error>

#include "base/log.h"
#include "process/fault_plan.h"
#include "transports/from_environment.h"

namespace process {

namespace {

// The process's node: its transport (observed when a plan or a capture asks), the engine's
// half of the fault plan.
std::unique_ptr<emu::Node> build_node() {
  base::init_logging();
  FaultPlan plan = fault_plan_from_environment();
  if (!plan.error.empty()) {
    spdlog::error("{}: the fault plan is refused, so emu0 cannot be opened (docs/usage.md)",
                  plan.error);
    throw std::system_error(EINVAL, std::generic_category(), "the fault plan is refused");
  }
  auto t = transports::transport_from_environment(std::move(plan.link));
  // Only a refused secret gives none (logged with the variable and the reason).
  if (!t) throw std::system_error(EACCES, std::generic_category(), "the job's secret is refused");
  auto node = std::make_unique<emu::Node>(std::move(t));
  node->set_faults(std::move(plan.engine));  // before any QP: they keep the pointer
  return node;
}

// The node and the process that built it. A forked child inherits the parent's node without
// its threads, and with the parent's transport address (its listeners, its shared-memory
// names): the child's first use builds a node of its own, as a child opening a kernel device
// gets a context of its own (rdma-core's pyverbs suite forks its two players after the parent
// opened the device). The inherited node is left alone: never used again, never destroyed
// (its destructor would join threads the child does not have).
struct Holder {
  std::mutex build_mutex;
  std::atomic<emu::Node*> current{nullptr};
  pid_t owner = 0;

  Holder() {
    // Held across fork, so that the child's copy is never locked by a thread it lacks.
    pthread_atfork([] { holder().build_mutex.lock(); }, [] { holder().build_mutex.unlock(); },
                   [] {
                     holder().build_mutex.unlock();
                     holder().current.store(nullptr, std::memory_order_relaxed);
                   });
  }

  static Holder& holder() {
    static Holder h;
    return h;
  }
};

// Destroys this process's node at exit. A static made right after the first node is built, so
// that it is destroyed before the statics the node's construction made (spdlog's, the
// transports'), as the function-local static Node it replaces was.
struct NodeAtExit {
  ~NodeAtExit() {
    Holder& h = Holder::holder();
    emu::Node* n = h.current.load(std::memory_order_acquire);
    if (n != nullptr && h.owner == ::getpid()) delete n;
  }
};

}  // namespace

emu::Node& node() {
  Holder& h = Holder::holder();
  if (emu::Node* n = h.current.load(std::memory_order_acquire)) return *n;
  std::lock_guard lock(h.build_mutex);
  if (emu::Node* n = h.current.load(std::memory_order_acquire)) return *n;
  // A throw leaves the node unbuilt: the next call tries again (the environment may be fixed).
  auto built = build_node();
  h.owner = ::getpid();
  h.current.store(built.get(), std::memory_order_release);
  static NodeAtExit at_exit;
  return *built.release();
}

}  // namespace process
