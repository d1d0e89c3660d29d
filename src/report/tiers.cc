// The checkpoint tiers of a run (tiers.h).
#include "report/tiers.h"

#include <fstream>
#include <map>

#include "ckpt/s3_store.h"
#include "ckpt/store.h"
#include "core/config.h"
#include "core/run_layout.h"

namespace ftrain::report {

void ReadCheckpointTiers(const std::string& run_dir, RunSummary* r) {
  std::map<int64_t, RunSummary::StepTiers, std::greater<int64_t>> steps;
  ckpt::CheckpointStore store(r->ckpt_root);
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
    // An unreadable config was already reported by the checkpoint root's lookup.
    if (cfg.ok()) (void)cfg->GetString("ckpt.mirror", &r->mirror);
  }
  if (!r->mirror.empty()) {
    auto s3 = ckpt::S3CheckpointStore::Open(r->mirror);
    auto remote =
        s3.ok() ? (*s3)->List() : StatusOr<std::vector<ckpt::S3CheckpointInfo>>(s3.status());
    if (!remote.ok()) {
      r->warnings.push_back("ckpt.mirror " + r->mirror +
                            " could not be listed: " + remote.status().message());
    } else {
      for (const auto& c : *remote) {
        if (!c.committed) continue;
        ++r->checkpoints_in_mirror;
        steps[c.step].step = c.step;
        steps[c.step].mirror = true;
      }
    }
  }
  for (const auto& [step, t] : steps) r->tiers.push_back(t);
}

}  // namespace ftrain::report
