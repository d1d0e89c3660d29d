// Every rank's clock for the phases of one step (train/telemetry/step_phases.h), and the two
// collectives that carry them to rank 0: the host names once at start, and the boundary's flag
// agreement, an all-gather of [flags, phases] where an all-reduce (max) of the flags ran before. On
// a GPU the compute and optimizer spans are CUDA events on the current stream, not host timers
// around asynchronous work, and they are read one step late (a step's record carries the
// previous step's compute, optimizer, data-wait and exposed-communication figures), so that
// reading them never makes the host wait for the device. Header without LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/telemetry/step_phases.h"

namespace ftrain::fsdp {
class StreamEvents;  // fsdp/stream_waits.h
}

namespace ftrain::comm {
class Comm;
}

namespace ftrain::train {

class PhaseClock {
 public:
  // cuda_index >= 0: time compute and optimizer with CUDA events on that device.
  explicit PhaseClock(int cuda_index);
  // With these events (a fake in tests; null: host times).
  explicit PhaseClock(std::unique_ptr<fsdp::StreamEvents> events);
  ~PhaseClock();
  void StepStart();
  // After the micro-batches: the time spent waiting for the reader.
  void ComputeEnd(double data_wait_s);
  // After the optimizer: the step's exposed communication (fsdp::StepStats::comm_wait_s) and
  // its part during the micro-batches (comm_wait_fb_s).
  void OptimizerEnd(double comm_wait_total_s, double comm_wait_fb_s);
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
  struct Sample;
  void Record(int* event);
  std::unique_ptr<fsdp::StreamEvents> events_;  // null on the CPU
  std::unique_ptr<Sample> samples_[2];          // alternating on a GPU
  int current_ = 0;
  double stall_s_ = 0;
  uint64_t read_total_ = 0, read_reported_ = 0;
};

// Every rank's host (ckptd's node id: SLURMD_NODENAME, else the host name), once at start
// (collective on `control`).
StatusOr<std::vector<std::string>> GatherHosts(comm::Comm& control, const std::string& mine);

}  // namespace ftrain::train
