// `ftrain report RUN_DIR [--svg FILE]`: what a run did, from its own records
// (metrics.jsonl, restarts.jsonl, the checkpoint root): steps, tokens, step-time median/p95,
// tokens/s, checkpoints and their stall, restarts with cause and lost work; and a
// self-contained SVG timeline of loss and throughput with checkpoints and restarts marked.
// Reads files only; no LibTorch.
#pragma once

#include <ostream>
#include <string>

#include "core/status.h"

namespace ftrain::train {

Status PrintReport(const std::string& run_dir, std::ostream& out);
Status WriteReportSvg(const std::string& run_dir, const std::string& svg_path);

}  // namespace ftrain::train
