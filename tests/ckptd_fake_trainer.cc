// A torch-free stand-in for a trainer rank that checkpoints through ckptd: fills slots with
// the synthetic state of ckpt_fixture.h and submits the given steps. Used by ckptd_test.
//   ckptd_fake_trainer RUN_DIR NODE RANK WORLD STEPS [--scale S] [--kill-after-submit]
//                      [--restore] [--fake-gpu] [--memory]
// --memory submits the steps as memory-tier snapshots (kept and replicated, never persisted);
// a restore also prints "digest=<hex>" (proto::SnapshotDigest of the restored bytes).
// STEPS is a comma-separated list (may be "-": none). Exit 0 when every submit was accepted,
// 1 otherwise. --restore first asks for the rank's newest in-memory snapshot and checks every
// byte against the fixture state of that step: prints "restored step N", exit 3 when the
// daemon holds none, 4 when a byte differs. --fake-gpu marks every tensor as device memory and
// hands the client a DeviceMemory that copies with memcpy (no GPU here): the routing a GPU
// rank uses (registration of the slots, copies straight into them) with host bytes; exit 5
// when a copy missed the registered slots. --fetch-peer STEP [--peer ADDR] first asks the
// daemon to pull this rank's replica of STEP from peer memory (prints "fetched step N from
// peer H:P bytes=B seconds=T MB/s=M", exit 6 when no peer holds it); --check-manifest ROOT
// checks the restored tensors against the committed manifest's XXH3 as the trainer's resume
// does (prints "manifest check: N pieces match", exit 7 on a mismatch).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/ckptd_client.h"
#include "ckpt/filename.h"
#include "ckpt/reader.h"
#include "ckpt_fixture.h"

namespace {

// The GPU path's DeviceMemory with memcpy instead of cudaMemcpyAsync (the name says fake).
class FakeGpuMemory : public ftrain::ckpt::DeviceMemory {
 public:
  void RegisterHost(void* p, size_t n) override { ranges_.push_back({p, n}); }
  void UnregisterHost(void* p) override {
    for (size_t i = 0; i < ranges_.size(); ++i) {
      if (ranges_[i].first == p) {
        ranges_.erase(ranges_.begin() + static_cast<std::ptrdiff_t>(i));
        ++unregistered_;
        return;
      }
    }
  }
  ftrain::Status WaitForCopies() override { return ftrain::Status::Ok(); }
  ftrain::Status OrderBeforeStateChanges() override { return ftrain::Status::Ok(); }
  ftrain::Status StartCopyToHost(const std::vector<ftrain::ckpt::DeviceCopy>& copies) override {
    for (const auto& c : copies) {
      bool inside = false;
      for (const auto& r : ranges_) {
        const auto* lo = static_cast<const uint8_t*>(r.first);
        const auto* d = static_cast<const uint8_t*>(c.dst);
        inside = inside || (d >= lo && d + c.n <= lo + r.second);
      }
      if (!inside) ++outside_;
      std::memcpy(c.dst, c.src, c.n);
      ++copies_;
    }
    return ftrain::Status::Ok();
  }
  size_t registered() const { return ranges_.size(); }
  int copies() const { return copies_; }
  int outside() const { return outside_; }
  int unregistered() const { return unregistered_; }

