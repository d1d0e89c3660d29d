// ckptctl's s3:// commands: thin wrappers over S3CheckpointStore that print and pick the
// exit code. An outage (5xx, timeouts after the retries) is exit 2, never "bad" (1).
#include "cli/ckptctl_s3.h"

#include <stdlib.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/filename.h"
#include "ckpt/s3_store.h"
#include "ckpt/store.h"
#include "ckpt/tools.h"
#include "cli/cli_util.h"

namespace ftrain::cli {
namespace {

namespace po = boost::program_options;

// Writers (mirror, prune) get the full start-up check, the conditional-write probe included;
// readers only the credentials and the bucket, so read-only credentials do.
StatusOr<std::unique_ptr<ckpt::S3CheckpointStore>> OpenChecked(const std::string& root,
                                                               ckpt::S3StoreOptions o = {},
                                                               bool writer = false) {
  FT_ASSIGN_OR_RETURN(auto store, ckpt::S3CheckpointStore::Open(root, o));
  FT_RETURN_IF_ERROR(writer ? store->CheckUsable() : store->CheckReadable());
  return store;
}

}  // namespace

StatusOr<std::unique_ptr<LocalCheckpoint>> LocalCheckpoint::Open(const std::string& path) {
  if (!ckpt::IsS3Root(path)) {
    FT_ASSIGN_OR_RETURN(std::string dir, ckpt::ResolveCheckpointDir(path, Env::Default()));
    return std::unique_ptr<LocalCheckpoint>(new LocalCheckpoint(dir, ""));
  }
  // s3://B/P/step-00000120 names one step of the root s3://B/P; anything else is a root.
  std::string root = path;
  while (root.size() > 5 && root.back() == '/') root.pop_back();
  std::optional<int64_t> step;
  const size_t slash = root.rfind('/');
  const ckpt::RootEntry e = ckpt::ParseRootEntry(root.substr(slash + 1));
  if (slash > 5 && e.kind == ckpt::EntryKind::kComplete) {
    step = e.step;
    root.resize(slash);
  }
  FT_ASSIGN_OR_RETURN(auto store, OpenChecked(root));
  if (!step) {
    FT_ASSIGN_OR_RETURN(step, store->Latest());
    if (!step) return Status::InvalidArgument("no committed checkpoint in '" + root + "'");
  } else if (auto m = store->ReadManifest(*step); !m.ok()) {
    if (!m.status().IsNotFound()) return m.status();
    return Status::InvalidArgument("'" + path + "' is not a committed checkpoint (no " +
                                   ckpt::StepDirName(*step) + "/manifest.json under " + root + ")");
  }
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ckptctl-s3.XXXXXX").string();  // mkdtemp's
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Status::IOError(tmpl + ": mkdtemp for the copy of " + path + ": " +
                           std::strerror(errno));
  }
  auto local = std::unique_ptr<LocalCheckpoint>(
      new LocalCheckpoint(tmpl + "/" + ckpt::StepDirName(*step), tmpl));
  FT_RETURN_IF_ERROR(store->Download(*step, {}, local->dir_, Env::Default()));
  return local;
}

LocalCheckpoint::~LocalCheckpoint() {
  if (tmp_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(tmp_, ec);
  // A copy left behind is only disk space in $TMPDIR; say where it is.
  if (ec) std::cerr << "ckptctl: could not remove " << tmp_ << ": " << ec.message() << "\n";
}

int S3List(const std::string& root, bool json) {
  const std::string prog = "ckptctl list";
  auto store = OpenChecked(root);
  if (!store.ok()) return Fail(prog, store.status());
  auto list = (*store)->List();
  if (!list.ok()) return Fail(prog, list.status());
  nlohmann::json all = nlohmann::json::array();
  bool newest = true;
  for (const auto& i : *list) {
    const bool latest = i.committed && newest;
    if (i.committed) newest = false;
    if (json) {
      all.push_back({{"step", i.step},
                     {"path", root + "/" + ckpt::StepDirName(i.step)},
                     {"status", i.committed ? "complete" : "partial"},
                     {"bytes", i.bytes},
                     {"objects", i.objects},
                     {"is_latest", latest}});
    } else {
      std::cout << ckpt::StepDirName(i.step) << "  " << (i.committed ? "complete" : "partial ")
                << "  " << std::fixed << std::setprecision(1) << i.bytes / 1e6 << " MB  "
                << i.objects << " objects" << (latest ? "  (latest)" : "") << "\n";
    }
  }
  if (json) std::cout << all.dump(1) << "\n";
  return kExitOk;
}

int S3Latest(const std::string& root) {
  auto store = OpenChecked(root);
  if (!store.ok()) return Fail("ckptctl latest", store.status());
  auto latest = (*store)->Latest();
  if (!latest.ok()) return Fail("ckptctl latest", latest.status());
  if (!*latest) {
    std::cerr << "ckptctl latest: no complete checkpoint in '" << root << "'\n";
    return kExitBad;
  }
  std::cout << (*store)->root() << "/" << ckpt::StepDirName(**latest) << "\n";
  return kExitOk;
}

int S3Verify(const std::string& root, bool all, bool json, int threads) {
  const std::string prog = "ckptctl verify";
  auto store = OpenChecked(root);
  if (!store.ok()) return Fail(prog, store.status());
  auto list = (*store)->List();
  if (!list.ok()) return Fail(prog, list.status());
  const std::string scratch = std::filesystem::temp_directory_path().string();
  int rc = kExitOk, checked = 0;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& i : *list) {
    if (!i.committed) continue;
    auto rep = (*store)->Verify(i.step, scratch, threads, Env::Default());
    if (!rep.ok()) {  // an outage (retries spent) or a local error: exit 2, never "bad"
      return Fail(prog, Status::FailedPrecondition(rep.status().message() +
                                                   " (an outage, not damage: nothing was "
                                                   "found wrong; run verify again later)"));
    }
    ++checked;
    if (!rep->ok()) rc = kExitBad;
    if (json) {
      out.push_back({{"path", rep->dir},
                     {"step", i.step},
                     {"ok", rep->ok()},
                     {"datasets", rep->datasets_checked}});
    } else {
      for (const auto& p : rep->problems) {
        std::cout << "BAD " << p.file << (p.dataset.empty() ? "" : " dataset " + p.dataset) << ": "
                  << p.problem << "\n";
      }
      std::cout << (rep->ok() ? "OK  " : "BAD ") << rep->dir << ": " << rep->datasets_checked
                << " datasets\n";
    }
    if (!all) break;
  }
  if (json) std::cout << out.dump(1) << "\n";
  if (checked == 0) {
    return Fail(prog, Status::NotFound("no complete checkpoint in '" + root + "'"));
  }
  return rc;
}

