// `ckptctl`: the operator's checkpoint tool. Flag parsing and exit codes only; the work is in
// src/ckpt (store, verify, tools). One function per subcommand, dispatched from a table as in
// `ftrain`. Exit codes: 0 ok, 1 the checked thing is bad, 2 usage or environment error.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/ckptd_client.h"
#include "ckpt/s3_store.h"
#include "ckpt/store.h"
#include "ckpt/tools.h"
#include "ckpt/verify.h"
#include "cli/ckptctl_s3.h"
#include "cli/cli_util.h"
#include "core/run_layout.h"

namespace ftrain::cli {
namespace {

namespace po = boost::program_options;

constexpr char kUsage[] =
    "usage: ckptctl <command> [args]\n\n"
    "  list ROOT [--json]                      checkpoints, newest first\n"
    "  verify PATH [--all] [--json]            re-read and re-hash (PATH: root or checkpoint)\n"
    "  latest ROOT [--verified]                path of the newest complete checkpoint\n"
    "  inspect PATH [--json]                   metadata and tensor table\n"
    "  diff A B                                exit 0 iff bit-identical\n"
    "  prune ROOT --keep K [--keep-every M] [--dry-run] [--corrupt]\n"
    "  export PATH --format safetensors -o FILE [--dtype bf16|fp32]\n"
    "  export PATH --format hf -o DIR [--dtype bf16|fp32] [--shard-gb 5]\n"
    "  status RUN_DIR [--json] [--node N]...   every node's ckptd (exit 1 if one is down)\n"
    "  mirror PATH s3://B/P [--part-mb 8] [--threads 4] [--max-mb-per-s X] [--generation G]\n"
    "                                          upload a complete checkpoint, commit it there\n"
    "  restore s3://B/P ROOT                   newest s3 checkpoint into ROOT if newer there\n"
    "list, latest, verify and prune also take s3://BUCKET/PREFIX roots (prune: --abandoned\n"
    "also deletes uncommitted steps and aborts unfinished uploads; only with no writer alive);\n"
    "inspect, diff and export take s3://B/P (its newest) or s3://B/P/step-N, copied to $TMPDIR\n\n"
    "every command takes --log-level debug|info|warning|error (default: $FTRAIN_LOG_LEVEL)\n"
    "exit codes: 0 ok, 1 the checked thing is bad, 2 usage or environment error\n";

struct Parsed {
  po::variables_map vm;
  std::vector<std::string> args;
};

// Parses `argv` (argv[0] = the subcommand) with extra options and N positional arguments.
Status Parse(const std::string& cmd, int argc, char** argv, po::options_description opts,
             int positional, Parsed* out) {
  opts.add_options()("help,h", "show this help")(
      "args", po::value<std::vector<std::string>>(&out->args)->composing(), "positional");
  po::positional_options_description pos;
  pos.add("args", -1);
  FT_RETURN_IF_ERROR(ParseFlags("ckptctl " + cmd, argc, argv, opts, pos, &out->vm));
  if (out->vm.count("help")) return Status::Ok();
  if (static_cast<int>(out->args.size()) != positional) {
    return Status::InvalidArgument("ckptctl " + cmd + " takes " + std::to_string(positional) +
                                   " path argument(s), got " + std::to_string(out->args.size()) +
                                   " (see 'ckptctl --help')");
  }
  return Status::Ok();
}

// `ckptctl status RUN`: asks the daemon of every node (RUN/ckptd-<node>/sock) for its status.
int CkptdStatus(const std::string& run_dir, bool json, std::vector<std::string> only) {
  std::error_code ec;
  std::vector<std::string> nodes;
  for (const auto& e : std::filesystem::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string node = RunLayout::NodeOfDaemonDir(name);
    if (e.is_directory() && !node.empty()) nodes.push_back(node);
  }
  if (ec) {
    return Fail("ckptctl status", Status::InvalidArgument("cannot list run directory '" + run_dir +
                                                          "': " + ec.message()));
  }
  if (!only.empty()) {  // just these nodes, whether or not a daemon ever ran there
    for (const auto& n : only) {
      if (!ckpt::proto::IsSafeNodeId(n)) {
        return Fail("ckptctl status", Status::InvalidArgument(
                                          "--node '" + n + "' is not a node id ([A-Za-z0-9._-])"));
      }
    }
    nodes = only;
  }
  std::sort(nodes.begin(), nodes.end());
  if (nodes.empty()) {
    std::cerr << "ckptctl status: no ckptd has ever run under '" << run_dir << "'\n";
    return kExitBad;
  }
  int rc = kExitOk;
  for (const auto& node : nodes) {
    auto st = ckpt::QueryCkptdStatus(ckpt::proto::SocketPath(run_dir, node));
    if (!st.ok()) {
      rc = kExitBad;
      if (json) {
        std::cout << nlohmann::json(
                         {{"node", node}, {"running", false}, {"error", st.status().message()}})
                         .dump()
                  << "\n";
      } else {
        std::cout << "node " << node << ": NOT RUNNING (" << st.status().message() << ")\n";
      }
      continue;
    }
    if (json) {
      std::cout << *st << "\n";
      continue;
    }
    auto j = nlohmann::json::parse(*st, nullptr, false);
    if (j.is_discarded()) {
      std::cout << "node " << node << ": malformed status\n";
      rc = kExitBad;
      continue;
    }
    std::cout << "node " << node << " pid " << j.value("pid", 0) << " world "
              << j.value("world_size", 0) << "\n  in_flight " << j.value("snapshots_in_flight", 0)
              << " queue_depth " << j.value("queue_depth", 0) << " last_persisted_step "
              << j.value("last_persisted_step", -1) << " last_committed_step "
              << j.value("last_committed_step", -1) << "\n  saves " << j.value("saves", 0)
              << " commits_won " << j.value("commits_won", 0) << " failures "
              << j.value("failures", 0) << std::fixed << std::setprecision(1) << " throughput_mb_s "
              << j.value("throughput_mb_s", 0.0) << std::setprecision(2) << " compression_ratio "
              << j.value("compression_ratio", 0.0) << "\n";
    const std::string err = j.value("last_error", std::string());
    if (!err.empty()) std::cout << "  last_error " << err << "\n";
    const nlohmann::json rep = j.value("replication", nlohmann::json::object());
    if (rep.value("enabled", false)) {
      std::cout << "  replication job " << rep.value("job_id", "") << " peer "
                << rep.value("peer_address", "") << " buddy " << rep.value("buddy", "")
                << " bad_peers " << rep.value("bad_peers", 0) << " fetches "
                << rep.value("fetches", 0) << "\n";
      for (const auto& r : rep.value("to_buddy", nlohmann::json::array())) {
        std::cout << "    rank " << r.value("rank", -1) << " -> buddy: newest_step "
                  << r.value("newest_step_replicated", -1) << " bytes " << r.value("bytes", 0)
                  << " failures " << r.value("failures", 0) << "\n";
      }
      for (const auto& r : rep.value("replicas_held", nlohmann::json::array())) {
        std::cout << "    holds rank " << r.value("rank", -1) << " step " << r.value("step", -1)
                  << " bytes " << r.value("bytes", 0) << " from " << r.value("from", "") << "\n";
      }
    }
  }
  return rc;
}

int PrintVerify(const ckpt::VerifyReport& r, bool json, nlohmann::json* all) {
  const double mbps = r.seconds > 0 ? r.raw_bytes / r.seconds / 1e6 : 0;
  if (json) {
    nlohmann::json problems = nlohmann::json::array();
    for (const auto& p : r.problems) {
      problems.push_back({{"file", p.file}, {"dataset", p.dataset}, {"problem", p.problem}});
    }
    all->push_back({{"path", r.dir},
                    {"step", r.step},
                    {"ok", r.ok()},
                    {"datasets", r.datasets_checked},
                    {"raw_bytes", r.raw_bytes},
                    {"stored_bytes", r.stored_bytes},
                    {"seconds", r.seconds},
                    {"throughput_mb_s", mbps},
                    {"problems", problems}});
  } else {
    for (const auto& p : r.problems) {
      std::cout << "BAD " << p.file << (p.dataset.empty() ? "" : " dataset " + p.dataset) << ": "
                << p.problem << "\n";
    }
    std::cout << (r.ok() ? "OK  " : "BAD ") << r.dir << ": " << r.datasets_checked << " datasets, "
              << std::fixed << std::setprecision(1) << r.raw_bytes / 1e6 << " MB re-hashed ("
              << r.stored_bytes / 1e6 << " MB read) in " << std::setprecision(2) << r.seconds
              << " s, " << std::setprecision(0) << mbps << " MB/s\n";
  }
  return r.ok() ? kExitOk : kExitBad;
}

// Parses a subcommand's flags (argv[0] = its name). Returns the exit code to stop with (bad
// usage, or --help shown), or nothing when the command should go on.
std::optional<int> ParseOrExit(int argc, char** argv, po::options_description opts, int positional,
                               Parsed* p) {
  const std::string cmd = argv[0];
  Status s = Parse(cmd, argc, argv, std::move(opts), positional, p);
  if (!s.ok()) return Fail("ckptctl " + cmd, s);
  if (p->vm.count("help")) return (std::cout << kUsage, kExitOk);
  return std::nullopt;
}

int List(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  po::options_description opts(prog);
  opts.add_options()("json", "JSON output");
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, opts, 1, &p)) return *rc;
  if (ckpt::IsS3Root(p.args[0])) return S3List(p.args[0], p.vm.count("json") > 0);
  Status s = ckpt::PrintList(p.args[0], p.vm.count("json") > 0, std::cout, Env::Default());
  return s.ok() ? kExitOk : Fail(prog, s.IsNotFound() ? Status::InvalidArgument(s.message()) : s);
}

