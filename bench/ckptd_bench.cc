// ckptd_bench: the trainer-visible stall of a checkpoint through ckptd (wait for a slot + copy
// into shared memory + SUBMIT) next to, in the same run and for the same bytes: a plain
// memcpy into a pre-touched buffer (the floor) and a synchronous CheckpointStore::WriteShard
// (the path the trainer uses without the daemon), torch::save + fsync of the same tensors, and
// a raw write()+fsync of the same bytes (the disk limit); plus the daemon's persist
// throughput against that limit. Starts its own build/bin/ckptd. Never passes/fails on timing.
//
// State: `--mb` MB of one rank's shard: bf16 model (2 B/param), fp32 master (4), AdamW moments
// (4 + 4); master ~ small smooth values with noise in the low mantissa bits (compresses ~like
// real weights, not like zeros).
// usage: ckptd_bench [--mb 512] [--dir /var/tmp/ftrain-ckptd-bench] [--threads 2] [--nice 10]
// [--reps 3]
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckptd_client.h"
#include "ckpt/store.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mb = 512;
  int reps = 3, threads = 2, nice = 10;
  std::string dir = "/var/tmp/ftrain-ckptd-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::atoll(argv[i + 1]);
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    if (a == "--nice") nice = std::atoi(argv[i + 1]);
  }
  // Shell, not std::filesystem: LibTorch 2.11 (linked here) exports a crashing copy of it.
  if (std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "/run'").c_str()) != 0) return 2;

  // State: P params, 14 bytes each.
  const int64_t params = mb * 1000000 / 14;
  std::vector<float> master(params), m1(params), m2(params);
  std::vector<uint16_t> model(params);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 0.02f);
  for (int64_t i = 0; i < params; ++i) {
    master[i] = nd(rng);
    uint32_t b;
    std::memcpy(&b, &master[i], 4);
    model[i] = static_cast<uint16_t>(b >> 16);
    m1[i] = master[i] * 5e-3f;
    m2[i] = m1[i] * m1[i] + 1e-12f;
  }
  ftrain::ckpt::ShardContents c;
  auto add = [&](const char* kind, ftrain::ckpt::DType dt, const void* p) {
    c.tensors.push_back({kind, "model.layers.0.mlp.up_proj.weight", dt, {params}, 0, params, p});
  };
  add("model", ftrain::ckpt::DType::kBFloat16, model.data());
  add("master", ftrain::ckpt::DType::kFloat32, master.data());
  add("optim/exp_avg", ftrain::ckpt::DType::kFloat32, m1.data());
  add("optim/exp_avg_sq", ftrain::ckpt::DType::kFloat32, m2.data());
  c.blobs.push_back({"train", "state", "replicated", "{\"global_step\":1}"});
  const uint64_t bytes = ftrain::ckpt::SlotBytesFor(c);

  // 1. Plain memcpy into a pre-touched buffer of the same size.
  std::vector<uint8_t> dst(bytes, 1);
  std::vector<double> memcpy_s;
  for (int r = 0; r < reps; ++r) {
    auto t = Clock::now();
    uint64_t off = 0;
    for (const auto& t2 : c.tensors) {
      const size_t n = static_cast<size_t>(t2.length) * ftrain::ckpt::DTypeSize(t2.dtype);
      std::memcpy(dst.data() + off, t2.data, n);
      off += (n + 63) & ~size_t{63};
    }
    memcpy_s.push_back(Since(t));
  }

  // 2. Synchronous WriteShard + commit through the library.
  std::vector<double> sync_s;
  {
    ftrain::ckpt::CheckpointStore store(dir + "/sync", ftrain::Env::Default());
    for (int r = 0; r < reps; ++r) {
      ftrain::ckpt::CheckpointMeta meta;
      meta.step = r + 1;
      meta.world_size = 1;
      ftrain::ckpt::WriteOptions wo;
      wo.threads = threads;
      auto t = Clock::now();
      auto rec = store.WriteShard(meta, 0, c, wo);
      auto out = store.TryCommit(meta);
      sync_s.push_back(Since(t));
      if (!rec.ok() || !out.ok()) {
        std::fprintf(stderr, "sync write failed\n");
        return 1;
      }
    }
  }

  // 2b. torch::save of the same tensors (+ fsync), and a raw write()+fsync of the same bytes.
  std::vector<double> torch_s, raw_s;
  for (int r = 0; r < reps; ++r) {
    std::vector<torch::Tensor> all;
    for (const auto& t : c.tensors) {
      all.push_back(torch::from_blob(
          const_cast<void*>(t.data), {t.length},
          t.dtype == ftrain::ckpt::DType::kBFloat16 ? torch::kBFloat16 : torch::kFloat32));
    }
    const std::string path = dir + "/torch.pt";
    auto t = Clock::now();
    torch::save(all, path);
    int fd = ::open(path.c_str(), O_RDONLY);
    ::fsync(fd);
    ::close(fd);
    torch_s.push_back(Since(t));
    std::remove(path.c_str());

    const std::string raw = dir + "/raw.bin";
    t = Clock::now();
    fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (const auto& tt : c.tensors) {
      const char* p = static_cast<const char*>(tt.data);
      size_t n = static_cast<size_t>(tt.length) * ftrain::ckpt::DTypeSize(tt.dtype);
      while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w <= 0) {
          std::perror("write");
          return 1;
        }
        p += w;
        n -= static_cast<size_t>(w);
      }
    }
    ::fsync(fd);
    ::close(fd);
    raw_s.push_back(Since(t));
    std::remove(raw.c_str());
  }

  // 3. ckptd.
  const std::string bin = std::string(FTRAIN_BIN_DIR) + "/ckptd";
  pid_t d = fork();
  if (d == 0) {
    execl(bin.c_str(), bin.c_str(), "--root", (dir + "/ckpt").c_str(), "--run-dir",
          (dir + "/run").c_str(), "--node", "bench", "--threads", std::to_string(threads).c_str(),
          "--nice", std::to_string(nice).c_str(), "--keep", "2", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::unique_ptr<ftrain::ckpt::CkptdClient> client;
  for (int i = 0; i < 200 && !client; ++i) {
    auto cl = ftrain::ckpt::CkptdClient::Connect(dir + "/run", "bench", 0, 1, bytes);
    if (cl.ok())
      client = std::move(cl).value();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (!client) {
    std::fprintf(stderr, "ckptd did not start\n");
    return 1;
  }
  std::vector<double> stall_s, copy_s, persist_wall;
  double first_touch = 0;
  // Two warm-up submits touch both slots' pages (first-touch page faults are a one-time cost
  // of a daemon's life, reported separately).
  for (int r = 0; r < reps + 2; ++r) {
    ftrain::ckpt::CheckpointMeta meta;
    meta.step = r + 1;
    meta.world_size = 1;
    auto st = client->Submit(meta, c);
    if (!st.ok()) {
      std::fprintf(stderr, "submit: %s\n", st.status().ToString().c_str());
      return 1;
    }
    auto t = Clock::now();
    for (;;) {  // wait until persisted so the next stall is the copy, not backpressure
      auto js = nlohmann::json::parse(*client->StatusJson());
      if (js["last_persisted_step"].get<int64_t>() >= meta.step) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (r < 2) {
      first_touch = std::max(first_touch, st->stall_s());
      continue;
    }
    stall_s.push_back(st->stall_s());
    copy_s.push_back(st->copy_s);
    persist_wall.push_back(Since(t) + st->send_s);
  }
  auto js = nlohmann::json::parse(*client->StatusJson());
  client.reset();
  kill(d, SIGTERM);
  waitpid(d, nullptr, 0);

  const double mem = Median(memcpy_s), sync = Median(sync_s), stall = Median(stall_s);
  std::printf("ckptd_bench: %.0f MB per rank (%lld params), %d reps, threads %d, nice %d\n",
              bytes / 1e6, static_cast<long long>(params), reps, threads, nice);
  std::printf("  plain memcpy (pre-touched)     %8.3f s  %7.0f MB/s\n", mem, bytes / mem / 1e6);
  std::printf("  ckptd stall (slot+copy+SUBMIT) %8.3f s  = %.2fx memcpy, %.1f%% of sync\n", stall,
              stall / mem, 100 * stall / sync);
  std::printf("  ckptd first stall (cold slots) %8.3f s\n", first_touch);
  std::printf("  synchronous WriteShard+commit  %8.3f s  %7.0f MB/s\n", sync, bytes / sync / 1e6);
  const double ts = Median(torch_s), raw = Median(raw_s);
  std::printf(
      "  torch::save + fsync            %8.3f s  %7.0f MB/s  (ckptd stall = %.1f%% of it)\n", ts,
      bytes / ts / 1e6, 100 * stall / ts);
  std::printf("  raw write()+fsync (disk limit) %8.3f s  %7.0f MB/s\n", raw, bytes / raw / 1e6);
  const double pw = Median(persist_wall);
  std::printf(
      "  ckptd persist (daemon)         %8.3f s  %7.0f MB/s wall after SUBMIT = %.0f%% of the raw "
      "disk limit; daemon says %.0f MB/s, ratio %.2f\n",
      pw, bytes / pw / 1e6, 100 * raw / pw, js["throughput_mb_s"].get<double>(),
      js["compression_ratio"].get<double>());
  if (std::system(("rm -rf '" + dir + "'").c_str()) != 0) return 1;
  return 0;
}
