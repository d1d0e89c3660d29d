// A Hugging Face config.json as a LlamaConfig: LlamaForCausalLM (Llama 2/3/3.1: head_dim,
// attention_bias, mlp_bias, rope_scaling linear and llama3, tied embeddings),
// MistralForCausalLM (sliding_window) and Qwen2ForCausalLM (q/k/v biases, use_sliding_window,
// max_window_layers, layer_types), with transformers 5.17's defaults for absent keys. Anything
// that would change the math and is not implemented (another architecture, rope type or an
// unknown key) is an InvalidArgument naming the key and the file: never silently ignored.
// No LibTorch here; the JSON is parsed with nlohmann_json.
#pragma once

#include <string>

#include "core/config.h"
#include "core/status.h"
#include "formats/llama_config.h"

namespace ftrain {

// DIR/config.json for a directory, `path` itself otherwise.
std::string HfConfigPath(const std::string& dir_or_file);

// Reads and validates a config.json (or the directory holding one). The result records the
// path, the architecture and the file's bytes (hf_config_path, architecture, hf_config_text);
// max_seq_len is max_position_embeddings.
StatusOr<LlamaConfig> ReadHfConfig(const std::string& dir_or_file);

// model.hf = DIR from `config`, then every other model.* key checked against it: equal is
// fine, different is an InvalidArgument naming the key, its origin and the file.
// model.max_seq_len may be at most max_position_embeddings (the training length).
// When the config.json is gone (the base directory moved after the run started) and run.dir
// holds the copy the run's first start kept of that same file (RunLayout::hf_config_copy),
// the model comes from the copy, with a warning: a restart never needs the base directory.
StatusOr<LlamaConfig> LlamaConfigFromHfSection(const Config& config);

// The copy's contents for a model read from a config.json: {"source": path, "text": bytes}.
std::string HfConfigCopyJson(const LlamaConfig& model);

}  // namespace ftrain
