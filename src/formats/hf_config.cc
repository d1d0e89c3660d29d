// config.json -> LlamaConfig. Every key of the file is either read (and validated), known not
// to change the forward/backward math (token ids, generation settings, metadata), or refused
// with one line naming it. Defaults for absent keys are those of transformers 5.17's
// LlamaConfig / MistralConfig / Qwen2Config.
#include "formats/hf_config.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "core/log.h"
#include "core/run_layout.h"

namespace ftrain {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxConfigBytes = 4u << 20;  // real config.json files are a few KB

// The three supported model types and their transformers defaults.
struct Arch {
  const char* model_type;
  const char* architecture;
  int64_t vocab_size, intermediate_size, max_position_embeddings;
  int64_t kv_heads;  // num_key_value_heads when absent; 0: num_attention_heads (null: always)
};
constexpr Arch kArchs[] = {
    {"llama", "LlamaForCausalLM", 32000, 11008, 2048, 0},
    {"mistral", "MistralForCausalLM", 32000, 14336, 4096 * 32, 8},
    {"qwen2", "Qwen2ForCausalLM", 151936, 22016, 32768, 32},
};

// Keys that never change what the model computes in training or evaluation.
const std::set<std::string>& HarmlessKeys() {
  static const std::set<std::string> keys = {"architectures",
                                             "model_type",
                                             "transformers_version",
                                             "_name_or_path",
                                             "dtype",
                                             "torch_dtype",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "pad_token_id",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "use_cache",
                                             "initializer_range",
                                             "_attn_implementation_autoset",
                                             "attn_implementation",
                                             "tokenizer_class",
                                             "id2label",
                                             "label2id",
                                             "task_specific_params",
                                             "finetuning_task",
                                             "problem_type",
                                             "prefix",
                                             "return_dict",
                                             "output_hidden_states",
                                             "output_attentions",
                                             "torchscript",
                                             "use_bfloat16",
                                             "tf_legacy_loss",
                                             "chunk_size_feed_forward",
                                             "max_length",
                                             "min_length",
                                             "do_sample",
                                             "early_stopping",
                                             "num_beams",
                                             "num_beam_groups",
                                             "diversity_penalty",
                                             "temperature",
                                             "top_k",
                                             "top_p",
                                             "typical_p",
                                             "repetition_penalty",
                                             "length_penalty",
                                             "no_repeat_ngram_size",
                                             "encoder_no_repeat_ngram_size",
                                             "bad_words_ids",
                                             "num_return_sequences",
                                             "output_scores",
                                             "return_dict_in_generate",
                                             "forced_bos_token_id",
                                             "forced_eos_token_id",
                                             "remove_invalid_values",
                                             "exponential_decay_length_penalty",
                                             "suppress_tokens",
                                             "begin_suppress_tokens"};
  return keys;
}

// Reads typed keys of one JSON object, remembering which were read; errors name the file.
class Reader {
 public:
  Reader(const json& j, std::string file, std::string prefix = "")
      : j_(j), file_(std::move(file)), prefix_(std::move(prefix)) {}

