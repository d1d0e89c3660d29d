// ckpt_fuzz: a seeded mutation fuzzer for everything ftrain reads back from disk or a socket,
// built with AddressSanitizer + UndefinedBehaviorSanitizer (tests/CMakeLists.txt): manifests,
// receipts, the ckptd wire protocol's decoders, the peer (replication) wire decoders, and
// whole checkpoints whose shard files have damaged bytes (headers and data) read through
// CheckpointReader and VerifyCheckpoint. Pass: no crash, no hang (each shard case runs in a
// child with an alarm), no sanitizer report, every parse failure a Status, every accepted
// message keeps its decoder's promises, every successful read returns the bytes written, and
// verify refuses every changed shard. Deterministic for a seed; prints what it ran.
//
// usage: ckpt_fuzz [--seed S] [--cases N] [--seconds T]   (N per target; stops at T seconds)
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/filename.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "ckpt/verify.h"
#include "core/log.h"
#include "daemon/peer_wire.h"
#include "test_util.h"

namespace {

using namespace ftrain;  // NOLINT: a test driver
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string ReadAll(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void WriteAll(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// Byte-level damage: flip, overwrite, insert, delete, truncate, duplicate a run.
std::string MutateBytes(std::string s, std::mt19937_64& rng) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n && !s.empty(); ++i) {
    const size_t at = rng() % s.size();
    switch (rng() % 6) {
      case 0:
        s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
        break;
      case 1:
        s[at] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(at, 1, static_cast<char>(rng()));
        break;
      case 3:
        s.erase(at, 1 + rng() % 8);
        break;
      case 4:
        s.resize(at);
        break;
      default:
        s.insert(at, s.substr(at, rng() % 64));
        break;
    }
  }
  return s;
}

// Structural damage to a JSON document: drop/rename/retype a key, hostile values.
std::string MutateJson(const json& base, std::mt19937_64& rng) {
  static const std::vector<json> hostile = {nullptr,
                                            true,
                                            -1,
                                            0,
                                            1e300,
                                            -1e300,
                                            18446744073709551615ull,
                                            -9223372036854775807ll - 1,
                                            0.5,
                                            "",
                                            "../../x",
                                            json::array(),
                                            json::object(),
                                            json::array({json::object()}),
                                            json::array({-1, 1e30}),
                                            std::string(5000, 'a')};
  std::vector<std::string> pointers;
  std::function<void(const json&, const std::string&)> walk = [&](const json& j,
                                                                  const std::string& at) {
    pointers.push_back(at);
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) walk(it.value(), at + "/" + it.key());
    } else if (j.is_array()) {
      for (size_t i = 0; i < j.size(); ++i) walk(j[i], at + "/" + std::to_string(i));
    }
  };
  walk(base, "");
  json j = base;
  try {
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      json::json_pointer ptr(pointers[rng() % pointers.size()]);
      if (ptr.empty()) continue;
      if (!j.contains(ptr)) continue;
      const json::json_pointer parent = ptr.parent_pointer();
      switch (rng() % 3) {
        case 0:
          if (j[parent].is_object()) j[parent].erase(ptr.back());
          break;
        case 1:
          if (j[parent].is_object()) {
            json v = j[ptr];
            j[parent].erase(ptr.back());
            j[parent][ptr.back() + "_"] = v;
          }
          break;
        default:
          j[ptr] = hostile[rng() % hostile.size()];
      }
    }
  } catch (const std::exception&) {
  }
  std::string text = j.dump();
  if (rng() % 4 == 0) text = MutateBytes(text, rng);
  return text;
}

struct Counts {
  long cases = 0, accepted = 0;
};

bool TimeLeft(Clock::time_point deadline) { return Clock::now() < deadline; }

Counts FuzzManifests(const std::string& manifest, long cases, std::mt19937_64& rng,
                     Clock::time_point deadline) {
  Counts c;
  const json base = json::parse(manifest);
  for (long i = 0; i < cases && TimeLeft(deadline); ++i) {
    const std::string text = MutateJson(base, rng);
    auto m = ckpt::Manifest::FromJson(text, "fuzzed manifest");
    ++c.cases;
    if (!m.ok()) continue;
    ++c.accepted;
    for (const auto& t : m->tensors) {  // what a reader relies on must hold
      int64_t next = 0;
      for (const auto& p : t.pieces) {
        if (p.offset != next || p.rank < 0 || p.rank >= m->meta.world_size) std::abort();
        next += p.length;
      }
      if (next != t.numel()) std::abort();
    }
  }
  return c;
}

