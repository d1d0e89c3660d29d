// VerifyCheckpoint: re-read and re-hash everything a checkpoint claims.
#include "ckpt/verify.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "ckpt/filename.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "core/hex.h"

namespace ftrain::ckpt {
namespace {

struct DatasetCheck {
  const std::string& path;
  int rank;
  const Manifest& m;
  const std::map<std::string, const TensorPiece*>& expected;
  const std::map<std::string, DType>& dtypes;
  int threads;
};

// How many values of a float32 or bfloat16 tensor are NaN or infinite, and the first's index
// (all exponent bits set, in both formats).
std::pair<int64_t, int64_t> CountNonFinite(const std::vector<uint8_t>& bytes, DType dtype) {
  int64_t count = 0, first = -1;
  if (dtype == DType::kFloat32) {
    const size_t n = bytes.size() / 4;
    for (size_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      if ((v & 0x7f800000u) == 0x7f800000u && count++ == 0) first = static_cast<int64_t>(i);
    }
  } else if (dtype == DType::kBFloat16) {
    const size_t n = bytes.size() / 2;
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, bytes.data() + 2 * i, 2);
      if ((v & 0x7f80u) == 0x7f80u && count++ == 0) first = static_cast<int64_t>(i);
    }
  }
  return {count, first};
}

// Opens one shard and re-reads every dataset, appending what is wrong to rep.
void CheckDatasets(const DatasetCheck& c, VerifyReport* rep) {
  auto problem = [&](const std::string& ds, const std::string& what) {
    rep->problems.push_back({c.path, ds, what});
  };
  auto reader = ShardFileReader::Open(c.path);
  if (!reader.ok()) {
    problem("", reader.status().message());
    return;
  }
  if ((*reader)->rank() != c.rank || (*reader)->step() != c.m.meta.step ||
      (*reader)->world_size() != c.m.meta.world_size) {
    problem("", "file says step " + std::to_string((*reader)->step()) + " rank " +
                    std::to_string((*reader)->rank()) + "/" +
                    std::to_string((*reader)->world_size()) + ", manifest expects step " +
                    std::to_string(c.m.meta.step) + " rank " + std::to_string(c.rank) + "/" +
                    std::to_string(c.m.meta.world_size));
  }
  auto datasets = (*reader)->ListDatasets();
  if (!datasets.ok()) {
    problem("", datasets.status().message());
    return;
  }
  std::vector<uint8_t> bytes;  // reused: growing it once beats faulting in pages per dataset
  std::set<std::string> present;
  for (const auto& d : *datasets) {
    const std::string h5 = d.H5Path();
    present.insert(h5);
    Status rs = (*reader)->ReadAll(h5, &bytes, /*verify=*/true, c.threads);
    ++rep->datasets_checked;
    rep->raw_bytes += bytes.size();
    if (!rs.ok()) {
      problem(h5, rs.message());
      continue;
    }
    // A NaN or infinity in the weights or moments: the state cannot train on ([guard]).
    if (auto dt = c.dtypes.find(h5); dt != c.dtypes.end()) {
      const auto [count, first] = CountNonFinite(bytes, dt->second);
      if (count > 0) {
        problem(h5, std::to_string(count) +
                        " non-finite values (NaN or infinity; the first at "
                        "element " +
                        std::to_string(first) +
                        " of this piece): the state is not "
                        "trainable; resume from an older checkpoint");
      }
    }
    auto want = c.expected.find(h5);
    if (want != c.expected.end()) {
      const TensorPiece* p = want->second;
      auto dt = c.dtypes.find(h5);
      if (p->xxh3 != d.xxh3 || p->offset != d.offset || p->length != d.length ||
          dt == c.dtypes.end() || dt->second != d.dtype) {
        problem(h5, "dataset does not match the manifest (hash, slice or dtype)");
      }
    }
  }
  for (const auto& [h5, piece] : c.expected) {
    if (!present.count(h5)) problem(h5, "dataset listed in the manifest is missing");
  }
}

// CheckDatasets in a forked child, its findings sent back through a pipe as
// "dataset\tproblem\n" lines (tabs and newlines in messages become spaces). A child that dies
// (HDF5 crashing on the damaged structure) is itself the finding.
void CheckDatasetsIsolated(const DatasetCheck& c, VerifyReport* rep) {
  int fds[2];
  if (::pipe(fds) != 0) {
    rep->problems.push_back({c.path, "", "cannot isolate the parse of a damaged file (pipe)"});
    return;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    rep->problems.push_back({c.path, "", "cannot isolate the parse of a damaged file (fork)"});
    return;
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(120);  // a parse that loops on damaged structure ends here
    VerifyReport local;
    CheckDatasets(c, &local);
    std::string out =
        std::to_string(local.datasets_checked) + "\t" + std::to_string(local.raw_bytes) + "\n";
    for (const auto& p : local.problems) {
      std::string line = p.dataset + "\t" + p.problem;
      for (size_t i = p.dataset.size() + 1; i < line.size(); ++i) {
        if (line[i] == '\t' || line[i] == '\n') line[i] = ' ';
      }
      out += line + "\n";
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string in;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::istringstream lines(in);
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    if (first) {
      first = false;
      rep->datasets_checked += std::atoi(line.substr(0, tab).c_str());
      rep->raw_bytes += std::strtoull(line.substr(tab + 1).c_str(), nullptr, 10);
      continue;
    }
    rep->problems.push_back({c.path, line.substr(0, tab), line.substr(tab + 1)});
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    rep->problems.push_back(
        {c.path, "",
         "the HDF5 structure of this damaged file is broken too: parsing it " +
             std::string(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM
                             ? "did not finish in 120 s"
                             : "crashed (signal " +
                                   std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0) +
                                   ")") +
             "; the data cannot be trusted"});
  }
}

}  // namespace

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
  for (const auto& f : m.files) {
    const std::string path = JoinPath(dir, f.path);
    if (!env->FileExists(path)) {
      problem(path, "", "missing shard of rank " + std::to_string(f.rank));
      continue;
    }
    // The whole-file hash first: a file whose bytes are exactly the committed ones is parsed
    // here; a damaged one is parsed only in a child process, because HDF5 itself can crash on
    // a damaged object header (heap overflows in libhdf5 1.10, found by tests/fuzz).
    uint64_t size = 0, hash = 0;
    Status hs = HashFile(path, &size, &hash);
    rep.stored_bytes += size;
    bool intact = false;
    if (!hs.ok()) {
      problem(path, "", "read error: " + hs.message());
    } else if (size != f.size) {
      problem(path, "",
              "size " + std::to_string(size) + " bytes, manifest says " + std::to_string(f.size) +
                  (size < f.size ? " (truncated)" : ""));
    } else if (hash != f.xxh3) {
      problem(path, "",
              "file checksum mismatch: manifest xxh3 " + Hex64(f.xxh3) + ", computed " +
                  Hex64(hash) + " (the file was modified or damaged)");
    } else {
      intact = true;
    }
    if (!hs.ok()) continue;
    DatasetCheck check{path, f.rank, m, expected[f.rank], dtypes, threads};
    if (intact) {
      CheckDatasets(check, &rep);
    } else {
      CheckDatasetsIsolated(check, &rep);  // names the damaged datasets, survives HDF5
    }
  }
  return finish();
}

}  // namespace ftrain::ckpt