  Status Bad(const std::string& key, const std::string& what) const {
    return Status::InvalidArgument(file_ + ": " + prefix_ + key + " " + what);
  }
  // Absent or null: *out keeps its default; *given says whether a value was there.
  Status Int(const std::string& key, int64_t* out, bool* given = nullptr) {
    const json* v = Find(key);
    if (given) *given = v != nullptr;
    if (!v) return Status::Ok();
    if (v->is_number_integer()) {
      *out = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      *out = static_cast<int64_t>(v->get<double>());
    } else {
      return Bad(key, "= " + v->dump() + " is not an integer");
    }
    return Status::Ok();
  }
  Status Double(const std::string& key, double* out, bool* given = nullptr) {
    const json* v = Find(key);
    if (given) *given = v != nullptr;
    if (!v) return Status::Ok();
    if (!v->is_number()) return Bad(key, "= " + v->dump() + " is not a number");
    *out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const std::string& key, bool* out) {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Bad(key, "= " + v->dump() + " is not true or false");
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status String(const std::string& key, std::string* out) {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return Bad(key, "= " + v->dump() + " is not a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  // A key that must have one value for the math to be ftrain's (or be absent/null).
  Status Expect(const std::string& key, const std::set<json>& allowed, const std::string& why) {
    const json* v = Find(key);
    if (!v || allowed.count(*v)) return Status::Ok();
    return Bad(key, "= " + v->dump() + " is not supported: " + why);
  }
  // Present with the value null (transformers: None), which differs from absent (the default).
  bool Null(const std::string& key) {
    used_.insert(key);
    auto it = j_.find(key);
    return it != j_.end() && it->is_null();
  }
  const json* Find(const std::string& key) {
    used_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  // Every key not read and not in `harmless` is refused.
  Status CheckAllRead(const std::set<std::string>& harmless, const std::string& arch) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (used_.count(it.key()) || harmless.count(it.key())) continue;
      return Bad(it.key(), "is not a key ftrain knows for " + arch +
                               "; it may change the model, so it is refused (remove it from "
                               "the file if transformers ignores it)");
    }
    return Status::Ok();
  }

 private:
  const json& j_;
  std::string file_, prefix_;
  std::set<std::string> used_;
};

StatusOr<std::string> ReadText(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("model.hf: '" + path +
                                   "' is not a readable file; give a Hugging Face model "
                                   "directory or its config.json");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigBytes) {
    return Status::InvalidArgument(path + ": " + std::to_string(st.st_size) +
                                   " bytes is too large for a config.json");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return Status::IOError("reading '" + path + "' failed");
  return text.str();
}

// model_type (or, without one, architectures[0]) picks the architecture, as AutoModel does.
StatusOr<const Arch*> FindArch(Reader& r) {
  std::string model_type;
  FT_RETURN_IF_ERROR(r.String("model_type", &model_type));
  std::string listed;
  const json* archs = r.Find("architectures");
  if (archs) {
    if (!archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string()) {
      return r.Bad("architectures", "= " + archs->dump() + " must list one architecture");
    }
    listed = (*archs)[0].get<std::string>();
  }
  for (const Arch& a : kArchs) {
    if (model_type.empty() ? listed == a.architecture : model_type == a.model_type) {
      if (!listed.empty() && listed != a.architecture) {
        return r.Bad("architectures", "= " + archs->dump() + " is not " + a.architecture +
                                          " (ftrain trains causal language models)");
      }
      return &a;
    }
  }
  if (!model_type.empty()) {
    return r.Bad("model_type", "= '" + model_type +
                                   "' is not supported; ftrain implements llama "
                                   "(LlamaForCausalLM), mistral and qwen2");
  }
  return r.Bad("architectures", "= '" + listed +
                                    "' is not supported; ftrain implements LlamaForCausalLM, "
                                    "MistralForCausalLM and Qwen2ForCausalLM");
}

Status ReadShapes(Reader& r, const Arch& arch, LlamaConfig* c) {
  c->vocab_size = arch.vocab_size;
  c->hidden_size = 4096;
  c->intermediate_size = arch.intermediate_size;
  c->num_layers = 32;
  c->num_heads = 32;
  c->max_seq_len = arch.max_position_embeddings;
  c->rms_norm_eps = 1e-6;
  c->tie_embeddings = false;
  FT_RETURN_IF_ERROR(r.Int("vocab_size", &c->vocab_size));
  FT_RETURN_IF_ERROR(r.Int("hidden_size", &c->hidden_size));
  FT_RETURN_IF_ERROR(r.Int("intermediate_size", &c->intermediate_size));
  FT_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c->num_layers));
  FT_RETURN_IF_ERROR(r.Int("num_attention_heads", &c->num_heads));
  c->num_kv_heads = arch.kv_heads > 0 ? arch.kv_heads : c->num_heads;
  FT_RETURN_IF_ERROR(r.Int("num_key_value_heads", &c->num_kv_heads));
  if (r.Null("num_key_value_heads")) c->num_kv_heads = c->num_heads;  // __post_init__
  FT_RETURN_IF_ERROR(r.Int("max_position_embeddings", &c->max_seq_len));
  FT_RETURN_IF_ERROR(r.Double("rms_norm_eps", &c->rms_norm_eps));
  FT_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c->tie_embeddings));
  FT_RETURN_IF_ERROR(r.Int("head_dim", &c->head_dim));
  FT_RETURN_IF_ERROR(r.Expect("hidden_act", {"silu", "swish"}, "ftrain's MLP is SwiGLU (silu)"));
  FT_RETURN_IF_ERROR(
      r.Expect("attention_dropout", {0, 0.0}, "ftrain trains without dropout; set it to 0.0"));
  FT_RETURN_IF_ERROR(
      r.Expect("partial_rotary_factor", {1, 1.0}, "ftrain rotates the whole head dimension"));
  FT_RETURN_IF_ERROR(r.Expect("pruned_heads", {json::object()}, "ftrain has no pruned heads"));
  for (const char* k : {"is_decoder", "add_cross_attention", "is_encoder_decoder"}) {
    FT_RETURN_IF_ERROR(r.Expect(k, {false}, "ftrain trains decoder-only causal models"));
  }
  return Status::Ok();
}

