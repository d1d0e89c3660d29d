// `ftrain paths RUN_DIR`: where a run directory keeps its files (core/run_layout.h), for the
// shell scripts (slurm/train.sh, slurm/agent.sh) and for operators, so that no script keeps
// its own copy of the layout. The checkpoint root is resolved the way `ftrain train` resolves
// ckpt.root: from --config FILE and --section.key=value overrides when given (the arguments the
// trainer will get), else from the run's config.resolved.cfg (what its newest start used),
// else the default RUN_DIR/checkpoints.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/run_layout.h"

namespace ftrain::cli {
namespace {

namespace po = boost::program_options;

struct Resolved {
  std::string checkpoints;
  std::string checkpoints_from;  // "config", "resolved config" or "default"
};

StatusOr<Resolved> ResolveCheckpointRoot(const RunLayout& layout, const std::string& config_path,
                                         const std::vector<std::string>& overrides) {
  if (config_path.empty() && overrides.empty()) {
    FT_ASSIGN_OR_RETURN(std::string root, layout.CheckpointRoot());
    const bool from_run = root != layout.default_checkpoint_root();
    return Resolved{root, from_run ? "resolved config" : "default"};
  }
  Config config;
  if (!config_path.empty()) {
    FT_ASSIGN_OR_RETURN(config, Config::LoadFile(config_path));
  }
  for (const auto& o : overrides) FT_RETURN_IF_ERROR(config.ApplyOverride(o));
  std::string run_dir = layout.run_dir();
  FT_RETURN_IF_ERROR(config.GetString("run.dir", &run_dir));
  if (run_dir != layout.run_dir()) {
    return Status::InvalidArgument(
        "run.dir = '" + run_dir + "' (" + config.entries().at("run.dir").origin +
        ") is not the RUN_DIR argument '" + layout.run_dir() + "': give one run directory");
  }
  Resolved r{layout.default_checkpoint_root(), "default"};
  if (config.Has("ckpt.root")) {
    FT_RETURN_IF_ERROR(config.GetString("ckpt.root", &r.checkpoints));
    r.checkpoints_from = "config";
  }
  if (r.checkpoints.empty()) {
    return Status::InvalidArgument("ckpt.root is empty: give the checkpoint root");
  }
  return r;
}

using PathList = std::vector<std::pair<std::string, std::string>>;

PathList RunPathsOf(const RunLayout& layout, const Resolved& root) {
  return {
      {"run_dir", layout.run_dir()},
      {"checkpoints", root.checkpoints},
      {"metrics", layout.metrics()},
      {"restarts", layout.restarts()},
      {"resolved_config", layout.resolved_config()},
      {"config_error", layout.config_error()},
      {"last_stop", layout.last_stop()},
      {"failed_starts", layout.failed_starts()},
      {"node_requeues", layout.node_requeues()},
      {"logs", layout.logs()},
      {"tensorboard", layout.tensorboard()},
      {"profile", layout.profile()},
      {"commcheck", layout.commcheck()},
      {"replication_secret", layout.replication_secret()},
      {"job_nodes", layout.job_nodes()},
      {"heartbeats", layout.heartbeats()},
      {"submit", layout.submit()},
      {"hf_config_copy", layout.hf_config_copy()},
  };
}

PathList NodePathsOf(const RunLayout& layout, const std::string& node) {
  return {
      {"ckptd_dir", layout.daemon_dir(node)},
      {"ckptd_socket", ckpt::proto::SocketPath(layout.run_dir(), node)},
      {"ckptd_log", layout.daemon_log(node)},
      {"ckptd_peer_addr", layout.daemon_peer_addr(node)},
      {"ckptd_buddy_addr", layout.daemon_buddy_addr(node)},
  };
}

// --section.key=value arguments are the trainer's overrides, not this command's flags: they go
// to *overrides, everything else to *rest (argv[0] first).
void SplitOverrides(int argc, char** argv, std::vector<std::string>* overrides,
                    std::vector<char*>* rest) {
  rest->push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool override_arg =
        a.rfind("--", 0) == 0 && a.find('=') != std::string::npos && a.find('.') < a.find('=');
    if (override_arg) {
      overrides->push_back(a);
    } else {
      rest->push_back(argv[i]);
    }
  }
}

// Prints one path (--get KEY), or all of them as JSON or as "key<TAB>path" lines.
int PrintPaths(const std::string& program, const RunLayout& layout, const Resolved& root,
               const std::vector<std::string>& nodes, const std::string& get, bool json) {
  const PathList run_paths = RunPathsOf(layout, root);
  if (!get.empty()) {
    for (const auto& [k, v] : run_paths) {
      if (k == get) {
        std::cout << v << "\n";
        return kExitOk;
      }
    }
    for (const auto& [k, v] : NodePathsOf(layout, "NODE")) {
      if (k != get) continue;
      if (nodes.size() != 1) {
        return Fail(program, Status::InvalidArgument("--get " + get + " needs exactly one --node"));
      }
      for (const auto& [k2, v2] : NodePathsOf(layout, nodes[0])) {
        if (k2 == get) std::cout << v2 << "\n";
      }
      return kExitOk;
    }
    return Fail(program, Status::InvalidArgument("--get: unknown path '" + get + "' (see --help)"));
  }
  if (json) {
    nlohmann::json j;
    for (const auto& [k, v] : run_paths) j[k] = v;
    j["checkpoints_from"] = root.checkpoints_from;
    for (const auto& n : nodes) {
      for (const auto& [k, v] : NodePathsOf(layout, n)) j["nodes"][n][k] = v;
    }
    std::cout << j.dump(1) << "\n";
    return kExitOk;
  }
  for (const auto& [k, v] : run_paths) {
    std::cout << k << "\t" << v;
    if (k == "checkpoints") std::cout << "\t(" << root.checkpoints_from << ")";
    std::cout << "\n";
  }
  for (const auto& n : nodes) {
    for (const auto& [k, v] : NodePathsOf(layout, n))
      std::cout << k << "[" << n << "]\t" << v << "\n";
  }
  return kExitOk;
}

}  // namespace

