// `ftrain report RUN_DIR [--svg FILE] [--json]`: what a run did, from its own records
// (metrics.jsonl, restarts.jsonl, the checkpoint root): goodput and the hours lost to
// interruptions, each interruption with cause, detection, recovery and re-done work, step-time
// p50/p95, tokens/s, MFU and GPU figures when recorded, checkpoint stalls; as text, as JSON,
// and as a self-contained SVG timeline. Reads files only; no LibTorch.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "records/hangs.h"
#include "records/metrics_record.h"
#include "records/phases.h"
#include "records/quarantine.h"

namespace ftrain::report {

// RUN/commcheck.json (`ftrain commcheck --record`, slurm/train.sh's pre-flight): the link the
// step's collective bytes are held against.
struct LinkRecord {
  std::string path;
  bool present = false;   // the file exists and was usable
  double busbw_gbps = 0;  // the world group's all_gather/reduce_scatter at its largest size
  int64_t bytes = 0;      // (the lower of the two)
  std::string collective, backend;
  int world_size = 0, num_nodes = 0;
  // Set when the record's ranks or nodes differ from the run's newest step (a record made by
  // hand elsewhere, or at an older start): the record is still used, and this says so.
  std::string mismatch;
};

// One line of "where the time goes": its share, the figure behind it, whether it is the
// problem, and what to try.
struct BreakdownItem {
  std::string key;  // data_wait, communication, stragglers, micro_batch, checkpoints, failures
  std::string title;
  double share = 0;  // of the step time (failures, checkpoints: of the wall time)
  std::string figure;
  bool flagged = false;
  std::string verdict;  // "DATA-BOUND", "STRAGGLER", ... or "ok"
  std::string advice;
};

// The steps that count are metrics.jsonl's records (records/metrics_record.h): a resumed
// trainer rewrites the lines of the steps it re-does, so the file never holds a step twice.

// One line of restarts.jsonl (slurm/train.sh and the trainer's fell_back / resumed records).
struct RunEvent {
  double time = 0;
  std::string event, cause, job;
  std::string json;  // the whole record, for --json
  std::optional<double> lost_s;
  std::optional<int64_t> last_step;      // the newest step before the failure (train.sh)
  std::optional<double> last_step_time;  // and when it ended: the last sign of life
  std::optional<int64_t> step;           // fell_back: the damaged step; resumed: the step
  std::string detail;                    // fell_back: moved_to + problem; resumed: source
  std::optional<double> detected;        // when the failure was noticed (train.sh)
  std::string detected_by, evidence;     // "ftrain" (its own heartbeats + probe) or "slurm"
};

// The wall time between the last step that counts before a failure and the first step after
// it: re-done work (steps that ran but were lost) followed by downtime.
struct Interruption {
  std::string cause;          // of the first record in the gap (node_failure, rank_failure, ...)
  std::string how;            // what the records say happened, in words
  int64_t resumed_step = 0;   // the last step that counts before it (the checkpoint used)
  double last_good_time = 0;  // when that step ended
  double failed_at = 0;       // the last sign of life before the failure
  bool failed_at_estimated = false;
  std::string failed_at_basis;         // how failed_at was found, in words
  bool requeued = false;               // a requeued record: Slurm (or train.sh) requeued the job
  std::optional<double> detected_at;   // train.sh noticed (absent: Slurm requeued silently)
  std::string detected_by, evidence;   // who noticed, and on what signs (ftrain's detection)
  std::optional<double> restarted_at;  // the new attempt began (requeued / restarted record)
  std::optional<double> first_step_start, first_step_end;  // absent: the run never resumed
  int next_record = -1;  // index into RunSummary::steps of that first step (-1: none)
  // The attempt after it failed too before committing a checkpoint: the next interruption
  // begins where this one's downtime ends (`down_until`, when that attempt started).
  bool failed_again = false;
  double down_until = 0;  // the first new step's start, the next attempt's start, or the end
  int64_t redone_steps = 0;
  bool redone_steps_estimated = false;
  double redone_s = 0, down_s = 0, lost_s = 0;  // lost = re-done + down
  std::string state_from;                       // where the resumed state came from, in words
  std::vector<int> fallbacks;                   // indexes into RunSummary::events (fell_back)
  std::vector<int> events;                      // indexes into RunSummary::events in this gap
};

struct Percentiles {
  double p50 = 0, p95 = 0, max = 0;
  int count = 0;
};

// The held-out evaluations ([eval]) among the step records.
struct EvalSummary {
  int count = 0;
  int64_t first_step = 0, last_step = 0, best_step = 0;
  double first_loss = 0, last_loss = 0, best_loss = 0;
  double total_s = 0;  // their wall time, part of the steps' step_time_s
};

// One line of RUN/quarantine.jsonl (records/quarantine.h): a host kept out of the run (replicas
// of its shard disagreed, its ranks hung twice, its node could not run them).
struct QuarantinedNode : records::QuarantineRecord {
  // What the job controller did about it (its "quarantine" records in restarts.jsonl):
  // "replaced by spare n3", "excluded when job 12 was requeued", ... ("" : nothing recorded).
  std::string action;
};

// One line of RUN/hangs.jsonl (records/hangs.h): a rank the others waited for in a collective
// beyond the hang guard's threshold (train/hang_watch.h), and its host.
using HungRank = records::HangRecord;

struct RunSummary {
  std::string run_dir, ckpt_root;
  std::vector<records::StepMetrics> steps;
  std::vector<RunEvent> events;  // sorted by time
  std::vector<Interruption> interruptions;
  std::vector<QuarantinedNode> quarantined;  // RUN/quarantine.jsonl, in file order
  std::vector<HungRank> hangs;               // RUN/hangs.jsonl, in file order
  std::vector<std::string> warnings;         // skipped lines, guesses: shown, never silent
  double start = 0, end = 0, wall_s = 0;
  double productive_s = 0, lost_s = 0, redone_s = 0, down_s = 0, other_s = 0, goodput = 0;
  Percentiles step_time, step_time_with_stall, tokens_per_s, data_wait, comm, stall;
  std::optional<Percentiles> mfu, gpu_util, gpu_mem_gb, tokens_per_s_per_gpu;
  std::optional<EvalSummary> eval;
  // Over http/s3: read latency in seconds, the median over steps of each record's p50 and
  // p95, and the range requests counted; unset for local files.
  std::optional<double> read_p50_s, read_p95_s;
  int64_t read_requests = 0;
  std::vector<int64_t> checkpoint_steps;  // steps whose record shows a checkpoint stall
  double stall_total_s = 0;
  int checkpoints_in_root = 0, corrupt_in_root = 0;
  std::optional<int64_t> latest_in_root;
  // ckpt.mirror or ckpt.root = s3://... (report/tiers.cc): the object-store tier and which
  // tiers hold each step, newest first ("" / empty when the run has neither; unreachable: a
  // warning). With an S3 root, `file` is the staged copy in ckpt_root (the staging root).
  struct StepTiers {
    int64_t step = -1;
    bool file = false;    // complete in the file-system (or staging) root
    bool mirror = false;  // committed in the mirror
    bool s3 = false;      // committed in the S3 root
  };
  std::string mirror, s3_root;
  int checkpoints_in_mirror = 0, checkpoints_in_s3 = 0;
  std::vector<StepTiers> tiers;
  // Where the time goes (report/time_breakdown.cc), in the order to look.
  std::vector<records::Straggler> stragglers;  // as named, in step order
  std::vector<BreakdownItem> breakdown;
  LinkRecord link;
  bool data_bound = false, comm_bound = false;
};

// What the newest restarts.jsonl record says of the run as a whole.
struct RunState {
  std::string kind;  // "finished", "failed" (train.sh gave up), "unfinished", "" (no records)
  const RunEvent* last = nullptr;  // that record
  std::string advice;              // failed: what to do next
};
RunState RunStateOf(const RunSummary& r);

// Reads and analyses RUN_DIR. A missing directory or one without records is InvalidArgument
// (exit 2); a malformed record is Corruption naming file:line (exit 1), except a torn last
// line of a file (what a crash mid-append leaves), which is skipped with a warning.
StatusOr<RunSummary> AnalyzeRun(const std::string& run_dir, Env* env);

void PrintReport(const RunSummary& r, std::ostream& out);
void PrintReportJson(const RunSummary& r, std::ostream& out);
std::string RenderReportSvg(const RunSummary& r);
Status WriteReportSvg(const RunSummary& r, const std::string& svg_path);

// Helpers shared by the text, JSON and SVG forms (and tests).
std::string IsoTime(double unix_s);                     // 2026-12-01T14:33:02Z
std::string Offset(double seconds);                     // +01:23:45 (hours grow past 99)
std::string HumanDuration(double seconds);              // 45 s, 2 min 30 s, 3 h 05 min
Percentiles ComputePercentiles(std::vector<double> v);  // nearest rank
// A conservative width of `text` at `font_px` in a sans-serif font: the SVG lays out every
// label with it so nothing leaves the picture.
double TextWidth(const std::string& text, double font_px);

}  // namespace ftrain::report