Counts FuzzReceipts(const std::string& receipt, long cases, std::mt19937_64& rng,
                    Clock::time_point deadline) {
  Counts c;
  const json base = json::parse(receipt);
  for (long i = 0; i < cases && TimeLeft(deadline); ++i) {
    auto r = ckpt::Receipt::FromJson(MutateJson(base, rng), "fuzzed receipt");
    ++c.cases;
    if (!r.ok()) continue;
    ++c.accepted;
    if (r->rank < 0 || r->rank >= r->world_size) std::abort();
  }
  return c;
}

Counts FuzzProtocol(long cases, std::mt19937_64& rng, Clock::time_point deadline) {
  Counts c;
  ckpt::proto::Submit sub;
  sub.step = 12;
  sub.meta.world_size = 4;
  sub.meta.config_hash = "abc";
  sub.meta.generation = "000001700000000-0000000a";
  for (int k = 0; k < 3; ++k) {
    ckpt::proto::PieceDesc p;
    p.kind = "master";
    p.name = "model.layers." + std::to_string(k) + ".w";
    p.dtype = ckpt::DType::kFloat32;
    p.shape = {64, 64};
    p.offset = 0;
    p.length = 1024;
    p.slot_offset = static_cast<uint64_t>(k) * 4096;
    sub.pieces.push_back(p);
  }
  const std::string submit = ckpt::proto::EncodeSubmit(sub);
  const std::string hello = ckpt::proto::EncodeHello({1, 4, 77, 1 << 20});
  const std::string hello_ok = ckpt::proto::EncodeHelloOk({1 << 20, {"/ftrain-a", "/ftrain-b"}});
  const std::string restore = ckpt::proto::EncodeRestoreOk(&sub);
  const std::string header = ckpt::proto::EncodeHeader(ckpt::proto::MsgType::kSubmit, 100);
  for (long i = 0; i < cases && TimeLeft(deadline); ++i) {
    ++c.cases;
    const int which = static_cast<int>(rng() % 5);
    bool ok = false;
    if (which == 0) {
      ok = ckpt::proto::DecodeSubmit(MutateBytes(submit, rng), 1 << 20).ok();
    } else if (which == 1) {
      ok = ckpt::proto::DecodeHello(MutateBytes(hello, rng)).ok();
    } else if (which == 2) {
      ok = ckpt::proto::DecodeHelloOk(MutateBytes(hello_ok, rng)).ok();
    } else if (which == 3) {
      ok = ckpt::proto::DecodeRestoreOk(MutateBytes(restore, rng), 1 << 20).ok();
    } else {
      std::string h = MutateBytes(header, rng);
      h.resize(header.size());
      ok = ckpt::proto::DecodeHeader(reinterpret_cast<const uint8_t*>(h.data())).ok();
    }
    c.accepted += ok;
  }
  return c;
}

// The peer (daemon <-> daemon) wire decoders, reached before authentication: mutated valid
// frames. What an accepted message promises must hold (the code after the decoder relies on
// it): a nonce of the right size, a safe job id, ranks and steps in range, one hash per piece,
// every piece inside the image.
// An accepted peer message that breaks its decoder's promise: say which, then crash.
[[noreturn]] void BrokenPromise(int which) {
  static const char* kNames[] = {"HELLO", "CHALLENGE", "replica header", "FETCH", "frame header"};
  std::fprintf(stderr, "peer wire: an accepted %s breaks what its decoder promises\n",
               kNames[which]);
  std::abort();
}

