// Which library must serve a device's objects, and the check that a public verb called on our
// library was handed to the stand-in exactly as often as the program called it.
#pragma once

#include <cstdint>
#include <string>

#include "tests/delegation/check.h"
#include "tests/delegation/standin.h"

namespace delegation {

struct Serving {
  // The file whose code must serve the device: the inline verbs (post_send, poll_cq ...) jump
  // through the context's ops, which must point into this library.
  std::string library;
  // The device is the stand-in's: every public verb on its objects must enter the stand-in.
  bool standin = false;
};

// Runs `call` and, for a stand-in device, checks that it entered the stand-in's `verb` exactly
// `times` times: our library forwarded it (not zero) and did not run it twice.
template <typename Fn>
auto forwarded(const Serving& serving, const char* verb, uint64_t times, Fn&& call) {
  const uint64_t before = serving.standin ? standin_calls(verb) : 0;
  auto result = call();
  if (serving.standin) {
    const uint64_t delta = standin_calls(verb) - before;
    DELEGATION_CHECK(delta == times,
                     "%s on the stand-in's objects entered the stand-in %llu times, expected %llu "
                     "(our %s must hand it to EMURDMA_SYSTEM_FN(%s, ...))",
                     verb, static_cast<unsigned long long>(delta),
                     static_cast<unsigned long long>(times), verb, verb);
  }
  return result;
}

}  // namespace delegation
