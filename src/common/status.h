// Status and StatusOr: the project's error values.
//
// Errors travel as values with a code and a human message; each layer may add
// context with `WithContext` ("placing task 7: " + inner message). HTTP codes
// appear only in the API layer, which maps StatusCode once at its boundary.
//
// Thread-safety: plain value types; safe to copy between threads.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace hf {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong; `field` names it
  kNotFound,            // the named object does not exist (or is not visible)
  kAlreadyExists,       // an object with that identity already exists
  kFailedPrecondition,  // valid input, but the current state forbids it
  kResourceExhausted,   // does not fit now; may fit later
  kUnavailable,         // a dependency is down; retry
  kInternal,            // a bug or a broken invariant
  kUnauthenticated,     // no or unknown credentials
  kPermissionDenied,    // known caller, not allowed to do this
  kAborted,             // a concurrent change won (compare-and-set lost)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message, std::string field = {}) {
    return Status(StatusCode::kInvalidArgument, std::move(message),
                  std::move(field));
  }
  static Status NotFound(std::string message) {
    return Status(StatusCode::kNotFound, std::move(message));
  }
  static Status AlreadyExists(std::string message) {
    return Status(StatusCode::kAlreadyExists, std::move(message));
  }
  static Status FailedPrecondition(std::string message) {
    return Status(StatusCode::kFailedPrecondition, std::move(message));
  }
  static Status ResourceExhausted(std::string message) {
    return Status(StatusCode::kResourceExhausted, std::move(message));
  }
  static Status Unavailable(std::string message) {
    return Status(StatusCode::kUnavailable, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }
  static Status Unauthenticated(std::string message) {
    return Status(StatusCode::kUnauthenticated, std::move(message));
  }
  static Status PermissionDenied(std::string message) {
    return Status(StatusCode::kPermissionDenied, std::move(message));
  }
  static Status Aborted(std::string message) {
    return Status(StatusCode::kAborted, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The request field the error is about, when there is one ("" otherwise).
  const std::string& field() const { return field_; }

  // Returns a copy whose message is prefixed with `context` + ": ".
  Status WithContext(std::string_view context) const;

  // "INVALID_ARGUMENT: message (field: x)".
  std::string ToString() const;

  friend bool operator==(const Status&, const Status&) = default;

 private:
  Status(StatusCode code, std::string message, std::string field = {})
      : code_(code), message_(std::move(message)), field_(std::move(field)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string field_;
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr built from an OK Status has no value");
    if (status_.ok()) status_ = Status::Internal("StatusOr given an OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T& value() & {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace hf

// Returns early from the enclosing function when `expr` is not OK.
#define HF_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::hf::Status hf_status_ = (expr);        \
    if (!hf_status_.ok()) return hf_status_; \
  } while (false)
