// Status formatting.
#include "core/status.h"

namespace ftrain {

const char* Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "Invalid argument";
    case Code::kNotFound:
      return "Not found";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "I/O error";
    case Code::kFailedPrecondition:
      return "Failed precondition";
    case Code::kDeadlineExceeded:
      return "Deadline exceeded";
    case Code::kUnavailable:
      return "Unavailable";
    case Code::kAborted:
      return "Aborted";
    case Code::kInternal:
      return "Internal error";
    case Code::kStorageUnavailable:
      return "Storage unavailable";
    case Code::kNodeFault:
      return "Node fault";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::Annotate(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace ftrain