Counts FuzzPeerWire(long cases, std::mt19937_64& rng, Clock::time_point deadline) {
  namespace peer = ckptd::peer;
  Counts c;
  const std::string nonce(peer::kNonceBytes, 'n'), mac(peer::kMacBytes, 'm');
  peer::ReplicaHeader rh;
  rh.job = "1234.job";
  rh.rank = 1;
  rh.step = 12;
  rh.submit.step = 12;
  rh.submit.meta.step = 12;
  rh.submit.meta.world_size = 4;
  rh.submit.meta.config_hash = "abc";
  for (int k = 0; k < 3; ++k) {
    ckpt::proto::PieceDesc p;
    p.kind = "master";
    p.name = "model.layers." + std::to_string(k) + ".w";
    p.dtype = ckpt::DType::kFloat32;
    p.shape = {64, 64};
    p.offset = 0;
    p.length = 1024;
    p.slot_offset = static_cast<uint64_t>(k) * 4096;
    rh.submit.pieces.push_back(p);
    rh.xxh3.push_back(0x1234 + k);
  }
  rh.extent = peer::ImageExtent(rh.submit);
  const uint64_t max_extent = 1 << 20;
  const std::string hello = peer::EncodeHello({nonce, "1234.job"});
  const std::string challenge = peer::EncodeChallenge({nonce, mac});
  const std::string replica = peer::EncodeReplicaHeader(rh);
  const std::string fetch = peer::EncodeFetch({"1234.job", 3, 12});
  const std::string header = peer::EncodeFrameHeader(peer::PeerMsg::kStore, 100);
  if (!peer::DecodeReplicaHeader(replica, max_extent).ok() || !peer::DecodeHello(hello).ok() ||
      !peer::DecodeFetch(fetch).ok()) {
    std::fprintf(stderr, "peer wire: an unmutated message does not decode\n");
    std::abort();
  }
  for (long i = 0; i < cases && TimeLeft(deadline); ++i) {
    ++c.cases;
    bool ok = false;
    const int which = static_cast<int>(rng() % 5);
    switch (which) {
      case 0: {
        auto m = peer::DecodeHello(MutateBytes(hello, rng));
        ok = m.ok();
        if (ok && (m->nonce.size() != peer::kNonceBytes || !peer::IsSafeJobId(m->job)))
          BrokenPromise(which);
        break;
      }
      case 1: {
        auto m = peer::DecodeChallenge(MutateBytes(challenge, rng));
        ok = m.ok();
        if (ok && (m->nonce.size() != peer::kNonceBytes || m->mac.size() != peer::kMacBytes))
          BrokenPromise(which);
        break;
      }
      case 2: {
        auto m = peer::DecodeReplicaHeader(MutateBytes(replica, rng), max_extent);
        ok = m.ok();
        if (!ok) break;
        if (m->rank < 0 || m->rank >= m->submit.meta.world_size || m->extent > max_extent ||
            m->xxh3.size() != m->submit.pieces.size() || !peer::IsSafeJobId(m->job) ||
            peer::ImageExtent(m->submit) > m->extent) {
          BrokenPromise(which);
        }
        break;
      }
      case 3: {
        auto m = peer::DecodeFetch(MutateBytes(fetch, rng));
        ok = m.ok();
        if (ok && (m->rank < 0 || m->rank >= ckpt::kMaxWorldSize || m->step < 0 ||
                   m->step > ckpt::kMaxStep || !peer::IsSafeJobId(m->job))) {
          BrokenPromise(which);
        }
        break;
      }
      default: {
        std::string h = MutateBytes(header, rng);
        h.resize(header.size());
        auto m = peer::DecodeFrameHeader(reinterpret_cast<const uint8_t*>(h.data()));
        ok = m.ok();
        if (ok && m->length > peer::MaxPayload(m->type)) BrokenPromise(which);
      }
    }
    c.accepted += ok;
  }
  return c;
}

// A small real checkpoint (2 ranks, fp32 + bf16 tensors, blobs), written once.
void MakeCheckpoint(const std::string& root) {
  ckpt::CheckpointStore store(root, ftrain::Env::Default());
  std::vector<std::vector<float>> data(2, std::vector<float>(3000));
  for (size_t i = 0; i < 3000; ++i) data[0][i] = data[1][i] = static_cast<float>(i % 97) * 0.01f;
  std::vector<uint16_t> half(1500, 0x3f80);
  ckpt::CheckpointMeta meta;
  meta.step = 7;
  meta.world_size = 2;
  meta.config_hash = "fuzz";
  for (int r = 0; r < 2; ++r) {
    ckpt::ShardContents sc;
    sc.tensors.push_back({"master",
                          "w",
                          ckpt::DType::kFloat32,
                          {6000},
                          r * 3000,
                          3000,
                          data[static_cast<size_t>(r)].data()});
    sc.tensors.push_back(
        {"model", "w", ckpt::DType::kBFloat16, {3000}, r * 1500, 1500, half.data()});
    sc.blobs.push_back({"rng", "s", "per_rank", std::string(100, static_cast<char>('a' + r))});
    sc.blobs.push_back({"train", "state", "replicated", "{\"global_step\":7}"});
    ckpt::WriteOptions o;
    o.zstd_level = r == 0 ? 3 : 0;  // one compressed shard, one stored plainly
    o.threads = 1;
    o.chunk_bytes = 4096;
    if (!store.WriteShard(meta, r, sc, o).ok()) std::abort();
  }
  auto c = store.TryCommit(meta);
  if (!c.ok() || *c != ckpt::CommitOutcome::kCommitted) std::abort();
}

