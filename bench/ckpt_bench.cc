// ckpt_bench: checkpoint write/read/verify throughput for one rank's state, next to the limits
// measured in the same run: plain write()+fsync of the same bytes (raw disk limit), plain
// sequential read, single-thread zstd throughput, and LibTorch's torch::save.
//
// State generator (documented in docs/performance.md): P parameters in tensors shaped like a
// Llama's; fp32 master weights ~ N(0, 0.02); bf16 model weights = master rounded; AdamW
// moments as after warm-up: exp_avg ~ N(0, 1e-4), exp_avg_sq = exp_avg^2 * U(0.5, 2) + 1e-12.
// 14 bytes per parameter (bf16 2 + master 4 + two moments 8).
//
// The "load" columns are what resume does: every tensor read back through CheckpointReader,
// with each piece hashed and compared with the manifest as it is read (verified) and without
// (the comparison switched off), on the same checkpoint: the cost of verification.
//
// usage: ckpt_bench [--gb 2] [--dir /var/tmp/ftrain-bench] [--threads N] [--cold]
// Prints a table; never passes or fails on timing.
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "ckpt/verify.h"
#include "core/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void DropCaches(bool cold) {
  if (!cold) return;
  sync();
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd >= 0) {
    if (write(fd, "3", 1) != 1) std::fprintf(stderr, "drop_caches failed\n");
    close(fd);
  }
}

struct State {
  std::vector<std::pair<std::string, at::Tensor>> bf16, master, m, v;
  uint64_t bytes = 0;
};

State MakeState(double gb) {
  const int64_t params = static_cast<int64_t>(gb * 1e9 / 14);
  const int64_t hidden = 2048;
  State s;
  torch::manual_seed(0);
  int64_t left = params;
  int layer = 0;
  while (left > 0) {
    // One layer's worth of matrices: q,k,v,o (h x h), gate/up/down (h x 4h)... as 3 tensors.
    for (auto [name, rows] : std::vector<std::pair<std::string, int64_t>>{
             {"self_attn.qkvo", 4 * hidden}, {"mlp.gate_up", 2 * 5504}, {"mlp.down", 5504}}) {
      int64_t n = std::min(left, rows * hidden);
      if (n <= 0) break;
      std::string full = "model.layers." + std::to_string(layer) + "." + name + ".weight";
      auto w = torch::randn({n}) * 0.02;
      auto m = torch::randn({n}) * 1e-4;
      auto v = m * m * (torch::rand({n}) * 1.5 + 0.5) + 1e-12;
      s.master.push_back({full, w});
      s.bf16.push_back({full, w.to(torch::kBFloat16)});
      s.m.push_back({full, m});
      s.v.push_back({full, v});
      left -= n;
    }
    ++layer;
  }
  s.bytes = static_cast<uint64_t>(params) * 14;
  return s;
}

ftrain::ckpt::ShardContents Contents(const State& s) {
  ftrain::ckpt::ShardContents c;
  auto add = [&](const std::vector<std::pair<std::string, at::Tensor>>& v, const char* kind,
                 ftrain::ckpt::DType dt) {
    for (const auto& [name, t] : v) {
      ftrain::ckpt::TensorShardRef r;
      r.kind = kind;
      r.name = name;
      r.dtype = dt;
      r.shape = {t.numel()};
      r.offset = 0;
      r.length = t.numel();
      r.data = t.data_ptr();
      c.tensors.push_back(r);
    }
  };
  add(s.bf16, "model", ftrain::ckpt::DType::kBFloat16);
  add(s.master, "master", ftrain::ckpt::DType::kFloat32);
  add(s.m, "optim/exp_avg", ftrain::ckpt::DType::kFloat32);
  add(s.v, "optim/exp_avg_sq", ftrain::ckpt::DType::kFloat32);
  c.blobs.push_back({"train", "state", "replicated", "{\"step\":1}"});
  return c;
}

