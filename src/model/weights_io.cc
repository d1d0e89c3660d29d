// safetensors <-> LlamaModel. Open() validates every header (and the index) before Check()
// compares the tensor set with the model's; only then are parameters written, one tensor at
// a time (peak extra memory: one tensor's bytes plus its converted copy).
#include "model/weights_io.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/strings.h"
#include "model/llama.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this code copies it as is");

namespace ftrain::model {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxIndexBytes = 64u << 20;  // HF indexes are a few hundred KB

// Buffers HF keeps in some old exports; they are recomputed, never loaded.
bool IsIgnoredBuffer(const std::string& name) { return EndsWith(name, ".rotary_emb.inv_freq"); }

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A file named by an index must be a plain name in the index's directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

at::ScalarType SourceType(const std::string& dtype) {
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "F16") return at::kHalf;
  if (dtype == "F32") return at::kFloat;
  return at::ScalarType::Undefined;
}

StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::NotFound("cannot open '" + path + "': " + std::strerror(errno));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Status::Corruption("'" + path + "' is " + std::to_string(st.st_size) +
                              " bytes, more than the " + std::to_string(max_bytes) +
                              "-byte limit for a safetensors index");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  if (!in || !in.read(&text[0], static_cast<std::streamsize>(text.size()))) {
    return Status::IOError("cannot read '" + path + "'");
  }
  return text;
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::vector<TensorSpec> LlamaParamSpecs(const LlamaConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, kv = c.num_kv_heads * c.HeadDim(),
                q = c.num_heads * c.HeadDim();
  std::vector<TensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, H}});
  // nn.Linear(in, out, bias): "<name>.weight" [out, in], then "<name>.bias" [out] if any.
  auto linear = [&specs](const std::string& name, int64_t out, int64_t in, bool bias) {
    specs.push_back({name + ".weight", {out, in}});
    if (bias) specs.push_back({name + ".bias", {out}});
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    linear(p + "self_attn.q_proj", q, H, c.qkv_bias);
    linear(p + "self_attn.k_proj", kv, H, c.qkv_bias);
    linear(p + "self_attn.v_proj", kv, H, c.qkv_bias);
    linear(p + "self_attn.o_proj", H, q, c.o_bias);
    linear(p + "mlp.gate_proj", I, H, c.mlp_bias);
    linear(p + "mlp.up_proj", I, H, c.mlp_bias);
    linear(p + "mlp.down_proj", H, I, c.mlp_bias);
    specs.push_back({p + "input_layernorm.weight", {H}});
    specs.push_back({p + "post_attention_layernorm.weight", {H}});
  }
  specs.push_back({"model.norm.weight", {H}});
  if (!c.tie_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, H}});
  return specs;
}

// --- SafetensorsCheckpoint -------------------------------------------------------------------

StatusOr<std::string> ResolveSafetensorsPath(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::NotFound("'" + path +
                            "' does not exist (want a model directory, a *.safetensors file or a "
                            "model.safetensors.index.json)");
  }
  if (!S_ISDIR(st.st_mode)) return path;
  const std::string dir =
      path.size() > 1 && path.back() == '/' ? path.substr(0, path.size() - 1) : path;
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"}) {
    const std::string file = dir + "/" + name;
    if (::stat(file.c_str(), &st) == 0) return file;
  }
  return Status::NotFound("model directory '" + dir +
                          "' has neither model.safetensors.index.json nor model.safetensors");
}

StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& given) {
  FT_ASSIGN_OR_RETURN(const std::string path, ResolveSafetensorsPath(given));
  std::unique_ptr<SafetensorsCheckpoint> ck(new SafetensorsCheckpoint());
  ck->path_ = path;
  if (!EndsWith(path, ".json")) {
    FT_RETURN_IF_ERROR(ck->AddFile(path, nullptr));
    return ck;
  }
  auto bad = [&](const std::string& what) {
    return Status::Corruption("safetensors index '" + path + "': " + what);
  };
  FT_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxIndexBytes));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
    return bad("has no \"weight_map\" object (expected {\"weight_map\": {tensor: file}})");
  }
  // file name -> (tensor name -> file name), to check each file against the index.
  std::map<std::string, std::map<std::string, std::string>> by_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return bad("weight_map entry '" + it.key() + "' is not a file name string");
    }
    const std::string file = it.value().get<std::string>();
    if (!IsPlainFileName(file)) {
      return bad("weight_map entry '" + it.key() + "' names file '" + file +
                 "'; only plain file names in the index's directory are allowed (no '/', '..')");
    }
    by_file[file][it.key()] = file;
  }
  const std::string dir = DirName(path);
  for (const auto& [file, names] : by_file) {
    Status s = ck->AddFile(dir + "/" + file, &names);
    if (!s.ok() && s.IsNotFound()) {
      // Name what is lost with the file: the tensors the index puts there.
      return Status::NotFound(
          "the index '" + path + "' puts tensor '" + names.begin()->first + "'" +
          (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more"
                            : std::string()) +
          " in '" + file + "': " + s.message());
    }
    FT_RETURN_IF_ERROR(s);
  }
  return ck;
}

Status SafetensorsCheckpoint::AddFile(const std::string& file,
                                      const std::map<std::string, std::string>* index_names) {
  FT_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(file));
  const SafetensorsHeader* h = &(headers_[file] = std::move(header));
  if (index_names != nullptr) {
    // First what the index promises, then what the file holds beyond that.
    std::set<std::string> held;
    for (const SafetensorsEntry& e : h->entries) held.insert(e.name);
    for (const auto& item : *index_names) {
      if (held.count(item.first) == 0) {
        return Status::Corruption("the index '" + path_ + "' puts tensor '" + item.first +
                                  "' in '" + file + "', which does not hold it");
      }
    }
  }
  for (const SafetensorsEntry& e : h->entries) {
    if (IsIgnoredBuffer(e.name)) continue;
    if (index_names != nullptr && index_names->count(e.name) == 0) {
      return Status::Corruption("safetensors file '" + file + "' holds tensor '" + e.name +
                                "' but the index '" + path_ + "' does not list it there");
    }
    auto [it, inserted] = tensors_.emplace(e.name, Located{file, h, e});
    if (!inserted) {
      return Status::Corruption("tensor '" + e.name + "' is in both '" + it->second.file +
                                "' and '" + file + "'");
    }
  }
  return Status::Ok();
}

Status SafetensorsCheckpoint::Check(const std::vector<TensorSpec>& expected) const {
  std::set<std::string> wanted;
  for (const TensorSpec& spec : expected) {
    wanted.insert(spec.name);
    auto it = tensors_.find(spec.name);
    if (it == tensors_.end()) {
      std::string hint;
      if (spec.name == "lm_head.weight") {
        hint = "; if the checkpoint ties lm_head to the embedding, set model.tie_embeddings = true";
      }
      return Status::NotFound("tensor '" + spec.name + "' (shape " + ShapeString(spec.shape) +
                              ") is missing from '" + path_ + "'" + hint);
    }
    const SafetensorsEntry& e = it->second.entry;
    if (e.shape != spec.shape) {
      return Status::InvalidArgument("tensor '" + spec.name + "' in '" + it->second.file +
                                     "' has shape " + ShapeString(e.shape) +
                                     " but the model needs " + ShapeString(spec.shape) +
                                     "; check the model.* sizes in the config");
    }
    if (SourceType(e.dtype) == at::ScalarType::Undefined) {
      return Status::InvalidArgument("tensor '" + spec.name + "' in '" + it->second.file +
                                     "' has dtype " + e.dtype + "; only BF16, F16 and F32 load");
    }
  }
  for (const auto& [name, loc] : tensors_) {
    if (wanted.count(name)) continue;
    std::string hint = "; the checkpoint does not match the model config";
    if (name == "lm_head.weight") {
      hint =
          "; the model ties lm_head to model.embed_tokens.weight (model.tie_embeddings = "
          "true): set it to false to load a separate lm_head";
    }
    return Status::InvalidArgument("'" + loc.file + "' has tensor '" + name +
                                   "' that the model does not have" + hint);
  }
  return Status::Ok();
}