// rope_parameters (transformers 5) or rope_scaling + rope_theta (4.x), merged as
// RotaryEmbeddingConfigMixin.convert_rope_params_to_dict does: rope_scaling wins.
Status ReadRope(Reader& r, const std::string& file, LlamaConfig* c) {
  const json* scaling = r.Find("rope_scaling");
  const json* params = r.Find("rope_parameters");
  const char* key = scaling ? "rope_scaling" : "rope_parameters";
  const json* dict = scaling ? scaling : params;
  double top_theta = 10000.0;
  FT_RETURN_IF_ERROR(r.Double("rope_theta", &top_theta));
  c->rope_theta = top_theta;
  c->rope_scaling = RopeScaling();
  if (!dict) return Status::Ok();
  if (!dict->is_object()) return r.Bad(key, "= " + dict->dump() + " is not an object");
  Reader d(*dict, file, std::string(key) + ".");
  FT_RETURN_IF_ERROR(d.Double("rope_theta", &c->rope_theta));
  std::string type = "default";
  FT_RETURN_IF_ERROR(d.String("type", &type));
  FT_RETURN_IF_ERROR(d.String("rope_type", &type));
  RopeScaling& s = c->rope_scaling;
  if (type == "linear" || type == "llama3") {
    bool given = false;
    FT_RETURN_IF_ERROR(d.Double("factor", &s.factor, &given));
    if (!given) return d.Bad("factor", "is required for rope type " + type);
  }
  if (type == "default") {
    s.type = RopeScaling::Type::kDefault;
  } else if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
    for (auto [name, out] : {std::pair<const char*, double*>{"low_freq_factor", &s.low_freq_factor},
                             {"high_freq_factor", &s.high_freq_factor}}) {
      bool given = false;
      FT_RETURN_IF_ERROR(d.Double(name, out, &given));
      if (!given) return d.Bad(name, "is required for rope type llama3");
    }
    // transformers: a top-level original_max_position_embeddings wins, then the dict's, then
    // max_position_embeddings.
    s.original_max_position_embeddings = c->max_seq_len;
    FT_RETURN_IF_ERROR(
        d.Int("original_max_position_embeddings", &s.original_max_position_embeddings));
    FT_RETURN_IF_ERROR(
        r.Int("original_max_position_embeddings", &s.original_max_position_embeddings));
  } else {
    return d.Bad("rope_type", "= '" + type +
                                  "' is not supported (ftrain implements default, linear and "
                                  "llama3; yarn, dynamic and longrope would change the math)");
  }
  FT_RETURN_IF_ERROR(
      d.Expect("partial_rotary_factor", {1, 1.0}, "ftrain rotates the whole head dimension"));
  return d.CheckAllRead({}, "rope type " + type);
}

// Qwen2: the window applies where layer_types says "sliding_attention"; without layer_types,
// to layers >= max_window_layers when use_sliding_window is true.
Status ReadQwen2Window(Reader& r, LlamaConfig* c) {
  bool use = false;
  int64_t window = 4096, max_window_layers = 28;
  FT_RETURN_IF_ERROR(r.Bool("use_sliding_window", &use));
  FT_RETURN_IF_ERROR(r.Int("sliding_window", &window));
  FT_RETURN_IF_ERROR(r.Int("max_window_layers", &max_window_layers));
  // Qwen2Config.__post_init__: sliding_window = sliding_window if use_sliding_window else None.
  const bool has_window = use && !r.Null("sliding_window");
  if (has_window && window <= 0) {
    return r.Bad("sliding_window", "= " + std::to_string(window) + " must be positive or null");
  }
  const json* types = r.Find("layer_types");
  c->sliding_layers.assign(static_cast<size_t>(std::max<int64_t>(c->num_layers, 0)), false);
  for (int64_t i = 0; i < c->num_layers; ++i) {
    c->sliding_layers[i] = has_window && i >= max_window_layers;
  }
  if (types) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c->num_layers) {
      return r.Bad("layer_types", "must list one entry per layer (num_hidden_layers = " +
                                      std::to_string(c->num_layers) + ")");
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t != "full_attention" && t != "sliding_attention") {
        return r.Bad("layer_types", "[" + std::to_string(i) + "] = " + t.dump() +
                                        " is not full_attention or sliding_attention");
      }
      c->sliding_layers[i] = t == "sliding_attention";
    }
  }
  bool any = false;
  for (bool s : c->sliding_layers) any = any || s;
  if (any && !has_window) {
    return r.Bad("layer_types",
                 "has sliding_attention layers but the sliding window is not set "
                 "(use_sliding_window = false or sliding_window = null)");
  }
  c->sliding_window = any ? window : 0;
  if (!any) c->sliding_layers.clear();
  return Status::Ok();
}