double RawWrite(const std::string& path, const ftrain::ckpt::ShardContents& c) {
  auto t0 = Clock::now();
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (const auto& t : c.tensors) {
    const char* p = static_cast<const char*>(t.data);
    size_t n = static_cast<size_t>(t.length) * ftrain::ckpt::DTypeSize(t.dtype);
    while (n > 0) {
      ssize_t w = write(fd, p, n);
      if (w <= 0) {
        std::perror("write");
        std::exit(1);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  fsync(fd);
  close(fd);
  return Since(t0);
}

double RawRead(const std::string& path) {
  auto t0 = Clock::now();
  int fd = open(path.c_str(), O_RDONLY);
  std::vector<char> buf(8 << 20);
  while (read(fd, buf.data(), buf.size()) > 0) {
  }
  close(fd);
  return Since(t0);
}

double ZstdSingleThreadMBs(const ftrain::ckpt::ShardContents& c, int level) {
  // Compress the first 256 MB of master weights (shuffled like the writer does) on one thread.
  const auto& t = c.tensors[c.tensors.size() / 4];
  size_t n = std::min<size_t>(static_cast<size_t>(t.length) * 4, 256u << 20);
  std::vector<char> out(ZSTD_compressBound(4u << 20));
  auto t0 = Clock::now();
  size_t done = 0;
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  while (done < n) {
    size_t chunk = std::min<size_t>(4u << 20, n - done);
    ZSTD_compressCCtx(cctx, out.data(), out.size(), static_cast<const char*>(t.data) + done, chunk,
                      level);
    done += chunk;
  }
  ZSTD_freeCCtx(cctx);
  return n / Since(t0) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  double gb = 2.0;
  std::string dir = "/var/tmp/ftrain-bench";
  int threads = ftrain::DefaultThreads();
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--gb" && i + 1 < argc)
      gb = std::atof(argv[++i]);
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--cold")
      cold = true;
    else {
      std::fprintf(stderr, "usage: ckpt_bench [--gb G] [--dir D] [--threads N] [--cold]\n");
      return 2;
    }
  }
  torch::set_num_threads(1);
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  std::printf("# ckpt_bench: %.2f GB rank state, %d threads, dir %s%s\n", gb, threads, dir.c_str(),
              cold ? ", cold reads (page cache dropped)" : ", reads from page cache");
  State state = MakeState(gb);
  auto contents = Contents(state);
  const double mb = state.bytes / 1e6;

  const std::string raw_path = dir + "/raw.bin";
  double raw_w = RawWrite(raw_path, contents);
  DropCaches(cold);
  double raw_r = RawRead(raw_path);
  std::printf("raw write+fsync   %8.0f MB/s  (the disk limit for this state)\n", mb / raw_w);
  std::printf("raw read          %8.0f MB/s\n", mb / raw_r);
  const double z1 = ZstdSingleThreadMBs(contents, 1);
  std::printf("zstd -1, 1 thread %8.0f MB/s  x %d cores = %.0f MB/s\n", z1, threads, z1 * threads);
  std::remove(raw_path.c_str());

  std::printf("\n%-22s %9s %9s %8s %9s %9s %9s %9s %7s\n", "ftrain checkpoint", "write", "vs_limit",
              "ratio", "verify", "vs_read", "load", "load-nv", "v.cost");
  for (int level : {0, 1, 3}) {
    for (bool shuffle : {false, true}) {
      if (level == 0 && shuffle) continue;
      const std::string root = dir + "/ckpt";
      std::system(("rm -rf '" + root + "'").c_str());
      ftrain::ckpt::CheckpointStore store(root, ftrain::Env::Default());
      ftrain::ckpt::CheckpointMeta meta;
      meta.step = 1;
      meta.world_size = 1;
      ftrain::ckpt::WriteOptions o;
      o.zstd_level = level;
      o.shuffle = shuffle;
      o.threads = threads;
      auto t0 = Clock::now();
      auto receipt = store.WriteShard(meta, 0, contents, o);
      if (!receipt.ok()) {
        std::fprintf(stderr, "%s\n", receipt.status().ToString().c_str());
        return 1;
      }
      auto outcome = store.TryCommit(meta);
      if (!outcome.ok()) return 1;
      const double w = Since(t0);
      std::map<std::string, std::pair<uint64_t, uint64_t>> per_kind;
      for (const auto& d : receipt->info.datasets) {
        per_kind[d.kind].first +=
            static_cast<uint64_t>(d.length) * ftrain::ckpt::DTypeSize(d.dtype);
        per_kind[d.kind].second += d.stored_bytes;
      }
      DropCaches(cold);
      auto rep =
          ftrain::ckpt::VerifyCheckpoint(root + "/step-00000001", threads, ftrain::Env::Default());
      const double limit = level == 0 ? mb / raw_w : std::min(mb / raw_w, z1 * threads);
      char label[64];
      std::snprintf(label, sizeof(label), "zstd %d%s", level,
                    level == 0 ? " (none)"
                    : shuffle  ? " +shuffle"
                               : "");
      // Resume's load, verified and not, best of two each (same checkpoint, same cache state).
      double load_s[2] = {1e30, 1e30};
      for (int rep_i = 0; rep_i < 2; ++rep_i) {
        for (int v = 0; v < 2; ++v) {
          DropCaches(cold);
          auto reader =
              ftrain::ckpt::CheckpointReader::Open(root + "/step-00000001", ftrain::Env::Default());
          if (!reader.ok()) return 1;
          (*reader)->set_verify_for_benchmark(v == 0);
          (*reader)->set_read_threads(threads);
          std::vector<uint8_t> buf;
          auto t1 = Clock::now();
          for (const auto& t : (*reader)->manifest().tensors) {
            if (!(*reader)->ReadTensor(t.kind, t.name, &buf).ok()) return 1;
          }
          load_s[v] = std::min(load_s[v], Since(t1));
        }
      }
      std::printf(
          "%-22s %6.0f MB/s %8.0f%% %8.3f %6.0f MB/s %7.0f%% %4.0f MB/s %4.0f MB/s %6.1f%%  ",
          label, mb / w, 100.0 * (mb / w) / limit,
          double(receipt->info.raw_bytes) / receipt->info.stored_bytes, mb / rep.seconds,
          100.0 * (mb / rep.seconds) / (mb / raw_r), mb / load_s[0], mb / load_s[1],
          100.0 * (load_s[0] - load_s[1]) / load_s[1]);
      for (const auto& [kind, b] : per_kind) {
        std::printf("%s %.3f  ", kind.c_str(), double(b.first) / b.second);
      }
      std::printf("%s\n", rep.ok() ? "" : "VERIFY FAILED");
    }
  }
  // torch::save of the same tensors, then fsync.
  {
    const std::string path = dir + "/torch.pt";
    std::vector<at::Tensor> all;
    for (auto* v : {&state.bf16, &state.master, &state.m, &state.v}) {
      for (auto& [n, t] : *v) all.push_back(t);
    }
    auto t0 = Clock::now();
    torch::save(all, path);
    int fd = open(path.c_str(), O_RDONLY);
    fsync(fd);
    close(fd);
    std::printf("\ntorch::save+fsync %8.0f MB/s\n", mb / Since(t0));
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  return 0;
}
