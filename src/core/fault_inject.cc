// FTRAIN_FAULT parsing (core/fault_inject.h).
#include "core/fault_inject.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/config.h"
#include "core/log.h"

namespace ftrain {

const char* FaultKindName(FaultKind k) {
  switch (k) {
    case FaultKind::kNanGrad:
      return "nan_grad";
    case FaultKind::kSpike:
      return "spike";
    case FaultKind::kBitflip:
      return "bitflip";
    case FaultKind::kStall:
      return "stall";
    case FaultKind::kNanLoss:
      break;
  }
  return "nan_loss";
}

std::vector<Fault> FaultPlan::At(int64_t step, int rank) const {
  std::vector<Fault> out;
  for (const Fault& f : faults) {
    if (f.step == step && (f.rank < 0 || f.rank == rank)) out.push_back(f);
  }
  return out;
}

std::string FaultName(const Fault& f) {
  return std::string(FaultKindName(f.kind)) + "@" + std::to_string(f.step) + ":" +
         (f.rank < 0 ? std::string("*") : std::to_string(f.rank));
}

bool FiresOncePerRun(FaultKind k) { return k == FaultKind::kBitflip || k == FaultKind::kStall; }

Status RecordFiredFault(const std::string& fired_path, const Fault& f) {
  const std::string line = FaultName(f) + "\n";
  const int fd = ::open(fired_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(fired_path + ": open: " + std::strerror(errno));
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Status::IOError(fired_path + ": write: " + std::strerror(err));
  return Status::Ok();
}

void DropFiredFaults(const std::string& fired_path, FaultPlan* plan) {
  std::ifstream in(fired_path);
  std::set<std::string> fired;
  for (std::string line; std::getline(in, line);) fired.insert(line);
  if (fired.empty()) return;
  auto& v = plan->faults;
  v.erase(std::remove_if(v.begin(), v.end(),
                         [&](const Fault& f) {
                           return FiresOncePerRun(f.kind) && fired.count(FaultName(f)) > 0;
                         }),
          v.end());
}

namespace {

Status BadItem(const std::string& item, const std::string& why) {
  return Status::InvalidArgument(std::string(kFaultEnv) + ": '" + item + "' " + why +
                                 " (give KIND@STEP[:RANK],... with KIND nan_loss, nan_grad, "
                                 "spike, bitflip or stall; testing only, see docs/operations.md)");
}

StatusOr<Fault> ParseItem(const std::string& item) {
  const size_t at = item.find('@');
  if (at == std::string::npos) return BadItem(item, "has no @STEP");
  Fault f;
  const std::string kind = item.substr(0, at);
  if (kind == "nan_loss") {
    f.kind = FaultKind::kNanLoss;
  } else if (kind == "nan_grad") {
    f.kind = FaultKind::kNanGrad;
  } else if (kind == "spike") {
    f.kind = FaultKind::kSpike;
  } else if (kind == "bitflip") {
    f.kind = FaultKind::kBitflip;
  } else if (kind == "stall") {
    f.kind = FaultKind::kStall;
  } else {
    return BadItem(item, "names no known fault");
  }
  std::string step = item.substr(at + 1), rank;
  if (const size_t colon = step.find(':'); colon != std::string::npos) {
    rank = step.substr(colon + 1);
    step = step.substr(0, colon);
  }
  if (!ParseInt64(step, &f.step) || f.step < 1) return BadItem(item, "has no step >= 1");
  if (!rank.empty()) {
    int64_t r = 0;
    if (!ParseInt64(rank, &r) || r < 0 || r > (1 << 30)) return BadItem(item, "has a bad rank");
    f.rank = static_cast<int>(r);
  }
  return f;
}

}  // namespace

StatusOr<FaultPlan> ParseFaultPlan(const std::string& spec, const std::string& factor) {
  FaultPlan plan;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    FT_ASSIGN_OR_RETURN(Fault f, ParseItem(item));
    plan.faults.push_back(f);
  }
  if (!factor.empty()) {
    char* end = nullptr;
    plan.spike_factor = std::strtod(factor.c_str(), &end);
    if (end == factor.c_str() || *end != '\0' || !std::isfinite(plan.spike_factor) ||
        plan.spike_factor == 0) {
      return Status::InvalidArgument(std::string(kFaultFactorEnv) + " = '" + factor +
                                     "' is not a finite non-zero number");
    }
  }
  return plan;
}

StatusOr<FaultPlan> FaultPlanFromEnv() {
  const char* spec = std::getenv(kFaultEnv);
  if (spec == nullptr || *spec == '\0') return FaultPlan();
  const char* factor = std::getenv(kFaultFactorEnv);
  FT_ASSIGN_OR_RETURN(FaultPlan plan, ParseFaultPlan(spec, factor ? factor : ""));
  // A stray variable in a production job would corrupt steps on purpose: say so up front.
  FT_LOG(Warning) << kFaultEnv << "=" << spec
                  << " is set: this run injects numeric faults (testing only; see "
                     "docs/operations.md, Guardrails)";
  return plan;
}

}  // namespace ftrain
