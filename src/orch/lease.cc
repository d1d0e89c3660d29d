// orch/lease.cc - the run lease (lease.h): epoch entries made with link(2), the holder's file
// replaced by rename, the take-over rules.
#include "orch/lease.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "core/env.h"

namespace ftrain::orch {
namespace {

std::string EpochName(int64_t e) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%012lld", static_cast<long long>(e));
  return buf;
}

StatusOr<std::string> ReadSmall(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path);
    return Status::IOError("cannot read '" + path + "': " + strerror(errno));
  }
  std::string s;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) s.append(buf, static_cast<size_t>(n));
  close(fd);
  return s;
}

Status WriteNew(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot create '" + path + "': " + strerror(errno));
  const bool ok =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  close(fd);
  if (!ok) {
    unlink(path.c_str());
    return Status::IOError("cannot write '" + path + "'");
  }
  return Status::Ok();
}

std::string NewToken() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

}  // namespace

std::string RootLeaseFile(const std::string& ckpt_root) { return ckpt_root + "/.root-lease"; }
std::string RootLeaseDir(const std::string& ckpt_root) { return ckpt_root + "/.root-lease.d"; }

std::string CanonicalRunDir(const std::string& run_dir) {
  std::error_code ec;
  const auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(run_dir, ec), ec);
  return ec ? run_dir : p.string();
}

bool PathInside(const std::string& path, const std::string& dir) {
  std::string p = CanonicalRunDir(path), d = CanonicalRunDir(dir);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return p == d || p.rfind(d == "/" ? d : d + "/", 0) == 0;
}

std::string LeaseHolder::Describe() const {
  std::string s = (role == "watcher" ? "the watcher on " + host + " of job " + job
                                     : "job " + job + " (on " + host + ")");
  s += ", epoch " + std::to_string(epoch);
  if (!handoff.empty()) s += ", handed to job " + handoff;
  if (!from.empty()) s += ", resubmitted from job " + from;
  if (!run.empty()) s += ", run directory " + run;
  return s;
}

std::string FormatHolder(const LeaseHolder& h) {
  std::ostringstream o;
  o << "epoch=" << h.epoch << "\njob=" << h.job << "\nrestart=" << h.restart << "\nhost=" << h.host
    << "\nrole=" << h.role << "\nhandoff=" << h.handoff << "\nfrom=" << h.from
    << "\ntoken=" << h.token << "\n";
  if (!h.run.empty()) o << "run=" << h.run << "\n";
  return o.str();
}

std::optional<LeaseHolder> ParseHolder(const std::string& text) {
  LeaseHolder h;
  std::istringstream in(text);
  bool epoch = false;
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "epoch") {
      char* end = nullptr;
      h.epoch = std::strtoll(v.c_str(), &end, 10);
      epoch = end != v.c_str() && *end == '\0' && h.epoch > 0;
    } else if (k == "job") {
      h.job = v;
    } else if (k == "restart") {
      h.restart = std::atoi(v.c_str());
    } else if (k == "host") {
      h.host = v;
    } else if (k == "role") {
      h.role = v;
    } else if (k == "handoff") {
      h.handoff = v;
    } else if (k == "from") {
      h.from = v;
    } else if (k == "token") {
      h.token = v;
    } else if (k == "run") {
      h.run = v;
    }
  }
  if (!epoch) return std::nullopt;
  return h;
}

StatusOr<std::optional<LeaseHolder>> RunLease::Current() const {
  // The highest entry is authoritative; the holder's file adds its hand-off.
  int64_t top = 0;
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() == 12 && n.find_first_not_of("0123456789") == std::string::npos) {
        top = std::max<int64_t>(top, std::stoll(n));
      }
    }
    closedir(d);
  } else if (errno != ENOENT) {
    return Status::IOError("cannot list '" + dir_ + "': " + strerror(errno));
  }
  if (top == 0) return std::optional<LeaseHolder>();
  auto file = ReadSmall(file_);
  if (file.ok()) {
    auto h = ParseHolder(*file);
    if (h && h->epoch == top) return std::optional<LeaseHolder>(*h);
  }
  FT_ASSIGN_OR_RETURN(std::string entry, ReadSmall(dir_ + "/" + EpochName(top)));
  auto h = ParseHolder(entry);
  if (!h) return Status::Corruption(dir_ + "/" + EpochName(top) + " is not a lease entry");
  return std::optional<LeaseHolder>(*h);
}

