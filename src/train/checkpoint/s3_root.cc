// The start of a run whose checkpoint root is on S3: checks, fence, reconciliation and the
// restore with fallback (s3_root.h).
#include "train/checkpoint/s3_root.h"

#include <torch/torch.h>

#include <chrono>
#include <thread>
#include <vector>

#include "ckpt/filename.h"
#include "ckpt/s3_staging.h"
#include "ckpt/s3_store.h"
#include "ckpt/store.h"
#include "core/env.h"
#include "core/log.h"
#include "train/config/mirror_config.h"

namespace ftrain::train {
namespace {

// `v` from rank 0 on every rank (a control collective).
StatusOr<double> FromLeader(comm::DistContext& ctx, double v) {
  torch::Tensor t = torch::tensor({v}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(t, 0)->Wait());
  return t[0].item<double>();
}

StatusOr<double> MaxOverRanks(comm::DistContext& ctx, double v) {
  torch::Tensor t = torch::tensor({v}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(t, comm::ReduceOp::kMax)->Wait());
  return t[0].item<double>();
}

// Rank 0: the store's checks, the fence, the staging marker and the reconciliation. Returns
// the committed steps on S3 newer than the newest complete staged one, newest first.
StatusOr<std::vector<int64_t>> PrepareAsLeader(const TrainConfig& cfg,
                                               const std::string& generation, Env* env) {
  const std::string& url = cfg.ckpt.s3_root;
  auto store = ckpt::S3CheckpointStore::Open(url);
  if (!store.ok()) {
    return Status::InvalidArgument("ckpt.root = " + url + ": " + store.status().message());
  }
  Status s = (*store)->CheckUsable();
  if (s.ok()) s = (*store)->ClaimFence(generation);
  if (!s.ok()) return Status::FailedPrecondition("ckpt.root: " + s.message());
  FT_ASSIGN_OR_RETURN(S3UploadConfig knobs, ParseS3UploadConfig(cfg.raw));
  data::UploadOptions upload;
  upload.part_bytes = uint64_t(knobs.part_mb) << 20;
  upload.threads = knobs.threads;
  upload.max_bytes_per_s = static_cast<int64_t>(knobs.max_mb_s * 1e6);
  // Recorded in S3_ROOT: every writer of this staging root (ckptd, a rank) uploads with them.
  FT_RETURN_IF_ERROR(ckpt::MarkStagingRoot(cfg.ckpt.root, url, upload, env));
  FT_RETURN_IF_ERROR(
      ckpt::ReconcileStaging(cfg.ckpt.root, url, static_cast<int>(cfg.ckpt.keep), env).status());
  FT_ASSIGN_OR_RETURN(auto remote, (*store)->List());
  ckpt::CheckpointStore fs(cfg.ckpt.root, env);
  FT_ASSIGN_OR_RETURN(std::optional<ckpt::CheckpointInfo> local, fs.Latest());
  std::vector<int64_t> steps;
  for (const auto& i : remote) {  // newest first
    if (i.committed && (!local || i.step > local->step)) steps.push_back(i.step);
  }
  FT_LOG(Info) << "checkpoint: root " << url << " (staged in " << cfg.ckpt.root << "), "
               << (remote.empty() ? std::string("empty")
                                  : std::to_string(steps.size()) + " committed step(s) to restore");
  return steps;
}

// Rank 0: an empty step-N.restore directory for the ranks' downloads.
Status BeginRestore(const std::string& root, int64_t step, Env* env) {
  const std::string tmp = JoinPath(root, ckpt::RestoreDirName(step));
  if (env->FileExists(tmp)) FT_RETURN_IF_ERROR(env->RemoveDirRecursive(tmp));
  return CreateDirs(env, tmp);
}

// 0: my files are there; 1: damage (an object's XXH3 or size is wrong, or it is missing);
// 2: an outage or a local error (retried, never damage).
double Outcome(const Status& s) {
  if (s.ok()) return 0;
  return s.IsCorruption() || s.IsNotFound() ? 1 : 2;
}

// Every rank: the restore loop. Rank 0 picks the step (-1: none left, -2: give up) and
// decides after each round from the worst rank's outcome.
Status RestoreWithFallback(comm::DistContext& ctx, const TrainConfig& cfg,
                           std::vector<int64_t> steps, Env* env) {
  const bool leader = ctx.world().rank == 0;
  const std::string& url = cfg.ckpt.s3_root;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(cfg.ckpt.resume_retry_s);
  size_t next = 0;
  bool give_up = false;
  for (int attempt = 0;; ++attempt) {
    double step = give_up ? -2 : (leader && next < steps.size() ? double(steps[next]) : -1);
    if (leader && step >= 0) FT_RETURN_IF_ERROR(BeginRestore(cfg.ckpt.root, int64_t(step), env));
    FT_ASSIGN_OR_RETURN(step, FromLeader(ctx, step));
    if (step == -1) return Status::Ok();  // resume from what is staged (or start fresh)
    if (step == -2) {
      return Status::Unavailable("ckpt.root = " + url +
                                 ": could not download the checkpoint within "
                                 "ckpt.resume_retry_s (an outage, not damage; nothing was set "
                                 "aside): start again later");
    }
    const int64_t s = static_cast<int64_t>(step);
    Status mine =
        ckpt::RestoreFiles(url, cfg.ckpt.root, s, ctx.world().rank, ctx.world().world_size, env);
    if (!mine.ok())
      FT_LOG(Warning) << "checkpoint: restoring step " << s << ": " << mine.ToString();
    FT_ASSIGN_OR_RETURN(double worst, MaxOverRanks(ctx, Outcome(mine)));
    if (!leader) {
      if (worst == 0) return ctx.control().Barrier()->Wait();  // after rank 0's rename
      continue;
    }
    if (worst == 0) {
      FT_RETURN_IF_ERROR(ckpt::FinishRestore(url, cfg.ckpt.root, s, env));
      FT_LOG(Info) << "checkpoint: restored step " << s << " from " << url;
      return ctx.control().Barrier()->Wait();
    }
    if (worst == 1) {
      FT_LOG(Error) << "checkpoint: step " << s << " in " << url
                    << " is damaged; setting it aside and falling back to the previous one";
      Status a = ckpt::SetAsideDamaged(url, s);
      // Not set aside (an outage): this start still skips it; the next one checks it again.
      if (!a.ok())
        FT_LOG(Warning) << "checkpoint: setting step " << s << " aside: " << a.ToString();
      ++next;
      continue;
    }
    give_up = std::chrono::steady_clock::now() > deadline;
    const int wait_ms = std::min(5000, 200 << std::min(attempt, 5));
    FT_LOG(Warning) << "checkpoint: " << url << " is unavailable; retrying step " << s << " in "
                    << wait_ms << " ms (ckpt.resume_retry_s = " << cfg.ckpt.resume_retry_s << ")";
    if (!give_up) std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
}

}  // namespace

Status OpenS3Root(comm::DistContext& ctx, const TrainConfig& cfg, const std::string& generation,
                  Env* env) {
  if (cfg.ckpt.s3_root.empty()) return Status::Ok();
  const bool leader = ctx.world().rank == 0;
  StatusOr<std::vector<int64_t>> steps = std::vector<int64_t>();
  if (leader) steps = PrepareAsLeader(cfg, generation, env);
  // A refusal ends every rank with rank 0's code, not a peer's broken collective.
  FT_ASSIGN_OR_RETURN(double c, FromLeader(ctx, static_cast<double>(steps.status().code())));
  const auto code = static_cast<Status::Code>(static_cast<int>(c));
  if (code != Status::Code::kOk) {
    return leader ? steps.status()
                  : Status(code, "ckpt.root: refused by rank 0 (its log says why)");
  }
  if (cfg.train.resume != "auto") return Status::Ok();
  return RestoreWithFallback(ctx, cfg, leader ? std::move(*steps) : std::vector<int64_t>(), env);
}

}  // namespace ftrain::train
