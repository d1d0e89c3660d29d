// `ftrain commcheck`: flags only; the check lives in comm/commcheck.
#include <torch/cuda.h>

#include <iostream>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "comm/commcheck.h"
#include "comm/context.h"
#include "core/env.h"
#include "core/log.h"
#include "train/device/device.h"

namespace ftrain::cli {

namespace po = boost::program_options;

// The collectives were correct, but rank 0 could not write --record's file.
constexpr int kExitRecordNotWritten = 3;

int RunCommcheck(int argc, char** argv) {
  const std::string program = "ftrain commcheck";
  po::options_description opts(
      "ftrain commcheck [--sizes 1M,4M,...] [--iters N] [--warmup N] [--json] [--record FILE] "
      "[--backend B]\n"
      "(run one per rank: under srun --mpi=pmix, ftrain launch, or with RANK/WORLD_SIZE/"
      "MASTER_ADDR/MASTER_PORT)");
  std::string sizes_text = "1M,4M,16M,64M";
  comm::CommcheckOptions o;
  o.env = Env::Default();  // this process's files
  int rdzv_timeout = 0;
  std::string backend = "gloo";
  opts.add_options()("help,h", "show this help")(
      "sizes", po::value<std::string>(&sizes_text)->default_value(sizes_text),
      "comma-separated tensor sizes in bytes (K/M/G suffixes; any size, uneven ones too)")(
      "iters", po::value<int>(&o.iters)->default_value(5), "timed iterations per size")(
      "warmup", po::value<int>(&o.warmup)->default_value(1), "untimed iterations per size")(
      "json", po::bool_switch(&o.json), "print one JSON object instead of the table")(
      "record", po::value<std::string>(&o.record_path),
      "rank 0 also writes that JSON object to FILE (RUN/commcheck.json, `ftrain paths RUN "
      "--get commcheck`, is where `ftrain report` looks for the link's bandwidth; exit 3 if it "
      "cannot be written)")("no-groups", "skip the intra-node and inter-node group checks")(
      "backend", po::value<std::string>(&backend)->default_value(backend),
      "gloo (CPU tensors) or nccl (CUDA tensors on GPU local_rank; needs ftrain built with "
      "NCCL against a CUDA LibTorch, see scripts/gpu-smoke.sh)")(
      "rdzv-timeout", po::value<int>(&rdzv_timeout),
      "seconds to wait for all ranks (default 300, or FTRAIN_RDZV_TIMEOUT)")(
      "inject-fault", po::value<std::string>(&o.inject_fault),
      "RANK:COLLECTIVE: corrupt that rank's result (to test the checker itself)");
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, po::positional_options_description(), &vm);
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts;
    return kExitOk;
  }
  if (o.iters < 1 || o.warmup < 0) {
    return Fail(program, Status::InvalidArgument("--iters must be >= 1 and --warmup >= 0"));
  }
  o.check_groups = !vm.count("no-groups");
  std::stringstream ss(sizes_text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t b;
    if (!comm::ParseByteSize(item, &b)) {
      return Fail(program, Status::InvalidArgument("--sizes: '" + item +
                                                   "' is not a positive size like 4096, 64K, 1M"));
    }
    o.sizes_bytes.push_back(b);
  }
  if (o.sizes_bytes.empty()) return Fail(program, Status::InvalidArgument("--sizes is empty"));

  auto dopts = comm::DistOptionsFromEnv(comm::DistOptions());
  if (!dopts.ok()) return Fail(program, dopts.status());
  if (vm.count("rdzv-timeout")) {
    if (rdzv_timeout <= 0)
      return Fail(program, Status::InvalidArgument("--rdzv-timeout must be > 0"));
    dopts->rdzv_timeout_s = rdzv_timeout;
  }
  if (backend != "gloo" && backend != "nccl") {
    return Fail(program,
                Status::InvalidArgument("--backend '" + backend + "' is not gloo or nccl"));
  }
  if (backend == "nccl" && !torch::cuda::is_available()) {
    return Fail(program, Status::FailedPrecondition(
                             "--backend nccl needs CUDA tensors, but this LibTorch sees no CUDA "
                             "device (CPU-only LibTorch, or no GPU); build against a CUDA LibTorch "
                             "on a GPU machine (scripts/gpu-smoke.sh)"));
  }
  dopts->backend = backend;
  if (backend == "nccl") {
    // The GPU Slurm bound to this task: with --gpus-per-task=1 (or CUDA_VISIBLE_DEVICES set per
    // rank) the only visible device is 0 whatever the local rank; otherwise the local rank's,
    // as the trainer chooses (train/device/device.cc).
    auto gpu = train::ChooseDevice(train::Device::kCuda, 0);
    if (!gpu.ok()) return Fail(program, gpu.status());
    dopts->cuda_device = gpu->cuda_index;
    o.device = "cuda:" + std::to_string(gpu->cuda_index);
  }
  auto ctx = comm::DistContext::Init(*dopts);
  if (!ctx.ok()) return Fail(program, ctx.status());
  Status record_error;
  Status r = comm::RunCommcheck(**ctx, o, std::cout, nullptr, &record_error);
  if (!r.ok()) {
    FT_LOG(Error) << r.message();
    return ExitCodeFor(r);
  }
  if (!record_error.ok()) {
    // Its own code: slurm/train.sh's pre-flight must not blame the network for a run directory
    // it cannot write.
    FT_LOG(Error) << record_error.message() << " (exit " << kExitRecordNotWritten << ")";
    return kExitRecordNotWritten;
  }
  return kExitOk;
}

}  // namespace ftrain::cli
