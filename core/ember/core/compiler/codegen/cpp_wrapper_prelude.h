// What every generated C++ wrapper (ahead-of-time packages) starts with: ATen's tensor and
// dispatcher, the error kinds its C entry reports, and the few helpers the wrapper calls.
#pragma once
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember_aot {

// A caller's input that does not match the package (dtype, rank, size, device).
struct BadInput : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// An index tensor held a value out of range (the JIT wrapper raises IndexError).
struct IndexOutOfRange : std::out_of_range {
  using std::out_of_range::out_of_range;
};

// C entry status codes (the loaders turn them into their own exceptions).
enum Status : int { kOk = 0, kBadInput = 1, kFailed = 2, kIndexError = 3 };

inline int report(const char* what, char* err, int64_t err_len, int status) {
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, what, static_cast<size_t>(err_len - 1));
    err[err_len - 1] = '\0';
  }
  return status;
}

inline const char* dtype_name(c10::ScalarType t) { return c10::toString(t); }

// ``t`` laid out with ``stride``: a copy only when a dimension longer than 1 disagrees.
inline at::Tensor fix(const at::Tensor& t, c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto have = t.strides();
  bool same = true;
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] != 1 && have[d] != stride[d]) same = false;
  }
  if (same) return t;
  at::Tensor out = at::detail::empty_strided_cpu(size, stride, t.scalar_type());
  out.copy_(t);
  return out;
}

// A view with ``offset`` counted from ``t``'s first element (``t`` may itself be a view).
inline at::Tensor view(const at::Tensor& t, c10::IntArrayRef size, c10::IntArrayRef stride,
                       int64_t offset) {
  return t.as_strided(size, stride, t.storage_offset() + offset);
}

inline at::Tensor empty(c10::IntArrayRef size, c10::IntArrayRef stride, c10::ScalarType t) {
  return at::detail::empty_strided_cpu(size, stride, t);
}

inline c10::OperatorHandle op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

inline std::optional<at::Tensor> some(const at::Tensor& t) { return t; }

// Input checks: what was expected, named after the input.
inline void expect_dtype(const at::Tensor& t, const char* name, c10::ScalarType want) {
  if (t.scalar_type() != want) {
    throw BadInput(std::string("input '") + name + "': expected dtype " + dtype_name(want) +
                   ", got " + dtype_name(t.scalar_type()));
  }
}

inline void expect_rank(const at::Tensor& t, const char* name, int64_t rank) {
  if (!t.defined()) throw BadInput(std::string("input '") + name + "' is not a tensor");
  if (!t.device().is_cpu()) {
    throw BadInput(std::string("input '") + name + "': expected a CPU tensor, got one on " +
                   t.device().str());
  }
  if (t.dim() != rank) {
    throw BadInput(std::string("input '") + name + "': expected " + std::to_string(rank) +
                   " dimensions, got " + std::to_string(t.dim()));
  }
}

inline void expect_size(const at::Tensor& t, const char* name, int64_t dim, int64_t want) {
  if (t.size(dim) != want) {
    throw BadInput(std::string("input '") + name + "': dimension " + std::to_string(dim) +
                   " must be " + std::to_string(want) + ", got " + std::to_string(t.size(dim)));
  }
}

inline void expect_range(int64_t got, const char* name, int64_t dim, const char* sym,
                         int64_t lo, int64_t hi) {
  if (got < lo || got > hi) {
    throw BadInput(std::string("input '") + name + "': dimension " + std::to_string(dim) +
                   " (" + sym + ") is " + std::to_string(got) + ", outside the package's range [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

inline void expect_equal(int64_t got, int64_t want, const char* name, int64_t dim,
                         const char* sym) {
  if (got != want) {
    throw BadInput(std::string("input '") + name + "': dimension " + std::to_string(dim) +
                   " must equal " + sym + " = " + std::to_string(want) + " (bound by an " +
                   "earlier input), got " + std::to_string(got));
  }
}

}  // namespace ember_aot
