// SPDX-License-Identifier: Apache-2.0
/// @file error.hpp
/// The throwing side of the error model: `ShapeError` and `throw_if_error`. Built without
/// exceptions (`-fno-exceptions`, or `ATTNREF_NO_EXCEPTIONS` defined), errors go to an
/// overridable handler instead; the default prints the error and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "attnref/core/status.hpp"

#if !defined(ATTNREF_NO_EXCEPTIONS) && \
    !(defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND))
#define ATTNREF_NO_EXCEPTIONS 1
#endif

namespace attnref {

/// Thrown by the `validate_*` wrappers and by the checked kernel entry points.
/// `what()` is `Status::to_string()`; `status()` gives the code, JAX id and values.
class ShapeError : public std::invalid_argument {
 public:
  explicit ShapeError(const Status& status)
      : std::invalid_argument(status.to_string()), status_(status) {}
  const Status& status() const noexcept { return status_; }

 private:
  Status status_;
};

/// Called with the error when exceptions are off. It must not return (if it does, attnref
/// aborts anyway).
using ErrorHandler = void (*)(const Status&);

namespace detail {
inline void default_error_handler(const Status& status) {
  std::fprintf(stderr, "attnref: %s\n", status.to_string().c_str());
  std::abort();
}
inline ErrorHandler& error_handler_slot() noexcept {
  static ErrorHandler handler = &default_error_handler;
  return handler;
}
}  // namespace detail

/// Installs `handler` for builds without exceptions; returns the previous one. nullptr restores
/// the default (print and abort).
inline ErrorHandler set_error_handler(ErrorHandler handler) noexcept {
  ErrorHandler previous = detail::error_handler_slot();
  detail::error_handler_slot() = handler != nullptr ? handler : &detail::default_error_handler;
  return previous;
}

/// Throws `ShapeError(status)` (or calls the handler without exceptions) when `status` is an
/// error; does nothing on success.
inline void throw_if_error(const Status& status) {
  if (status.ok()) return;
#if defined(ATTNREF_NO_EXCEPTIONS)
  detail::error_handler_slot()(status);
  std::abort();
#else
  throw ShapeError(status);
#endif
}

}  // namespace attnref
