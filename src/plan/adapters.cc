// The LoRA and QLoRA rows of `ftrain plan`: per-GPU memory of fine-tuning with low-rank adapters
// on a frozen bf16 base (LoRA) or a frozen 4-bit NF4 base (QLoRA), next to the full fine-tune
// strategies. Planner only: ftrain train trains all weights. Formulas and sources: docs/plan.md,
// "LoRA and QLoRA".
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/strings.h"
#include "plan/internal.h"

namespace ftrain::plan_internal {
namespace {

constexpr const char* kTargets[] = {"q", "k", "v", "o", "gate", "up", "down"};

// Adapter state, bytes per adapter parameter: fp32 master 4 + Adam m,v 8 + bf16 gradient 2.
constexpr double kAdapterBytes = 4 + 8 + 2;
constexpr double kBaseBytes = 2;  // bf16 frozen weights
// NF4 with double quantisation (Dettmers et al. 2023, §3): 4 bits per weight, an 8-bit absmax
// per block of 64 weights and an fp32 constant per 256 of those blocks: 8/64 + 32/(64 x 256)
// = 0.127 bits per weight.
constexpr double kNf4Bytes = 0.5;
constexpr double kNf4ConstantBytes = (8.0 / 64.0 + 32.0 / (64.0 * 256.0)) / 8.0;

// (d_in, d_out) of one projection of a decoder layer.
struct Projection {
  double in;
  double out;
};

Projection Shape(const std::string& target, const PlanResult& r) {
  const double h = static_cast<double>(r.hidden);
  const double kv = static_cast<double>(r.kv_dim);
  const double inter = static_cast<double>(r.intermediate);
  if (target == "q" || target == "o") return {h, h};
  if (target == "k" || target == "v") return {h, kv};
  if (target == "gate" || target == "up") return {h, inter};
  return {inter, h};  // down
}

std::string Count(double n) {
  if (n >= 1e9) return Num(n / 1e9, 2) + "B";
  if (n >= 1e6) return Num(n / 1e6, 1) + "M";
  return Num(n, 0);
}

}  // namespace

Status ValidateAdapterInput(const PlanInput& in) {
  FT_RETURN_IF_ERROR(CheckPositiveInt("--lora-rank", in.lora_rank, 1 << 20));
  if (in.lora_targets.empty()) {
    return Status::InvalidArgument(
        "--lora-targets is empty; give a comma-separated subset of q,k,v,o,gate,up,down");
  }
  for (const auto& t : in.lora_targets) {
    if (std::find(std::begin(kTargets), std::end(kTargets), t) == std::end(kTargets)) {
      return Status::InvalidArgument("--lora-targets: unknown projection '" + t +
                                     "'; known: q,k,v,o,gate,up,down");
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<AdapterPlan>> ComputeAdapters(const PlanResult& r) {
  const double l = static_cast<double>(r.layers);
  const double rank = static_cast<double>(r.input.lora_rank);
  double per_layer = 0;
  std::vector<std::string> seen;
  for (const auto& t : r.input.lora_targets) {
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;  // q,q is q
    seen.push_back(t);
    const Projection p = Shape(t, r);
    if (rank > std::min(p.in, p.out)) {
      return Status::InvalidArgument(
          "--lora-rank " + std::to_string(r.input.lora_rank) + " is larger than the " + t +
          " projection (" + Num(p.in, 0) + " x " + Num(p.out, 0) +
          "): an adapter of that rank is no longer low rank; use a rank below " +
          Num(std::min(p.in, p.out), 0));
    }
    per_layer += rank * (p.in + p.out);
  }
  // Every projection of every layer is quantised by QLoRA, targeted or not.
  double linear_per_layer = 0;
  for (const char* t : kTargets) {
    const Projection p = Shape(t, r);
    linear_per_layer += p.in * p.out;
  }
  const double parameters = static_cast<double>(r.parameters);
  const double quantised = std::min(parameters, l * linear_per_layer);
  const double h = static_cast<double>(r.hidden);
  const double largest_projection =
      h * std::max({h, static_cast<double>(r.intermediate), static_cast<double>(r.kv_dim)});

  std::vector<AdapterPlan> out;
  for (const char* name : {"lora", "qlora"}) {
    AdapterPlan a;
    a.name = name;
    a.adapter_parameters = l * per_layer;
    a.adapter_bytes = kAdapterBytes * a.adapter_parameters;
    if (a.name == "lora") {
      a.base_bytes = kBaseBytes * parameters;
    } else {
      a.quantised_parameters = quantised;
      a.base_bytes =
          (kNf4Bytes + kNf4ConstantBytes) * quantised + kBaseBytes * (parameters - quantised);
      a.dequant_bytes = kBaseBytes * largest_projection;
    }
    a.activation_bytes = r.activation_bytes;
    a.total_bytes = a.base_bytes + a.adapter_bytes + a.dequant_bytes + a.activation_bytes;
    a.headroom_bytes = r.usable_bytes - a.total_bytes;
    a.fits = a.headroom_bytes >= 0;
    out.push_back(a);
  }
  return out;
}

void AppendAdapterText(const PlanResult& r, std::ostringstream& o) {
  if (r.adapters.empty()) return;
  const AdapterPlan& lora = r.adapters[0];
  const AdapterPlan& qlora = r.adapters.back();
  const double p = static_cast<double>(r.parameters);
  o << "fine-tuning with adapters (frozen base, only the adapters train; the base is replicated "
       "on every GPU; ftrain train itself trains all weights):\n"
    << "  LoRA rank " << r.input.lora_rank << " on " << Join(r.input.lora_targets, ",") << ": "
    << Count(lora.adapter_parameters) << " adapter parameters ("
    << Num(100 * lora.adapter_parameters / p, 2) << "% of " << Count(p) << ")\n";
  const size_t kName = 15, kCol = 9;
  o << Pad("method", kName, true);
  for (const char* hdr : {"base", "adapters", "dequant", "activ", "total", "fits", "headroom"}) {
    o << Pad(hdr, kCol);
  }
  o << "\n";
  for (const auto& a : r.adapters) {
    o << Pad(a.name, kName, true) << Pad(Gb(a.base_bytes), kCol) << Pad(Gb(a.adapter_bytes), kCol)
      << Pad(Gb(a.dequant_bytes), kCol) << Pad(Gb(a.activation_bytes), kCol)
      << Pad(Gb(a.total_bytes), kCol) << Pad(a.fits ? "yes" : "no", kCol)
      << Pad(Gb(a.headroom_bytes), kCol) << "\n";
  }
  o << "  base: lora bf16, 2 bytes/parameter; qlora NF4 with double quantisation, 0.5 byte + "
       "0.127 bit/parameter on the "
    << Count(qlora.quantised_parameters) << " projection weights of the layers, the other "
    << Count(p - qlora.quantised_parameters)
    << " (embeddings, lm_head, norms) bf16; dequant: one bf16 projection at a time\n"
    << "  adapters: 14 bytes/adapter parameter = fp32 master 4 + Adam m,v 8 + bf16 grads 2 "
       "(QLoRA's paged optimiser may move them to CPU memory under pressure; counted on the "
       "GPU here); activations as above\n";
  bool any_misses = false;
  for (const auto& a : r.adapters) any_misses = any_misses || !a.fits;
  if (any_misses && !r.input.act_ckpt) {
    const double ckpt = CheckpointedActivationBytes(r);
    std::string would;
    for (const auto& a : r.adapters) {
      if (a.total_bytes - a.activation_bytes + ckpt <= r.usable_bytes) {
        would += (would.empty() ? "" : " and ") + a.name;
      }
    }
    o << "  try: --act-ckpt: activations " << Gb(r.activation_bytes) << " -> " << Gb(ckpt)
      << " GB per GPU"
      << (would.empty()
              ? ""
              : "; then " + would + " fit" + (would.find(' ') == std::string::npos ? "s" : ""))
      << "\n";
  }
  o << "\n";
}

nlohmann::ordered_json AdaptersJson(const PlanResult& r) {
  using json = nlohmann::ordered_json;
  json out = json::array();
  for (const auto& a : r.adapters) {
    out.push_back({
        {"name", a.name},
        {"lora_rank", r.input.lora_rank},
        {"lora_targets", r.input.lora_targets},
        {"adapter_parameters", static_cast<int64_t>(std::llround(a.adapter_parameters))},
        {"quantised_parameters", static_cast<int64_t>(std::llround(a.quantised_parameters))},
        {"base_bytes", Bytes(a.base_bytes)},
        {"adapter_bytes", Bytes(a.adapter_bytes)},
        {"dequant_bytes", Bytes(a.dequant_bytes)},
        {"activation_bytes", Bytes(a.activation_bytes)},
        {"total_bytes_per_gpu", Bytes(a.total_bytes)},
        {"fits", a.fits},
        {"headroom_bytes", Bytes(a.headroom_bytes)},
    });
  }
  return out;
}

}  // namespace ftrain::plan_internal
