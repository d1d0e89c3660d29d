// data_bench: reader throughput against the raw sequential read of the same shard files in the
// same run (the limit), warm (page cache) and cold (pages dropped with posix_fadvise), and the
// consumer's wait per batch with a fixed-time consumer for several prefetch depths. Prints one
// JSON object per measurement; never passes or fails. Driver: bench/data_bench.sh.
//   data_bench [--dir D] [--gb 2] [--seq-len 2048] [--micro-batch 8] [--consumer-ms 0.5]
//              [--io-threads 4]
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "data/format/synthetic.h"
#include "data/read/dataset.h"
#include "data/read/reader.h"

namespace {

using Clock = std::chrono::steady_clock;
using ftrain::data::TokenReader;

// User + system CPU seconds of the whole process so far (all threads).
double CpuSeconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<std::string> ShardPaths(const std::string& dir, const ftrain::data::DatasetIndex& x) {
  std::vector<std::string> out;
  for (const auto& s : x.shards) out.push_back(dir + "/" + s.name);
  return out;
}

// Drops the files' clean pages from the page cache (no root needed).
void DropCache(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Sequential read of every file with 4 MiB reads: the limit a reader can approach.
double RawRead(const std::vector<std::string>& paths, uint64_t* bytes) {
  std::vector<char> buf(4 << 20);
  *bytes = 0;
  auto t0 = Clock::now();
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) *bytes += uint64_t(n);
    ::close(fd);
  }
  return Since(t0);
}

struct EpochResult {
  double seconds = 0, cpu_seconds = 0;
  uint64_t rows = 0, tokens = 0, bytes_delivered = 0, bytes_read = 0;
};

EpochResult ReadEpoch(const ftrain::data::ReaderOptions& o, uint64_t steps) {
  EpochResult r;
  auto reader = TokenReader::Open(o, nullptr);
  if (!reader.ok()) {
    std::fprintf(stderr, "open: %s\n", reader.status().ToString().c_str());
    std::exit(1);
  }
  const auto& x = (*reader)->index();
  auto t0 = Clock::now();
  const double cpu0 = CpuSeconds();
  for (uint64_t i = 0; i < steps; ++i) {
    auto b = (*reader)->Next();
    if (!b.ok()) {
      std::fprintf(stderr, "next: %s\n", b.status().ToString().c_str());
      std::exit(1);
    }
    r.rows += uint64_t(b->rows);
    r.tokens += b->tokens.size();
  }
  r.seconds = Since(t0);
  r.cpu_seconds = CpuSeconds() - cpu0;
  r.bytes_delivered = r.rows * x.row_bytes();
  r.bytes_read = (*reader)->stats().bytes_read;
  return r;
}

