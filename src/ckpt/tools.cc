// ckptctl operations: list, inspect, diff (export is in export.cc).
#include "ckpt/tools.h"

#include <cmath>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/filename.h"
#include "ckpt/reader.h"
#include "ckpt/store.h"

namespace ftrain::ckpt {

using nlohmann::json;

namespace {

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  std::ostringstream o;
  o << std::fixed << std::setprecision(u == 0 ? 0 : 1) << b << " " << units[u];
  return o.str();
}

std::string IsoTime(double unix_s) {
  if (unix_s <= 0) return "-";
  time_t t = static_cast<time_t>(unix_s);
  struct tm tm_utc;
  gmtime_r(&t, &tm_utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm_utc);
  return buf;
}

}  // namespace

uint16_t Fp32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN stays NaN
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

StatusOr<std::string> ResolveCheckpointDir(const std::string& path, Env* env) {
  if (env->FileExists(JoinPath(path, kManifestName)) ||
      ParseRootEntry(Basename(path)).kind != EntryKind::kOther) {
    return path;
  }
  CheckpointStore store(path, env);
  FT_ASSIGN_OR_RETURN(std::optional<CheckpointInfo> latest, store.Latest());
  if (!latest) {
    return Status::NotFound("'" + path +
                            "' is neither a checkpoint nor a root with a complete one");
  }
  return latest->path;
}

Status PrintList(const std::string& root, bool as_json, std::ostream& out, Env* env) {
  CheckpointStore store(root, env);
  FT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, store.List());
  FT_ASSIGN_OR_RETURN(std::vector<std::string> foreign, store.ListForeign());
  if (as_json) {
    json arr = json::array();
    for (const auto& i : all) {
      json j = {{"step", i.step},
                {"path", i.path},
                {"status", CheckpointStatusName(i.status)},
                {"latest", i.is_latest},
                {"bytes_on_disk", i.bytes_on_disk}};
      if (i.status == CheckpointStatus::kComplete) {
        j["world_size"] = i.world_size;
        j["created_unix"] = i.created_unix;
        j["raw_bytes"] = i.raw_bytes;
        j["compression_ratio"] = i.bytes_on_disk > 0 ? double(i.raw_bytes) / i.bytes_on_disk : 0.0;
      }
      if (!i.problem.empty()) j["problem"] = i.problem;
      if (i.is_symlink) j["symlink"] = true;
      arr.push_back(j);
    }
    out << json({{"root", root}, {"checkpoints", arr}, {"ignored", foreign}}).dump(1) << "\n";
    return Status::Ok();
  }
  out << std::left << std::setw(10) << "step" << std::setw(12) << "status" << std::setw(22)
      << "created" << std::setw(11) << "size" << std::setw(8) << "ratio" << std::setw(7) << "world"
      << "\n";
  for (const auto& i : all) {
    std::ostringstream ratio;
    if (i.status == CheckpointStatus::kComplete && i.bytes_on_disk > 0) {
      ratio << std::fixed << std::setprecision(2) << double(i.raw_bytes) / i.bytes_on_disk;
    } else {
      ratio << "-";
    }
    out << std::left << std::setw(10) << i.step << std::setw(12) << CheckpointStatusName(i.status)
        << std::setw(22) << IsoTime(i.created_unix) << std::setw(11)
        << HumanBytes(static_cast<double>(i.bytes_on_disk)) << std::setw(8) << ratio.str()
        << std::setw(7) << (i.world_size > 0 ? std::to_string(i.world_size) : "-")
        << (i.is_latest ? "LATEST" : "")
        << (i.is_symlink ? (i.is_latest ? " " : "") + std::string("(symlink: never rotated)") : "")
        << "\n";
    if (!i.problem.empty()) out << "    problem: " << i.problem << "\n";
  }
  if (all.empty()) out << "(no checkpoints in " << root << ")\n";
  for (const auto& f : foreign) out << "ignored (not a checkpoint): " << f << "\n";
  return Status::Ok();
}