// The checkpoint directories `ckptctl verify PATH [--all]` checks.
StatusOr<std::vector<std::string>> VerifyTargets(const std::string& path, bool all) {
  if (!Env::Default()->IsDirectory(path)) {
    return Status::InvalidArgument("'" + path + "' is not a directory");
  }
  std::vector<std::string> dirs;
  if (!all) {
    FT_ASSIGN_OR_RETURN(std::string dir, ckpt::ResolveCheckpointDir(path, Env::Default()));
    dirs.push_back(dir);
    return dirs;
  }
  ckpt::CheckpointStore store(path, Env::Default());
  FT_ASSIGN_OR_RETURN(auto infos, store.List());
  int set_aside = 0;
  for (const auto& i : infos) {
    if (i.status == ckpt::CheckpointStatus::kCorrupt) {
      ++set_aside;  // evidence a resume already rejected; verify it by its path
    } else if (i.status != ckpt::CheckpointStatus::kPartial &&
               i.status != ckpt::CheckpointStatus::kDeleting) {
      dirs.push_back(i.path);
    }
  }
  if (set_aside > 0) {
    std::cerr << "ckptctl verify: skipping " << set_aside << " step-N.corrupt director"
              << (set_aside == 1 ? "y" : "ies")
              << " that resume set aside (name one to verify it)\n";
  }
  if (dirs.empty()) return Status::NotFound("no checkpoints under '" + path + "'");
  return dirs;
}

