// ckptctl export: consolidated model weights under their Hugging Face names, as one
// safetensors file, or as a Hugging Face model directory (sharded safetensors with
// model.safetensors.index.json, config.json with the export dtype, generation_config.json and
// the tokenizer files that the checkpoint carries; formats/hf_files.h) that transformers loads.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ckpt/reader.h"
#include "ckpt/tools.h"
#include "formats/hf_files.h"
#include "formats/safetensors.h"

namespace ftrain::ckpt {

using nlohmann::json;

namespace {

std::string Megabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

// The weights an export writes: the preferred kind (bf16 "model" for bf16, fp32 "master" for
// fp32), or the other one when a checkpoint has none of it.
StatusOr<std::vector<const ManifestTensor*>> ExportedTensors(const Manifest& m,
                                                             const std::string& dir,
                                                             const std::string& dtype) {
  if (dtype != "bf16" && dtype != "fp32") {
    return Status::InvalidArgument("--dtype must be bf16 or fp32, got '" + dtype + "'");
  }
  const std::string preferred = dtype == "bf16" ? "model" : "master";
  const std::string other = dtype == "bf16" ? "master" : "model";
  std::vector<const ManifestTensor*> tensors;
  for (const auto& t : m.tensors) {
    if (t.kind == preferred) tensors.push_back(&t);
  }
  if (tensors.empty()) {
    for (const auto& t : m.tensors) {
      if (t.kind == other) tensors.push_back(&t);
    }
  }
  if (tensors.empty()) {
    return Status::NotFound("checkpoint '" + dir + "' has no model or master weights to export");
  }
  return tensors;
}

// One tensor's consolidated bytes in the export dtype (fp32 -> bf16 rounds to nearest even).
StatusOr<std::vector<uint8_t>> ExportedBytes(CheckpointReader& reader, const ManifestTensor& t,
                                             const std::string& dtype) {
  std::vector<uint8_t> raw;
  FT_RETURN_IF_ERROR(reader.ReadTensor(t.kind, t.name, &raw));
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<uint8_t> conv;
  if (dtype == "bf16" && t.dtype == DType::kFloat32) {
    conv.resize(n * 2);
    for (size_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, raw.data() + 4 * i, 4);
      uint16_t h = Fp32ToBf16(f);
      std::memcpy(conv.data() + 2 * i, &h, 2);
    }
    return conv;
  }
  if (dtype == "fp32" && t.dtype == DType::kBFloat16) {
    conv.resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
      float f = static_cast<float>(ElementAsDouble(DType::kBFloat16, raw.data(), i));
      std::memcpy(conv.data() + 4 * i, &f, 4);
    }
    return conv;
  }
  if ((dtype == "bf16") != (t.dtype == DType::kBFloat16)) {
    return Status::InvalidArgument("tensor " + t.name + " has dtype " + DTypeName(t.dtype) +
                                   ", which export cannot convert to " + dtype);
  }
  return raw;
}

// Writes `tensors` to one safetensors file at `path`; adds their byte count to *total.
Status WriteWeightsFile(CheckpointReader& reader, const std::vector<const ManifestTensor*>& tensors,
                        const std::string& dtype, const std::string& path,
                        const std::map<std::string, std::string>& meta, uint64_t* total) {
  std::vector<model::SafetensorsEntry> entries;
  for (const auto* t : tensors) {
    entries.push_back({t->name, dtype == "bf16" ? "BF16" : "F32", t->shape, 0, 0});
  }
  FT_ASSIGN_OR_RETURN(auto writer, model::SafetensorsWriter::Begin(path, entries, meta));
  for (const auto* t : tensors) {
    FT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ExportedBytes(reader, *t, dtype));
    FT_RETURN_IF_ERROR(writer->Write(t->name, bytes.data(), bytes.size()));
    *total += bytes.size();
  }
  return writer->Finish();
}

}  // namespace

Status ExportSafetensors(const std::string& dir, const std::string& dtype,
                         const std::string& out_path, std::ostream& log, Env* env) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir, env));
  const Manifest& m = reader->manifest();
  FT_ASSIGN_OR_RETURN(std::vector<const ManifestTensor*> tensors, ExportedTensors(m, dir, dtype));
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"ftrain_step", std::to_string(m.meta.step)},
                                             {"ftrain_source", tensors.front()->kind},
                                             {"ftrain_code_version", m.meta.code_version}};
  uint64_t total = 0;
  FT_RETURN_IF_ERROR(WriteWeightsFile(*reader, tensors, dtype, out_path, meta, &total));
  log << "exported " << tensors.size() << " tensors (" << Megabytes(total) << ", " << dtype
      << ", from " << tensors.front()->kind << " weights of step " << m.meta.step << ") to "
      << out_path << "\n";
  return Status::Ok();
}

