// The standard clocks as seconds, and a sleep in seconds: the one definition of the small
// helpers that the controller, the agent, the trainer's guards and ckptd each had their own
// copy of. Code that must fake time in tests takes an Env (core/env.h) instead and reads it
// with NowSeconds(env) and UnixSeconds(env); these are for the places that read the real clock
// directly.
#pragma once

#include <chrono>
#include <thread>

namespace ftrain {

// Seconds on steady_clock (any origin): for durations and deadlines, never for records.
inline double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Unix seconds on system_clock: for records people read; a step of the clock moves it.
inline double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Sleeps `s` seconds (nothing for s <= 0).
inline void SleepSeconds(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

}  // namespace ftrain
