// The process's rdma_cm thread: one Boost.Asio io_context on a thread of its own, started on
// first use and never stopped (ids may be destroyed as the process exits), on which every
// socket of the connection manager lives (cm/: dials, listeners, channels). Program threads
// hand it work with post(), or with run_on_cm_thread() when they need the answer.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <string>
#include <utility>

#include "base/job_secret.h"

namespace rdmacm_api {

boost::asio::io_context& cm_io();
bool on_cm_thread();

template <class F>
void post_to_cm_thread(F&& f) {
  boost::asio::post(cm_io(), std::forward<F>(f));
}

// Runs `f` on the CM thread and returns once it ran (at once when called there).
void run_on_cm_thread(const std::function<void()>& f);

// The job's secret (EMURDMA_SECRET_FILE / EMURDMA_SECRET), read once: every CM stream proves it
// (cm/cm_handshake.h) when there is one. `error` is set when one was named but refused.
const base::JobSecretResult& cm_secret();

}  // namespace rdmacm_api
