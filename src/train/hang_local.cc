// Node-local progress files of the hang guard (hang_local.h).
#include "train/hang_local.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "records/progress.h"

namespace ftrain::train {

using records::WriteReplace;

namespace {

uint64_t Fnv1a(const std::string& s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

std::string NodeLocalProgress::DirFor(const std::string& root, const std::string& run_dir,
                                      const std::string& generation, int node) {
  const uint64_t h = Fnv1a(std::to_string(node), Fnv1a(generation + '\0', Fnv1a(run_dir + '\0')));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return root + "/ftrain-hang-" + hex;
}

NodeLocalProgress::NodeLocalProgress(std::string dir, int rank, std::string generation, Env* env)
    : dir_(std::move(dir)), rank_(rank), generation_(std::move(generation)), env_(env) {}

Status NodeLocalProgress::Open() {
  if (::mkdir(dir_.c_str(), 0700) == 0 || errno == EEXIST) {
    if (env_->IsDirectory(dir_)) return Status::Ok();
  }
  return Status::IOError("mkdir " + dir_ + ": " + std::strerror(errno));
}

Status NodeLocalProgress::Write(const RankProgress& p) {
  return WriteReplace(dir_ + "/rank-" + std::to_string(rank_) + ".json", ProgressJson(p));
}

std::vector<RankProgress> NodeLocalProgress::ReadAll() const {
  std::vector<RankProgress> out;
  auto names = env_->ListDir(dir_);
  if (!names.ok()) return out;  // no directory: nothing shared yet
  for (const std::string& name : *names) {
    if (name.rfind("rank-", 0) != 0 || name.size() < 10 ||
        name.compare(name.size() - 5, 5, ".json") != 0) {
      continue;  // a temporary or the verdict
    }
    std::string text;
    RankProgress p;
    if (!env_->ReadFile(dir_ + "/" + name, &text).ok()) continue;  // just removed
    if (!ParseProgress(text, &p) || p.generation != generation_) continue;
    out.push_back(std::move(p));
  }
  return out;
}

Status NodeLocalProgress::WriteVerdict(const HangVerdict& v) {
  nlohmann::json hung = nlohmann::json::array();
  for (const RankProgress& p : v.hung) hung.push_back(nlohmann::json::parse(ProgressJson(p)));
  const nlohmann::json j = {{"generation", generation_}, {"recorder", v.recorder}, {"hung", hung}};
  return WriteReplace(dir_ + "/verdict.json", j.dump());
}

bool NodeLocalProgress::ReadVerdict(HangVerdict* v) const {
  std::string text;
  if (!env_->ReadFile(dir_ + "/verdict.json", &text).ok()) return false;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("generation", std::string()) != generation_ ||
      !j.contains("hung") || !j["hung"].is_array() || !j.contains("recorder") ||
      !j["recorder"].is_number_integer()) {
    return false;
  }
  HangVerdict out;
  out.recorder = j["recorder"].get<int>();
  for (const nlohmann::json& h : j["hung"]) {
    RankProgress p;
    if (!ParseProgress(h.dump(), &p)) return false;
    if (p.rank == rank_) out.me_hung = true;
    out.hung.push_back(std::move(p));
  }
  if (out.hung.empty()) return false;
  *v = std::move(out);
  return true;
}

void NodeLocalProgress::Remove() {
  ::unlink((dir_ + "/rank-" + std::to_string(rank_) + ".json").c_str());
  // A rank removes its entry only once it has read the verdict (or ends without one): with no
  // entry left, nobody needs the verdict. Otherwise a later rank's Remove takes them.
  auto names = env_->ListDir(dir_);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    if (name.rfind("rank-", 0) == 0) return;
  }
  ::unlink((dir_ + "/verdict.json").c_str());
  ::rmdir(dir_.c_str());  // fails if a rank wrote again meanwhile: its own Remove comes later
}

}  // namespace ftrain::train
