// The process's rdma_cm thread (cm_thread.h).
#include "rdmacm_api/cm_thread.h"

#include <boost/asio/executor_work_guard.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace rdmacm_api {
namespace {

struct CmThread {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
};

// Never destroyed: the thread runs until the process ends, so that an id destroyed during exit
// still finds it.
CmThread& cm_thread() {
  static CmThread* instance = new CmThread;
  return *instance;
}

}  // namespace

boost::asio::io_context& cm_io() {
  return cm_thread().io;
}

bool on_cm_thread() {
  return std::this_thread::get_id() == cm_thread().thread.get_id();
}

void run_on_cm_thread(const std::function<void()>& f) {
  if (on_cm_thread()) {
    f();
    return;
  }
  std::mutex mutex;
  std::condition_variable ran;
  bool done = false;
  post_to_cm_thread([&] {
    f();
    std::lock_guard lock(mutex);
    done = true;
    ran.notify_one();
  });
  std::unique_lock lock(mutex);
  ran.wait(lock, [&] { return done; });
}

const base::JobSecretResult& cm_secret() {
  static const base::JobSecretResult secret = base::job_secret_from_environment();
  return secret;
}

}  // namespace rdmacm_api
