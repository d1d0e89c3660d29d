// orch/slurm.cc - SlurmCli: the Slurm client commands, bounded, retried where that is safe,
// verified where they change the job (see slurm.h for the 22.05 behaviour behind each choice).
#include "orch/slurm.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/strings.h"

namespace ftrain::orch {
namespace {

const std::set<std::string> kWholeLineKeys = {"Command",       "WorkDir", "StdErr",       "StdIn",
                                              "StdOut",        "Comment", "AdminComment", "Power",
                                              "SystemComment", "Reason"};

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) {
    l = Trim(l);
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

std::string TmpDir() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? t : "/tmp";
}

// "MessageTimeout = 10 sec" -> 10.
double ConfigSeconds(const std::string& text, const std::string& key, double def) {
  std::regex re("(^|\\n)" + key + "\\s*=\\s*([0-9]+)");
  std::smatch m;
  if (std::regex_search(text, m, re)) return std::stod(m[2]);
  return def;
}

}  // namespace

std::string JobInfo::Get(const std::string& key) const {
  auto it = fields.find(key);
  if (it == fields.end()) return "";
  const std::string& v = it->second;
  if (v == "(null)" || v == "N/A" || v == "None") return "";
  return v;
}

int JobInfo::Restarts() const {
  const std::string v = Get("Restarts");
  return v.empty() ? 0 : std::atoi(v.c_str());
}

// A Slurm field name: "JobState", "Socks/Node", "TRES"; not "--flag" or "x.y".
bool IsFieldKey(const std::string& k) {
  if (k.empty() || !std::isalpha(static_cast<unsigned char>(k[0]))) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/' || c == ':';
  });
}

JobInfo ParseShowJob(const std::string& text) {
  JobInfo j;
  for (const auto& line : Lines(text)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string first = line.substr(0, eq);
    if (kWholeLineKeys.count(first) && first != "Reason") {
      j.fields[first] = line.substr(eq + 1);  // a path with spaces: the rest of the line
      continue;
    }
    // `scontrol -o` puts every field on one line, and a value may hold spaces (a Reason, a
    // Comment, a Command's arguments): a word that does not start "Key=" continues the value
    // before it.
    std::istringstream in(line);
    std::string* value = nullptr;
    for (std::string tok; in >> tok;) {
      const size_t e = tok.find('=');
      if (e != std::string::npos && IsFieldKey(tok.substr(0, e))) {
        value = &j.fields[tok.substr(0, e)];
        *value = tok.substr(e + 1);
      } else if (value != nullptr) {
        *value += " " + tok;
      }
    }
  }
  return j;
}

SlurmCli::SlurmCli() {
  const passwd* pw = getpwuid(getuid());
  user_ = pw != nullptr ? pw->pw_name : std::to_string(getuid());
}

RunResult SlurmCli::Query(const std::vector<std::string>& argv, double timeout_s) {
  RunOptions o;
  o.timeout_s = timeout_s;
  RunResult r = RunCommand(argv, o);
  if (r.ok()) return r;
  SleepSeconds(0.5);  // slurmctld busy: one more try
  return RunCommand(argv, o);
}

StatusOr<std::vector<std::string>> SlurmCli::Hostnames(const std::string& hostlist) {
  if (hostlist.empty()) return std::vector<std::string>{};
  RunResult r = Query({"scontrol", "show", "hostnames", hostlist});
  if (!r.ok())
    return Status::Unavailable("scontrol show hostnames " + hostlist + ": " + r.Describe(10));
  return Lines(r.out);  // read whole: never a pipe closed early under pipefail
}

StatusOr<std::string> SlurmCli::Hostlist(const std::vector<std::string>& nodes) {
  RunResult r = Query({"scontrol", "show", "hostlist", Join(nodes, ",")});
  if (!r.ok()) return Status::Unavailable("scontrol show hostlist: " + r.Describe(10));
  return Trim(r.out);
}

std::optional<std::vector<std::string>> SlurmCli::NodesOfJob(const std::string& job) {
  RunResult r = Query({"squeue", "-h", "-j", job, "-o", "%N"});
  const std::string list = Trim(r.out);
  if (!r.ok() || list.empty()) return std::nullopt;  // no answer is not "no nodes"
  auto names = Hostnames(list);
  if (!names.ok() || names->empty()) return std::nullopt;
  return *names;
}

