// Checkpoint root and shard naming.
#include "ckpt/filename.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace ftrain::ckpt {
namespace {

// Parses exactly `digits` decimal digits at s[pos...]; -1 on anything else.
int64_t ParseDigits(const std::string& s, size_t pos, size_t digits) {
  if (s.size() < pos + digits) return -1;
  int64_t v = 0;
  for (size_t i = pos; i < pos + digits; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

std::string Fmt(const char* pattern, int64_t v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), pattern, static_cast<long long>(v));
  return buf;
}

}  // namespace

std::string StepDirName(int64_t step) { return Fmt("step-%08lld", step); }
std::string PartialDirName(int64_t step) { return StepDirName(step) + ".partial"; }
std::string DeletingDirName(int64_t step) { return StepDirName(step) + ".deleting"; }
std::string RestoreDirName(int64_t step) { return StepDirName(step) + ".restore"; }

RootEntry ParseRootEntry(const std::string& name) {
  RootEntry e;
  if (name.rfind("step-", 0) != 0) return e;
  const int64_t step = ParseDigits(name, 5, 8);
  if (step < 0) return e;
  const std::string suffix = name.substr(13);
  if (suffix.empty())
    e.kind = EntryKind::kComplete;
  else if (suffix == ".partial")
    e.kind = EntryKind::kPartial;
  else if (suffix == ".deleting")
    e.kind = EntryKind::kDeleting;
  else if (suffix == ".corrupt" ||
           (suffix.rfind(".corrupt-", 0) == 0 && suffix.size() > 9 && suffix.size() <= 13 &&
            suffix.find_first_not_of("0123456789", 9) == std::string::npos))
    e.kind = EntryKind::kCorrupt;
  else
    return e;
  e.step = step;
  return e;
}

std::string CorruptDirName(int64_t step, int n) {
  return StepDirName(step) + (n <= 1 ? ".corrupt" : ".corrupt-" + std::to_string(n));
}

std::string ShardFileName(int rank) { return Fmt("shard-%05lld.h5", rank); }
std::string ShardTempName(int rank) {
  static std::atomic<uint64_t> counter{0};
  return ShardFileName(rank) + ".tmp." + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1));
}
std::string ReceiptFileName(int rank) { return Fmt("shard-%05lld.json", rank); }

int ParseShardFileName(const std::string& name) {
  if (name.size() != 14 || name.rfind("shard-", 0) != 0 || name.substr(11) != ".h5") return -1;
  return static_cast<int>(ParseDigits(name, 6, 5));
}

bool IsSafeRelativeName(const std::string& name) {
  if (name.empty() || name.size() > 255) return false;
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos) return false;
  if (name.find('\0') != std::string::npos) return false;
  if (name == "." || name == ".." || name.front() == '.') return false;
  return true;
}

}  // namespace ftrain::ckpt