 private:
  std::vector<std::pair<void*, size_t>> ranges_;
  int copies_ = 0, outside_ = 0, unregistered_ = 0;
};

}  // namespace

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
  bool kill_after = false, restore = false, fake_gpu = false, memory = false;
  int64_t fetch_step = -1, restore_step = -1;
  std::string peer, manifest_root;
  for (int i = 6; i < argc; ++i) {
    if (std::strcmp(argv[i], "--restore") == 0) restore = true;
    if (std::strcmp(argv[i], "--restore-step") == 0 && i + 1 < argc) {
      restore = true;
      restore_step = std::atoll(argv[++i]);
    }
    if (std::strcmp(argv[i], "--scale") == 0 && i + 1 < argc) scale = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--kill-after-submit") == 0) kill_after = true;
    if (std::strcmp(argv[i], "--fake-gpu") == 0) fake_gpu = true;
    if (std::strcmp(argv[i], "--memory") == 0) memory = true;
    if (std::strcmp(argv[i], "--fetch-peer") == 0 && i + 1 < argc)
      fetch_step = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--peer") == 0 && i + 1 < argc) peer = argv[++i];
    if (std::strcmp(argv[i], "--check-manifest") == 0 && i + 1 < argc) manifest_root = argv[++i];
  }
  using ftrain::testing::RankState;
  const uint64_t slot_bytes =
      ftrain::ckpt::SlotBytesFor(RankState(0, rank, world, scale).contents());
  FakeGpuMemory gpu;
  auto client = ftrain::ckpt::CkptdClient::Connect(run_dir, node, rank, world, slot_bytes,
                                                   fake_gpu ? &gpu : nullptr);
  if (!client.ok()) {
    std::fprintf(stderr, "fake trainer rank %d: %s\n", rank, client.status().ToString().c_str());
    return 1;
  }
  if (fetch_step >= 0) {
    auto f = (*client)->FetchFromPeer(fetch_step, peer);
    if (!f.ok()) {
      std::fprintf(stderr, "fetch-peer: %s\n", f.status().ToString().c_str());
      return 1;
    }
    if (!f->found) {
      std::printf("not in peer memory: %s\n", f->detail.c_str());
      return 6;
    }
    std::printf("fetched step %lld from %s bytes=%llu seconds=%.6f MB/s=%.1f\n",
                static_cast<long long>(f->step), f->source.c_str(),
                static_cast<unsigned long long>(f->bytes), f->seconds, f->mb_per_s());
    std::fflush(stdout);
  }
  if (restore) {
    auto snap = (*client)->Restore(restore_step);
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
        same = w.kind == p.kind && w.name == p.name && w.length == p.length &&
               std::memcmp(got, w.data, p.length * ftrain::ckpt::DTypeSize(p.dtype)) == 0;
      } else if (p.is_blob && b < contents.blobs.size()) {
        const auto& w = contents.blobs[b++];
        same = w.group == p.kind && w.name == p.name &&
               w.bytes.size() == static_cast<size_t>(p.length) &&
               std::memcmp(got, w.bytes.data(), w.bytes.size()) == 0;
      }
      if (!same) {
        std::printf("restored step %lld: piece %s differs\n", static_cast<long long>(sub.step),
                    p.name.c_str());
        return 4;
      }
    }
    // Every piece the rank submitted, not only those that came back (an empty or truncated
    // snapshot is not a restore).
    if (t != contents.tensors.size() || b != contents.blobs.size() || sub.pieces.size() != t + b) {
      std::printf("restored step %lld: %zu of %zu tensors and %zu of %zu blobs\n",
                  static_cast<long long>(sub.step), t, contents.tensors.size(), b,
                  contents.blobs.size());
      return 4;
    }
    std::printf("restored step %lld (%zu pieces) digest=%016llx\n",
                static_cast<long long>(sub.step), sub.pieces.size(),
                static_cast<unsigned long long>(ftrain::ckpt::proto::SnapshotDigest(
                    ftrain::ckpt::proto::PieceHashes(sub, (*snap)->base))));
    std::fflush(stdout);
    if (!manifest_root.empty()) {
      // What resume does with an in-memory snapshot: each tensor piece only if its XXH3 is
      // the committed manifest's for this rank and slice.
      auto reader = ftrain::ckpt::CheckpointReader::Open(
          manifest_root + "/" + ftrain::ckpt::StepDirName(sub.step), ftrain::Env::Default());
      if (!reader.ok()) {
        std::fprintf(stderr, "manifest: %s\n", reader.status().ToString().c_str());
        return 7;
      }
      int matched = 0;
      for (const auto& p : sub.pieces) {
        if (p.is_blob) continue;
        const auto* t = (*reader)->manifest().FindTensor(p.kind, p.name);
        bool ok = false;
        for (const auto& mp : t != nullptr ? t->pieces : std::vector<ftrain::ckpt::TensorPiece>{}) {
          ok = ok || (mp.rank == rank && mp.offset == p.offset && mp.length == p.length &&
                      mp.xxh3 == ftrain::ckpt::Xxh3((*snap)->base + p.slot_offset,
                                                    p.length * ftrain::ckpt::DTypeSize(p.dtype)));
        }
        if (!ok) {
          std::printf("manifest check: piece %s/%s does not match\n", p.kind.c_str(),
                      p.name.c_str());
          return 7;
        }
        ++matched;
      }
      std::printf("manifest check: %d pieces match\n", matched);
    }
  }
  for (int64_t step : steps) {
    RankState state(step, rank, world, scale);
    ftrain::ckpt::ShardContents contents = state.contents();
    for (auto& t : contents.tensors) t.on_device = fake_gpu;
    auto st = [&]() -> ftrain::StatusOr<ftrain::ckpt::SubmitStats> {
      auto p = (*client)->BeginSubmit(ftrain::testing::FixtureMeta(step, world), contents);
      if (!p.ok()) return p.status();
      p->submit.memory_only = memory;
      return (*client)->FinishSubmit(std::move(*p));
    }();
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
  if (fake_gpu) {
    const size_t slots = gpu.registered();
    client->reset();  // unregisters the slots before unmapping them
    std::printf("fake gpu: %d copies, %d outside the %zu registered slots, %d unregistered\n",
                gpu.copies(), gpu.outside(), slots, gpu.unregistered());
    if (gpu.outside() > 0 || gpu.copies() == 0 || gpu.unregistered() != static_cast<int>(slots))
      return 5;
  }
  return 0;
}
