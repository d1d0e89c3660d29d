// orch/job_runner_records.cc - JobRunner, part 3: the run lease and the records: the lost-work
// fields (read in-process: the metrics' last line, the newest complete checkpoint), a record
// into this node's spool, and the holder's merge into restarts.jsonl.
#include <chrono>
#include <thread>

#include "ckpt/store.h"
#include "orch/files.h"
#include "orch/job_runner.h"
#include "orch/quarantine.h"
#include "records/json_lines.h"
#include "records/rollbacks.h"

namespace ftrain::orch {

std::vector<records::Field> JobRunner::LostFields(bool at_failure) {
  // Seconds of training since the newest complete checkpoint: the work a failure loses. The
  // metrics' last line is taken when the step ended (a relaunched trainer drops the lines
  // after its checkpoint: this record is the only trace of the work that is re-done).
  const std::string line = at_failure ? metrics_at_failure_ : LastLine(layout_.metrics());
  double last_time = 0;
  std::optional<int64_t> last_step;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("time") && j["time"].is_number()) {
    last_time = j["time"].get<double>();
    if (j.contains("step") && j["step"].is_number_integer()) last_step = j["step"].get<int64_t>();
  }
  double newest = 0;
  auto list = ckpt::CheckpointStore(ckpt_root_, env_).List();
  if (list.ok()) {
    int64_t best = -1;
    for (const auto& c : *list) {
      if (c.status == ckpt::CheckpointStatus::kComplete && c.step > best) {
        best = c.step;
        newest = c.created_unix;
      }
    }
  }
  double lost = last_time - newest;
  if (newest == 0 || lost < 0) lost = 0;
  std::vector<records::Field> f{records::Num("lost_s", lost, 3)};
  if (last_step) {
    f.push_back(records::Int("last_step", *last_step));
    f.push_back(records::Num("last_step_time", last_time, 3));
  }
  return f;
}

void JobRunner::Record(const Action& a) {
  records::RestartRecord r = a.record;
  r.time = UnixSeconds(env_);
  std::vector<records::Field> fields;
  for (const auto& f : r.fields) {
    if (f.key != "@LOST@") {
      fields.push_back(f);
      continue;
    }
    for (const auto& l : LostFields(a.lost_at_failure)) fields.push_back(l);
  }
  r.fields = fields;
  Status w = records::AppendToSpool(layout_, ctx_.node, records::EncodeLine(r), env_);
  // The record only informs people and the report: the job goes on without it.
  if (!w.ok()) Log("WARNING: " + w.message());
  MergeRecords();
}

void JobRunner::MergeRecords() {
  if (!mine_) return;  // only the lease holder writes restarts.jsonl
  auto m = merger_.MaybeMerge();
  if (!m.ok())
    Log("WARNING: could not merge the records into restarts.jsonl: " + m.status().message());
}

// RUN/quarantine.jsonl and RUN/hangs.jsonl for the policy (absent: nothing recorded).
void JobRunner::ReadQuarantine(Observation* o) const {
  o->quarantine = records::ParseQuarantineText(ReadTextOr(layout_.quarantine()));
  o->hangs = records::ParseHangsText(ReadTextOr(layout_.hangs()));
}

// The lines RUN/node_faults.jsonl gained since the step was launched (the ranks of a node that
// cannot run them append one each before exiting 76).
void JobRunner::ReadNodeFaults(Observation* o) const {
  o->node_faults = NodeFaultsSince(ReadTextOr(layout_.node_faults()), node_faults_at_launch_);
}

// RUN/rollbacks.jsonl's records (records/rollbacks.h owns the file; -1 when it cannot be
// read: a 79 is then no rollback) and the newest complete checkpoint, for a start or a step's
// end: the policy bounds rollbacks and node requeues per newest checkpoint.
void JobRunner::ReadRunRecords(Observation* o) const {
  auto r = records::ReadRollbacks(layout_.run_dir(), env_);
  o->rollbacks = r.ok() ? records::CountRollbacks(*r) : -1;
  o->checkpoint = NewestCheckpoint();
}

// A line of RUN/quarantine.jsonl for a host the policy quarantined (a repeated hang). The
// trainer has exited: nobody else appends now.
void JobRunner::Quarantine(const Action& a) {
  if (a.nodes.empty()) return;
  records::QuarantineRecord q;
  q.time = UnixSeconds(env_);
  q.host = a.nodes[0];
  q.fields = a.record.fields;
  q.cause = a.text;
  q.job = ctx_.job;
  Status w = records::AppendQuarantine(layout_.quarantine(), q);
  // The policy has the host quarantined for this start either way; the file carries it on.
  if (!w.ok())
    Log("WARNING: could not record the quarantine of " + a.nodes[0] + ": " + w.message());
}

void JobRunner::AcquireLease() {
  LeaseHolder me;
  me.job = ctx_.job;
  me.restart = ctx_.restart_count;
  me.host = ctx_.node;
  me.from = ctx_.resubmitted_from;
  auto alive = [this](const std::string& job) -> std::optional<bool> {
    auto info = slurm_->ShowJob(job);
    if (!info.ok()) {
      // Gone from slurmctld's memory (ended long ago) is not running.
      if (info.status().message().find("Invalid job id") != std::string::npos) return false;
      return std::nullopt;
    }
    const std::string st = info->State();
    return st == "RUNNING" || st == "CONFIGURING" || st == "SUSPENDED";
  };
  Observation o = Obs(Observation::Kind::kLease);
  // An I/O error is in the observation already ("nobody known (...)": refused, exit 1).
  (void)AcquireLeaseOn(&lease_, me, alive, &o);
  if (o.lease_ok && !PathInside(ckpt_root_, s_.run_dir)) {
    // The checkpoint root outside the run directory: another run must not train on it.
    RunLease root(RootLeaseFile(ckpt_root_), RootLeaseDir(ckpt_root_), env_);
    LeaseHolder run_me = me;
    run_me.run = CanonicalRunDir(s_.run_dir);
    Observation r = Obs(Observation::Kind::kLease);
    Status io = AcquireLeaseOn(&root, run_me, alive, &r);
    if (!io.ok()) {
      // An I/O error on the root (not another run's lease): the trainer meets the same root
      // and says what is wrong with it; refusing here would turn a storage hiccup into a
      // FAILED job.
      Log("WARNING: could not take the checkpoint root's lease in " + ckpt_root_ + ": " +
          io.message() + "; training without it");
    } else if (!r.lease_ok) {
      o.lease_ok = false;
      o.ckpt_root_held = true;
      o.holder = r.holder;
      o.detail = ckpt_root_;
    }
  }
  answers_.push_back(o);
}

Status JobRunner::AcquireLeaseOn(RunLease* lease, const LeaseHolder& me, const JobAlive& alive,
                                 Observation* out) {
  Observation& o = *out;
  for (int tries = 0; tries < 12; ++tries) {  // slurmctld may be busy: up to ~1 min
    auto r = lease->Acquire(me, alive);
    if (!r.ok()) {
      o.holder = "nobody known (" + r.status().message() + ")";
      return r.status();
    }
    o.lease_ok = r->ok;
    o.epoch = r->holder.epoch;
    o.holder =
        r->holder.Describe() + (r->unknown ? " (slurmctld could not say whether it runs)" : "");
    o.superseded = r->superseded;
    if (r->ok && lease == &lease_) mine_ = r->holder;
    if (!r->unknown) break;
    std::this_thread::sleep_for(std::chrono::seconds(5));
  }
  return Status::Ok();
}

}  // namespace ftrain::orch
