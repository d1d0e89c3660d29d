// orch/probe_async.h - the detector's probes off the caller's thread (issue 44, hole 11): each
// silent node's probes (orch/detect.h GatherEvidence: a TCP connect, the watcher's own view, a
// task) run on a thread of their own, one at a time per node, and their answer waits to be
// taken by the next look. The controller's 0.5 s tick, and with it USR1/TERM, never waits on
// a connect to a blackholed address or an srun that does not start.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "orch/detect.h"

namespace ftrain::orch {

class AsyncProbes {
 public:
  // `prober` is used only on the probe threads (several at once: it must be thread-safe and
  // share nothing unguarded with the caller's thread, e.g. a SlurmProber with its own client).
  AsyncProbes(DetectSettings s, std::shared_ptr<Prober> prober);
  // Probes in flight are left to end on their own (each is bounded by its timeouts); their
  // answers are dropped. Nothing waits for them.
  ~AsyncProbes();
  AsyncProbes(const AsyncProbes&) = delete;
  AsyncProbes& operator=(const AsyncProbes&) = delete;

  // Asks for the probes of `node`, silent for `silent_s` at `asked_at` (monotonic seconds);
  // nothing when its probes are in flight already.
  void Ask(const std::string& node, double silent_s, const std::vector<std::string>& nodes,
           double asked_at);
  // The answer of the newest finished probes of `node` asked after `since` (the start of its
  // silence: every ask of a silence comes a heartbeat timeout later), once.
  std::optional<Evidence> Take(const std::string& node, double since);
  // Probes of `node` are running.
  bool InFlight(const std::string& node) const;

 private:
  struct Slot {
    bool in_flight = false;
    std::optional<Evidence> answer;  // finished, not taken yet
    double answer_asked_at = 0;      // when the answer's probes were asked
  };
  struct Shared {
    DetectSettings s;
    std::shared_ptr<Prober> prober;
    mutable std::mutex mu;
    std::map<std::string, Slot> slots;  // guarded by mu
  };
  std::shared_ptr<Shared> shared_;  // the probe threads hold it too: they may outlive this
};

}  // namespace ftrain::orch