int RunPaths(int argc, char** argv) {
  const std::string program = "ftrain paths";
  po::options_description opts(
      "ftrain paths RUN_DIR [--node NODE]... [--json | --get KEY] [--config FILE] "
      "[--section.key=value ...]");
  std::string run_dir, get, config_path;
  std::vector<std::string> nodes;
  bool json = false;
  opts.add_options()("help,h", "show this help")("run-dir", po::value<std::string>(&run_dir),
                                                 "the run directory (run.dir)")(
      "node", po::value<std::vector<std::string>>(&nodes),
      "also the paths of this node's daemon (repeatable)")("json", po::bool_switch(&json),
                                                           "print one JSON object")(
      "get", po::value<std::string>(&get),
      "print only this path (checkpoints, metrics, restarts, resolved_config, config_error, "
      "last_stop, logs, tensorboard, profile, commcheck, replication_secret, job_nodes, "
      "heartbeats, submit, hf_config_copy; with one --node: ckptd_dir, "
      "ckptd_socket, ckptd_log, ckptd_peer_addr, ckptd_buddy_addr)")(
      "config", po::value<std::string>(&config_path),
      "resolve ckpt.root from this training config (and the overrides) as `ftrain train` would");
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  std::vector<std::string> overrides;
  std::vector<char*> rest;
  SplitOverrides(argc, argv, &overrides, &rest);
  po::variables_map vm;
  Status s = ParseFlags(program, static_cast<int>(rest.size()), rest.data(), opts, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts;
    return kExitOk;
  }
  if (run_dir.empty()) {
    return Fail(program, Status::InvalidArgument("give the run directory (see --help)"));
  }
  if (json && !get.empty()) {
    return Fail(program, Status::InvalidArgument("--json and --get exclude each other"));
  }
  for (const auto& n : nodes) {
    if (!ckpt::proto::IsSafeNodeId(n)) {
      return Fail(program,
                  Status::InvalidArgument("--node '" + n + "' is not a node id ([A-Za-z0-9._-])"));
    }
  }
  const RunLayout layout(run_dir);
  auto root = ResolveCheckpointRoot(layout, config_path, overrides);
  if (!root.ok()) return Fail(program, root.status());

  return PrintPaths(program, layout, *root, nodes, get, json);
}

}  // namespace ftrain::cli
