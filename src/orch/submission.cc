// orch/submission.cc - capture, checked load, and the replayed options of a job (submission.h).
#include "orch/submission.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <regex>
#include <set>

#include "core/strings.h"
#include "orch/files.h"

namespace ftrain::orch {
namespace {

std::string NameOf(const std::string& kv) { return kv.substr(0, kv.find('=')); }

// "gres:gpu:a100:2" / "gres/gpu:2" -> "gpu:a100:2" / "gpu:2".
std::string StripGres(const std::string& v) {
  return std::regex_replace(v, std::regex("gres[:/]"), "");
}

// "gpu:a100:2" -> "a100:2"; "gpu:2" -> "2"; "" when it is not a GPU entry.
std::string GpuCount(const std::string& entry) {
  const std::string e = StripGres(entry);
  if (e.rfind("gpu:", 0) != 0) return "";
  return e.substr(4);
}

void TresOptions(const JobInfo& j, std::vector<std::string>* o) {
  if (std::string v = j.Get("TresPerNode"); !v.empty()) o->push_back("--gres=" + StripGres(v));
  if (std::string v = GpuCount(j.Get("TresPerJob")); !v.empty()) o->push_back("--gpus=" + v);
  if (std::string v = GpuCount(j.Get("TresPerSocket")); !v.empty()) {
    o->push_back("--gpus-per-socket=" + v);
  }
  // TresPerTask may list cpus too ("cpu:4,gres:gpu:1"): the GPU part is --gpus-per-task.
  const std::string per_task = j.Get("TresPerTask");
  size_t pos = 0;
  while (pos <= per_task.size() && !per_task.empty()) {
    const size_t comma = per_task.find(',', pos);
    const std::string e =
        per_task.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (std::string v = GpuCount(e); !v.empty()) o->push_back("--gpus-per-task=" + v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (std::string v = GpuCount(j.Get("CpusPerTres")); !v.empty())
    o->push_back("--cpus-per-gpu=" + v);
  if (std::string v = GpuCount(j.Get("MemPerTres")); !v.empty()) o->push_back("--mem-per-gpu=" + v);
}

}  // namespace

bool IsCredential(const std::string& name) {
  std::string u = name;
  std::transform(u.begin(), u.end(), u.begin(), ::toupper);
  for (const char* k : {"SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL", "ACCESS_KEY",
                        "API_KEY", "PRIVATE_KEY"}) {
    if (u.find(k) != std::string::npos) return true;
  }
  return false;
}

Status CaptureSubmission(const std::string& dir, const std::string& show_job_text,
                         const std::vector<std::string>& environment,
                         const std::string& script_path) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError("cannot make '" + dir + "': " + strerror(errno));
  }
  FT_RETURN_IF_ERROR(CheckPrivate(dir, S_IFDIR, "directory"));
  std::string env, withheld;
  for (const auto& kv : environment) {
    if (IsCredential(NameOf(kv))) {
      withheld += NameOf(kv) + "\n";
    } else {
      env += kv;
      env.push_back('\0');
    }
  }
  int fd = open(script_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::IOError("cannot read the batch script '" + script_path +
                           "': " + strerror(errno));
  std::string script;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) script.append(buf, static_cast<size_t>(n));
  close(fd);
  FT_RETURN_IF_ERROR(WritePrivate(dir + "/job", show_job_text));
  FT_RETURN_IF_ERROR(WritePrivate(dir + "/env", env));
  FT_RETURN_IF_ERROR(WritePrivate(dir + "/env.withheld", withheld));
  return WritePrivate(dir + "/script", script);
}

StatusOr<LoadedSubmission> LoadSubmission(const std::string& dir) {
  FT_RETURN_IF_ERROR(CheckPrivate(dir, S_IFDIR, "directory"));
  LoadedSubmission s;
  FT_ASSIGN_OR_RETURN(std::string job, ReadPrivate(dir + "/job"));
  s.job = ParseShowJob(job);
  FT_ASSIGN_OR_RETURN(std::string env, ReadPrivate(dir + "/env"));
  for (size_t pos = 0; pos < env.size();) {
    const size_t end = env.find('\0', pos);
    const std::string kv =
        env.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!kv.empty()) {
      s.env.push_back(kv);
      s.vars[NameOf(kv)] = kv.substr(std::min(kv.size(), NameOf(kv).size() + 1));
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  auto withheld = ReadPrivate(dir + "/env.withheld");  // absent in older captures: none
  if (withheld.ok()) {
    for (size_t pos = 0; pos < withheld->size();) {
      const size_t nl = withheld->find('\n', pos);
      const std::string n =
          withheld->substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      if (!n.empty()) s.withheld.push_back(n);
      if (nl == std::string::npos) break;
      pos = nl + 1;
    }
  }
  s.script = dir + "/script";
  FT_RETURN_IF_ERROR(CheckPrivate(s.script, S_IFREG, "regular file"));
  if (s.env.empty()) return Status::FailedPrecondition(dir + "/env is empty");
  return s;
}

std::string OutputPattern(const std::string& path, const std::string& job) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return dir + std::regex_replace(base, std::regex("(^|[^0-9])" + job + "(?=[^0-9]|$)"), "$1%j");
}

std::vector<std::string> ResubmitExclusions(const std::vector<std::string>& exc,
                                            const std::vector<std::string>& drop,
                                            const std::string& dead) {
  std::vector<std::string> out;
  for (const auto& n : exc) {
    if (n.empty() || n == dead || std::find(drop.begin(), drop.end(), n) != drop.end()) continue;
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  out.push_back(dead);
  return out;
}

StatusOr<NewJob> NewJobOf(const LoadedSubmission& s, const std::string& dead,
                          const std::string& old_job, const std::vector<std::string>& excluded,
                          bool same_size, const std::string& home,
                          const std::map<std::string, std::string>& own_env) {
  auto var = [&s](const std::string& n) {
    auto it = s.vars.find(n);
    return it == s.vars.end() ? std::string() : it->second;
  };
  std::string nodes_s = var("SLURM_JOB_NUM_NODES");
  if (nodes_s.empty()) nodes_s = var("SLURM_NNODES");
  if (nodes_s.empty() || nodes_s.find_first_not_of("0123456789") != std::string::npos) {
    return Status::FailedPrecondition(
        "the saved environment has no node count (SLURM_JOB_NUM_NODES)");
  }
  int nodes = std::stoi(nodes_s);
  const std::string spares_s = var("FTRAIN_SPARE_NODES");
  int spares = !spares_s.empty() && spares_s.find_first_not_of("0123456789") == std::string::npos
                   ? std::stoi(spares_s)
                   : 0;
  if (spares > 0 && !same_size) {
    nodes -= 1;
    spares -= 1;
  }
  NewJob j;
  j.spares = spares;
  std::vector<std::string>& o = j.options;
  o.push_back("--nodes=" + std::to_string(nodes));
  if (!var("SLURM_NTASKS_PER_NODE").empty()) {
    o.push_back("--ntasks-per-node=" + var("SLURM_NTASKS_PER_NODE"));
  } else if (!var("SLURM_NTASKS").empty()) {
    o.push_back("--ntasks=" + var("SLURM_NTASKS"));
  }
  if (!var("SLURM_CPUS_PER_TASK").empty())
    o.push_back("--cpus-per-task=" + var("SLURM_CPUS_PER_TASK"));
  if (!var("SLURM_JOB_NAME").empty()) o.push_back("--job-name=" + var("SLURM_JOB_NAME"));
  const JobInfo& f = s.job;
  for (const auto& [key, flag] : std::vector<std::pair<std::string, std::string>>{
           {"Partition", "--partition"}, {"Account", "--account"}, {"QOS", "--qos"}}) {
    if (!f.Get(key).empty()) o.push_back(flag + "=" + f.Get(key));
  }
  const std::string tl = f.Get("TimeLimit");
  if (!tl.empty() && tl != "UNLIMITED" && tl != "Partition_Limit") o.push_back("--time=" + tl);
  if (!f.Get("WorkDir").empty()) o.push_back("--chdir=" + f.Get("WorkDir"));
  const std::string out = f.Get("StdOut"), err = f.Get("StdErr");
  if (!out.empty()) o.push_back("--output=" + OutputPattern(out, old_job));
  if (!err.empty() && err != out) o.push_back("--error=" + OutputPattern(err, old_job));
  if (!f.Get("Features").empty()) o.push_back("--constraint=" + f.Get("Features"));
  if (!f.Get("Reservation").empty()) o.push_back("--reservation=" + f.Get("Reservation"));
  const std::string mem = f.Get("MinMemoryNode"), mem_cpu = f.Get("MinMemoryCPU");
  if (!mem.empty() && mem != "0") o.push_back("--mem=" + mem);
  if (!mem_cpu.empty() && mem_cpu != "0") o.push_back("--mem-per-cpu=" + mem_cpu);
  TresOptions(f, &o);
  if (f.Get("OverSubscribe") == "NO") o.push_back("--exclusive");
  if (!f.Get("MailUser").empty()) o.push_back("--mail-user=" + f.Get("MailUser"));
  const std::string mt = f.Get("MailType");
  if (!mt.empty() && mt != "NONE") o.push_back("--mail-type=" + mt);
  o.push_back("--exclude=" + Join(excluded, ","));
  if (spares > 0) o.push_back("--no-kill");
  // The environment: the captured one without Slurm's output variables and ftrain's
  // resubmission variables, then those set anew, then the withheld credentials from here.
  for (const auto& kv : s.env) {
    const std::string n = NameOf(kv);
    const bool slurm = (n.rfind("SLURM_", 0) == 0 && n != "SLURM_CONF") ||
                       n.rfind("SLURMD_", 0) == 0 || n == "ENVIRONMENT";
    if (slurm || n.rfind("FTRAIN_RESUBMIT", 0) == 0 || n.rfind("FTRAIN_SPARE_NODE", 0) == 0)
      continue;
    j.env.push_back(kv);
  }
  if (var("FTRAIN_HOME").empty()) j.env.push_back("FTRAIN_HOME=" + home);
  if (!spares_s.empty()) j.env.push_back("FTRAIN_SPARE_NODES=" + std::to_string(spares));
  if (!var("FTRAIN_SPARE_NODELIST").empty() && same_size) {
    j.env.push_back("FTRAIN_SPARE_NODELIST=" + var("FTRAIN_SPARE_NODELIST"));
  }
  const std::string done = var("FTRAIN_RESUBMITS");
  const int resubmits = done.empty() ? 0 : std::atoi(done.c_str());
  j.env.push_back("FTRAIN_RESUBMITTED_FROM=" + old_job);
  j.env.push_back("FTRAIN_RESUBMITS=" + std::to_string(resubmits + 1));
  j.env.push_back("FTRAIN_RESUBMIT_EXCLUDED=" + dead);
  if (!var("FTRAIN_RESUBMIT_SAME_SIZE").empty()) {
    j.env.push_back("FTRAIN_RESUBMIT_SAME_SIZE=" + var("FTRAIN_RESUBMIT_SAME_SIZE"));
  }
  for (const auto& n : s.withheld) {
    auto it = own_env.find(n);
    if (it != own_env.end()) j.env.push_back(n + "=" + it->second);
  }
  j.cwd = var("SLURM_SUBMIT_DIR");
  if (j.cwd.empty()) j.cwd = f.Get("WorkDir");
  if (j.cwd.empty()) j.cwd = "/";
  return j;
}

std::optional<std::string> RepointDependency(const std::string& dep, const std::string& old_job,
                                             const std::string& new_job) {
  const std::regex names("(^|[^0-9])" + old_job + "([^0-9]|$)");
  if (!std::regex_search(dep, names)) return std::nullopt;
  std::string d = std::regex_replace(dep, std::regex("\\([^)]*\\)"), "");
  // "$01": a group number of two digits, so that the job id's digits never extend it.
  return std::regex_replace(d, std::regex("(^|[^0-9])" + old_job + "(?=[^0-9]|$)"),
                            "$01" + new_job);
}

bool CanRun(const JobInfo& j) {
  static const std::set<std::string> kNever = {
      "BadConstraints", "PartitionConfig", "PartitionNodeLimit",      "PartitionTimeLimit",
      "InvalidAccount", "InvalidQOS",      "AccountNotAllowed",       "QOSNotAllowed",
      "PartitionDown",  "JobHeldAdmin",    "DependencyNeverSatisfied"};
  const std::string st = j.State();
  if (st.empty()) return true;  // nothing known: sbatch accepted it
  if (st != "PENDING" && st != "RUNNING" && st != "CONFIGURING") return false;
  return kNever.count(j.Get("Reason")) == 0;
}

}  // namespace ftrain::orch
