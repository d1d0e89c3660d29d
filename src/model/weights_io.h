// Hugging Face safetensors <-> LlamaModel: import initial weights from one model.safetensors
// or a sharded set (model.safetensors.index.json), or a model directory holding either;
// export back to one file. Checks names and shapes of the whole set before any parameter is
// written; errors name the tensor and file. bf16/fp16/fp32 sources are converted to the
// parameter dtype. A byte range of one tensor can be read alone (ReadRange: what an FSDP
// rank needs for its own shards). No LibTorch in this header (at::Tensor is only declared),
// so CLI code can include it cheaply.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/llama_config.h"
#include "formats/safetensors.h"

namespace at {
class Tensor;
}

namespace ftrain::model {

class LlamaModel;

// A parameter a checkpoint must hold: HF name and shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Every parameter of the HF model with this config, in HF named_parameters() order:
// model.embed_tokens.weight, model.layers.<i>.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}
// _proj, input_layernorm, post_attention_layernorm}.weight (each projection followed by its
// .bias where cfg has one: qkv_bias, o_bias, mlp_bias), model.norm.weight, lm_head.weight
// (untied only). LlamaModel registers exactly these.
std::vector<TensorSpec> LlamaParamSpecs(const LlamaConfig& cfg);

// "[4096, 11008]": a shape as every error message about one prints it.
std::string ShapeString(const std::vector<int64_t>& shape);

// A validated safetensors checkpoint: every header read and checked (see safetensors.h), and
// for an index every file name checked (a plain name in the index's directory) and every
// tensor found in the file the index names. Old HF exports' "*.rotary_emb.inv_freq" buffers
// are skipped (HF ignores them too).
class SafetensorsCheckpoint {
 public:
  // `path` is a *.safetensors file, a *.index.json (HF sharded layout), or a directory with
  // model.safetensors.index.json or model.safetensors in it (a Hugging Face model directory;
  // the index wins when both are there).
  static StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);

  // The tensor set must equal `expected`: errors name the missing, extra or wrongly shaped
  // tensor and its file. Source dtypes must be BF16, F16 or F32.
  Status Check(const std::vector<TensorSpec>& expected) const;
  // Reads tensor `name` into `dst` (same shape, any floating dtype, any device), converting.
  Status Read(const std::string& name, const at::Tensor& dst) const;
  // Reads elements [offset, offset + dst.numel()) of tensor `name` (row-major, flattened)
  // into the 1-D `dst` (any floating dtype, any device), converting; only those bytes are
  // read from the file (pread, in pieces of at most 64 MiB).
  Status ReadRange(const std::string& name, int64_t offset, const at::Tensor& dst) const;

  std::vector<std::string> Names() const;  // sorted
  const std::string& path() const { return path_; }
  // Bytes of tensor data read from the files so far (Read and ReadRange), and in all.
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t total_bytes() const;

 private:
  struct Located {
    std::string file;  // full path
    const SafetensorsHeader* header = nullptr;
    SafetensorsEntry entry;
  };
  SafetensorsCheckpoint() = default;
  Status AddFile(const std::string& file, const std::map<std::string, std::string>* index_names);

  std::string path_;
  std::map<std::string, SafetensorsHeader> headers_;  // by file path
  std::map<std::string, Located> tensors_;            // by tensor name
  mutable uint64_t bytes_read_ = 0;
};

// What `path` (a file, an index or a model directory) opens as: the directory resolved to
// its index or model.safetensors, anything else unchanged. NotFound names the directory and
// both file names when a directory has neither.
StatusOr<std::string> ResolveSafetensorsPath(const std::string& path);

// Loads every parameter of `model` from `path` (see SafetensorsCheckpoint). The model must
// hold materialized parameters (not an FSDP engine's released ones). On an error found while
// checking, the model is unchanged; an I/O error while reading may leave it partly loaded.
Status LoadSafetensors(LlamaModel& model, const std::string& path);

enum class WeightsDType { kBF16, kFP32 };
// "bf16" | "fp32"; anything else is InvalidArgument naming the text.
StatusOr<WeightsDType> ParseWeightsDType(const std::string& text);

// Writes every parameter (HF names, named_parameters() order, metadata format=pt) to one
// safetensors file at `path` via path.tmp + fsync + rename. Bit-exact round trip with
// LoadSafetensors when the parameter dtype equals `dtype`.
Status SaveSafetensors(const LlamaModel& model, const std::string& path, WeightsDType dtype);

}  // namespace ftrain::model