// What the undamaged checkpoint holds: every tensor (kind/name -> bytes) and every blob
// (group/name -> all ranks' bytes).
struct Original {
  std::map<std::string, std::vector<uint8_t>> tensors;
  std::map<std::string, std::vector<std::string>> blobs;
};
Original ReadOriginal(const std::string& dir) {
  Original o;
  auto reader = ckpt::CheckpointReader::Open(dir, ftrain::Env::Default());
  if (!reader.ok()) std::abort();
  for (const auto& t : (*reader)->manifest().tensors) {
    if (!(*reader)->ReadTensor(t.kind, t.name, &o.tensors[t.kind + "/" + t.name]).ok())
      std::abort();
  }
  for (const auto& b : (*reader)->manifest().blobs) {
    auto all = (*reader)->ReadBlobAllRanks(b.group, b.name);
    if (!all.ok()) std::abort();
    o.blobs[b.group + "/" + b.name] = *all;
  }
  return o;
}

[[noreturn]] void Wrong(const std::string& what) {
  std::fprintf(stderr, "WRONG: %s\n", what.c_str());
  std::fflush(nullptr);
  _exit(4);
}

// Reads everything resume would read. Any failure is fine; a read that succeeds must return
// the original bytes, and verification must refuse a checkpoint whose shard changed.
void ReadEverything(const std::string& dir, const Original& original, bool changed) {
  auto reader = ckpt::CheckpointReader::Open(dir, ftrain::Env::Default());
  if (reader.ok()) {
    for (const auto& t : (*reader)->manifest().tensors) {
      const std::string id = t.kind + "/" + t.name;
      auto want = original.tensors.find(id);
      std::vector<uint8_t> buf;
      if ((*reader)->ReadTensor(t.kind, t.name, &buf).ok() &&
          (want == original.tensors.end() || buf != want->second)) {
        Wrong("ReadTensor(" + id + ") succeeded with other bytes than were written");
      }
      const size_t esize = ckpt::DTypeSize(t.dtype);
      const int64_t n = t.numel() / 2;
      std::vector<uint8_t> part(static_cast<size_t>(t.numel()) * 4);
      if ((*reader)->ReadTensorRange(t.kind, t.name, 1, n, part.data()).ok() &&
          (want == original.tensors.end() ||
           std::memcmp(part.data(), want->second.data() + esize, n * esize) != 0)) {
        Wrong("ReadTensorRange(" + id + ") succeeded with other bytes than were written");
      }
    }
    for (const auto& b : (*reader)->manifest().blobs) {
      const std::string id = b.group + "/" + b.name;
      auto got = (*reader)->ReadBlobAllRanks(b.group, b.name);
      auto want = original.blobs.find(id);
      if (got.ok() && (want == original.blobs.end() || *got != want->second)) {
        Wrong("ReadBlobAllRanks(" + id + ") succeeded with other bytes than were written");
      }
    }
  }
  // ckptctl verify parses a damaged file in a child process: HDF5 crashing there is contained
  // and reported, and counted here (exit 3) to show how often libhdf5 itself fails.
  const auto rep = ckpt::VerifyCheckpoint(dir, 1, ftrain::Env::Default());
  for (const auto& p : rep.problems) {
    if (p.problem.find("HDF5 structure of this damaged file is broken") != std::string::npos) {
      std::fflush(nullptr);
      _exit(3);
    }
  }
  if (changed && rep.ok()) Wrong("verify passed a checkpoint with a changed shard");
  if (!changed && !rep.ok())
    Wrong("verify failed an undamaged checkpoint: " + rep.problems[0].problem);
}