int Verify(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  po::options_description opts(prog);
  opts.add_options()("json", "JSON output")("all", "every checkpoint under a root")(
      "threads", po::value<int>()->default_value(0), "decompression threads (0 = all cores)");
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, opts, 1, &p)) return *rc;
  const int threads = p.vm["threads"].as<int>();
  if (ckpt::IsS3Root(p.args[0])) {
    return S3Verify(p.args[0], p.vm.count("all") > 0, p.vm.count("json") > 0, threads);
  }
  auto dirs = VerifyTargets(p.args[0], p.vm.count("all") > 0);
  if (!dirs.ok()) return Fail(prog, dirs.status());
  int rc = kExitOk;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& d : *dirs) {
    if (PrintVerify(ckpt::VerifyCheckpoint(d, threads, Env::Default()), p.vm.count("json") > 0,
                    &all) != kExitOk) {
      rc = kExitBad;
    }
  }
  if (p.vm.count("json")) std::cout << all.dump(1) << "\n";
  return rc;
}

int Latest(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  po::options_description opts(prog);
  opts.add_options()("verified", "the newest checkpoint that also verifies");
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, opts, 1, &p)) return *rc;
  if (ckpt::IsS3Root(p.args[0])) {
    if (p.vm.count("verified")) {
      return Fail(prog, Status::InvalidArgument("--verified is not supported on s3:// roots; "
                                                "run 'ckptctl verify' on the root"));
    }
    return S3Latest(p.args[0]);
  }
  ckpt::CheckpointStore store(p.args[0], Env::Default());
  if (!Env::Default()->IsDirectory(p.args[0])) {
    return Fail(prog, Status::InvalidArgument("checkpoint root '" + p.args[0] +
                                              "' does not exist or is not a directory"));
  }
  auto all = store.List();
  if (!all.ok()) return Fail(prog, all.status());
  for (const auto& i : *all) {
    if (i.status != ckpt::CheckpointStatus::kComplete) continue;
    if (p.vm.count("verified")) {
      auto rep = ckpt::VerifyCheckpoint(i.path, 0, Env::Default());
      if (!rep.ok()) {
        std::cerr << "ckptctl latest: skipping " << i.path << ": " << rep.problems.front().problem
                  << "\n";
        continue;
      }
    }
    std::cout << i.path << "\n";
    return kExitOk;
  }
  std::cerr << "ckptctl latest: no " << (p.vm.count("verified") ? "verified" : "complete")
            << " checkpoint in '" << p.args[0] << "'\n";
  return kExitBad;
}