namespace {

// Tensors in order, cut into files of at most `limit` bytes (a larger tensor gets a file of
// its own), as HF's save_pretrained does.
std::vector<std::vector<const ManifestTensor*>> PlanShards(
    const std::vector<const ManifestTensor*>& tensors, size_t elem, uint64_t limit) {
  std::vector<std::vector<const ManifestTensor*>> shards;
  uint64_t in_current = 0;
  for (const auto* t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t->numel()) * elem;
    if (shards.empty() || (in_current > 0 && in_current + bytes > limit)) {
      shards.emplace_back();
      in_current = 0;
    }
    shards.back().push_back(t);
    in_current += bytes;
  }
  return shards;
}

// The output directory: made if missing; one with files in it is refused (nothing of an
// earlier export is silently mixed in or overwritten).
Status PrepareOutputDir(const std::string& out_dir, Env* env) {
  if (env->FileExists(out_dir)) {
    FT_ASSIGN_OR_RETURN(std::vector<std::string> children, env->ListDir(out_dir));
    if (!children.empty()) {
      return Status::InvalidArgument("-o '" + out_dir +
                                     "' is not empty; give a new or empty directory");
    }
    return Status::Ok();
  }
  return CreateDirs(env, out_dir);
}

// The Hugging Face files the checkpoint carries (state group "hf"), config.json with
// `torch_dtype` set to the export dtype.
StatusOr<std::map<std::string, std::string>> CarriedHfFiles(CheckpointReader& reader,
                                                            const std::string& dir,
                                                            const std::string& dtype) {
  std::map<std::string, std::string> files;
  const Manifest& m = reader.manifest();
  const auto& known = model::HfCarriedFileNames();
  for (const auto& b : m.blobs) {
    if (b.group != model::kHfStateGroup) continue;
    // Only the names ftrain carries become files (a name from a checkpoint is not trusted).
    if (std::find(known.begin(), known.end(), b.name) == known.end()) {
      return Status::Corruption("checkpoint '" + dir + "' carries a Hugging Face file named '" +
                                b.name + "', which is not one ftrain carries");
    }
    FT_ASSIGN_OR_RETURN(files[b.name], reader.ReadBlob(b.group, b.name, 0, m.meta.world_size));
  }
  if (files.count("config.json") == 0) {
    return Status::InvalidArgument(
        "checkpoint '" + dir +
        "' carries no Hugging Face config.json (it was written before checkpoints carried "
        "them); use --format safetensors");
  }
  FT_ASSIGN_OR_RETURN(
      files["config.json"],
      model::WithTorchDtype(files["config.json"], dtype == "bf16" ? "bfloat16" : "float32",
                            "config.json in checkpoint '" + dir + "'"));
  return files;
}

}  // namespace

Status ExportHf(const std::string& dir, const std::string& dtype, double shard_gb,
                const std::string& out_dir, std::ostream& log, Env* env) {
  if (!(shard_gb > 0) || shard_gb > 1e6) {
    return Status::InvalidArgument("--shard-gb must be a positive number of GB, got " +
                                   std::to_string(shard_gb));
  }
  FT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir, env));
  const Manifest& m = reader->manifest();
  FT_ASSIGN_OR_RETURN(std::vector<const ManifestTensor*> tensors, ExportedTensors(m, dir, dtype));
  FT_ASSIGN_OR_RETURN(auto files, CarriedHfFiles(*reader, dir, dtype));
  FT_RETURN_IF_ERROR(PrepareOutputDir(out_dir, env));
  const auto shards =
      PlanShards(tensors, dtype == "bf16" ? 2 : 4, static_cast<uint64_t>(shard_gb * 1e9));
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  json weight_map = json::object();
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    FT_RETURN_IF_ERROR(
        WriteWeightsFile(*reader, shards[i], dtype, JoinPath(out_dir, name), meta, &total));
    for (const auto* t : shards[i]) weight_map[t->name] = name;
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  FT_RETURN_IF_ERROR(WriteFileDurably(env, JoinPath(out_dir, "model.safetensors.index.json"),
                                      index.dump(2) + "\n"));
  for (const auto& [name, bytes] : files) {
    FT_RETURN_IF_ERROR(WriteFileDurably(env, JoinPath(out_dir, name), bytes));
  }
  log << "exported " << tensors.size() << " tensors (" << Megabytes(total) << ", " << dtype
      << ", from " << tensors.front()->kind << " weights of step " << m.meta.step << ") in "
      << shards.size() << " file(s) with " << files.size() << " Hugging Face file(s) to " << out_dir
      << "\n";
  return Status::Ok();
}

}  // namespace ftrain::ckpt
