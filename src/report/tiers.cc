// The checkpoint tiers of a run (tiers.h).
#include "report/tiers.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ckpt/s3_store.h"
#include "ckpt/store.h"
#include "core/config.h"
#include "core/run_layout.h"

namespace ftrain::report {
namespace {

using StepMap = std::map<int64_t, RunSummary::StepTiers, std::greater<int64_t>>;

// Marks `flag` on every step committed in the S3 root `url` (`key` names it in a warning);
// returns how many, or -1 with a warning when it cannot be listed.
int ListCommitted(const std::string& key, const std::string& url, bool RunSummary::StepTiers::*flag,
                  StepMap* steps, RunSummary* r) {
  auto s3 = ckpt::S3CheckpointStore::Open(url);
  auto remote =
      s3.ok() ? (*s3)->List() : StatusOr<std::vector<ckpt::S3CheckpointInfo>>(s3.status());
  if (!remote.ok()) {
    r->warnings.push_back(key + " " + url + " could not be listed: " + remote.status().message());
    return -1;
  }
  int n = 0;
  for (const auto& c : *remote) {
    if (!c.committed) continue;
    ++n;
    (*steps)[c.step].step = c.step;
    (*steps)[c.step].*flag = true;
  }
  return n;
}

}  // namespace

void ReadCheckpointTiers(const std::string& run_dir, RunSummary* r, Env* env) {
  StepMap steps;
  ckpt::CheckpointStore store(r->ckpt_root, env);
  auto list = store.List();
  if (list.ok()) {
    for (const auto& c : *list) {
      if (c.status != ckpt::CheckpointStatus::kComplete) continue;
      steps[c.step].step = c.step;
      steps[c.step].file = true;
    }
  }
  const std::string path = RunLayout(run_dir).resolved_config();
  if (std::ifstream(path)) {
    auto cfg = Config::LoadFile(path);
    std::string root;
    // An unreadable config was already reported by the checkpoint root's lookup.
    if (cfg.ok()) (void)cfg->GetString("ckpt.mirror", &r->mirror);
    if (cfg.ok()) (void)cfg->GetString("ckpt.root", &root);
    // ckpt.root = s3://...: r->ckpt_root is its staging root (RunLayout::CheckpointRoot).
    if (root.rfind("s3://", 0) == 0) r->s3_root = root;
  }
  if (!r->mirror.empty()) {
    const int n =
        ListCommitted("ckpt.mirror", r->mirror, &RunSummary::StepTiers::mirror, &steps, r);
    r->checkpoints_in_mirror = std::max(0, n);
  }
  if (!r->s3_root.empty()) {
    const int n = ListCommitted("ckpt.root", r->s3_root, &RunSummary::StepTiers::s3, &steps, r);
    r->checkpoints_in_s3 = std::max(0, n);
  }
  for (const auto& [step, t] : steps) r->tiers.push_back(t);
}

}  // namespace ftrain::report
