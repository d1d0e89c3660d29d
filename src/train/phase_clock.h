// Every rank's clock for the phases of one step (train/telemetry/step_phases.h), and the two
// collectives that carry them to rank 0: the host names once at start, and the boundary's flag
// agreement, an all-gather of [flags, phases] where an all-reduce (max) of the flags ran before. On
// a GPU the compute and optimizer spans are CUDA events on the current stream (read after the
// step's last host synchronisation), not host timers around asynchronous work. Header without
// LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/telemetry/step_phases.h"

namespace ftrain::comm {
class Comm;
}

namespace ftrain::train {

class PhaseClock {
 public:
  // cuda_index >= 0: time compute and optimizer with CUDA events on that device.
  explicit PhaseClock(int cuda_index);
  ~PhaseClock();
  void StepStart();
  // After the micro-batches: the data wait and the engine's collective wait so far.
  void ComputeEnd(double data_wait_s, double comm_wait_s);
  // After the optimizer: the engine's collective wait of the whole step.
  void OptimizerEnd(double comm_wait_total_s);
  // Checkpoint stall (a snapshot copy waited for, a save at the boundary): counted in the
  // next vector Take() returns.
  void AddStall(double s) { stall_s_ += s; }
  // The reader's running total of bytes read (data::ReaderStats::bytes_read): Take() reports
  // what was read since the previous step.
  void NoteBytesRead(uint64_t total) { read_total_ = total; }
  // This step's phases (the boundary wait measured by the caller); resets the stall.
  records::RankPhases Take(double boundary_wait_s);

 private:
  using Clock = std::chrono::steady_clock;
  struct Events;
  std::unique_ptr<Events> events_;  // null on CPU
  Clock::time_point t0_, t1_, t2_;
  double data_wait_s_ = 0, comm_fb_s_ = 0, comm_total_s_ = 0, stall_s_ = 0;
  uint64_t read_total_ = 0, read_reported_ = 0;
};

// Every rank's host (ckptd's node id: SLURMD_NODENAME, else the host name), once at start
// (collective on `control`).
StatusOr<std::vector<std::string>> GatherHosts(comm::Comm& control, const std::string& mine);

}  // namespace ftrain::train