Status SafetensorsCheckpoint::Read(const std::string& name, const at::Tensor& dst) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return Status::NotFound("tensor '" + name + "' is not in '" + path_ + "'");
  }
  const Located& loc = it->second;
  if (dst.sizes().vec() != loc.entry.shape) {
    return Status::InvalidArgument("tensor '" + name + "' in '" + loc.file + "' has shape " +
                                   ShapeString(loc.entry.shape) + ", destination has " +
                                   ShapeString(dst.sizes().vec()));
  }
  const at::ScalarType src_type = SourceType(loc.entry.dtype);
  if (src_type == at::ScalarType::Undefined) {
    return Status::InvalidArgument("tensor '" + name + "' in '" + loc.file + "' has dtype " +
                                   loc.entry.dtype + "; only BF16, F16 and F32 load");
  }
  try {
    at::NoGradGuard no_grad;
    // Read straight into the destination when nothing needs converting.
    if (dst.device().is_cpu() && dst.scalar_type() == src_type && dst.is_contiguous()) {
      bytes_read_ += static_cast<uint64_t>(dst.nbytes());
      return ReadSafetensorsTensor(loc.file, *loc.header, loc.entry, dst.data_ptr(),
                                   static_cast<size_t>(dst.nbytes()));
    }
    at::Tensor src = at::empty(loc.entry.shape, at::TensorOptions().dtype(src_type));
    FT_RETURN_IF_ERROR(ReadSafetensorsTensor(loc.file, *loc.header, loc.entry, src.data_ptr(),
                                             static_cast<size_t>(src.nbytes())));
    bytes_read_ += static_cast<uint64_t>(src.nbytes());
    dst.copy_(src);
  } catch (const std::exception& ex) {
    return Status::Internal("loading tensor '" + name + "' from '" + loc.file + "': " + ex.what());
  }
  return Status::Ok();
}

Status SafetensorsCheckpoint::ReadRange(const std::string& name, int64_t offset,
                                        const at::Tensor& dst) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return Status::NotFound("tensor '" + name + "' is not in '" + path_ + "'");
  }
  const Located& loc = it->second;
  const at::ScalarType src_type = SourceType(loc.entry.dtype);
  if (src_type == at::ScalarType::Undefined) {
    return Status::InvalidArgument("tensor '" + name + "' in '" + loc.file + "' has dtype " +
                                   loc.entry.dtype + "; only BF16, F16 and F32 load");
  }
  const uint64_t elem = SafetensorsDTypeSize(loc.entry.dtype);
  const uint64_t numel = (loc.entry.end - loc.entry.begin) / elem;
  if (dst.dim() != 1 || offset < 0 || static_cast<uint64_t>(offset) > numel ||
      static_cast<uint64_t>(dst.numel()) > numel - static_cast<uint64_t>(offset)) {
    return Status::Internal("elements [" + std::to_string(offset) + ", +" +
                            std::to_string(dst.numel()) + ") of tensor '" + name + "' in '" +
                            loc.file + "' (" + std::to_string(numel) +
                            " elements) asked for with a wrong range or destination");
  }
  constexpr int64_t kPieceBytes = 64 << 20;  // bounds the conversion buffer
  const int64_t piece = std::max<int64_t>(1, kPieceBytes / static_cast<int64_t>(elem));
  try {
    at::NoGradGuard no_grad;
    const bool direct =
        dst.device().is_cpu() && dst.scalar_type() == src_type && dst.is_contiguous();
    at::Tensor buf;
    for (int64_t done = 0; done < dst.numel(); done += piece) {
      const int64_t n = std::min(piece, dst.numel() - done);
      at::Tensor out = dst.narrow(0, done, n);
      if (!direct && (!buf.defined() || buf.numel() < n)) {
        buf = at::empty({std::min(piece, dst.numel())}, at::TensorOptions().dtype(src_type));
      }
      at::Tensor into = direct ? out : buf.narrow(0, 0, n);
      FT_RETURN_IF_ERROR(ReadSafetensorsRange(loc.file, *loc.header, loc.entry,
                                              static_cast<uint64_t>(offset + done) * elem,
                                              into.data_ptr(), static_cast<size_t>(n) * elem));
      bytes_read_ += static_cast<uint64_t>(n) * elem;
      if (!direct) out.copy_(into);
    }
  } catch (const std::exception& ex) {
    return Status::Internal("loading tensor '" + name + "' from '" + loc.file + "': " + ex.what());
  }
  return Status::Ok();
}

