// The Hugging Face files that travel with a run's checkpoints (state group "hf", written by
// rank 0), so that `ckptctl export --format hf` writes a directory transformers loads without
// the base model's directory: config.json (the base's as it came, or one made from [model] for
// a LlamaForCausalLM when the run had no Hugging Face base), generation_config.json (the
// base's, if it has one) and the tokenizer files (the base's, else the dataset's). Reads
// small files only; no LibTorch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "formats/llama_config.h"

namespace ftrain::model {

// The checkpoint state group that carries them (one replicated blob per file name).
inline constexpr char kHfStateGroup[] = "hf";

struct HfFiles {
  std::map<std::string, std::string> bytes;    // file name -> contents
  std::map<std::string, std::string> sources;  // file name -> where it came from
  bool empty() const { return bytes.empty(); }
};

// The file names carried from a base directory, besides the weights: config.json,
// generation_config.json and every tokenizer file transformers writes (tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, tokenizer.model, added_tokens.json,
// vocab.json, merges.txt, chat_template.jinja).
const std::vector<std::string>& HfCarriedFileNames();

// The directory a train.init value names: itself when it is a directory, else the directory of
// the file (a model.safetensors or an index); empty for "random".
std::string HfBaseDir(const std::string& init, Env* env);

// What a run carries: every HfCarriedFileNames() file in `base_dir` (empty: no base), a made
// config.json (LlamaConfigJson) when the base has none, and, when the base has no tokenizer
// file, the dataset's tokenizer `data_tokenizer` (a path; empty or missing: none). Errors
// (InvalidArgument) name the file: a config.json that is not a JSON object, a file over
// 64 MiB, one that cannot be read.
StatusOr<HfFiles> CollectHfFiles(const std::string& base_dir, const std::string& data_tokenizer,
                                 const LlamaConfig& model, int bos_id, int eos_id, Env* env);

// config.json of a LlamaForCausalLM with these shapes (ids < 0 are left out).
std::string LlamaConfigJson(const LlamaConfig& cfg, int bos_id, int eos_id);

// `config_json` with "torch_dtype" and "dtype" (transformers 5's name) set to `dtype`
// ("bfloat16" or "float32"), other keys unchanged. `where` names the text in errors.
StatusOr<std::string> WithTorchDtype(const std::string& config_json, const std::string& dtype,
                                     const std::string& where);

}  // namespace ftrain::model