int Inspect(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  po::options_description opts(prog);
  opts.add_options()("json", "JSON output");
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, opts, 1, &p)) return *rc;
  auto ck = LocalCheckpoint::Open(p.args[0]);
  if (!ck.ok()) return Fail(prog, ck.status());
  Status s = ckpt::PrintInspect((*ck)->dir(), p.vm.count("json") > 0, std::cout, Env::Default());
  return s.ok() ? kExitOk : Fail(prog, s);
}

int Diff(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, po::options_description(prog), 2, &p)) return *rc;
  auto a = LocalCheckpoint::Open(p.args[0]);
  if (!a.ok()) return Fail(prog, a.status());
  auto b = LocalCheckpoint::Open(p.args[1]);
  if (!b.ok()) return Fail(prog, b.status());
  auto r = ckpt::DiffCheckpoints((*a)->dir(), (*b)->dir(), std::cout, Env::Default());
  if (!r.ok()) return Fail(prog, r.status());
  if (!r->identical) return kExitBad;
  std::cout << "identical: " << r->tensors_compared << " tensors and " << r->blobs_compared
            << " pieces of state are bit-identical\n";
  return kExitOk;
}

int Prune(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  int keep = 0;
  int64_t keep_every = 0;
  po::options_description opts(prog);
  opts.add_options()("keep", po::value<int>(&keep)->required(),
                     "newest complete checkpoints to keep")(
      "keep-every", po::value<int64_t>(&keep_every)->default_value(0), "also keep multiples of M")(
      "dry-run", "print what would be deleted")(
      "corrupt", "also remove step-N.corrupt directories that resume set aside")(
      "abandoned", "s3://: also uncommitted steps and unfinished multipart uploads");
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, opts, 1, &p)) return *rc;
  if (keep < 1) return Fail(prog, Status::InvalidArgument("--keep must be at least 1"));
  if (keep_every < 0) return Fail(prog, Status::InvalidArgument("--keep-every must be >= 0"));
  if (ckpt::IsS3Root(p.args[0])) {
    if (keep_every != 0 || p.vm.count("corrupt")) {
      return Fail(prog, Status::InvalidArgument("--keep-every and --corrupt are not supported "
                                                "on s3:// roots"));
    }
    return S3Prune(p.args[0], keep, p.vm.count("abandoned") > 0, p.vm.count("dry-run") > 0);
  }
  if (!Env::Default()->IsDirectory(p.args[0])) {
    return Fail(prog, Status::InvalidArgument("'" + p.args[0] + "' is not a directory"));
  }
  const bool dry_run = p.vm.count("dry-run") > 0;
  ckpt::CheckpointStore store(p.args[0], Env::Default());
  auto deleted = store.Rotate({keep, keep_every}, dry_run);
  if (!deleted.ok()) return Fail(prog, deleted.status());
  if (p.vm.count("corrupt")) {
    auto corrupt = store.RemoveCorrupt(dry_run);
    if (!corrupt.ok()) return Fail(prog, corrupt.status());
    deleted->insert(deleted->end(), corrupt->begin(), corrupt->end());
  }
  for (const auto& d : *deleted) std::cout << (dry_run ? "would delete " : "deleted ") << d << "\n";
  if (deleted->empty()) std::cout << "nothing to delete\n";
  return kExitOk;
}

