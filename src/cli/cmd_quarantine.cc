// `ftrain quarantine list|clear RUN_DIR [--host H]...`: which hosts RUN/quarantine.jsonl keeps
// out of the run now (and until when), and the operator's way to return a host: `clear`
// appends a "cleared" line (records/quarantine.h) instead of editing the history; the job
// controller then ignores the host's earlier lines and hang records (orch/quarantine.h).
// Torch-free; runs while a job trains (one O_APPEND write, as the controller's own lines).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/env.h"
#include "core/run_layout.h"
#include "orch/quarantine.h"
#include "records/quarantine.h"
#include "report/run_report.h"

namespace ftrain::cli {
namespace {

namespace po = boost::program_options;

// A keep setting from the environment (what `ftrain job` would use), else its default.
StatusOr<double> KeepFromEnv(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(x) || x < 0) {
    return Status::InvalidArgument(std::string(name) + "='" + v +
                                   "' is not a number of seconds >= 0 (0: for the whole run)");
  }
  return x;
}

double KeepOf(const records::QuarantineRecord& q, const orch::QuarantineKeep& keep) {
  if (q.cause == orch::kFaultyCause) return keep.faulty_s;
  if (q.cause == orch::kHangCause) return keep.hang_s;
  return 0;
}

// Each host kept out at `now`, with its lines' causes and when the last of them expires.
void List(const std::string& run_dir, const std::string& path,
          const std::vector<records::QuarantineRecord>& lines, double now,
          const orch::QuarantineKeep& keep) {
  const std::vector<std::string> hosts = orch::QuarantinedHosts(lines, now, keep);
  std::cout << path << ": " << lines.size() << " line(s); " << hosts.size()
            << " host(s) kept out of this run now\n";
  for (const std::string& h : hosts) {
    std::string causes;
    double until = 0;  // < 0: never
    for (const auto& q : lines) {
      if (q.host != h) continue;
      if (q.cause == records::kClearedCause) {  // what came before no longer counts
        causes.clear();
        until = 0;
        continue;
      }
      const double k = KeepOf(q, keep);
      if (k > 0 && q.time >= 0 && now - q.time > k) continue;  // expired
      causes += (causes.empty() ? "" : ",") + (q.cause.empty() ? std::string("sdc") : q.cause);
      if (k <= 0 || q.time < 0) {
        until = -1;
      } else if (until >= 0) {
        until = std::max(until, q.time + k);
      }
    }
    std::cout << "  " << h << "  cause " << causes << ", "
              << (until < 0 ? std::string("until cleared")
                            : "until " + report::IsoTime(until) + " (then it trains again)")
              << "\n";
  }
  for (const auto& q : lines) {
    if (q.cause != records::kClearedCause) continue;
    std::cout << "  cleared: " << q.host << " at " << report::IsoTime(q.time) << "\n";
  }
  if (!hosts.empty()) {
    std::cout << "return a host with: ftrain quarantine clear " << run_dir << " --host HOST\n";
  }
}

// Appends a cleared line for each of `hosts` (all kept out now when empty).
Status Clear(const std::string& path, const std::vector<records::QuarantineRecord>& lines,
             std::vector<std::string> hosts, double now, const orch::QuarantineKeep& keep) {
  std::vector<std::string> named;  // every host the file names
  for (const auto& q : lines) {
    if (std::find(named.begin(), named.end(), q.host) == named.end()) named.push_back(q.host);
  }
  if (hosts.empty()) hosts = orch::QuarantinedHosts(lines, now, keep);
  for (const std::string& h : hosts) {
    if (std::find(named.begin(), named.end(), h) == named.end()) {
      std::string known;
      for (const auto& n : named) known += (known.empty() ? "" : " ") + n;
      return Status::InvalidArgument(
          "--host " + h + ": " + path +
          " names no such host (it names: " + (known.empty() ? "none" : known) + ")");
    }
  }
  const char* user = std::getenv("USER");
  for (const std::string& h : hosts) {
    records::QuarantineRecord c;
    c.time = now;
    c.host = h;
    c.cause = records::kClearedCause;
    c.fields = {records::Str("by", user != nullptr ? user : "")};
    FT_RETURN_IF_ERROR(records::AppendQuarantine(path, c));
    std::cout << "cleared " << h << ": a \"cleared\" line appended to " << path
              << "; its earlier lines and hang records no longer keep it out\n";
  }
  if (hosts.empty()) std::cout << "nothing to clear: no host is kept out of this run now\n";
  return Status::Ok();
}

}  // namespace

int RunQuarantine(int argc, char** argv) {
  const std::string program = "ftrain quarantine";
  po::options_description opts("ftrain quarantine list|clear RUN_DIR [--host HOST]...");
  std::string action, run_dir;
  std::vector<std::string> hosts;
  opts.add_options()("help,h", "show this help")("action", po::value<std::string>(&action),
                                                 "list or clear")(
      "run-dir", po::value<std::string>(&run_dir), "the run directory (run.dir)")(
      "host", po::value<std::vector<std::string>>(&hosts),
      "clear: the host to return (repeatable; default: every host kept out now)");
  po::positional_options_description pos;
  pos.add("action", 1).add("run-dir", 1);
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts
              << "Hosts stay out for FTRAIN_FAULTY_KEEP_S (node_fault lines) and "
                 "FTRAIN_HANG_QUARANTINE_KEEP_S (hang lines) after their line, read from the "
                 "environment as `ftrain job` does; sdc lines until cleared.\n";
    return kExitOk;
  }
  if (action != "list" && action != "clear") {
    return Fail(program, Status::InvalidArgument("give list or clear, then the run directory"));
  }
  Env* env = Env::Default();  // this process's files, passed down
  if (run_dir.empty() || !env->IsDirectory(run_dir)) {
    return Fail(program, Status::InvalidArgument("run directory '" + run_dir +
                                                 "' is not a directory: give run.dir"));
  }
  if (action == "list" && !hosts.empty()) {
    return Fail(program, Status::InvalidArgument("--host is for clear"));
  }
  orch::QuarantineKeep keep;
  auto faulty = KeepFromEnv("FTRAIN_FAULTY_KEEP_S", orch::kDefaultFaultyKeepS);
  if (!faulty.ok()) return Fail(program, faulty.status());
  auto hang = KeepFromEnv("FTRAIN_HANG_QUARANTINE_KEEP_S", orch::kDefaultHangQuarantineKeepS);
  if (!hang.ok()) return Fail(program, hang.status());
  keep.faulty_s = *faulty;
  keep.hang_s = *hang;
  const std::string path = RunLayout(run_dir).quarantine();
  std::vector<std::string> warnings;
  auto lines = records::ReadQuarantineFile(path, &warnings, env);
  if (!lines.ok()) return Fail(program, lines.status());
  for (const auto& w : warnings) std::cerr << program << ": warning: " << w << "\n";
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (action == "list") {
    List(run_dir, path, *lines, now, keep);
    return kExitOk;
  }
  s = Clear(path, *lines, hosts, now, keep);
  return s.ok() ? kExitOk : Fail(program, s);
}

}  // namespace ftrain::cli
