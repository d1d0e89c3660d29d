// The operations behind `ckptctl`: list, inspect, diff (tools.cc) and export (export.cc), as
// library functions that print to a stream (so tests and other tools can call them). Exit-code
// policy stays in the CLI main; these return Status (Corruption/NotFound = "the checked thing is
// bad").
#pragma once

#include <ostream>
#include <string>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::ckpt {

Status PrintList(const std::string& root, bool json, std::ostream& out, Env* env);
Status PrintInspect(const std::string& dir, bool json, std::ostream& out, Env* env);

struct DiffResult {
  bool identical = true;
  int tensors_compared = 0;
  int blobs_compared = 0;
};
// Compares every tensor (globally, so different world sizes compare too) and every piece of
// state; prints each difference with the max abs difference for float tensors.
StatusOr<DiffResult> DiffCheckpoints(const std::string& a, const std::string& b, std::ostream& out,
                                     Env* env);

// Consolidated model weights under their Hugging Face names. dtype "bf16" reads the bf16
// model tensors (bit-exact with what training computed with) and "fp32" the fp32 master
// weights; when one kind is absent the other is converted (fp32 -> bf16 rounds to nearest
// even).
Status ExportSafetensors(const std::string& dir, const std::string& dtype,
                         const std::string& out_path, std::ostream& log, Env* env);

// A Hugging Face model directory at `out_dir` (made if missing; refused when not empty):
// the weights (as ExportSafetensors) in model-0000i-of-0000n.safetensors files of at most
// `shard_gb` GB each with model.safetensors.index.json, and the Hugging Face files the
// checkpoint carries (formats/hf_files.h), config.json with torch_dtype set to the export dtype.
// A checkpoint that carries no config.json (written by an older ftrain) is InvalidArgument.
Status ExportHf(const std::string& dir, const std::string& dtype, double shard_gb,
                const std::string& out_dir, std::ostream& log, Env* env);

// A checkpoint directory from a PATH that is either a checkpoint or a root (-> latest).
StatusOr<std::string> ResolveCheckpointDir(const std::string& path, Env* env);

uint16_t Fp32ToBf16(float f);

}  // namespace ftrain::ckpt
