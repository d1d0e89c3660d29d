// Which tiers hold each checkpoint of a run (`ftrain report`): the file-system root and, when
// the run's resolved config sets ckpt.mirror, the S3 mirror (listed, never written).
#pragma once

#include "report/run_report.h"

namespace ftrain::report {

// Fills r->mirror, r->checkpoints_in_mirror and r->tiers; a mirror that cannot be listed
// (no credentials here, an outage) adds a warning instead.
void ReadCheckpointTiers(const std::string& run_dir, RunSummary* r);

}  // namespace ftrain::report