uint64_t SafetensorsCheckpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, loc] : tensors_) n += loc.entry.end - loc.entry.begin;
  return n;
}

std::vector<std::string> SafetensorsCheckpoint::Names() const {
  std::vector<std::string> names;
  for (const auto& item : tensors_) names.push_back(item.first);
  return names;
}

// --- model-level load/save -------------------------------------------------------------------

namespace {

// Every spec is a parameter of the model with the spec's shape (not a shard of it); `fix`
// ends the message when one is not.
template <typename Params>  // LlamaModel's named_parameters()
Status CheckParamsMatchSpecs(const Params& params, const std::vector<TensorSpec>& specs,
                             const std::string& fix) {
  for (const TensorSpec& spec : specs) {
    const at::Tensor* p = params.find(spec.name);
    if (p == nullptr) return Status::Internal("model has no parameter " + spec.name);
    if (p->sizes().vec() != spec.shape) {
      return Status::FailedPrecondition("parameter " + spec.name + " has shape " +
                                        ShapeString(p->sizes().vec()) + ", expected " +
                                        ShapeString(spec.shape) + "; " + fix);
    }
  }
  return Status::Ok();
}

}  // namespace

Status LoadSafetensors(LlamaModel& model, const std::string& path) {
  FT_ASSIGN_OR_RETURN(auto ck, SafetensorsCheckpoint::Open(path));
  const std::vector<TensorSpec> specs = LlamaParamSpecs(model->config());
  FT_RETURN_IF_ERROR(ck->Check(specs));
  auto params = model->named_parameters();
  FT_RETURN_IF_ERROR(
      CheckParamsMatchSpecs(params, specs, "load weights before an engine shards the model"));
  for (const TensorSpec& spec : specs) {
    FT_RETURN_IF_ERROR(ck->Read(spec.name, *params.find(spec.name)));
  }
  return Status::Ok();
}

StatusOr<WeightsDType> ParseWeightsDType(const std::string& text) {
  if (text == "bf16") return WeightsDType::kBF16;
  if (text == "fp32") return WeightsDType::kFP32;
  return Status::InvalidArgument("weights dtype '" + text + "' is not supported; use bf16 or fp32");
}

Status SaveSafetensors(const LlamaModel& model, const std::string& path, WeightsDType dtype) {
  const at::ScalarType type = dtype == WeightsDType::kBF16 ? at::kBFloat16 : at::kFloat;
  const std::string st_dtype = dtype == WeightsDType::kBF16 ? "BF16" : "F32";
  const std::vector<TensorSpec> specs = LlamaParamSpecs(model->config());
  auto params = model->named_parameters();
  FT_RETURN_IF_ERROR(
      CheckParamsMatchSpecs(params, specs, "save from a model whose parameters are materialized"));
  std::vector<SafetensorsEntry> entries;
  for (const TensorSpec& spec : specs) {
    SafetensorsEntry e;
    e.name = spec.name;
    e.dtype = st_dtype;
    e.shape = spec.shape;
    entries.push_back(std::move(e));
  }
  FT_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Begin(path, entries, {{"format", "pt"}}));
  try {
    at::NoGradGuard no_grad;
    for (const TensorSpec& spec : specs) {
      at::Tensor t = params.find(spec.name)->detach().to(at::kCPU).to(type).contiguous();
      FT_RETURN_IF_ERROR(writer->Write(spec.name, t.data_ptr(), static_cast<size_t>(t.nbytes())));
    }
  } catch (const std::exception& ex) {
    return Status::Internal("saving '" + path + "': " + ex.what());
  }
  return writer->Finish();
}

}  // namespace ftrain::model