Counts FuzzShards(const std::string& work, long cases, std::mt19937_64& rng,
                  Clock::time_point deadline, long* hangs, long* contained) {
  Counts c;
  const std::string good_root = work + "/good";
  MakeCheckpoint(good_root);
  const std::string good = good_root + "/step-00000007";
  const std::string shard0 = ReadAll(good + "/shard-00000.h5");
  const std::string shard1 = ReadAll(good + "/shard-00001.h5");
  const std::string manifest = ReadAll(good + "/manifest.json");
  const Original original = ReadOriginal(good);
  const std::string dir = work + "/case/step-00000007";
  if (std::system(("mkdir -p '" + dir + "'").c_str()) != 0) std::abort();
  WriteAll(dir + "/manifest.json", manifest);
  for (long i = 0; i < cases && TimeLeft(deadline); ++i) {
    // Same length most of the time, so the manifest's size check passes and the damage
    // reaches HDF5 and the decoders.
    const bool first = rng() % 2 == 0;
    std::string bytes = first ? shard0 : shard1;
    const size_t len = bytes.size();
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) {
      // Half the hits in the first 4 KiB (superblock, object headers), half anywhere.
      const size_t at = rng() % 2 == 0 ? rng() % std::min<size_t>(4096, len) : rng() % len;
      bytes[at] = static_cast<char>(rng() % 3 == 0 ? bytes[at] ^ 0x01 : static_cast<char>(rng()));
    }
    if (rng() % 16 == 0) bytes = MutateBytes(bytes, rng);
    const bool changed = bytes != (first ? shard0 : shard1);  // a write may repeat a byte
    WriteAll(dir + "/shard-00000.h5", first ? bytes : shard0);
    WriteAll(dir + "/shard-00001.h5", first ? shard1 : bytes);
    ++c.cases;
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);
      ReadEverything(dir, original, changed);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
      ++*hangs;
      std::fprintf(stderr, "HANG on shard case %ld (seed-reproducible); kept in %s\n", i,
                   dir.c_str());
      return c;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
      ++*contained;
      continue;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 4) {
      std::fprintf(stderr, "WRONG RESULT on shard case %ld; the damaged checkpoint is kept in %s\n",
                   i, dir.c_str());
      std::exit(1);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr,
                   "CRASH on shard case %ld (status %d); the damaged checkpoint is kept in %s\n", i,
                   status, dir.c_str());
      std::exit(1);
    }
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 20261201;
  long cases = 4000;
  double seconds = 600;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--cases")
      cases = std::atol(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: ckpt_fuzz [--seed S] [--cases N] [--seconds T]\n");
      return 2;
    }
  }
  SetLogLevel(LogLevel::kError);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  testing::TempDir work_dir("ftrain-fuzz");
  const std::string work = work_dir.path();
  std::mt19937_64 rng(seed);
  MakeCheckpoint(work + "/base");
  const std::string manifest = ReadAll(work + "/base/step-00000007/manifest.json");
  ckpt::CheckpointStore store(work + "/base", ftrain::Env::Default());
  ckpt::CheckpointMeta meta;
  meta.step = 8;
  meta.world_size = 2;
  std::vector<float> v(100, 1.0f);
  ckpt::ShardContents sc;
  sc.tensors.push_back({"master", "w", ckpt::DType::kFloat32, {200}, 0, 100, v.data()});
  auto receipt = store.WriteShard(meta, 0, sc, {});
  if (!receipt.ok()) return 1;
  const auto m = FuzzManifests(manifest, cases, rng, deadline);
  const auto r = FuzzReceipts(receipt->ToJson(), cases, rng, deadline);
  const auto p = FuzzProtocol(cases, rng, deadline);
  const auto w = FuzzPeerWire(cases, rng, deadline);
  long hangs = 0, contained = 0;
  const auto s = FuzzShards(work, cases / 4, rng, deadline, &hangs, &contained);
  std::printf(
      "ckpt_fuzz seed %llu: manifests %ld (%ld accepted), receipts %ld (%ld), protocol "
      "%ld (%ld), peer wire %ld (%ld), damaged shards %ld: no crash in ftrain, %ld hangs; libhdf5 "
      "crashed on "
      "%ld damaged files inside ckptctl verify's isolated parse (contained, reported)\n",
      static_cast<unsigned long long>(seed), m.cases, m.accepted, r.cases, r.accepted, p.cases,
      p.accepted, w.cases, w.accepted, s.cases, hangs, contained);
  if (hangs > 0) work_dir.Keep();  // the hung cases' files, for whoever investigates
  return hangs > 0 ? 1 : 0;
}
