// Which tiers hold each checkpoint of a run (`ftrain report`): the file-system root (with
// ckpt.root = s3://..., its staging root) and, when the run's resolved config names one, the
// S3 mirror (ckpt.mirror) or the S3 root (ckpt.root = s3://...): listed, never written.
#pragma once

#include "report/run_report.h"

namespace ftrain::report {

// Fills r->mirror, r->checkpoints_in_mirror, r->s3_root, r->checkpoints_in_s3 and r->tiers;
// a store that cannot be listed (no credentials here, an outage) adds a warning instead.
void ReadCheckpointTiers(const std::string& run_dir, RunSummary* r, Env* env);

}  // namespace ftrain::report
