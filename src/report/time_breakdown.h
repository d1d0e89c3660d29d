// Run report, part 4 (internal to src/report): "where the time goes". Reads the per-rank step
// phases rank 0 recorded in metrics.jsonl ("phases", "ranks", "stragglers") and turns them
// into one line per suspect, in the order to look (a starved data loader, communication
// against compute, stragglers, a micro-batch too small, checkpoint stalls, failures), each
// with its number and what to try; and the SVG panel (stacked phases over steps and every
// rank's busy time as a heat strip).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "core/status.h"
#include "report/run_report.h"

namespace ftrain::report {

// Reads RUN/commcheck.json into r->link; a missing file leaves it absent, a bad one adds one
// warning naming the file (the rest of the report does not depend on it).
void ReadLinkRecord(const std::string& path, RunSummary* r);
// Fills r->breakdown, data_bound and comm_bound (after the rest of the analysis).
void AnalyzeTimeBreakdown(RunSummary* r);
void PrintTimeBreakdown(const RunSummary& r, std::ostream& out);
nlohmann::ordered_json TimeBreakdownJson(const RunSummary& r);

// The SVG panel under the timeline: its height (0 when no step has phases) and its drawing,
// translated down by `top`.
double PhasesPanelHeight(const RunSummary& r);
std::string RenderPhasesPanel(const RunSummary& r, double top);

}  // namespace ftrain::report
