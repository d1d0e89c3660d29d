// VerifyCheckpoint: re-read and re-hash everything a checkpoint claims.
#include "ckpt/verify.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <set>

#include "ckpt/filename.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"

namespace ftrain::ckpt {
VerifyReport VerifyCheckpoint(const std::string& dir_in, int threads, Env* env) {
  VerifyReport rep;
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  rep.dir = dir;
  auto t0 = std::chrono::steady_clock::now();
  auto problem = [&](const std::string& file, const std::string& ds, const std::string& what) {
    rep.problems.push_back({file, ds, what});
  };
  auto finish = [&] {
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
  };
  if (!env->IsDirectory(dir)) {
    problem(dir, "", "not a directory");
    return finish();
  }
  RootEntry entry = ParseRootEntry(Basename(dir));
  if (entry.kind == EntryKind::kPartial) problem(dir, "", "partial checkpoint (never committed)");
  const std::string mpath = JoinPath(dir, kManifestName);
  std::string text;
  Status s = env->ReadFile(mpath, &text);
  if (!s.ok()) {
    problem(mpath, "", "manifest missing or unreadable: " + s.message());
    return finish();
  }
  auto manifest = Manifest::FromJson(text, mpath);
  if (!manifest.ok()) {
    problem(mpath, "", manifest.status().message());
    return finish();
  }
  const Manifest& m = *manifest;
  rep.step = m.meta.step;
  if (entry.kind == EntryKind::kComplete && entry.step != m.meta.step) {
    problem(mpath, "",
            "manifest is for step " + std::to_string(m.meta.step) +
                " but the directory is named for step " + std::to_string(entry.step));
  }
  // Files in the directory that the manifest does not account for.
  std::set<std::string> known = {kManifestName, kCommitMarkerName, kGenerationName};
  for (const auto& f : m.files) {
    known.insert(f.path);
    known.insert(ReceiptFileName(f.rank));
  }
  auto children = env->ListDir(dir);
  if (children.ok()) {
    for (const auto& c : *children) {
      if (!known.count(c)) {
        problem(JoinPath(dir, c), "",
                ParseShardFileName(c) >= 0 ? "extra shard not listed in the manifest (world size " +
                                                 std::to_string(m.meta.world_size) + ")"
                                           : "unknown file in the checkpoint directory");
      }
    }
  }
  // Which datasets each rank's file must hold, with the manifest's hash.
  std::map<int, std::map<std::string, const TensorPiece*>> expected;
  std::map<std::string, DType> dtypes;
  for (const auto& t : m.tensors) {
    for (const auto& p : t.pieces) expected[p.rank]["/" + t.kind + "/" + t.name] = &p;
    dtypes["/" + t.kind + "/" + t.name] = t.dtype;
  }
  std::vector<uint8_t> bytes;  // reused: growing it once beats faulting in pages per dataset
  for (const auto& f : m.files) {
    const std::string path = JoinPath(dir, f.path);
    if (!env->FileExists(path)) {
      problem(path, "", "missing shard of rank " + std::to_string(f.rank));
      continue;
    }
    // The whole-file hash streams the file on its own thread while the datasets below are
    // decoded: one pass over the disk instead of two.
    struct FileHash {
      bool ok = false;
      uint64_t size = 0, hash = 0;
      std::string err;
    };
    auto file_hash = std::async(std::launch::async, [path] {
      FileHash h;
      Status st = HashFile(path, &h.size, &h.hash);
      h.ok = st.ok();
      h.err = st.message();
      return h;
    });
    const size_t file_problems_at = rep.problems.size();
    auto file_level = [&](const FileHash& h) {
      std::vector<VerifyProblem> out;
      if (!h.ok) {
        out.push_back({path, "", "read error: " + h.err});
        return out;
      }
      if (h.size != f.size) {
        out.push_back({path, "",
                       "size " + std::to_string(h.size) + " bytes, manifest says " +
                           std::to_string(f.size) + (h.size < f.size ? " (truncated)" : "")});
      } else if (h.hash != f.xxh3) {
        out.push_back({path, "",
                       "file checksum mismatch: manifest xxh3 " + Hex64(f.xxh3) + ", computed " +
                           Hex64(h.hash) + " (the file was modified or damaged)"});
      }
      return out;
    };
    // File-level problems are reported first, then what the datasets say.
    struct Finish {
      std::function<void()> fn;
      ~Finish() { fn(); }
    } finish_file{[&] {
      const FileHash h = file_hash.get();
      rep.stored_bytes += h.size;
      auto fp = file_level(h);
      rep.problems.insert(rep.problems.begin() + static_cast<std::ptrdiff_t>(file_problems_at),
                          fp.begin(), fp.end());
    }};
    auto reader = ShardFileReader::Open(path);
    if (!reader.ok()) {
      problem(path, "", reader.status().message());
      continue;
    }
    if ((*reader)->rank() != f.rank || (*reader)->step() != m.meta.step ||
        (*reader)->world_size() != m.meta.world_size) {
      problem(path, "",
              "file says step " + std::to_string((*reader)->step()) + " rank " +
                  std::to_string((*reader)->rank()) + "/" +
                  std::to_string((*reader)->world_size()) + ", manifest expects step " +
                  std::to_string(m.meta.step) + " rank " + std::to_string(f.rank) + "/" +
                  std::to_string(m.meta.world_size));
    }
    auto datasets = (*reader)->ListDatasets();
    if (!datasets.ok()) {
      problem(path, "", datasets.status().message());
      continue;
    }
    std::set<std::string> present;
    for (const auto& d : *datasets) {
      const std::string h5 = d.H5Path();
      present.insert(h5);
      Status rs = (*reader)->ReadAll(h5, &bytes, /*verify=*/true, threads);
      ++rep.datasets_checked;
      rep.raw_bytes += bytes.size();
      if (!rs.ok()) {
        problem(path, h5, rs.message());
        continue;
      }
      auto want = expected[f.rank].find(h5);
      if (want != expected[f.rank].end()) {
        const TensorPiece* p = want->second;
        if (p->xxh3 != d.xxh3 || p->offset != d.offset || p->length != d.length ||
            dtypes[h5] != d.dtype) {
          problem(path, h5, "dataset does not match the manifest (hash, slice or dtype)");
        }
      }
    }
    for (const auto& [h5, piece] : expected[f.rank]) {
      if (!present.count(h5)) problem(path, h5, "dataset listed in the manifest is missing");
    }
  }
  return finish();
}

}  // namespace ftrain::ckpt