Status ReadArchSwitches(Reader& r, const Arch& arch, LlamaConfig* c) {
  const std::string name = arch.model_type;
  if (name == "llama") {
    bool attention_bias = false;
    FT_RETURN_IF_ERROR(r.Bool("attention_bias", &attention_bias));
    FT_RETURN_IF_ERROR(r.Bool("mlp_bias", &c->mlp_bias));
    c->qkv_bias = c->o_bias = attention_bias;
    r.Find("pretraining_tp");  // read by LlamaConfig, used by no transformers 5 modeling code
  } else if (name == "mistral") {
    // Absent: MistralConfig's default 4096; null: no window (every layer).
    int64_t window = 4096;
    FT_RETURN_IF_ERROR(r.Int("sliding_window", &window));
    if (r.Null("sliding_window")) window = 0;
    if (!r.Null("sliding_window") && window <= 0) {
      return r.Bad("sliding_window", "= " + std::to_string(window) + " must be positive or null");
    }
    c->sliding_window = window;
  } else {
    c->qkv_bias = true;
    FT_RETURN_IF_ERROR(ReadQwen2Window(r, c));
  }
  return Status::Ok();
}

}  // namespace

std::string HfConfigPath(const std::string& dir_or_file) {
  struct stat st;
  if (::stat(dir_or_file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return dir_or_file + (dir_or_file.back() == '/' ? "" : "/") + "config.json";
  }
  return dir_or_file;
}

namespace {

// The architecture and shapes of config.json `file` whose bytes are `text`.
StatusOr<LlamaConfig> ParseHfConfig(const std::string& file, const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(file + ": not a JSON object (want a Hugging Face config.json)");
  }
  Reader r(j, file);
  FT_ASSIGN_OR_RETURN(const Arch* arch, FindArch(r));
  LlamaConfig c;
  c.architecture = arch->architecture;
  c.hf_config_path = file;
  c.hf_config_text = text;
  FT_RETURN_IF_ERROR(ReadShapes(r, *arch, &c));
  FT_RETURN_IF_ERROR(ReadRope(r, file, &c));
  FT_RETURN_IF_ERROR(ReadArchSwitches(r, *arch, &c));
  FT_RETURN_IF_ERROR(r.CheckAllRead(HarmlessKeys(), arch->architecture));
  Status s = c.Validate();
  if (!s.ok()) return Status::InvalidArgument(file + ": " + s.message());
  return c;
}

// model.hf's config.json as the run's first start kept it (RunLayout::hf_config_copy), when
// `file` is gone and the copy is of that same file: a restart never needs the base directory.
// Returns the copy's {source, text}.
std::optional<std::pair<std::string, std::string>> KeptCopyOf(const Config& config,
                                                              std::string file) {
  while (file.size() > 1 && file.back() == '/') file.pop_back();
  std::string run_dir;
  struct stat st;
  if (!config.Has("run.dir") || !config.GetString("run.dir", &run_dir).ok() ||
      ::stat(file.c_str(), &st) == 0) {
    return std::nullopt;
  }
  const std::string copy = RunLayout(run_dir).hf_config_copy();
  auto text = ReadText(copy);
  if (!text.ok()) return std::nullopt;
  const json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("source") || !j.contains("text") ||
      !j["source"].is_string() || !j["text"].is_string() ||
      (j["source"] != file && j["source"] != file + "/config.json")) {
    FT_LOG(Warning) << "model.hf: " << copy << " is not a copy of " << file << "; ignoring it";
    return std::nullopt;
  }
  FT_LOG(Warning) << "model.hf: " << file << " is gone; the model comes from the copy this run's "
                  << "first start kept (" << copy << ")";
  return std::pair{j["source"].get<std::string>(), j["text"].get<std::string>()};
}

}  // namespace

