// The replica check for silent data corruption and the bitflip fault (sdc_check.h).
#include "train/sdc_check.h"

#include <torch/torch.h>
#include <xxhash.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "comm/collectives.h"
#include "core/clock.h"
#include "core/run_layout.h"
#include "fsdp/engine.h"
#include "records/json_lines.h"
#include "records/quarantine.h"
#include "records/restarts.h"

namespace ftrain::train {

namespace {

std::vector<torch::Tensor> MasterPieces(const fsdp::FsdpEngine& engine) {
  std::vector<torch::Tensor> out;
  for (const fsdp::ShardPiece& p : engine.StatePieces()) {
    if (p.kind == "master" && p.data.numel() > 0) out.push_back(p.data);
  }
  return out;
}

uint64_t HostDigest(const std::vector<torch::Tensor>& pieces) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const torch::Tensor& t : pieces) {
    XXH3_64bits_update(st, t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// Sum over elements of (bits xor position x K1) x K2 (K2 odd: a bijection of the element's
// bits for each position, so a single changed element always changes the sum), wrapping in
// int64. Integer sums do not depend on the reduction order: deterministic on any device.
uint64_t DeviceDigest(const std::vector<torch::Tensor>& pieces) {
  constexpr int64_t kPosition = static_cast<int64_t>(0x9E3779B97F4A7C15ULL);
  constexpr int64_t kMix = static_cast<int64_t>(0xC2B2AE3D27D4EB4FULL);
  const auto opts = torch::TensorOptions(torch::kInt64).device(pieces[0].device());
  torch::Tensor acc = torch::zeros({}, opts);
  int64_t base = 0;
  for (const torch::Tensor& t : pieces) {
    const int64_t n = t.numel();
    torch::Tensor bits = t.view(torch::kInt32).to(torch::kInt64).bitwise_and_(0xFFFFFFFFLL);
    torch::Tensor key = torch::arange(base, base + n, opts).mul_(kPosition);
    acc.add_(bits.bitwise_xor_(key).mul_(kMix).sum());
    base += n;
  }
  return static_cast<uint64_t>(acc.item<int64_t>());  // the check's one host synchronisation
}

}  // namespace

uint64_t MasterDigest(const fsdp::FsdpEngine& engine) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> pieces = MasterPieces(engine);
  if (pieces.empty()) return 0;
  return pieces[0].device().is_cpu() ? HostDigest(pieces) : DeviceDigest(pieces);
}

std::string FlipMasterBit(fsdp::FsdpEngine& engine) {
  torch::NoGradGuard no_grad;
  for (const fsdp::ShardPiece& p : engine.StatePieces()) {
    if (p.kind != "master" || p.data.numel() == 0) continue;
    const int64_t i = p.data.numel() / 2;
    p.data.view(torch::kInt32).narrow(0, i, 1).bitwise_xor_(1 << 20);
    return "bit 20 of element " + std::to_string(p.offset + i) + " of " + p.name + "'s master";
  }
  return "nothing (this rank holds no master shard)";
}

StatusOr<SdcVerdict> CheckReplicas(const fsdp::FsdpEngine& engine, comm::Comm& control,
                                   const ReplicaPlace& me, const std::vector<std::string>& hosts) {
  constexpr int64_t kFields = 4;  // hash, rank, shard, node
  torch::Tensor in = torch::empty({kFields}, torch::kInt64);
  int64_t* v = in.data_ptr<int64_t>();
  v[0] = static_cast<int64_t>(MasterDigest(engine));
  v[1] = me.rank;
  v[2] = me.shard;
  v[3] = me.node;
  torch::Tensor out = torch::empty({kFields * control.size()}, torch::kInt64);
  FT_RETURN_IF_ERROR(
      control.AllGather(out, in)->Wait().Annotate("gathering the replicas' shard hashes"));
  std::vector<ReplicaHash> all(static_cast<size_t>(control.size()));
  const int64_t* o = out.data_ptr<int64_t>();
  for (size_t r = 0; r < all.size(); ++r) {
    const int64_t* f = o + kFields * static_cast<int64_t>(r);
    all[r].hash = static_cast<uint64_t>(f[0]);
    all[r].rank = static_cast<int>(f[1]);
    all[r].shard = static_cast<int>(f[2]);
    all[r].node = static_cast<int>(f[3]);
  }
  return JudgeReplicas(all, hosts);
}

Status RecordSdc(const std::string& run_dir, const records::LaunchContext& launch, int64_t step,
                 const SdcVerdict& v, Env* env) {
  const RunLayout layout(run_dir);
  nlohmann::json ranks = nlohmann::json::array(), hosts = nlohmann::json::array(),
                 nodes = nlohmann::json::array();
  const std::string& job = launch.job_id;
  for (const SdcSuspect& s : v.suspects) {
    ranks.push_back(s.rank);
    hosts.push_back(s.host);
    nodes.push_back(s.node);
    records::QuarantineRecord q;
    q.time = UnixSeconds();
    q.host = s.host;
    q.node = s.node;
    q.rank = s.rank;
    q.shard = s.shard;
    q.step = step;
    q.cause = "sdc";
    q.by_majority = v.by_majority;
    if (!job.empty()) q.job = job;
    FT_RETURN_IF_ERROR(records::AppendQuarantine(layout.quarantine(), q));
  }
  nlohmann::json rec = {{"time", UnixSeconds()},  {"event", "sdc"},
                        {"cause", "sdc"},         {"step", step},
                        {"ranks", ranks},         {"hosts", hosts},
                        {"nodes", nodes},         {"by_majority", v.by_majority},
                        {"replicas", v.replicas}, {"detail", v.summary}};
  if (!job.empty()) rec["job"] = job;
  return records::AppendForThisProcess(layout, launch, rec.dump(), env);
}

}  // namespace ftrain::train