int S3Prune(const std::string& root, int keep, bool abandoned, bool dry_run) {
  auto store = OpenChecked(root, {}, /*writer=*/true);
  if (!store.ok()) return Fail("ckptctl prune", store.status());
  auto deleted = (*store)->Prune(keep, abandoned, dry_run);
  if (!deleted.ok()) return Fail("ckptctl prune", deleted.status());
  for (const auto& d : *deleted) std::cout << (dry_run ? "would delete " : "deleted ") << d << "\n";
  if (deleted->empty()) std::cout << "nothing to delete\n";
  return kExitOk;
}

int Mirror(int argc, char** argv) {
  const std::string prog = "ckptctl mirror";
  std::string generation;
  int part_mb = 8, threads = 4;
  double max_mb_per_s = 0;
  po::options_description opts(prog);
  std::vector<std::string> args;
  opts.add_options()("generation", po::value<std::string>(&generation),
                     "this writer's job generation (default: a new one)")(
      "part-mb", po::value<int>(&part_mb)->default_value(8), "multipart part size (>= 5)")(
      "threads", po::value<int>(&threads)->default_value(4), "parts uploaded at once")(
      "max-mb-per-s", po::value<double>(&max_mb_per_s)->default_value(0),
      "bandwidth cap (0: none)")("args", po::value<std::vector<std::string>>(&args)->composing(),
                                 "DIR S3ROOT");
  po::positional_options_description pos;
  pos.add("args", -1);
  po::variables_map vm;
  Status s = ParseFlags(prog, argc, argv, opts, pos, &vm);
  if (s.ok() && args.size() != 2) s = Status::InvalidArgument("takes DIR S3ROOT");
  if (s.ok() && (part_mb < 5 || threads < 1 || max_mb_per_s < 0)) {
    s = Status::InvalidArgument("--part-mb must be >= 5, --threads >= 1, --max-mb-per-s >= 0");
  }
  if (s.ok() && !ckpt::IsS3Root(args[1]))
    s = Status::InvalidArgument("'" + args[1] + "' is not s3://BUCKET/PREFIX");
  if (!s.ok()) return Fail(prog, s);
  if (generation.empty()) generation = ckpt::NewGeneration(/*fence_epoch=*/0);  // a clock one
  auto dir = ckpt::ResolveCheckpointDir(args[0], Env::Default());
  if (!dir.ok()) return Fail(prog, dir.status());
  ckpt::S3StoreOptions o;
  o.upload.part_bytes = uint64_t(part_mb) << 20;
  o.upload.threads = threads;
  o.upload.max_bytes_per_s = static_cast<int64_t>(max_mb_per_s * 1e6);
  auto store = OpenChecked(args[1], o, /*writer=*/true);
  if (!store.ok()) return Fail(prog, store.status());
  auto out = (*store)->Upload(*dir, generation, Env::Default());
  if (!out.ok()) return Fail(prog, out.status());
  std::cout << (*out == ckpt::MirrorOutcome::kCommitted ? "committed " : "already committed ")
            << *dir << " -> " << (*store)->root() << "\n";
  return kExitOk;
}

int Restore(int argc, char** argv) {
  const std::string prog = "ckptctl restore";
  if (argc != 3) return Fail(prog, Status::InvalidArgument("takes S3ROOT FSROOT"));
  auto store = OpenChecked(argv[1]);
  if (!store.ok()) return Fail(prog, store.status());
  auto step = ckpt::RestoreFromMirror(argv[1], argv[2], Env::Default());
  if (!step.ok()) return Fail(prog, step.status());
  if (!*step) {
    std::cout << "nothing to restore: " << argv[2] << " is as new as " << argv[1] << "\n";
  } else {
    std::cout << "restored " << ckpt::StepDirName(**step) << " into " << argv[2] << "\n";
  }
  return kExitOk;
}

}  // namespace ftrain::cli
