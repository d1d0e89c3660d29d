// Hugging Face directory files carried by checkpoints: collection at a run's start, the
// made config.json for a run without a base, the dtype patch at export.
#include "formats/hf_files.h"

#include <nlohmann/json.hpp>

#include "core/env.h"

namespace ftrain::model {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxCarriedBytes = 64u << 20;  // a Llama 3 tokenizer.json is ~9 MB

StatusOr<std::string> ReadCarried(const std::string& path, Env* env) {
  StatusOr<uint64_t> size = env->FileSize(path);
  if (!size.ok()) return Status::InvalidArgument("cannot stat '" + path + "'");
  if (*size > kMaxCarriedBytes) {
    return Status::InvalidArgument("'" + path + "' is " + std::to_string(*size) +
                                   " bytes, more than the 64 MiB carried with checkpoints");
  }
  std::string bytes;
  if (!env->ReadFile(path, &bytes).ok()) {
    return Status::InvalidArgument("cannot read '" + path + "'");
  }
  return bytes;
}

bool IsTokenizerFile(const std::string& name) {
  return name != "config.json" && name != "generation_config.json";
}

}  // namespace

const std::vector<std::string>& HfCarriedFileNames() {
  static const std::vector<std::string> kNames = {"config.json",
                                                  "generation_config.json",
                                                  "tokenizer.json",
                                                  "tokenizer_config.json",
                                                  "special_tokens_map.json",
                                                  "tokenizer.model",
                                                  "added_tokens.json",
                                                  "vocab.json",
                                                  "merges.txt",
                                                  "chat_template.jinja"};
  return kNames;
}

std::string HfBaseDir(const std::string& init, Env* env) {
  if (init.empty() || init == "random") return "";
  if (env->IsDirectory(init)) return init;
  const size_t slash = init.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : init.substr(0, slash);
}

StatusOr<HfFiles> CollectHfFiles(const std::string& base_dir, const std::string& data_tokenizer,
                                 const LlamaConfig& model, int bos_id, int eos_id, Env* env) {
  HfFiles out;
  bool tokenizer = false;
  for (const std::string& name :
       base_dir.empty() ? std::vector<std::string>() : HfCarriedFileNames()) {
    const std::string path = base_dir + "/" + name;
    if (!env->IsRegularFile(path)) continue;
    FT_ASSIGN_OR_RETURN(std::string text, ReadCarried(path, env));
    if (name == "config.json" || name == "generation_config.json") {
      const json j = json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return Status::InvalidArgument("'" + path + "' is not a JSON object");
      }
    }
    tokenizer = tokenizer || IsTokenizerFile(name);
    out.bytes[name] = std::move(text);
    out.sources[name] = path;
  }
  if (out.bytes.count("config.json") == 0) {
    out.bytes["config.json"] = LlamaConfigJson(model, bos_id, eos_id);
    out.sources["config.json"] = "made from [model] (LlamaForCausalLM)";
  }
  if (!tokenizer && !data_tokenizer.empty() && env->IsRegularFile(data_tokenizer)) {
    const size_t slash = data_tokenizer.rfind('/');
    const std::string name =
        slash == std::string::npos ? data_tokenizer : data_tokenizer.substr(slash + 1);
    FT_ASSIGN_OR_RETURN(out.bytes[name], ReadCarried(data_tokenizer, env));
    out.sources[name] = data_tokenizer;
  }
  return out;
}

std::string LlamaConfigJson(const LlamaConfig& c, int bos_id, int eos_id) {
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.HeadDim()},
            {"max_position_embeddings", c.max_seq_len},
            {"rope_theta", c.rope_theta},
            {"rms_norm_eps", c.rms_norm_eps},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"tie_word_embeddings", c.tie_embeddings},
            {"torch_dtype", "float32"}};
  if (bos_id >= 0) j["bos_token_id"] = bos_id;
  if (eos_id >= 0) j["eos_token_id"] = eos_id;
  return j.dump(2) + "\n";
}

StatusOr<std::string> WithTorchDtype(const std::string& config_json, const std::string& dtype,
                                     const std::string& where) {
  json j = json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(where + " is not a JSON object");
  }
  j["torch_dtype"] = dtype;
  j["dtype"] = dtype;
  return j.dump(2) + "\n";
}

}  // namespace ftrain::model
