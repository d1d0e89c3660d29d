// Status and StatusOr<T>: how every fallible function in ftrain reports failure.
// A Status has a named kind and a message that names the file/flag/rank and what to do.
// Exit codes are decided only in main() (see ExitCodeFor in cli); library code never exits.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace ftrain {

// [[nodiscard]]: a call whose Status (or StatusOr) is dropped does not compile. Handle it, or
// cast it to (void) with a comment saying why ignoring it is right (STYLE.md 2).
class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,     // bad flag, config value or request: a usage error (exit 2)
    kNotFound,            // a file, key or checkpoint that should exist does not
    kCorruption,          // data is present but wrong: checksum, magic, truncation (exit 1)
    kIOError,             // the OS failed an I/O call (ENOSPC, EIO, ...)
    kFailedPrecondition,  // the environment is not as required (exit 2)
    kDeadlineExceeded,    // a timeout, e.g. the rendezvous
    kUnavailable,         // a peer or service went away (a dead rank)
    kAborted,             // stopped on purpose (signal, peer failure)
    kInternal,            // a bug or an unexpected library error
    // Storage that holds good data could not be read for a bounded time (EIO, ESTALE, a file
    // gone missing): an outage to retry later, never damage (ftrain train exits 74).
    kStorageUnavailable,
    // This node cannot run the work (no usable GPU, a driver that does not start, a local
    // path missing here): the node's fault, not the configuration's (ftrain train exits 76).
    kNodeFault,
  };

  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {Code::kFailedPrecondition, std::move(m)};
  }
  static Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status NodeFault(std::string m) { return {Code::kNodeFault, std::move(m)}; }
  static Status StorageUnavailable(std::string m) {
    return {Code::kStorageUnavailable, std::move(m)};
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsStorageUnavailable() const { return code_ == Code::kStorageUnavailable; }
  bool IsNodeFault() const { return code_ == Code::kNodeFault; }

  // "Corruption: <message>"; "OK" for success.
  std::string ToString() const;
  static const char* CodeName(Code code);

  // Returns a copy with "context: " prepended to the message (same code).
  Status Annotate(const std::string& context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

// The project's one exception type, thrown only across module boundaries that cannot
// return a Status (constructors, callbacks from LibTorch) and caught in main().
class StatusError : public std::exception {
 public:
  explicit StatusError(Status s) : status_(std::move(s)), what_(status_.ToString()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

}  // namespace ftrain

#define FT_RETURN_IF_ERROR(expr)     \
  do {                               \
    ::ftrain::Status _ft_s = (expr); \
    if (!_ft_s.ok()) return _ft_s;   \
  } while (0)

#define FT_CONCAT_INNER(a, b) a##b
#define FT_CONCAT(a, b) FT_CONCAT_INNER(a, b)
#define FT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
#define FT_ASSIGN_OR_RETURN(lhs, expr) \
  FT_ASSIGN_OR_RETURN_IMPL(FT_CONCAT(_ft_or_, __LINE__), lhs, expr)
