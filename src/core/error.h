// Internal error type. Inside the engine, code throws tessera::Error; public API entry points
// catch it and return the Status (exceptions never cross include/tessera).
#pragma once

#include <stdexcept>
#include <string>

#include "tessera/status.h"

namespace tessera {

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }
  Status status() const { return Status(code_, what()); }

 private:
  ErrorCode code_;
};

[[noreturn]] inline void throw_error(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

// Checks an invariant of caller-supplied arguments.
#define TESSERA_CHECK_ARG(cond, msg)                                              \
  do {                                                                            \
    if (!(cond)) ::tessera::throw_error(::tessera::ErrorCode::kInvalidArgument, msg); \
  } while (0)

}  // namespace tessera