StatusOr<bool> RunLease::Create(const LeaseHolder& h) {
  FT_RETURN_IF_ERROR(CreateDirs(env_, dir_));
  const std::string entry = dir_ + "/" + EpochName(h.epoch);
  const std::string tmp = dir_ + "/.tmp." + h.token + "." + std::to_string(getpid());
  FT_RETURN_IF_ERROR(WriteNew(tmp, FormatHolder(h)));
  const int rc = link(tmp.c_str(), entry.c_str());
  const int err = errno;
  unlink(tmp.c_str());
  if (rc != 0 && err != EEXIST) {
    return Status::IOError("cannot make '" + entry + "': " + strerror(err));
  }
  if (rc != 0) {
    // EEXIST: another's, or ours whose reply was lost (NFS): the entry says which.
    FT_ASSIGN_OR_RETURN(std::string text, ReadSmall(entry));
    auto other = ParseHolder(text);
    if (!other || other->token != h.token) return false;
  }
  FT_RETURN_IF_ERROR(WriteFileDurably(env_, file_, FormatHolder(h)));
  return true;
}

StatusOr<LeaseResult> RunLease::Acquire(LeaseHolder me, const JobAlive& alive) {
  me.token = NewToken();
  for (int tries = 0; tries < 16; ++tries) {
    FT_ASSIGN_OR_RETURN(std::optional<LeaseHolder> cur, Current());
    LeaseResult r;
    bool take = !cur.has_value();
    if (cur) {
      const bool same_job = cur->job == me.job;
      // An earlier start of this job (Slurm requeued it), unless a watcher of it handed the
      // run to another job meanwhile.
      const bool earlier_start = same_job && cur->restart <= me.restart && cur->handoff.empty();
      const bool handed_to_me = !cur->handoff.empty() && cur->handoff == me.job;
      // The checkpoint root's lease: a job of the same run (the run lease decided between them).
      const bool same_run = !me.run.empty() && cur->run == me.run;
      take = earlier_start || handed_to_me || same_run;
      if (!take) {
        // Another job (or a watcher of one): it keeps the run only while Slurm runs it.
        const std::string holder_job = cur->handoff.empty() ? cur->job : cur->handoff;
        std::optional<bool> running = alive(holder_job);
        if (!running.has_value()) {
          r.holder = *cur;
          r.unknown = true;
          return r;
        }
        take = !*running;
        r.superseded = cur->from == me.job || (same_job && !cur->handoff.empty());
      }
    }
    if (!take) {
      r.holder = *cur;
      return r;
    }
    me.epoch = cur ? cur->epoch + 1 : 1;
    FT_ASSIGN_OR_RETURN(bool made, Create(me));
    if (made) {
      r.ok = true;
      r.holder = me;
      return r;
    }
    // Someone took that epoch first: look again.
  }
  return Status::Aborted("the run lease " + dir_ + " changes hands too fast to take");
}

StatusOr<LeaseHolder> RunLease::Renew(const LeaseHolder& mine) {
  FT_ASSIGN_OR_RETURN(std::optional<LeaseHolder> cur, Current());
  if (!cur || cur->token != mine.token || cur->epoch < mine.epoch) {
    return Status::Aborted("the run lease was taken over by " +
                           (cur ? cur->Describe() : std::string("someone")));
  }
  if (cur->epoch > mine.epoch) {
    // Our own renewal whose holder file was not written (an I/O error after the link, and this
    // is the retry): the entry is ours, so finish it instead of calling it a take-over.
    FT_RETURN_IF_ERROR(WriteFileDurably(env_, file_, FormatHolder(*cur)));
    return *cur;
  }
  LeaseHolder next = mine;
  next.epoch = mine.epoch + 1;
  next.handoff.clear();
  FT_ASSIGN_OR_RETURN(bool made, Create(next));
  if (!made)
    return Status::Aborted("the run lease was taken over at epoch " + std::to_string(next.epoch));
  return next;
}

StatusOr<bool> RunLease::Holds(const LeaseHolder& mine) const {
  FT_ASSIGN_OR_RETURN(std::optional<LeaseHolder> cur, Current());
  // A later epoch with our token is our own renewal (only Renew copies a token), one whose
  // caller may not have learnt it yet (an I/O error after the entry was made).
  return cur.has_value() && cur->token == mine.token && cur->epoch >= mine.epoch;
}

Status RunLease::HandOff(const LeaseHolder& mine, const std::string& new_job) {
  FT_ASSIGN_OR_RETURN(bool holds, Holds(mine));
  if (!holds) return Status::Aborted("the run lease is no longer this watcher's");
  LeaseHolder h = mine;
  h.handoff = new_job;
  return WriteFileDurably(env_, file_, FormatHolder(h));
}

}  // namespace ftrain::orch