StatusOr<JobInfo> SlurmCli::ShowJob(const std::string& job) {
  RunResult r = Query({"scontrol", "-o", "show", "job", job});
  if (!r.ok()) return Status::Unavailable("scontrol show job " + job + ": " + r.Describe(10));
  JobInfo j = ParseShowJob(r.out);
  if (j.fields.empty()) return Status::Unavailable("scontrol show job " + job + " said nothing");
  return j;
}

StatusOr<JobInfo> SlurmCli::ShowJobWithin(const std::string& job, double timeout_s) {
  RunOptions o;
  o.timeout_s = timeout_s;
  RunResult r = RunCommand({"scontrol", "-o", "show", "job", job}, o);
  if (!r.ok())
    return Status::Unavailable("scontrol show job " + job + ": " + r.Describe(timeout_s));
  JobInfo j = ParseShowJob(r.out);
  if (j.fields.empty()) return Status::Unavailable("scontrol show job " + job + " said nothing");
  return j;
}

StatusOr<std::vector<StepInfo>> SlurmCli::Steps(const std::string& job) {
  RunResult r = Query({"squeue", "-h", "-s", "-j", job, "-o", "%i %j %N"});
  if (!r.ok()) return Status::Unavailable("squeue -s -j " + job + ": " + r.Describe(10));
  std::vector<StepInfo> out;
  for (const auto& l : Lines(r.out)) {
    std::istringstream in(l);
    StepInfo s;
    in >> s.id >> s.name >> s.nodes;
    if (!s.id.empty()) out.push_back(s);
  }
  return out;
}

std::string SlurmCli::NodeState(const std::string& node) {
  RunResult r = Query({"sinfo", "-h", "-N", "-n", node, "-o", "%t"});
  auto lines = Lines(r.out);
  return r.ok() && !lines.empty() ? lines[0] : "";
}

