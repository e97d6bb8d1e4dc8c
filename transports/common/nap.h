// The length of a transport thread's nap beside a busy-polling program: it starts short and
// doubles at each look that finds the program still keeping up, to a cap, so that a program
// that polls on its own is disturbed less and less; it starts over once the program stops.
// Each transport sets its own bounds and decides when to nap (shm_receiver_thread.cpp,
// tcp/tcp_nap_policy.h).
#pragma once

#include <algorithm>

namespace transports {

template <typename Duration>
class DoublingNap {
 public:
  DoublingNap(Duration shortest, Duration longest)
      : shortest_(shortest), longest_(longest), next_(shortest) {}
  // The nap to take now; the one after it is twice as long, up to the cap.
  Duration take() {
    const Duration now = next_;
    next_ = std::min(next_ * 2, longest_);
    return now;
  }
  // The program stopped polling: the next nap is the shortest again.
  void start_over() { next_ = shortest_; }

 private:
  Duration shortest_;
  Duration longest_;
  Duration next_;
};

}  // namespace transports
