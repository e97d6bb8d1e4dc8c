// An spdlog sink that keeps the lines it is given, to count those that contain a text: what
// tests/log_capture.h (the engine's logger) and the connection manager's tests attach.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <string>
#include <vector>

namespace emu_test {

class LineSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // The lines captured so far that contain `text`.
  std::vector<std::string> lines_with(const std::string& text) {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& l : lines_) {
      if (l.find(text) != std::string::npos) out.push_back(l);
    }
    return out;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::vector<std::string> lines_;
};

}  // namespace emu_test