std::optional<std::vector<std::string>> SlurmCli::PartitionNodes(const std::string& partition) {
  RunResult r = Query({"sinfo", "-h", "-N", "-p", partition, "-o", "%N"});
  if (!r.ok()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& n : Lines(r.out)) {  // a node in two partitions is listed twice
    if (!n.empty() && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

StatusOr<std::string> SlurmCli::SlurmdAddress(const std::string& node) {
  auto it = address_cache_.find(node);
  if (it != address_cache_.end()) return it->second;
  RunResult r = Query({"scontrol", "-o", "show", "node", node});
  if (!r.ok()) return Status::Unavailable("scontrol show node " + node + ": " + r.Describe(10));
  JobInfo f = ParseShowJob(r.out);
  const std::string addr = f.Get("NodeAddr");
  if (addr.empty()) return Status::NotFound("no NodeAddr for node " + node);
  std::string port = f.Get("Port");
  if (port.empty() || port == "0") port = std::to_string(Config().slurmd_port);
  return address_cache_[node] = addr + " " + port;
}

SlurmConfig SlurmCli::Config() {
  if (config_) return *config_;
  SlurmConfig c;
  RunResult r = Query({"scontrol", "show", "config"});
  if (!r.ok()) return c;  // the defaults: nothing cached, asked again next time
  c.message_timeout_s = ConfigSeconds(r.out, "MessageTimeout", 10);
  c.kill_wait_s = ConfigSeconds(r.out, "KillWait", 30);
  c.slurmd_port = static_cast<int>(ConfigSeconds(r.out, "SlurmdPort", 6818));
  std::smatch m;
  if (std::regex_search(r.out, m, std::regex("cred_expire=([0-9]+)"))) {
    c.cred_expire_s = std::stod(m[1]);
  }
  c.slurmdbd = std::regex_search(r.out, std::regex("AccountingStorageType\\s*=\\s*\\S*slurmdbd"));
  config_ = c;
  return c;
}

bool SlurmCli::Ping() {
  RunResult r = RunCommand({"scontrol", "ping"}, Bounded(5));
  return r.out.find("is UP") != std::string::npos;
}

bool SlurmCli::SignalStep(const std::string& step, const std::string& sig) {
  // Its exit status says nothing (22.05 exits 225 after delivering): only a hang fails.
  RunResult r = RunCommand({"scancel", "--signal=" + sig, step}, Bounded(30));
  return !r.timed_out;
}

Status SlurmCli::Release(const std::string& job, const std::vector<std::string>& keep) {
  RunOptions o;
  o.timeout_s = 15;
  o.cwd = TmpDir();  // scontrol writes slurm_job_J_resize.{sh,csh} where it runs
  RunResult r =
      RunCommand({"scontrol", "update", "JobId=" + job, "NodeList=" + Join(keep, ",")}, o);
  for (const char* ext : {".sh", ".csh"}) {
    std::remove((TmpDir() + "/slurm_job_" + job + "_resize" + ext).c_str());
  }
  if (!r.ok()) return Status::Unavailable(r.Describe(15));
  return Status::Ok();
}

Status SlurmCli::Requeue(const std::string& job, int restarts_before, double budget_s,
                         const RequeueGuard& guard) {
  const double deadline = MonotonicSeconds() + budget_s;
  std::string last = "no try";
  int tries = 0;
  while (true) {
    const double left = deadline - MonotonicSeconds();
    if (left <= 1 && tries > 0) break;
    ++tries;
    if (guard) {
      auto before = ShowJobWithin(job, std::max(1.0, std::min(5.0, left - 0.5)));
      if (before.ok() && before->Restarts() > restarts_before) return Status::Ok();
      Status g = before.ok() ? guard(*before) : Status::Ok();
      if (!g.ok()) return g;
      if (!before.ok()) {
        last = before.status().message() + " (not requeueing without an answer)";
        if (MonotonicSeconds() + 1 >= deadline) break;
        SleepSeconds(1);
        continue;
      }
    }
    RunResult r = RunCommand({"scontrol", "requeue", job},
                             Bounded(std::max(1.0, std::min(10.0, left - 0.5))));
    last = r.ok() ? "verification failed" : r.Describe(10);
    // Verify whatever the command said: it may have acted and failed, or failed after acting.
    auto info = ShowJob(job);
    if (info.ok() && info->Restarts() > restarts_before) return Status::Ok();
    if (!info.ok()) last += "; " + info.status().message();
    if (MonotonicSeconds() + 1 >= deadline) break;
    SleepSeconds(1);
  }
  return Status::Unavailable("scontrol requeue " + job + ": " + last + " (" +
                             std::to_string(tries) + " tries in " +
                             std::to_string(static_cast<int>(budget_s)) + " s)");
}

Status SlurmCli::SetExcludedNodes(const std::string& job, const std::string& hostlist,
                                  int num_nodes, int num_tasks, int num_cpus) {
  std::vector<std::string> argv = {"scontrol", "update", "JobId=" + job};
  // "NumNodes=N" alone sets only the minimum (the job shows 2-3): N-N.
  if (num_nodes > 0) {
    argv.push_back("NumNodes=" + std::to_string(num_nodes) + "-" + std::to_string(num_nodes));
    if (num_tasks > 0) argv.push_back("NumTasks=" + std::to_string(num_tasks));
    if (num_cpus > 0) argv.push_back("NumCPUs=" + std::to_string(num_cpus));
  }
  argv.push_back("ExcNodeList=" + hostlist);
  RunResult r;
  for (int i = 0; i < 2; ++i) {
    r = RunCommand(argv, Bounded(10));
    if (r.ok()) return Status::Ok();
  }
  return Status::Unavailable(r.Describe(10));
}

Status SlurmCli::Cancel(const std::string& job, bool pending_only) {
  std::string last;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> argv = {"scancel"};
    if (pending_only) argv.push_back("--state=PENDING");
    argv.push_back(job);
    RunResult r = RunCommand(argv, Bounded(30));
    last = r.Describe(30);
    auto info = ShowJob(job);
    if (!info.ok()) {
      if (r.ok()) return Status::Ok();  // gone from slurmctld's memory: ended long ago
      continue;
    }
    const std::string st = info->State();
    const bool live = st == "RUNNING" || st == "PENDING" || st == "SUSPENDED" ||
                      st == "CONFIGURING" || st == "REQUEUED";
    if (!live || (pending_only && st != "PENDING")) return Status::Ok();
    SleepSeconds(1);
  }
  return Status::Unavailable("scancel " + job + ": " + last + "; the job still runs");
}

Submitted SlurmCli::Submit(const std::vector<std::string>& options, const std::string& script,
                           const std::vector<std::string>& env, const std::string& cwd,
                           const std::string& token) {
  auto find = [&]() -> std::vector<std::string> {
    std::vector<std::string> ids;
    RunResult q = Query({"squeue", "-h", "-u", user_, "-o", "%i|%k"});
    for (const auto& l : Lines(q.out)) {
      const size_t bar = l.find('|');
      if (bar != std::string::npos && l.substr(bar + 1) == token) ids.push_back(l.substr(0, bar));
    }
    std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    return ids;
  };
  Submitted out;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<std::string> argv = {"sbatch", "--parsable", "--comment=" + token};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(script);
    RunOptions o;
    o.timeout_s = submit_timeout_s_;
    o.env = env;
    o.cwd = cwd;
    RunResult r = RunCommand(argv, o);
    const std::string id = Trim(r.out.substr(0, r.out.find(';')));
    const bool numeric = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
    if (r.ok() && numeric) {
      out.job = id;
      return out;
    }
    out.error = "sbatch " + Join(options, " ") + " failed (" + r.Describe(submit_timeout_s_) + ")";
    // It may have created the job anyway (a reply lost, a timeout after the job was made).
    std::vector<std::string> ids = find();
    if (!ids.empty()) {
      for (size_t i = 1; i < ids.size(); ++i) (void)Cancel(ids[i], false);  // never two
      out.job = ids[0];
      out.error.clear();
      return out;
    }
    if (!r.timed_out) break;  // a refusal: the same options fail again
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> SlurmCli::PendingJobsOfUser() {
  std::vector<std::pair<std::string, std::string>> out;
  RunResult r = Query({"squeue", "-h", "-u", user_, "-t", "PD", "-o", "%i %E"});
  for (const auto& l : Lines(r.out)) {
    const size_t sp = l.find(' ');
    if (sp != std::string::npos) out.emplace_back(l.substr(0, sp), Trim(l.substr(sp + 1)));
  }
  return out;
}

Status SlurmCli::SetDependency(const std::string& job, const std::string& dependency) {
  RunResult r =
      RunCommand({"scontrol", "update", "JobId=" + job, "Dependency=" + dependency}, Bounded(10));
  return r.ok() ? Status::Ok() : Status::Unavailable(r.Describe(10));
}

double NorespondWaitS(const SlurmConfig& c, double cap_s) {
  const double w = c.message_timeout_s + 5 - (c.cred_expire_s + 1);
  return std::max(0.0, std::min(cap_s, w));
}

bool Responds(const std::string& st) {
  static const std::set<std::string> kUp = {"idle", "mix", "alloc", "comp", "resv", "plnd"};
  // sinfo's flags after a state: '*' not responding and '~' powered off do not answer; the
  // others ('-' planned, '@' reboot pending, '^' rebooting, '$' maintenance, '#' powering up,
  // '!' power down pending, '%' powering down) are a node whose slurmd answers.
  std::string base = st;
  while (!base.empty() && std::string("-@^$#!%").find(base.back()) != std::string::npos) {
    base.pop_back();
  }
  return kUp.count(base) > 0;
}

std::vector<std::string> Exclusions(const std::vector<std::string>& user_excluded,
                                    const std::map<std::string, std::string>& dead_states,
                                    const std::vector<std::string>& faulty) {
  std::vector<std::string> out = user_excluded;
  auto add = [&out](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  for (const auto& [node, state] : dead_states) {
    if (!Responds(state)) add(node);
  }
  for (const auto& n : faulty) add(n);
  return out;
}

}  // namespace ftrain::orch

namespace ftrain::orch {

std::vector<std::string> ExpandArgs(const JobInfo& j, const std::string& job, int count,
                                    const std::string& exclude_hostlist) {
  std::vector<std::string> a = {"salloc",
                                "--no-shell",
                                "--immediate=3",
                                "--dependency=expand:" + job,
                                "--nodes=" + std::to_string(count),
                                "--job-name=ftrain-grow-" + job};
  if (!j.Get("Partition").empty()) a.push_back("--partition=" + j.Get("Partition"));
  std::string exclude = exclude_hostlist;  // and the job's own exclusions
  const std::string own = j.Get("ExcNodeList");
  if (!own.empty()) exclude += (exclude.empty() ? "" : ",") + own;
  if (!exclude.empty()) a.push_back("--exclude=" + exclude);
  const std::string per_node = j.Get("NtasksPerN:B:S:C");  // "2:0:*:*"
  const std::string tasks = per_node.substr(0, per_node.find(':'));
  if (!tasks.empty() && tasks != "0" && std::all_of(tasks.begin(), tasks.end(), ::isdigit)) {
    a.push_back("--ntasks-per-node=" + tasks);
  }
  const std::string cpus = j.Get("MinCPUsNode");
  if (!cpus.empty() && std::all_of(cpus.begin(), cpus.end(), ::isdigit)) {
    a.push_back("--mincpus=" + cpus);
  }
  const std::string tres = j.Get("TresPerNode");  // "gres:gpu:8" (22.05), "gres/gpu:8"
  if (tres.rfind("gres:", 0) == 0 || tres.rfind("gres/", 0) == 0) {
    a.push_back("--gres=" + tres.substr(5));
  }
  if (j.Get("OverSubscribe") == "NO") a.push_back("--exclusive");
  return a;
}

std::string GrantedJob(const std::string& err) {
  std::smatch m;
  static const std::regex re("Granted job allocation ([0-9]+)");
  return std::regex_search(err, m, re) ? std::string(m[1]) : "";
}

StatusOr<std::vector<std::string>> SlurmCli::Expand(const std::string& job, int count,
                                                    const std::vector<std::string>& exclude) {
  auto info = ShowJob(job);
  if (!info.ok()) return info.status();
  auto before = Hostnames(info->Get("NodeList"));
  if (!before.ok()) return before.status();
  auto excl = exclude.empty() ? StatusOr<std::string>("") : Hostlist(exclude);
  if (!excl.ok()) return excl.status();
  // salloc inside the batch job: without SLURM_JOB_ID it is a new allocation, not a step.
  std::vector<std::string> argv = {"env", "-u", "SLURM_JOB_ID", "-u", "SLURM_JOBID"};
  for (auto& x : ExpandArgs(*info, job, count, *excl)) argv.push_back(std::move(x));
  RunResult r = RunCommand(argv, Bounded(30));
  const std::string grown = GrantedJob(r.err);
  if (grown.empty()) return Status::Unavailable("salloc: " + r.Describe(30));
  RunOptions o = Bounded(15);
  o.cwd = TmpDir();  // scontrol writes slurm_job_J_resize.{sh,csh} where it runs
  RunResult give = RunCommand({"scontrol", "update", "JobId=" + grown, "NumNodes=0"}, o);
  // 22.05 merges at NumNodes=0; the documented second half is harmless when it refuses.
  (void)RunCommand({"scontrol", "update", "JobId=" + job, "NumNodes=ALL"}, o);
  for (const std::string& id : {grown, job}) {
    for (const char* ext : {".sh", ".csh"}) {
      std::remove((TmpDir() + "/slurm_job_" + id + "_resize" + ext).c_str());
    }
  }
  auto after = ShowJob(job);
  auto now = after.ok() ? Hostnames(after->Get("NodeList"))
                        : StatusOr<std::vector<std::string>>(after.status());
  std::vector<std::string> gained;
  if (now.ok()) {
    for (const auto& n : *now) {
      if (std::find(before->begin(), before->end(), n) == before->end()) gained.push_back(n);
    }
  }
  if (gained.empty()) {
    (void)Cancel(grown, false);  // never leave the new allocation behind
    return Status::Unavailable("job " + grown + " got nodes but they did not join job " + job +
                               " (" + (give.ok() ? "NumNodes=0 accepted" : give.Describe(15)) +
                               ")");
  }
  return gained;
}

}  // namespace ftrain::orch
