// ckptd's Prometheus textfile (--prom-dir): ckptd-[<job>-]<node>.prom, labelled with the
// Slurm job id and the node, rewritten atomically at most once a second from the loop thread
// (the statistics it reads are loop-thread only). What `ckptd status` reports, for scraping.
#include <chrono>
#include <cstdlib>

#include "core/clock.h"
#include "core/log.h"
#include "daemon/server.h"

namespace ftrain::ckptd {

Status Server::OpenPromFile() {
  if (options_.prom_dir.empty()) return Status::Ok();
  const std::string& job = options_.job_id;
  const bool have_job = !job.empty();
  PromLabels labels;
  if (have_job) labels.push_back({"slurm_job_id", job});
  labels.push_back({"node", options_.node});
  const std::string file =
      "ckptd-" + (have_job ? PromSafeName(job) + "-" : "") + PromSafeName(options_.node) + ".prom";
  auto prom = PromTextfile::Open(options_.prom_dir, file, std::move(labels));
  if (!prom.ok()) {
    return Status::FailedPrecondition("--prom-dir: " + prom.status().message() +
                                      "; give a writable directory or leave the flag out");
  }
  prom_ = std::move(*prom);  // first written by the serve loop, once the state is known
  FT_LOG(Info) << "ckptd: Prometheus metrics in " << prom_->path();
  return Status::Ok();
}

void Server::MaybeWritePromFile(bool force) {
  const double now = UnixSeconds();
  if (prom_ == nullptr || (!force && now - prom_written_unix_ < 1.0)) return;
  prom_written_unix_ = now;
  int persisting = 0, connected = 0;
  for (const auto& [r, rs] : ranks_) {
    connected += rs.conn >= 0;
    for (const auto& s : rs.slots) persisting += s.state == SlotState::kPersisting;
  }
  auto d = [](auto v) { return static_cast<double>(v); };
  std::vector<PromSample> samples = {
      {"ckptd_snapshots_in_flight", "Snapshots handed over and not yet persisted.", false,
       d(persisting)},
      {"ckptd_queue_depth", "Snapshots waiting for the persist thread.", false,
       d(persister_ ? persister_->queued() : 0)},
      {"ckptd_connected_ranks", "Trainer ranks connected to this daemon.", false, d(connected)},
      {"ckptd_last_persisted_step", "Newest step this daemon wrote a shard of; -1 for none.", false,
       d(last_persisted_step_)},
      {"ckptd_last_committed_step", "Newest step this daemon saw committed; -1 for none.", false,
       d(last_committed_step_)},
      {"ckptd_last_failed_step", "Newest step whose persist failed here; -1 for none.", false,
       d(last_failed_step_)},
      {"ckptd_persist_bytes_per_second",
       "Checkpoint state bytes persisted per second of persist time (since start).", false,
       persist_s_ > 0 ? d(raw_bytes_) / persist_s_ : 0.0},
      {"ckptd_persist_bytes_total", "Bytes written to shard files (after compression).", true,
       d(stored_bytes_)},
      {"ckptd_persist_raw_bytes_total", "Checkpoint state bytes persisted (before compression).",
       true, d(raw_bytes_)},
      {"ckptd_persisted_snapshots_total", "Snapshots persisted.", true, d(saves_)},
      {"ckptd_persist_failures_total", "Snapshots whose persist failed.", true, d(failures_)},
      {"ckptd_updated_timestamp_seconds", "When this file was written.", false, now},
  };
  for (auto& p : PeerPromSamples()) samples.push_back(std::move(p));
  Status s = prom_->Write(samples);
  if (!s.ok() && s.message() != prom_error_) {
    // Not fatal: checkpoints matter more than their metrics; retried next second.
    FT_LOG(Warning) << "ckptd: " << s.message() << " (retrying every second)";
  }
  prom_error_ = s.ok() ? "" : s.message();
}

}  // namespace ftrain::ckptd
