// What the runtime's two translation units share (cpp_wrapper_runtime.cpp: tensors, arenas,
// checks; cpp_wrapper_dispatch.cpp: boxed dispatcher calls and packed weights). They compile
// in parallel, so the dispatcher's headers, the slowest to parse, stay out of the first.
// Sees ATen; never included by a generated wrapper.
#pragma once
#include "cpp_wrapper_prelude.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>

namespace ember_aot {
namespace detail {

inline c10::TensorImpl* impl_of(const Tensor& t) {
  return static_cast<c10::TensorImpl*>(t.impl());
}

// A new reference to ``t`` as an at::Tensor (undefined for a null handle).
inline at::Tensor aten(const Tensor& t) {
  if (t.impl() == nullptr) return at::Tensor();
  return at::Tensor(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(
      impl_of(t)));
}

inline Tensor handle(at::Tensor t) {
  if (!t.defined()) return Tensor();
  return Tensor::adopt(t.unsafeReleaseTensorImpl());
}

// One call site's packed weight: what it was packed from (held, so its address cannot be
// reused) at which version, and the packed copy.
struct Packed {
  std::mutex lock;
  at::Tensor source;
  int64_t version = -1;
  at::Tensor packed;
};

// A new packed-weight slot, listed so that release_caches empties it, and its removal.
Packed* enlist_packed();
void delist_packed(Packed* p);

}  // namespace detail
}  // namespace ember_aot
