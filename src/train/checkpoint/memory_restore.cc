// Recovery from the memory tier (memory_restore.h).
#include "train/checkpoint/memory_restore.h"

#include <torch/torch.h>

#include <chrono>
#include <optional>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/filename.h"
#include "ckpt/memory_manifest.h"
#include "ckpt/store.h"
#include "comm/context.h"
#include "core/env.h"
#include "core/log.h"

namespace ftrain::train {
namespace {

using Clock = std::chrono::steady_clock;

// Rank 0 reads the record and broadcasts [step, digest halves per rank]; -1: nothing newer
// than the disk that this run can take.
StatusOr<ckpt::MemoryManifest> AgreeOnRecord(const TrainConfig& cfg, comm::DistContext& ctx,
                                             int64_t disk_step, Env* env) {
  const int w = ctx.world().world_size;
  std::vector<double> v(1 + 2 * static_cast<size_t>(w), 0.0);
  v[0] = -1;
  if (ctx.world().rank == 0) {
    auto rec = ckpt::ReadMemoryManifest(env, cfg.ckpt.root);
    if (!rec.ok()) {
      FT_LOG(Warning) << "resume: memory tier: " << rec.status().message() << "; using the disk";
    } else if (rec->has_value()) {
      const ckpt::MemoryManifest& m = **rec;
      if (m.step <= disk_step) {
        FT_LOG(Info) << "resume: memory tier records step " << m.step << ", not newer than the "
                     << "disk's step " << disk_step;
      } else if (m.world_size != w || m.config_hash != cfg.ConfigHash()) {
        FT_LOG(Warning) << "resume: memory tier records step " << m.step << " of another run ("
                        << m.world_size << " ranks, config " << m.config_hash
                        << "); using the disk";
      } else {
        v[0] = static_cast<double>(m.step);
        for (int r = 0; r < w; ++r) {
          v[1 + 2 * r] = static_cast<double>(m.digests[r] & 0xffffffffu);
          v[2 + 2 * r] = static_cast<double>(m.digests[r] >> 32);
        }
      }
    }
  }
  torch::Tensor t =
      torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kFloat64).clone();
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(t, 0)->Wait());
  ckpt::MemoryManifest m;
  m.step = static_cast<int64_t>(t[0].item<double>());
  m.world_size = w;
  for (int r = 0; r < w; ++r) {
    m.digests.push_back(static_cast<uint64_t>(t[1 + 2 * r].item<double>()) |
                        (static_cast<uint64_t>(t[2 + 2 * r].item<double>()) << 32));
  }
  return m;
}

// This rank's snapshot of `step` from its daemon, else a peer's memory; checked against the
// recorded digest. "" when it is here and whole, else why not.
std::string GetPiece(CheckpointSink& sink, int64_t step, uint64_t digest, int world,
                     std::optional<ckpt::CkptdClient::MemorySnapshot>* snap, bool* from_peer) {
  if (!sink.connected()) return "no checkpoint daemon on this node";
  auto s = sink.MemorySnapshot(step);
  if (!s.ok()) return "asking ckptd: " + s.status().message();
  if (!s->has_value()) {
    auto f = sink.FetchFromPeer(step);
    if (!f.ok()) return "not in this node's daemon; fetch from a peer: " + f.status().message();
    if (!f->found) return "held neither by this node's daemon nor by a peer (" + f->detail + ")";
    *from_peer = true;
    s = sink.MemorySnapshot(step);
    if (!s.ok() || !s->has_value()) return "the fetched snapshot is gone";
  }
  const ckpt::proto::Submit& sub = (*s)->submit;
  if (sub.meta.step != step || sub.meta.world_size != world) return "the daemon holds another step";
  const uint64_t got = ckpt::proto::SnapshotDigest(ckpt::proto::PieceHashes(sub, (*s)->base));
  if (got != digest) return "its bytes do not match the digest MEMORY_TIER.json records";
  *snap = std::move(*s);
  return "";
}

// Every rank's vote (max over ranks of `bad`); true when no rank failed.
StatusOr<bool> AllOk(comm::DistContext& ctx, bool bad) {
  torch::Tensor t = torch::tensor({bad ? 1.0 : 0.0}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(t, comm::ReduceOp::kMax)->Wait());
  return t[0].item<double>() == 0;
}

}  // namespace

StatusOr<MemoryRestore> RestoreMemoryTier(const TrainConfig& cfg, comm::DistContext& ctx,
                                          CheckpointSink& sink, const std::string& generation,
                                          int64_t disk_step) {
  const auto t0 = Clock::now();
  const comm::WorldInfo& world = ctx.world();
  MemoryRestore out;
  FT_ASSIGN_OR_RETURN(ckpt::MemoryManifest rec, AgreeOnRecord(cfg, ctx, disk_step, sink.env()));
  if (rec.step < 0) return out;
  out.recorded = rec.step;
  std::optional<ckpt::CkptdClient::MemorySnapshot> snap;
  bool from_peer = false;
  const std::string why =
      GetPiece(sink, rec.step, rec.digests[world.rank], world.world_size, &snap, &from_peer);
  if (!why.empty()) {
    FT_LOG(Warning) << "resume: memory tier: rank " << world.rank << " cannot restore step "
                    << rec.step << " from memory: " << why;
  }
  FT_ASSIGN_OR_RETURN(bool all_here, AllOk(ctx, !why.empty()));
  if (!all_here) {
    out.why_not = "a rank's snapshot of step " + std::to_string(rec.step) +
                  " is in no daemon's memory or does not match its digest (see the ranks' logs)";
    return out;
  }
  // Every rank holds its verified piece: write the step out, exactly as ckptd would have.
  ckpt::CheckpointMeta meta = snap->submit.meta;
  meta.generation = generation;
  ckpt::CheckpointStore store(cfg.ckpt.root, sink.env());
  Status s = store
                 .WriteShard(meta, world.rank, ckpt::proto::ContentsOf(snap->submit, snap->base),
                             sink.write_options())
                 .status();
  if (s.ok()) s = store.TryCommit(meta).status();
  if (!s.ok())
    FT_LOG(Error) << "resume: memory tier: writing step " << rec.step << ": " << s.message();
  FT_ASSIGN_OR_RETURN(bool written, AllOk(ctx, !s.ok()));
  torch::Tensor peers = torch::tensor({from_peer ? 1.0 : 0.0}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(peers, comm::ReduceOp::kSum)->Wait());
  out.ranks_from_peer = static_cast<int>(peers[0].item<double>());
  const bool committed =
      written && sink.env()->IsDirectory(JoinPath(cfg.ckpt.root, ckpt::StepDirName(rec.step)));
  FT_ASSIGN_OR_RETURN(bool everywhere, AllOk(ctx, !committed));
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!everywhere) {
    out.why_not = "writing step " + std::to_string(rec.step) + " out failed (see the ranks' logs)";
    return out;
  }
  out.step = rec.step;
  return out;
}

}  // namespace ftrain::train
