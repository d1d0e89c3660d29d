// Test helper: a real checkpoint writer process for crash tests. Recovers the root, then
// saves steps FIRST..LAST (world W, synthetic state) with rotation keep 2, printing each
// committed step. Run with FTRAIN_CRASH_AT=N to be SIGKILLed before its Nth file-system
// operation, or kill it from outside at any time.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/store.h"
#include "ckpt_fixture.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: ckpt_crash_writer ROOT FIRST LAST WORLD SCALE\n");
    return 2;
  }
  const std::string root = argv[1];
  const int64_t first = std::atoll(argv[2]), last = std::atoll(argv[3]);
  const int world = std::atoi(argv[4]);
  const int64_t scale = std::atoll(argv[5]);
  ftrain::ckpt::CheckpointStore store(root, ftrain::Env::Default());
  ftrain::Status s = store.Recover();
  if (!s.ok()) {
    std::fprintf(stderr, "recover: %s\n", s.ToString().c_str());
    return 1;
  }
  ftrain::ckpt::WriteOptions o;
  o.zstd_level = 1;
  o.chunk_bytes = 64 << 10;
  for (int64_t step = first; step <= last; ++step) {
    s = ftrain::testing::SaveFixture(&store, step, world, o, scale);
    if (!s.ok()) {
      std::fprintf(stderr, "save %lld: %s\n", static_cast<long long>(step), s.ToString().c_str());
      return 1;
    }
    auto rotated = store.Rotate({2, 0});
    if (!rotated.ok()) {
      std::fprintf(stderr, "rotate: %s\n", rotated.status().ToString().c_str());
      return 1;
    }
    std::printf("committed %lld\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
  return 0;
}
