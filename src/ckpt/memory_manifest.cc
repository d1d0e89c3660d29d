// The memory tier's manifest (memory_manifest.h): JSON in, JSON out, fenced writes.
#include "ckpt/memory_manifest.h"

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "ckpt/filename.h"

namespace ftrain::ckpt {
namespace {

constexpr char kFormat[] = "ftrain-memory-tier";
constexpr int kVersion = 1;

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool ParseHex(const std::string& s, uint64_t* v) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  *v = std::strtoull(s.c_str(), nullptr, 16);
  return true;
}

}  // namespace

std::string MemoryManifest::ToJson() const {
  nlohmann::json d = nlohmann::json::array();
  for (uint64_t x : digests) d.push_back(Hex(x));
  nlohmann::json j = {{"format", kFormat},
                      {"version", kVersion},
                      {"step", step},
                      {"generation", generation},
                      {"world_size", world_size},
                      {"config_hash", config_hash},
                      {"digests", d}};
  return j.dump(1) + "\n";
}

StatusOr<MemoryManifest> MemoryManifest::FromJson(const std::string& text,
                                                  const std::string& path) {
  auto bad = [&](const std::string& why) {
    return Status::Corruption("memory manifest '" + path + "': " + why);
  };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return bad("not a JSON object");
  if (j.value("format", std::string()) != kFormat) return bad("not an ftrain memory manifest");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kVersion) {
    return bad("unsupported version");
  }
  MemoryManifest m;
  if (!j.contains("step") || !j["step"].is_number_integer() || !j.contains("world_size") ||
      !j["world_size"].is_number_integer() || !j.contains("digests") || !j["digests"].is_array() ||
      !j.contains("generation") || !j["generation"].is_string() || !j.contains("config_hash") ||
      !j["config_hash"].is_string()) {
    return bad("missing or mistyped field");
  }
  m.step = j["step"].get<int64_t>();
  m.world_size = j["world_size"].get<int>();
  m.generation = j["generation"].get<std::string>();
  m.config_hash = j["config_hash"].get<std::string>();
  if (m.step < 0 || m.step > kMaxStep) return bad("step out of range");
  if (m.world_size < 1 || m.world_size > kMaxWorldSize) return bad("world size out of range");
  if (j["digests"].size() != static_cast<size_t>(m.world_size)) {
    return bad("expected one digest per rank");
  }
  for (const auto& d : j["digests"]) {
    uint64_t v = 0;
    if (!d.is_string() || !ParseHex(d.get<std::string>(), &v)) return bad("malformed digest");
    m.digests.push_back(v);
  }
  return m;
}

StatusOr<std::optional<MemoryManifest>> ReadMemoryManifest(Env* env, const std::string& root) {
  const std::string path = JoinPath(root, kMemoryManifestName);
  if (!env->FileExists(path)) return std::optional<MemoryManifest>();
  std::string text;
  Status s = env->ReadFile(path, &text);
  if (!s.ok()) return Status::Corruption("memory manifest '" + path + "': " + s.message());
  FT_ASSIGN_OR_RETURN(MemoryManifest m, MemoryManifest::FromJson(text, path));
  return std::optional<MemoryManifest>(std::move(m));
}

Status WriteMemoryManifest(Env* env, const std::string& root, const MemoryManifest& m) {
  if (m.world_size < 1 || m.digests.size() != static_cast<size_t>(m.world_size)) {
    return Status::InvalidArgument("memory manifest: one digest per rank expected");
  }
  // Fencing: generation ids are ordered by time ("<unix ms>-<random>", store.h). An unreadable
  // file is replaced: it fences nothing and would only hide newer restorable steps.
  auto old = ReadMemoryManifest(env, root);
  if (old.ok() && old->has_value()) {
    const MemoryManifest& o = **old;
    if (o.generation > m.generation) {
      return Status::FailedPrecondition("memory manifest in " + root +
                                        " belongs to the newer job "
                                        "start " +
                                        o.generation + "; this writer (" + m.generation +
                                        ") is stale");
    }
    if (o.generation == m.generation && o.step > m.step) {
      return Status::FailedPrecondition("memory manifest in " + root + " already records step " +
                                        std::to_string(o.step) + " > " + std::to_string(m.step));
    }
  }
  return WriteFileDurably(env, JoinPath(root, kMemoryManifestName), m.ToJson());
}

StatusOr<int64_t> DropMemoryManifestNewerThan(Env* env, const std::string& root,
                                              int64_t checked_step) {
  auto rec = ReadMemoryManifest(env, root);
  if (!rec.ok() || !rec->has_value() || (**rec).step <= checked_step) return int64_t{-1};
  const std::string path = JoinPath(root, kMemoryManifestName);
  Status s = env->RemoveFile(path);
  if (s.ok()) s = env->SyncDir(root);
  if (!s.ok()) {
    return Status::IOError("dropping the unchecked memory record " + path + " (step " +
                           std::to_string((**rec).step) + "): " + s.message() +
                           "; remove it by hand before the restart");
  }
  return (**rec).step;
}

}  // namespace ftrain::ckpt
