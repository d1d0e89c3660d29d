// Engine/run state <-> checkpoint.
#include "train/checkpoint/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/log.h"
#include "formats/hf_files.h"

namespace ftrain::train {

using nlohmann::json;

namespace {

// The default CPU generator serialised field by field (get_state() copies a struct with
// uninitialised padding, so its bytes differ between identical generators). Layout:
// "ftrain-rng 1" then little-endian seed u64, left i32, seeded u8, next u32, state u32[624],
// has_float u8, float f32, has_double u8, double f64.
template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
bool Take(const std::string& in, size_t* pos, T* v) {
  if (*pos + sizeof(T) > in.size()) return false;
  std::memcpy(v, in.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}
constexpr char kRngMagic[] = "ftrain-rng 1";

std::string RngState() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto* impl = at::check_generator<at::CPUGeneratorImpl>(gen);
  const at::mt19937_data_pod d = impl->engine().data();
  std::string out = kRngMagic;
  Put(&out, d.seed_);
  Put(&out, static_cast<int32_t>(d.left_));
  Put(&out, static_cast<uint8_t>(d.seeded_ ? 1 : 0));
  Put(&out, d.next_);
  for (uint32_t w : d.state_) Put(&out, w);
  const auto f = impl->next_float_normal_sample();
  Put(&out, static_cast<uint8_t>(f.has_value() ? 1 : 0));
  Put(&out, f.has_value() ? *f : 0.0f);
  const auto g = impl->next_double_normal_sample();
  Put(&out, static_cast<uint8_t>(g.has_value() ? 1 : 0));
  Put(&out, g.has_value() ? *g : 0.0);
  return out;
}

Status SetRngState(const std::string& bytes) {
  size_t pos = sizeof(kRngMagic) - 1;
  if (bytes.compare(0, pos, kRngMagic) != 0) {
    return Status::Corruption("RNG state blob has no 'ftrain-rng 1' header");
  }
  at::mt19937_data_pod d;
  int32_t left = 0;
  uint8_t seeded = 0, has_f = 0, has_d = 0;
  float f = 0;
  double g = 0;
  bool ok = Take(bytes, &pos, &d.seed_) && Take(bytes, &pos, &left) && Take(bytes, &pos, &seeded) &&
            Take(bytes, &pos, &d.next_);
  for (auto& w : d.state_) ok = ok && Take(bytes, &pos, &w);
  ok = ok && Take(bytes, &pos, &has_f) && Take(bytes, &pos, &f) && Take(bytes, &pos, &has_d) &&
       Take(bytes, &pos, &g) && pos == bytes.size();
  d.left_ = left;
  d.seeded_ = seeded != 0;
  if (!ok || d.left_ <= 0 || d.left_ > 624 || d.next_ > 624) {
    return Status::Corruption("RNG state blob is truncated or out of range");
  }
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto* impl = at::check_generator<at::CPUGeneratorImpl>(gen);
  at::mt19937 engine;
  engine.set_data(d);
  impl->set_engine(engine);
  impl->set_next_float_normal_sample(has_f ? c10::optional<float>(f) : c10::nullopt);
  impl->set_next_double_normal_sample(has_d ? c10::optional<double>(g) : c10::nullopt);
  return Status::Ok();
}

}  // namespace

ckpt::ShardContents BuildShardContents(const fsdp::FsdpEngine& engine, const RunState& state,
                                       const std::string& schedule_json) {
  ckpt::ShardContents contents;
  const std::vector<fsdp::ShardPiece> pieces =
      engine.WritesTensorState() ? engine.StatePieces() : std::vector<fsdp::ShardPiece>();
  for (const auto& p : pieces) {
    ckpt::TensorShardRef r;
    r.kind = p.kind;
    r.name = p.name;
    r.dtype =
        p.data.scalar_type() == torch::kBFloat16 ? ckpt::DType::kBFloat16 : ckpt::DType::kFloat32;
    r.shape = p.shape;
    r.offset = p.offset;
    r.length = p.data.numel();
    // Device memory stays where it is: the checkpoint sink's DeviceMemory copies it straight
    // into the daemon's slot (or a host buffer for a synchronous save).
    r.data = p.data.data_ptr();
    r.on_device = !p.data.is_cpu();
    contents.tensors.push_back(r);
  }
  json optim = {{"step", engine.optimizer_step()}};
  json train = {{"global_step", state.step}, {"tokens", state.tokens}};
  if (!state.guard_norms.empty()) train["guard_norms"] = state.guard_norms;
  if (!state.guard_recent.empty()) train["guard_recent"] = state.guard_recent;
  // Run history, not training state: `ckptctl diff` ignores the "history" group, so a run
  // that was interrupted compares bit-identical with one that was not.
  json history = {{"restarts", state.restarts}, {"metrics_line", state.metrics_line}};
  if (!state.skipped.empty()) history["skipped"] = state.skipped;
  contents.blobs.push_back({"optim", "state", "replicated", optim.dump()});
  contents.blobs.push_back({"scheduler", "state", "replicated", schedule_json});
  contents.blobs.push_back({"train", "state", "replicated", train.dump()});
  contents.blobs.push_back({"history", "run", "per_rank", history.dump()});
  contents.blobs.push_back({"data", "cursor", "per_rank", state.data_cursor});
  contents.blobs.push_back({"rng", "torch_cpu", "per_rank", RngState()});
  // Written by rank 0 only (replicated: any rank or world size reads rank 0's copy).
  for (const auto& [name, bytes] : state.hf_files) {
    contents.blobs.push_back({model::kHfStateGroup, name, "replicated", bytes});
  }
  if (engine.config().device.is_cuda()) {
    // The CUDA generator of this rank's device (its state is an opaque byte tensor).
    const torch::Tensor cuda_rng =
        at::globalContext().defaultGenerator(engine.config().device).get_state();
    contents.blobs.push_back({"rng", "torch_cuda", "per_rank",
                              std::string(static_cast<const char*>(cuda_rng.data_ptr()),
                                          static_cast<size_t>(cuda_rng.nbytes()))});
  }
  return contents;
}

namespace {

// The snapshot's tensor pieces by (kind, name, first element).
using PieceIndex =
    std::map<std::tuple<std::string, std::string, int64_t>, const ckpt::proto::PieceDesc*>;

// The bytes of exactly this piece in the in-memory snapshot, if they are provably the bytes
// of the committed checkpoint (same rank, same slice, XXH3 recorded in the manifest).
const uint8_t* FromMemory(MemorySource* mem, const PieceIndex& index, const ckpt::ManifestTensor& t,
                          int rank, int64_t offset, int64_t length) {
  auto it = index.find({t.kind, t.name, offset});
  if (it == index.end() || it->second->length != length || it->second->dtype != t.dtype) {
    return nullptr;
  }
  const ckpt::TensorPiece* want = nullptr;
  for (const auto& p : t.pieces) {
    if (p.rank == rank && p.offset == offset && p.length == length) want = &p;
  }
  if (want == nullptr) return nullptr;
  const uint8_t* bytes = mem->base + it->second->slot_offset;
  if (ckpt::Xxh3(bytes, static_cast<size_t>(length) * ckpt::DTypeSize(t.dtype)) != want->xxh3) {
    ++mem->mismatched;
    return nullptr;
  }
  return bytes;
}

}  // namespace

Status LoadCheckpoint(ckpt::CheckpointReader& reader, int rank, int world_size,
                      fsdp::FsdpEngine& engine, RunState* state, MemorySource* memory) {
  const auto& m = reader.manifest();
  if (memory != nullptr && (m.meta.world_size != world_size || memory->snapshot == nullptr)) {
    memory = nullptr;
  }
  PieceIndex index;
  if (memory != nullptr) {
    for (const auto& p : memory->snapshot->pieces) {
      if (!p.is_blob) index[{p.kind, p.name, p.offset}] = &p;
    }
  }
  FT_RETURN_IF_ERROR(engine.LoadState([&](const std::string& kind, const std::string& name,
                                          int64_t offset, int64_t length,
                                          torch::Tensor dst) -> Status {
    const ckpt::ManifestTensor* t = m.FindTensor(kind, name);
    if (t == nullptr) {
      return Status::InvalidArgument("checkpoint '" + reader.dir() + "' has no " + kind +
                                     " tensor " + name + "; it was written for another model");
    }
    int64_t numel = 1;
    for (int64_t d : t->shape) numel *= d;
    if (t->dtype != ckpt::DType::kFloat32 || numel < offset + length) {
      return Status::InvalidArgument("checkpoint tensor " + kind + "/" + name +
                                     " has the wrong shape or dtype for this model");
    }
    const size_t bytes = static_cast<size_t>(length) * ckpt::DTypeSize(t->dtype);
    // A GPU destination is filled from a pinned host buffer (host -> device copy).
    torch::Tensor host =
        dst.is_cpu() ? dst
                     : torch::empty(dst.sizes(),
                                    torch::TensorOptions(dst.scalar_type()).pinned_memory(true));
    const uint8_t* mem =
        memory != nullptr ? FromMemory(memory, index, *t, rank, offset, length) : nullptr;
    if (mem != nullptr) {
      std::memcpy(host.data_ptr(), mem, bytes);
      memory->bytes_from_memory += bytes;
    } else {
      if (memory != nullptr) memory->bytes_from_disk += bytes;
      FT_RETURN_IF_ERROR(reader.ReadTensorRange(kind, name, offset, length, host.data_ptr()));
    }
    if (!dst.is_cpu()) dst.copy_(host);
    return Status::Ok();
  }));
  FT_ASSIGN_OR_RETURN(std::string optim_s, reader.ReadBlob("optim", "state", rank, world_size));
  FT_ASSIGN_OR_RETURN(std::string train_s, reader.ReadBlob("train", "state", rank, world_size));
  json optim = json::parse(optim_s, nullptr, false);
  json train = json::parse(train_s, nullptr, false);
  if (optim.is_discarded() || train.is_discarded() || !optim.contains("step") ||
      !train.contains("global_step")) {
    return Status::Corruption("checkpoint '" + reader.dir() + "' has malformed optim/train state");
  }
  engine.set_optimizer_step(optim["step"].get<int64_t>());
  state->step = train["global_step"].get<int64_t>();
  state->tokens = train.value("tokens", int64_t{0});
  state->guard_norms.clear();
  if (train.contains("guard_norms") && train["guard_norms"].is_array()) {
    for (const auto& v : train["guard_norms"]) {
      if (v.is_number()) state->guard_norms.push_back(v.get<double>());
    }
  }
  state->guard_recent.clear();
  if (train.contains("guard_recent") && train["guard_recent"].is_array()) {
    for (const auto& v : train["guard_recent"]) {
      if (v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_boolean()) {
        state->guard_recent.emplace_back(v[0].get<double>(), v[1].get<bool>());
      }
    }
  }
  if (reader.HasBlob("history", "run")) {
    // Rank 0's copy: it holds the metrics line (any world size may read it).
    FT_ASSIGN_OR_RETURN(std::vector<std::string> all, reader.ReadBlobAllRanks("history", "run"));
    json hist = json::parse(all.front(), nullptr, false);
    if (!hist.is_discarded()) {
      state->restarts = hist.value("restarts", int64_t{0});
      state->metrics_line = hist.value("metrics_line", std::string());
      state->skipped.clear();
      for (const auto& e : hist.value("skipped", json::array())) {
        if (e.is_array() && e.size() == 2 && e[0].is_number_integer() && e[1].is_string()) {
          state->skipped.emplace_back(e[0].get<int64_t>(), e[1].get<std::string>());
        }
      }
    }
  }
  if (m.meta.world_size == world_size) {
    FT_ASSIGN_OR_RETURN(state->data_cursor, reader.ReadBlob("data", "cursor", rank, world_size));
    FT_ASSIGN_OR_RETURN(std::string rng, reader.ReadBlob("rng", "torch_cpu", rank, world_size));
    FT_RETURN_IF_ERROR(SetRngState(rng));
    if (engine.config().device.is_cuda() && reader.HasBlob("rng", "torch_cuda")) {
      FT_ASSIGN_OR_RETURN(std::string cuda_rng,
                          reader.ReadBlob("rng", "torch_cuda", rank, world_size));
      torch::Tensor state = torch::empty({static_cast<int64_t>(cuda_rng.size())}, torch::kUInt8);
      std::memcpy(state.data_ptr(), cuda_rng.data(), cuda_rng.size());
      at::Generator gen = at::globalContext().defaultGenerator(engine.config().device);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
  } else {
    // Every rank's cursor holds the same global position; the data reader remaps it to the
    // new world size. RNG streams are per rank and cannot be carried over: reseed.
    FT_ASSIGN_OR_RETURN(std::vector<std::string> cursors,
                        reader.ReadBlobAllRanks("data", "cursor"));
    state->data_cursor = cursors.front();
    if (engine.config().exact_reduce) {
      // The step draws no random numbers and exact reduction makes its sums order-free. The
      // stream is left where the start's per-rank seed put it (trainer.cc), which is where an
      // uninterrupted run at this world size has it too: the checkpoints stay byte-identical.
      FT_LOG(Info) << "resume: world size changed from " << m.meta.world_size << " to "
                   << world_size << ": tensors resharded, data position kept, RNG as seeded "
                   << "for this rank; dist.reduce = exact: the bits stay those of an "
                   << "uninterrupted run";
    } else {
      torch::manual_seed(static_cast<uint64_t>(state->step) * 1000003ULL +
                         static_cast<uint64_t>(rank));
      FT_LOG(Warning) << "resume: world size changed from " << m.meta.world_size << " to "
                      << world_size << ": tensors resharded, data position remapped, RNG "
                      << "reseeded; the run is no longer bit-comparable with an uninterrupted one";
    }
  }
  return Status::Ok();
}

}  // namespace ftrain::train
