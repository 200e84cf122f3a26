// Status and Expected<T>: errors as values at library boundaries.
//
//   tessera::Expected<int> parse(std::string_view s);
//   auto r = parse("42");
//   if (!r) { std::cerr << r.status().message(); return 1; }
//   int v = *r;
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tessera {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // caller passed something malformed
  kNotFound,         // file, key or tensor missing
  kCorruptData,      // untrusted bytes failed validation
  kUnsupported,      // valid input we do not handle (architecture, dtype, template)
  kIo,               // OS-level read/map failure
  kOutOfMemory,
  kInternal,
};

const char* error_code_name(ErrorCode code);

class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return {}; }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>"
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Holds either a value or a non-ok Status.
template <class T>
class Expected {
 public:
  Expected(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tessera