int Export(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  std::string format, output, dtype = "bf16";
  double shard_gb = 5;
  po::options_description opts(prog);
  opts.add_options()("format", po::value<std::string>(&format)->required(), "safetensors or hf")(
      "output,o", po::value<std::string>(&output)->required(),
      "output file (safetensors) or directory (hf)")(
      "dtype", po::value<std::string>(&dtype)->default_value("bf16"), "bf16 or fp32")(
      "shard-gb", po::value<double>(&shard_gb)->default_value(5),
      "hf: at most this many GB per safetensors file");
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, opts, 1, &p)) return *rc;
  if (format != "safetensors" && format != "hf") {
    return Fail(prog, Status::InvalidArgument("--format '" + format +
                                              "' is not supported; use safetensors or hf"));
  }
  if (format == "safetensors" && !p.vm["shard-gb"].defaulted()) {
    return Fail(prog, Status::InvalidArgument("--shard-gb applies to --format hf only"));
  }
  auto ck = LocalCheckpoint::Open(p.args[0]);
  if (!ck.ok()) return Fail(prog, ck.status());
  const std::string& dir = (*ck)->dir();
  Status s = format == "hf"
                 ? ckpt::ExportHf(dir, dtype, shard_gb, output, std::cout, Env::Default())
                 : ckpt::ExportSafetensors(dir, dtype, output, std::cout, Env::Default());
  return s.ok() ? kExitOk : Fail(prog, s);
}

int DaemonStatus(int argc, char** argv) {
  const std::string prog = std::string("ckptctl ") + argv[0];
  po::options_description opts(prog);
  opts.add_options()("json", "one JSON object per node")(
      "node", po::value<std::vector<std::string>>()->composing(), "only this node (repeatable)");
  Parsed p;
  if (auto rc = ParseOrExit(argc, argv, opts, 1, &p)) return *rc;
  return CkptdStatus(p.args[0], p.vm.count("json") > 0,
                     p.vm.count("node") ? p.vm["node"].as<std::vector<std::string>>()
                                        : std::vector<std::string>());
}

// One row per subcommand; the help text is kUsage (its format predates this table).
struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv);  // argv[0] = the subcommand's name
};

const Subcommand kSubcommands[] = {
    {"list", List},     {"verify", Verify},   {"latest", Latest}, {"inspect", Inspect},
    {"diff", Diff},     {"prune", Prune},     {"export", Export}, {"status", DaemonStatus},
    {"mirror", Mirror}, {"restore", Restore},
};

int Run(int argc, char** argv) {
  const Status log = InitLogLevel(&argc, argv);
  if (!log.ok()) return Fail("ckptctl", log);
  if (argc < 2) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kUsage;
    return kExitOk;
  }
  for (const auto& s : kSubcommands) {
    if (cmd == s.name) return s.run(argc - 1, argv + 1);
  }
  std::cerr << "ckptctl: unknown command '" << cmd << "'\n" << kUsage;
  return kExitUsage;
}

}  // namespace
}  // namespace ftrain::cli

int main(int argc, char** argv) { return ftrain::cli::Run(argc, argv); }