void PrintEpoch(const char* name, const char* cache, int world, int depth, const EpochResult& r,
                double raw_gbps) {
  double gbps = r.bytes_delivered / r.seconds / 1e9;
  std::printf(
      "{\"bench\":\"%s\",\"cache\":\"%s\",\"dp_size\":%d,\"prefetch\":%d,\"rows\":%llu,"
      "\"seconds\":%.3f,\"cpu_s\":%.3f,\"tokens_per_s\":%.4g,\"delivered_gbps\":%.3f,\"read_gbps\":"
      "%.3f,"
      "\"raw_gbps\":%.3f,\"fraction_of_raw\":%.3f}\n",
      name, cache, world, depth, (unsigned long long)r.rows, r.seconds, r.cpu_seconds,
      r.tokens / r.seconds, gbps, r.bytes_read / r.seconds / 1e9, raw_gbps, gbps / raw_gbps);
  std::fflush(stdout);
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/ftrain-data-bench";
  double gb = 2;
  uint32_t seq_len = 2048;
  int mb = 8;
  double consumer_ms = 0.5;
  int io_threads = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir")
      dir = v;
    else if (k == "--gb")
      gb = std::atof(v.c_str());
    else if (k == "--seq-len")
      seq_len = uint32_t(std::atoi(v.c_str()));
    else if (k == "--micro-batch")
      mb = std::atoi(v.c_str());
    else if (k == "--consumer-ms")
      consumer_ms = std::atof(v.c_str());
  }
  ftrain::data::SyntheticSpec spec;
  spec.seq_len = seq_len;
  spec.token_bytes = 2;
  const uint64_t row_bytes = (uint64_t(seq_len) + 1) * 2;
  spec.chunk_rows = uint32_t(std::max<uint64_t>(1, (1 << 20) / row_bytes));
  spec.rows_per_shard = (256ull << 20) / row_bytes;
  spec.num_rows = uint64_t(gb * 1e9) / row_bytes;
  auto existing = ftrain::data::Dataset::Open(dir, ftrain::Env::Default());
  if (!existing.ok() || (*existing)->index().num_rows != spec.num_rows ||
      (*existing)->index().seq_len != seq_len) {
    std::string rm = "rm -rf '" + dir + "'";
    if (std::system(rm.c_str()) != 0) return 1;
    auto t0 = Clock::now();
    auto x = ftrain::data::WriteSyntheticDataset(dir, spec, ftrain::Env::Default());
    if (!x.ok()) {
      std::fprintf(stderr, "%s\n", x.status().ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "data_bench: wrote %.2f GB in %.1f s to %s\n",
                 spec.num_rows * row_bytes / 1e9, Since(t0), dir.c_str());
  }
  auto ds = ftrain::data::Dataset::Open(dir, ftrain::Env::Default());
  const auto& x = (*ds)->index();
  const auto paths = ShardPaths(dir, x);
  std::printf(
      "{\"bench\":\"dataset\",\"dir\":\"%s\",\"rows\":%llu,\"seq_len\":%u,"
      "\"gb\":%.3f,\"shards\":%zu,\"chunk_rows\":%u,\"micro_batch\":%d,\"cores\":%u}\n",
      dir.c_str(), (unsigned long long)x.num_rows, x.seq_len, x.num_rows * x.row_bytes() / 1e9,
      x.shards.size(), x.chunk_rows, mb, std::thread::hardware_concurrency());

  ftrain::data::ReaderOptions o;
  o.env = ftrain::Env::Default();
  o.source = dir;
  o.seed = 1;
  o.micro_batch = mb;
  o.prefetch_depth = 4;
  o.io_threads = io_threads;
  const uint64_t steps = x.num_rows / uint64_t(mb);
  uint64_t bytes = 0;

  // Warm: the files are in the page cache (read twice; the second read is timed).
  RawRead(paths, &bytes);
  double raw_warm = bytes / RawRead(paths, &bytes) / 1e9;
  std::printf("{\"bench\":\"raw_sequential_read\",\"cache\":\"warm\",\"gbps\":%.3f}\n", raw_warm);
  for (int depth : {4, 0}) {
    o.prefetch_depth = depth;
    PrintEpoch("reader_epoch", "warm", 1, depth, ReadEpoch(o, steps), raw_warm);
  }
  o.prefetch_depth = 4;
  o.dp_size = 4;  // rank 0 of 4: a quarter of the rows, whole chunks read
  PrintEpoch("reader_epoch", "warm", 4, 4, ReadEpoch(o, steps / 4), raw_warm);
  o.dp_size = 1;

  // Cold: pages dropped before each run.
  DropCache(paths);
  double raw_cold = bytes / RawRead(paths, &bytes) / 1e9;
  std::printf("{\"bench\":\"raw_sequential_read\",\"cache\":\"cold\",\"gbps\":%.3f}\n", raw_cold);
  DropCache(paths);
  PrintEpoch("reader_epoch", "cold", 1, 4, ReadEpoch(o, steps), raw_cold);

  // Prefetch: a consumer that takes consumer_ms per batch; the wait in Next() per batch.
  for (int depth : {0, 1, 4, 16}) {
    DropCache(paths);
    o.prefetch_depth = depth;
    auto reader = TokenReader::Open(o, nullptr);
    std::vector<double> waits;
    const int batches = 6000, warmup = 50;  // ~6 windows of 32 MiB at L=2048, mb=8
    for (int i = 0; i < batches; ++i) {
      auto t0 = Clock::now();
      auto b = (*reader)->Next();
      double w = Since(t0);
      if (!b.ok()) return 1;
      if (i >= warmup) waits.push_back(w * 1e3);
      auto busy_until = Clock::now() + std::chrono::microseconds(int64_t(consumer_ms * 1000));
      std::this_thread::sleep_until(busy_until);
    }
    double total = 0;
    size_t over_1ms = 0;
    for (double w : waits) {
      total += w;
      over_1ms += w > 1.0;
    }
    std::printf(
        "{\"bench\":\"prefetch_wait\",\"cache\":\"cold\",\"prefetch\":%d,\"consumer_ms\":%.1f,"
        "\"batches\":%zu,\"wait_ms_p50\":%.4f,\"wait_ms_p95\":%.4f,\"wait_ms_max\":%.3f,"
        "\"wait_ms_mean\":%.4f,\"batches_waiting_over_1ms\":%zu}\n",
        depth, consumer_ms, waits.size(), Percentile(waits, 0.5), Percentile(waits, 0.95),
        Percentile(waits, 1.0), total / waits.size(), over_1ms);
    std::fflush(stdout);
  }
  return 0;
}
