// The log lines of emurdma (spdlog's default logger) while a test runs, to count them. Create
// it before the nodes and transports whose lines it captures, destroy it after them: the
// logger's sink list is not guarded against threads that log meanwhile.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.h"
#include "tests/line_sink.h"

namespace emu_test {

class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<LineSink>()) {
    base::init_logging();
    logger_ = spdlog::default_logger();
    logger_->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = logger_->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The lines captured so far that contain `text`.
  std::vector<std::string> lines_with(const std::string& text) const {
    return sink_->lines_with(text);
  }

 private:
  std::shared_ptr<LineSink> sink_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace emu_test
