// records/restarts.h - the schema of RUN/restarts.jsonl, the run's history of starts, stops,
// failures and restarts, shared by every writer (`ftrain job`, `ftrain agent`, the trainer's
// rank 0) and by its reader (`ftrain report`). It does not decide what happens to a job
// (src/orch does); it only says how a record is written, where, and how it is read back.
//
// One writer per file: writers on several hosts never append to one file (appends are not
// atomic on NFS). Each host appends whole lines (one write(2) each) to its own spool,
// RUN/.records/restarts-<node>.jsonl; the holder of the run lease (the job controller, or a
// watcher that took the job over) is the only writer of RUN/restarts.jsonl, which it rewrites
// atomically (temp, fsync, rename) as the time-ordered merge of everything. A reader takes
// both, merged, so a record not merged yet is never missed. A torn or malformed line is
// skipped and reported, never fatal.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/run_layout.h"
#include "core/status.h"
#include "records/launch_context.h"

namespace ftrain::records {

// A field of a record after the five fixed ones: its key and its value, already JSON-encoded.
struct Field {
  std::string key;
  std::string json;
  bool operator==(const Field& o) const { return key == o.key && json == o.json; }
};
Field Str(const std::string& key, const std::string& value);  // escaped
Field Int(const std::string& key, int64_t value);
Field Num(const std::string& key, double value, int decimals);  // fixed decimals, finite
Field Bool(const std::string& key, bool value);
// A value the caller encoded itself (a number read back from a record, a JSON object).
Field Raw(const std::string& key, const std::string& json);

// One line of restarts.jsonl. The five fixed fields come first, in this order, then `fields`
// in theirs: the former bash writers' layout, which operators' greps and the tests rely on.
struct RestartRecord {
  double time = 0;  // unix seconds, the writer's wall clock: for people and for order only
  std::string job;  // SLURM_JOB_ID ("" outside Slurm)
  int64_t restart_count = 0;
  std::string event, cause;
  std::vector<Field> fields;
};

// JSON string escaping (quotes, backslashes, control characters; UTF-8 passes through).
std::string EscapeJson(const std::string& s);
// One JSON object, no newline: {"time":T,"job":"J","restart_count":N,"event":"E","cause":"C",...}.
std::string EncodeLine(const RestartRecord& r);

// Lines are appended with AppendJsonLine (json_lines.h): one write(2), O_APPEND, a symbolic link
// as the file refused.
// The spool of `node` (RUN/.records/restarts-<node>.jsonl), created as needed.
Status AppendToSpool(const RunLayout& layout, const std::string& node, const std::string& line,
                     Env* env);
// Where a process that is not the job controller writes: under `ftrain job`
// (launch.records_spool) the spool of the node it runs on (launch.short_host), else, run on
// its own (one writer), restarts.jsonl itself.
Status AppendForThisProcess(const RunLayout& layout, const LaunchContext& launch,
                            const std::string& line, Env* env);

// A record read back: its text, its time, where it came from ("file:line") and the object.
struct Line {
  double time = 0;
  std::string text;
  std::string where;
  nlohmann::json json;
};
struct Merged {
  std::vector<Line> lines;  // time order (stable), exact duplicates dropped
  std::vector<std::string> warnings;
};
// restarts.jsonl and every spool, merged. Lines that are not JSON objects with a numeric
// "time" are skipped with a warning naming file:line; so is a last line without its newline
// (a write in progress, or one a crash cut). Missing files are no records, not an error.
StatusOr<Merged> ReadMerged(const RunLayout& layout, Env* env);

// The single writer's merge: rewrites restarts.jsonl (temp, fsync, rename, fsync of the
// directory) as ReadMerged's lines when a spool holds a line it lacks. Only the holder of the
// run lease calls it. Returns how many lines were added (0: nothing rewritten).
StatusOr<int> MergeSpools(const RunLayout& layout, Env* env);

// Remembers the spools' sizes so that a controller can call it every tick for the price of
// a few stat(2) calls: it merges only when a spool grew.
class SpoolMerger {
 public:
  SpoolMerger(RunLayout layout, Env* env) : layout_(std::move(layout)), env_(env) {}
  StatusOr<int> MaybeMerge();

 private:
  RunLayout layout_;
  Env* env_;
  std::map<std::string, int64_t> sizes_;  // spool name -> size at the last merge
};

}  // namespace ftrain::records
