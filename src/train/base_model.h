// The run's base model (train.init): its weights into the FSDP engine at a fresh start, each
// rank reading only the byte ranges of its own shards, and the Hugging Face files (config,
// generation config, tokenizer) that every checkpoint carries so that neither a restart nor
// `ckptctl export --format hf` ever needs the base directory again. A resume reads neither
// from the base: the trainer calls LoadBaseWeights only when it starts fresh.
#pragma once

#include <string>

#include "comm/context.h"
#include "core/status.h"
#include "formats/hf_files.h"
#include "fsdp/engine.h"
#include "train/config/train_config.h"

namespace ftrain::train {

// Fills the engine's master shards (built with FsdpConfig::defer_init) from `init` (a
// safetensors file, an index or a Hugging Face model directory): every rank checks the
// tensor set against the engine's parameters, then reads only its own slices (pread) and
// converts them to fp32. Collective: every rank learns whether all loaded. Bad or missing
// files, tensors or dtypes are InvalidArgument naming the file and the tensor (exit 2); a
// read that failed with an I/O error stays IOError (a restart may help).
Status LoadBaseWeights(const std::string& init, comm::DistContext& ctx, fsdp::FsdpEngine& engine);

// The dataset's side of the carried files: its tokenizer file (a local path; empty for data
// served over HTTP) and its BOS/EOS ids (-1: none).
struct DataTokenizer {
  std::string path;
  int bos_id = -1;
  int eos_id = -1;
};

// Rank 0's Hugging Face files for this run: those the checkpoint it will resume from carries
// (train.resume auto: the newest complete one; a path: that one), else collected from the
// base directory of train.init and the dataset (model::CollectHfFiles).
StatusOr<model::HfFiles> HfFilesForRun(const TrainConfig& cfg, const DataTokenizer& data, Env* env);

// Rank 0's `sources` (file name -> where it came from) as a JSON object on every rank, for the
// checkpoint layout (collective on the control group).
StatusOr<std::string> ShareHfSources(comm::DistContext& ctx, const model::HfFiles& files);

}  // namespace ftrain::train
