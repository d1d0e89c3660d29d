// A torch-free stand-in for a trainer rank that checkpoints through ckptd: fills slots with
// the synthetic state of ckpt_fixture.h and submits the given steps. Used by ckptd_test.
//   ckptd_fake_trainer RUN_DIR NODE RANK WORLD STEPS [--scale S] [--kill-after-submit]
//                      [--restore]
// STEPS is a comma-separated list (may be "-": none). Exit 0 when every submit was accepted,
// 1 otherwise. --restore first asks for the rank's newest in-memory snapshot and checks every
// byte against the fixture state of that step: prints "restored step N", exit 3 when the
// daemon holds none, 4 when a byte differs.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/ckptd_client.h"
#include "ckpt_fixture.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: ckptd_fake_trainer RUN_DIR NODE RANK WORLD STEPS [--scale S] "
                 "[--kill-after-submit]\n");
    return 2;
  }
  const std::string run_dir = argv[1], node = argv[2];
  const int rank = std::atoi(argv[3]), world = std::atoi(argv[4]);
  std::vector<int64_t> steps;
  std::stringstream ss(argv[5]);
  for (std::string t; std::getline(ss, t, ',');) {
    if (t != "-") steps.push_back(std::atoll(t.c_str()));
  }
  int64_t scale = 1;
  bool kill_after = false, restore = false;
  for (int i = 6; i < argc; ++i) {
    if (std::strcmp(argv[i], "--restore") == 0) restore = true;
    if (std::strcmp(argv[i], "--scale") == 0 && i + 1 < argc) scale = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--kill-after-submit") == 0) kill_after = true;
  }
  using ftrain::testing::RankState;
  const uint64_t slot_bytes =
      ftrain::ckpt::SlotBytesFor(RankState(0, rank, world, scale).contents());
  auto client = ftrain::ckpt::CkptdClient::Connect(run_dir, node, rank, world, slot_bytes);
  if (!client.ok()) {
    std::fprintf(stderr, "fake trainer rank %d: %s\n", rank, client.status().ToString().c_str());
    return 1;
  }
  if (restore) {
    auto snap = (*client)->Restore();
    if (!snap.ok()) {
      std::fprintf(stderr, "restore: %s\n", snap.status().ToString().c_str());
      return 1;
    }
    if (!snap->has_value()) {
      std::printf("no snapshot in memory\n");
      return 3;
    }
    const auto& sub = (*snap)->submit;
    RankState want(sub.step, rank, world, scale);
    const auto contents = want.contents();
    size_t t = 0, b = 0;
    for (const auto& p : sub.pieces) {
      const uint8_t* got = (*snap)->base + p.slot_offset;
      bool same = false;
      if (!p.is_blob && t < contents.tensors.size()) {
        const auto& w = contents.tensors[t++];
        same = w.name == p.name && w.length == p.length &&
               std::memcmp(got, w.data, p.length * ftrain::ckpt::DTypeSize(p.dtype)) == 0;
      } else if (p.is_blob && b < contents.blobs.size()) {
        const auto& w = contents.blobs[b++];
        same = w.name == p.name && w.bytes.size() == static_cast<size_t>(p.length) &&
               std::memcmp(got, w.bytes.data(), w.bytes.size()) == 0;
      }
      if (!same) {
        std::printf("restored step %lld: piece %s differs\n", static_cast<long long>(sub.step),
                    p.name.c_str());
        return 4;
      }
    }
    std::printf("restored step %lld (%zu pieces)\n", static_cast<long long>(sub.step),
                sub.pieces.size());
    std::fflush(stdout);
  }
  for (int64_t step : steps) {
    RankState state(step, rank, world, scale);
    auto st = (*client)->Submit(ftrain::testing::FixtureMeta(step, world), state.contents());
    if (!st.ok()) {
      std::fprintf(stderr, "fake trainer rank %d step %lld: %s\n", rank,
                   static_cast<long long>(step), st.status().ToString().c_str());
      return 1;
    }
    std::printf("rank %d submitted step %lld bytes=%llu stall_s=%.6f wait_s=%.6f\n", rank,
                static_cast<long long>(step), static_cast<unsigned long long>(st->bytes),
                st->stall_s(), st->wait_s);
    std::fflush(stdout);
  }
  if (kill_after) ::raise(SIGKILL);
  return 0;
}
