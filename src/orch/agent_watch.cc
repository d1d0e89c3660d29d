// orch/agent_watch.cc - the agent's follower thread (agent_runner.h): the ring, the buddy, and
// the batch-host watcher's I/O for WatcherPolicy's actions (the claim, the run lease, the
// resubmission, the hand-off, the old job's cancel, the Slurm-view requeue).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>

#include "core/clock.h"
#include "core/env.h"
#include "core/strings.h"
#include "orch/agent_runner.h"
#include "orch/detect.h"
#include "orch/files.h"
#include "orch/probe.h"
#include "orch/process.h"
#include "orch/submission.h"
#include "records/restarts.h"

namespace ftrain::orch {
namespace {

std::string EvidenceWords(const std::vector<records::Field>& f) {
  for (const auto& x : f) {
    if (x.key == "evidence" && x.json.size() >= 2) return x.json.substr(1, x.json.size() - 2);
  }
  return "declared dead";
}

}  // namespace

WatcherObs AgentRunner::Answer(WatcherObs::Kind k) const {
  WatcherObs o;
  o.kind = k;
  o.now = NowSeconds(env_);
  o.wall = UnixSeconds(env_);
  return o;
}

void AgentRunner::Record(const records::RestartRecord& rec) {
  records::RestartRecord r = rec;
  r.time = UnixSeconds(env_);
  Status w = records::AppendToSpool(layout_, s_.node, records::EncodeLine(r), env_);
  if (!w.ok()) Log("WARNING: " + w.message());
  if (!lease_) return;
  RunLease lease(layout_.lease(), layout_.lease_dir(), env_);
  auto holds = lease.Holds(*lease_);
  if (holds.ok() && *holds) (void)records::MergeSpools(layout_, env_);  // the lease holder writes
}

// Has this start's resubmission an outcome: the new job's marker (written before its record),
// or a resubmitted / not_resubmitted record of this job and restart count?
bool AgentRunner::ResubmissionDone() const {
  if (access((layout_.submit() + "/replaced-" + job_).c_str(), F_OK) == 0) return true;
  auto m = records::ReadMerged(layout_, env_);
  if (!m.ok()) return false;
  for (const auto& l : m->lines) {
    const auto& j = l.json;
    const std::string ev = j.value("event", "");
    if ((ev == "resubmitted" || ev == "not_resubmitted") && j.value("job", "") == job_ &&
        j.value("restart_count", -1) == restart_count_) {
      return true;
    }
  }
  return false;
}

void AgentRunner::FollowLoop() {
  SlurmCli slurm;
  slurm.set_submit_timeout(s_.sbatch_timeout_s);
  SlurmProber prober(layout_.heartbeats(), &slurm, s_.detect.probe_timeout_s);
  Detector host(s_.detect, &prober, env_);
  WatcherPolicy w(s_, job_, restart_count_);
  double next_look = 0;
  while (!stop_) {
    const double now = NowSeconds(env_);
    std::vector<WatcherObs> obs;
    if (now >= next_look) {
      next_look = now + s_.watch_period_s;
      const std::vector<std::string> ring =
          RingOf(ReadTextOr(layout_.job_nodes()), job_, job_nodelist_);
      if (s_.replication && !PointBuddy(ring)) {
        Log("WARNING: could not point " + layout_.daemon_buddy_addr(s_.node) +
            " at the buddy (retried)");
      }
      w.SetRank(WatcherRank(ring, s_.batch_host, s_.node));
      if (w.rank() > 0 && s_.spare_nodes > 0 && !w.done()) {
        // Slurm's view (spares, --no-kill): is the batch host still in the job?
        WatcherObs v = Answer(WatcherObs::Kind::kHostView);
        auto in_job = slurm.NodesOfJob(job_);
        v.known = in_job.has_value();
        v.left =
            in_job && std::find(in_job->begin(), in_job->end(), s_.batch_host) == in_job->end();
        obs.push_back(v);
      }
    }
    if (w.rank() > 0 && w.watching_heartbeat() && s_.detect.on &&
        prober.HeartbeatExists(s_.batch_host)) {
      for (const auto& f : host.Look({s_.batch_host})) {
        WatcherObs d = Answer(f.verdict == Verdict::kLate ? WatcherObs::Kind::kLate
                                                          : WatcherObs::Kind::kDeclared);
        d.fields = f.fields;
        d.log = f.log;
        obs.push_back(d);
      }
    }
    obs.push_back(Answer(WatcherObs::Kind::kTick));
    for (size_t i = 0; i < obs.size() && !stop_; ++i) {
      for (const auto& a : w.On(obs[i]).acts) {
        Execute(a, &slurm);
        // Answers come back at once, before anything else.
        obs.insert(obs.begin() + static_cast<long>(i) + 1, answers_.begin(), answers_.end());
        answers_.clear();
      }
    }
    const double tick = w.rank() > 0 && !s_.batch_host.empty()
                            ? std::min(s_.watch_period_s, s_.detect.detect_period_s)
                            : s_.watch_period_s;
    for (double t = 0; t < tick && !stop_; t += 0.02) SleepSeconds(0.02);
  }
}

std::string AgentRunner::ClaimPath() const {
  return layout_.submit() + "/claim-" + job_ + "." + std::to_string(restart_count_);
}

// An atomic mkdir names one claimant; a take-over is one more (claim-...takeover).
WatcherObs AgentRunner::Claim(bool takeover) {
  WatcherObs o = Answer(WatcherObs::Kind::kClaim);
  (void)mkdir(layout_.submit().c_str(), 0700);
  const std::string path = takeover ? ClaimPath() + ".takeover" : ClaimPath();
  o.ok = mkdir(path.c_str(), 0700) == 0;
  if (o.ok) {
    (void)WriteFileDurably(env_, path + "/by", s_.node + "\n");
  } else {
    auto by = ReadText(ClaimPath() + "/by");
    o.by = by.ok() ? by->substr(0, by->find('\n')) : "";
  }
  return o;
}

// The other watcher holds the claim: its outcome, or its own death (the same rule as the batch
// host's), never a timeout alone (a live claimant keeps its claim).
WatcherObs AgentRunner::WatchClaim(Slurm* slurm) {
  SlurmProber prober(layout_.heartbeats(), slurm, s_.detect.probe_timeout_s);
  Detector claimant(s_.detect, &prober, env_);
  WatcherObs o = Answer(WatcherObs::Kind::kClaimWatch);
  while (!stop_) {
    if (ResubmissionDone()) {
      o.done = true;
      break;
    }
    if (o.by.empty()) {
      auto by = ReadText(ClaimPath() + "/by");
      if (by.ok()) o.by = by->substr(0, by->find('\n'));
    }
    if (!o.by.empty() && o.by != s_.node && prober.HeartbeatExists(o.by)) {
      bool dead = false;
      for (const auto& f : claimant.Look({o.by})) dead = dead || f.verdict != Verdict::kLate;
      if (dead) {
        o.dead = true;
        break;
      }
    }
    SleepSeconds(std::min(s_.watch_period_s, s_.detect.detect_period_s));
  }
  o.now = NowSeconds(env_);
  return o;
}

// The run lease, taken over from the batch host's controller (same job): it is fenced out.
WatcherObs AgentRunner::TakeLease(Slurm* slurm) {
  WatcherObs o = Answer(WatcherObs::Kind::kLease);
  LeaseHolder me;
  me.job = job_;
  me.restart = restart_count_;
  me.host = s_.node;
  me.role = "watcher";
  auto alive = [slurm](const std::string& job) -> std::optional<bool> {
    auto info = slurm->ShowJob(job);
    if (!info.ok()) return std::nullopt;
    const std::string st = info->State();
    return st == "RUNNING" || st == "CONFIGURING" || st == "SUSPENDED";
  };
  auto r = RunLease(layout_.lease(), layout_.lease_dir(), env_).Acquire(me, alive);
  o.ok = r.ok() && r->ok;
  if (o.ok) {
    lease_ = r->holder;
  } else {
    o.error = r.ok() ? "the run is held by " + r->holder.Describe() : r.status().message();
  }
  return o;
}

// The saved submission, replayed without the dead batch host (orch/submission.h).
WatcherObs AgentRunner::Submit(Slurm* slurm) {
  WatcherObs o = Answer(WatcherObs::Kind::kSubmitted);
  const std::string dir = layout_.submit();
  auto sub = LoadSubmission(dir);
  if (!sub.ok()) {
    o.error = "no usable submission in " + dir + ": " + sub.status().message();
    return o;
  }
  if (sub->job.Get("JobId") != job_) {
    o.error = dir + " holds job " + sub->job.Get("JobId") + "'s submission, not job " + job_ + "'s";
    return o;
  }
  std::vector<std::string> exc, drop;
  if (auto h = slurm->Hostnames(sub->job.Get("ExcNodeList")); h.ok()) exc = *h;
  auto it = sub->vars.find("FTRAIN_RESUBMIT_EXCLUDED");
  if (it != sub->vars.end()) {
    if (auto h = slurm->Hostnames(it->second); h.ok()) drop = *h;
  }
  std::map<std::string, std::string> own;
  for (const auto& kv : CurrentEnvironment()) {
    own[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  auto nj = NewJobOf(*sub, s_.batch_host, job_, ResubmitExclusions(exc, drop, s_.batch_host),
                     s_.same_size, s_.home, own);
  if (!nj.ok()) {
    o.error = nj.status().message();
    return o;
  }
  RunLease lease(layout_.lease(), layout_.lease_dir(), env_);
  auto holds = lease_ ? lease.Holds(*lease_) : StatusOr<bool>(false);
  if (!holds.ok() || !*holds) {  // the fence: a watcher that lost the run submits nothing
    o.error = "this watcher no longer holds the run lease";
    return o;
  }
  Submitted s = slurm->Submit(nj->options, sub->script, nj->env, nj->cwd,
                              "ftrain-resubmit-" + job_ + "." + std::to_string(restart_count_));
  o.job = s.job;
  o.error = s.error;
  std::string opts = Join(nj->options, " ");
  opts.erase(std::remove(opts.begin(), opts.end(), '"'), opts.end());
  o.options = opts;
  if (!s.job.empty()) {
    auto info = slurm->ShowJob(s.job);
    o.can_run = !info.ok() || CanRun(*info);  // unknown: trust sbatch's acceptance
    if (info.ok() && !o.can_run) o.error = info->State() + ", " + info->Get("Reason");
  }
  out_file_ = sub->job.Get("StdOut");
  return o;
}

// Says so in the old job's output, points its dependents at the new job, cancels it.
void AgentRunner::NotifyAndCancel(const std::string& new_job, Slurm* slurm) {
  const std::string msg = "the batch host " + s_.batch_host + " died (" + EvidenceWords(evidence_) +
                          "): this job continues as job " + new_job + " (see " +
                          layout_.restarts() + "); cancelling job " + job_;
  Log(msg);
  // This step's output went to srun on the dead batch host: the job's output file directly.
  if (!out_file_.empty()) {
    std::ofstream out(out_file_, std::ios::app);
    out << "[" << Stamp() << "] agent.sh " << s_.node << ": " << msg << "\n";
  }
  // A cancelled job never satisfies afterok, and afterany would fire now.
  for (const auto& [id, dep] : slurm->PendingJobsOfUser()) {
    auto repointed = RepointDependency(dep, job_, new_job);
    if (!repointed) continue;
    if (slurm->SetDependency(id, *repointed).ok()) {
      Log("job " + id + " now waits on job " + new_job + " (Dependency=" + *repointed + ")");
    } else {
      Log("WARNING: could not point job " + id + "'s dependency at job " + new_job +
          "; it still names job " + job_);
    }
  }
  Status c = slurm->Cancel(job_, false);
  if (!c.ok()) Log("WARNING: " + c.message() + ": cancel job " + job_ + " yourself");
}

void AgentRunner::Execute(const WatcherAct& a, Slurm* slurm) {
  using K = WatcherAct::Kind;
  switch (a.kind) {
    case K::kLog:
      Log(a.text);
      break;
    case K::kRecord:
      Record(a.record);
      // The batch host's death and its evidence, for the old job's output (NotifyAndCancel);
      // a record without evidence (Slurm's own view) keeps what was there.
      if (a.record.event == "step_failed") {
        for (const auto& f : a.record.fields) {
          if (f.key == "evidence") evidence_ = a.record.fields;
        }
      }
      break;
    case K::kClaim:
    case K::kTakeOverClaim:
      answers_.push_back(Claim(a.kind == K::kTakeOverClaim));
      break;
    case K::kWatchClaim:
      answers_.push_back(WatchClaim(slurm));
      break;
    case K::kTakeLease:
      answers_.push_back(TakeLease(slurm));
      break;
    case K::kSubmit:
      answers_.push_back(Submit(slurm));
      break;
    case K::kCancelNewJob:
      (void)slurm->Cancel(a.text, false);
      break;
    case K::kMarkReplaced: {
      // Should Slurm requeue this job before its cancel, that start ends at once (the marker).
      (void)WriteFileDurably(env_, layout_.submit() + "/replaced-" + job_, a.text + "\n");
      RunLease lease(layout_.lease(), layout_.lease_dir(), env_);
      if (lease_) (void)lease.HandOff(*lease_, a.text);
      break;
    }
    case K::kNotifyAndCancel:
      NotifyAndCancel(a.text, slurm);
      break;
    case K::kQueryRestarts: {
      WatcherObs o = Answer(WatcherObs::Kind::kRestarts);
      auto info = slurm->ShowJob(job_);
      o.count = info.ok() ? info->Restarts() : -1;
      answers_.push_back(o);
      break;
    }
    case K::kRequeue: {
      WatcherObs o = Answer(WatcherObs::Kind::kRequeued);
      Status r = slurm->Requeue(job_, restart_count_, 30, nullptr);
      o.ok = r.ok();
      o.error = r.message();
      answers_.push_back(o);
      break;
    }
  }
}

}  // namespace ftrain::orch
