// A tiny training config for tests that only validate configuration (no processes, no
// LibTorch): a 1-layer model, 10 steps, placeholder paths, plus `extra` config text.
#pragma once

#include <string>

#include "core/config.h"
#include "core/status.h"
#include "train/config/train_config.h"

namespace ftrain::train {

inline StatusOr<TrainConfig> LoadWith(const std::string& extra) {
  auto c = Config::Parse(
      "[model]\nvocab_size = 64\nhidden_size = 16\nintermediate_size = 32\nnum_layers = 1\n"
      "num_heads = 2\nmax_seq_len = 16\n[train]\nsteps = 10\n[data]\npath = /d\n[run]\n"
      "dir = /r\n" +
          extra,
      "test.cfg");
  if (!c.ok()) return c.status();
  return TrainConfig::Load(*c);
}

}  // namespace ftrain::train