Status PrintInspect(const std::string& dir, bool as_json, std::ostream& out, Env* env) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir, env));
  const Manifest& m = reader->manifest();
  // On-disk bytes per tensor: sum of the stored sizes the shards report.
  std::map<std::string, uint64_t> stored;
  for (const auto& f : m.files) {
    auto shard = ShardFileReader::Open(JoinPath(reader->dir(), f.path));
    if (!shard.ok()) return shard.status();
    auto datasets = (*shard)->ListDatasets();
    if (!datasets.ok()) return datasets.status();
    for (const auto& d : *datasets) stored[d.H5Path()] += d.stored_bytes;
  }
  if (as_json) {
    json tensors = json::array();
    for (const auto& t : m.tensors) {
      const uint64_t raw = static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype);
      const uint64_t st = stored["/" + t.kind + "/" + t.name];
      tensors.push_back({{"kind", t.kind},
                         {"name", t.name},
                         {"dtype", DTypeName(t.dtype)},
                         {"shape", t.shape},
                         {"bytes", raw},
                         {"stored_bytes", st},
                         {"compression_ratio", st > 0 ? double(raw) / st : 0.0}});
    }
    json blobs = json::array();
    for (const auto& b : m.blobs) {
      blobs.push_back(
          {{"group", b.group}, {"name", b.name}, {"policy", b.policy}, {"ranks", b.ranks}});
    }
    json doc = json::parse(m.ToJson());
    doc["tensors"] = tensors;
    doc["blobs"] = blobs;
    out << doc.dump(1) << "\n";
    return Status::Ok();
  }
  out << "checkpoint   " << reader->dir() << "\n"
      << "step         " << m.meta.step << "\n"
      << "world size   " << m.meta.world_size << "\n"
      << "created      " << IsoTime(m.created_unix) << "\n"
      << "config hash  " << m.meta.config_hash << "\n"
      << "code version " << m.meta.code_version << "\n"
      << "data version " << m.meta.data_version << "\n"
      << "layout       " << m.meta.layout_json << "\n"
      << "size         " << HumanBytes(double(m.raw_bytes)) << " raw, "
      << HumanBytes(double(m.stored_bytes)) << " stored\n\n";
  out << std::left << std::setw(18) << "kind" << std::setw(48) << "name" << std::setw(10) << "dtype"
      << std::setw(18) << "shape" << std::setw(11) << "bytes"
      << "ratio\n";
  for (const auto& t : m.tensors) {
    std::string shape = "[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      shape += (i ? "," : "") + std::to_string(t.shape[i]);
    shape += "]";
    const uint64_t raw = static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype);
    const uint64_t st = stored["/" + t.kind + "/" + t.name];
    std::ostringstream ratio;
    ratio << std::fixed << std::setprecision(2) << (st > 0 ? double(raw) / st : 0.0);
    out << std::left << std::setw(18) << t.kind << std::setw(48) << t.name << std::setw(10)
        << DTypeName(t.dtype) << std::setw(18) << shape << std::setw(11) << HumanBytes(double(raw))
        << ratio.str() << "\n";
  }
  out << "\nstate:\n";
  for (const auto& b : m.blobs) {
    out << "  " << b.group << "/" << b.name << " (" << b.policy << ", " << b.ranks.size() << " cop"
        << (b.ranks.size() == 1 ? "y" : "ies") << ")\n";
  }
  return Status::Ok();
}

StatusOr<DiffResult> DiffCheckpoints(const std::string& a_dir, const std::string& b_dir,
                                     std::ostream& out, Env* env) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> a, CheckpointReader::Open(a_dir, env));
  FT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> b, CheckpointReader::Open(b_dir, env));
  DiffResult res;
  auto differ = [&](const std::string& what) {
    res.identical = false;
    out << "differs: " << what << "\n";
  };
  const Manifest& ma = a->manifest();
  const Manifest& mb = b->manifest();
  if (ma.meta.step != mb.meta.step) {
    differ("step " + std::to_string(ma.meta.step) + " vs " + std::to_string(mb.meta.step));
  }
  for (const auto& ta : ma.tensors) {
    const ManifestTensor* tb = mb.FindTensor(ta.kind, ta.name);
    const std::string id = ta.kind + "/" + ta.name;
    if (tb == nullptr) {
      differ(id + " only in " + a_dir);
      continue;
    }
    if (ta.dtype != tb->dtype || ta.shape != tb->shape) {
      differ(id + " dtype/shape");
      continue;
    }
    std::vector<uint8_t> va, vb;
    FT_RETURN_IF_ERROR(a->ReadTensor(ta.kind, ta.name, &va));
    FT_RETURN_IF_ERROR(b->ReadTensor(tb->kind, tb->name, &vb));
    ++res.tensors_compared;
    if (va == vb) continue;
    const size_t n = static_cast<size_t>(ta.numel());
    double max_abs = 0;
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) {
      const double x = ElementAsDouble(ta.dtype, va.data(), i);
      const double y = ElementAsDouble(ta.dtype, vb.data(), i);
      const size_t e = DTypeSize(ta.dtype);
      if (std::memcmp(va.data() + i * e, vb.data() + i * e, e) != 0) {
        ++count;
        max_abs = std::max(max_abs, std::fabs(x - y));
      }
    }
    std::ostringstream msg;
    msg << id << ": " << count << " of " << n << " elements differ, max abs difference "
        << std::setprecision(6) << max_abs;
    differ(msg.str());
  }
  for (const auto& tb : mb.tensors) {
    if (ma.FindTensor(tb.kind, tb.name) == nullptr)
      differ(tb.kind + "/" + tb.name + " only in " + b_dir);
  }
  for (const auto& blob : ma.blobs) {
    const std::string id = blob.group + "/" + blob.name;
    if (blob.group == "history") continue;  // run history (restarts), not training state
    if (!b->HasBlob(blob.group, blob.name)) {
      differ("state " + id + " only in " + a_dir);
      continue;
    }
    if (blob.policy == "per_rank" && ma.meta.world_size != mb.meta.world_size) {
      differ("state " + id + " is per-rank and the world sizes differ (" +
             std::to_string(ma.meta.world_size) + " vs " + std::to_string(mb.meta.world_size) +
             ")");
      continue;
    }
    const int ranks = blob.policy == "per_rank" ? ma.meta.world_size : 1;
    for (int r = 0; r < ranks; ++r) {
      FT_ASSIGN_OR_RETURN(std::string xa,
                          a->ReadBlob(blob.group, blob.name, r, ma.meta.world_size));
      FT_ASSIGN_OR_RETURN(std::string xb,
                          b->ReadBlob(blob.group, blob.name, r, mb.meta.world_size));
      ++res.blobs_compared;
      if (xa != xb) differ("state " + id + (ranks > 1 ? " of rank " + std::to_string(r) : ""));
    }
  }
  for (const auto& blob : mb.blobs) {
    if (blob.group == "history") continue;
    if (!a->HasBlob(blob.group, blob.name))
      differ("state " + blob.group + "/" + blob.name + " only in " + b_dir);
  }
  return res;
}

}  // namespace ftrain::ckpt