StatusOr<LlamaConfig> ReadHfConfig(const std::string& dir_or_file) {
  const std::string file = HfConfigPath(dir_or_file);
  FT_ASSIGN_OR_RETURN(std::string text, ReadText(file));
  return ParseHfConfig(file, text);
}

std::string HfConfigCopyJson(const LlamaConfig& model) {
  return json{{"source", model.hf_config_path}, {"text", model.hf_config_text}}.dump() + "\n";
}

StatusOr<LlamaConfig> LlamaConfigFromHfSection(const Config& config) {
  std::string dir;
  FT_RETURN_IF_ERROR(config.GetString("model.hf", &dir));
  const std::string origin = config.entries().at("model.hf").origin;
  if (dir.empty()) return Status::InvalidArgument(origin + ": model.hf is empty");
  const auto kept = KeptCopyOf(config, HfConfigPath(dir));
  auto read = kept ? ParseHfConfig(kept->first, kept->second) : ReadHfConfig(dir);
  if (!read.ok()) return read.status().Annotate(origin);
  LlamaConfig c = std::move(*read);
  const std::string& file = c.hf_config_path;
  auto contradiction = [&](const std::string& key, const std::string& value,
                           const std::string& hf_key, const std::string& hf_value) {
    return Status::InvalidArgument(config.entries().at(key).origin + ": " + key + " = " + value +
                                   " contradicts " + hf_key + " = " + hf_value + " in " + file +
                                   "; with model.hf the shapes come from config.json: " +
                                   "remove " + key + " from the [model] section");
  };
  const std::pair<const char*, int64_t*> ints[] = {{"vocab_size", &c.vocab_size},
                                                   {"hidden_size", &c.hidden_size},
                                                   {"intermediate_size", &c.intermediate_size},
                                                   {"num_layers", &c.num_layers},
                                                   {"num_heads", &c.num_heads},
                                                   {"num_kv_heads", &c.num_kv_heads}};
  const std::map<std::string, std::string> hf_names = {{"num_layers", "num_hidden_layers"},
                                                       {"num_heads", "num_attention_heads"},
                                                       {"num_kv_heads", "num_key_value_heads"},
                                                       {"tie_embeddings", "tie_word_embeddings"},
                                                       {"max_seq_len", "max_position_embeddings"}};
  auto hf_name = [&](const std::string& k) {
    auto it = hf_names.find(k);
    return it == hf_names.end() ? k : it->second;
  };
  for (const auto& [name, field] : ints) {
    const std::string key = std::string("model.") + name;
    if (!config.Has(key)) continue;
    int64_t v = 0;
    FT_RETURN_IF_ERROR(config.GetInt(key, &v));
    if (v != *field)
      return contradiction(key, std::to_string(v), hf_name(name), std::to_string(*field));
  }
  if (config.Has("model.max_seq_len")) {
    int64_t v = 0;
    FT_RETURN_IF_ERROR(config.GetInt("model.max_seq_len", &v));
    if (v <= 0 || v > c.max_seq_len) {
      return Status::InvalidArgument(config.entries().at("model.max_seq_len").origin +
                                     ": model.max_seq_len = " + std::to_string(v) +
                                     " must be in [1, max_position_embeddings = " +
                                     std::to_string(c.max_seq_len) + "] of " + file);
    }
    c.max_seq_len = v;
  }
  if (config.Has("model.tie_embeddings")) {
    bool v = false;
    FT_RETURN_IF_ERROR(config.GetBool("model.tie_embeddings", &v));
    if (v != c.tie_embeddings) {
      return contradiction("model.tie_embeddings", v ? "true" : "false", "tie_word_embeddings",
                           c.tie_embeddings ? "true" : "false");
    }
  }
  for (auto [name, field] : {std::pair<const char*, double*>{"rope_theta", &c.rope_theta},
                             {"rms_norm_eps", &c.rms_norm_eps}}) {
    const std::string key = std::string("model.") + name;
    if (!config.Has(key)) continue;
    double v = 0;
    FT_RETURN_IF_ERROR(config.GetDouble(key, &v));
    if (v != *field) {
      std::ostringstream a, b;
      a.precision(17);
      b.precision(17);
      a << v;
      b << *field;
      return contradiction(key, a.str(), name, b.str());
    }
  }
  return c;
}

}  // namespace ftrain
