// TensorBoard event files (rank 0): tensorboard.Event protobuf messages (the minimal,
// wire-compatible tensorboard_event.proto, protobuf lite) in TFRecord framing: uint64 length,
// masked CRC-32C of the length, the data, masked CRC-32C of the data (CRC-32C by Boost.CRC).
// One new file per process, events.out.tfevents.<unix>.<host>.<pid>; its first record is
// file_version "brain.Event:2", its second a SessionLog START at the first step this process
// writes, so TensorBoard drops what a crashed predecessor wrote past the checkpoint it resumed
// from. Scalars only: no histograms, images or graphs. No fsync (metrics, not state).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ftrain::train {

// CRC-32C (Castagnoli) of `n` bytes, rotated and offset the way TFRecord stores it.
uint32_t MaskedCrc32c(const void* data, size_t n);
// One TFRecord: the framing around `data`.
std::string FrameTfRecord(const std::string& data);

class TensorBoardWriter {
 public:
  ~TensorBoardWriter();
  // Creates `dir` (and parents) if needed and a new event file in it, named after
  // `unix_time`, this host and this process. `first_step`: the step of the first scalars
  // this process will write (resume step + 1).
  static StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir,
                                                           int64_t first_step, double unix_time);
  // One event holding every scalar at `step`, handed to the kernel before returning.
  Status WriteScalars(int64_t step, double wall_time,
                      const std::vector<std::pair<std::string, float>>& scalars);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter() = default;
  Status WriteRecord(const std::string& event_bytes);
  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace ftrain::train
