// The bodies of cpp_wrapper_prelude.h on ATen, less the dispatcher's part
// (cpp_wrapper_dispatch.cpp): the only sources of an ahead-of-time package that see ATen's
// headers. Built once per machine and compiler flags (cached), linked into every package.
#include "cpp_wrapper_runtime.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember_aot {

// C entry status codes (the loaders turn them into their own exceptions).
enum Status : int { kOk = 0, kBadInput = 1, kFailed = 2, kIndexError = 3 };

// A caller's input that does not match the package (dtype, rank, size, device).
struct BadInput : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// An index tensor held a value out of range (the JIT wrapper raises IndexError).
struct IndexOutOfRange : std::out_of_range {
  using std::out_of_range::out_of_range;
};

static_assert(kFloat == static_cast<int64_t>(c10::ScalarType::Float), "ScalarType codes");
static_assert(kBFloat16 == static_cast<int64_t>(c10::ScalarType::BFloat16), "ScalarType codes");
static_assert(kBool == static_cast<int64_t>(c10::ScalarType::Bool), "ScalarType codes");
static_assert(kComplexDouble == static_cast<int64_t>(c10::ScalarType::ComplexDouble),
              "ScalarType codes");
static_assert(kStrided == static_cast<int64_t>(c10::Layout::Strided), "Layout codes");
static_assert(kChannelsLast == static_cast<int64_t>(c10::MemoryFormat::ChannelsLast),
              "MemoryFormat codes");
static_assert(kPreserveFormat == static_cast<int64_t>(c10::MemoryFormat::Preserve),
              "MemoryFormat codes");

using detail::aten;
using detail::handle;
using detail::impl_of;
using detail::Packed;

namespace {

const char* dtype_name(int64_t t) { return c10::toString(static_cast<c10::ScalarType>(t)); }

}  // namespace

void incref(void* impl) { c10::raw::intrusive_ptr::incref(static_cast<c10::TensorImpl*>(impl)); }
void decref(void* impl) { c10::raw::intrusive_ptr::decref(static_cast<c10::TensorImpl*>(impl)); }

void* Tensor::data() const { return impl_of(*this)->mutable_data(); }
int64_t Tensor::size(int64_t dim) const { return impl_of(*this)->size(dim); }
int64_t Tensor::stride(int64_t dim) const { return impl_of(*this)->stride(dim); }

Tensor arg(void* const* args, int64_t i) { return handle(*static_cast<at::Tensor*>(args[i])); }

void* release(Tensor t) { return new at::Tensor(aten(t)); }

Tensor fix(const Tensor& t, Ints size, Ints stride, Dtype dtype) {
  if (t.impl() == nullptr) return t;
  const auto want_dtype = static_cast<c10::ScalarType>(dtype);
  c10::IntArrayRef want(stride.begin(), stride.size());
  auto have = impl_of(t)->strides();
  const int64_t* sz = size.begin();
  bool same = c10::typeMetaToScalarType(impl_of(t)->dtype()) == want_dtype;
  for (size_t d = 0; d < size.size(); ++d) {
    if (sz[d] != 1 && have[d] != want[d]) same = false;
  }
  if (same) return t;
  at::Tensor out = at::detail::empty_strided_cpu(c10::IntArrayRef(size.begin(), size.size()),
                                                 want, want_dtype);
  out.copy_(aten(t));  // converts the dtype where it differs
  return handle(std::move(out));
}

namespace {

bool same_view(const at::Tensor& a, const at::Tensor& b) {
  return a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides();
}

}  // namespace

Tensor apart(const Tensor& t, std::initializer_list<Tensor> dsts, int64_t own) {
  if (t.impl() == nullptr) return t;
  const at::Tensor a = aten(t);
  int64_t j = 0;
  for (const Tensor& dst : dsts) {
    const at::Tensor d = aten(dst);
    if (a.is_alias_of(d) && !(j == own && same_view(a, d))) return handle(a.clone());
    ++j;
  }
  return t;
}

void write_back(const Tensor& dst, const Tensor& src) {
  at::Tensor d = aten(dst);
  const at::Tensor s = aten(src);
  if (!same_view(d, s)) d.copy_(s);
}

Tensor view(const Tensor& t, Ints size, Ints stride, int64_t offset) {
  at::Tensor base = aten(t);
  return handle(base.as_strided(c10::IntArrayRef(size.begin(), size.size()),
                                c10::IntArrayRef(stride.begin(), stride.size()),
                                base.storage_offset() + offset));
}

Tensor empty(Ints size, Ints stride, Dtype dtype) {
  return handle(at::detail::empty_strided_cpu(c10::IntArrayRef(size.begin(), size.size()),
                                              c10::IntArrayRef(stride.begin(), stride.size()),
                                              static_cast<c10::ScalarType>(dtype)));
}

namespace {
struct Pool {
  std::mutex lock;
  std::vector<at::Tensor> free;  // arenas no call holds
};
Pool& pool_of(ArenaPool& p) { return *static_cast<Pool*>(p.impl()); }

// What this package keeps between calls (each package links its own copy of this runtime),
// emptied by release_caches. Never destroyed: the statics it lists may outlive it at exit.
struct Caches {
  std::mutex lock;
  std::vector<Pool*> pools;
  std::vector<Packed*> packed;
};
Caches& caches() {
  static Caches* all = new Caches();
  return *all;
}

template <typename T>
T* enlist(std::vector<T*> Caches::*list, T* item) {
  std::lock_guard<std::mutex> held(caches().lock);
  (caches().*list).push_back(item);
  return item;
}

template <typename T>
void delist(std::vector<T*> Caches::*list, T* item) {
  std::lock_guard<std::mutex> held(caches().lock);
  auto& v = caches().*list;
  v.erase(std::remove(v.begin(), v.end(), item), v.end());
  delete item;
}
}  // namespace

namespace detail {
Packed* enlist_packed() { return enlist(&Caches::packed, new Packed()); }
void delist_packed(Packed* p) { delist(&Caches::packed, p); }
}  // namespace detail

ArenaPool::ArenaPool() : impl_(enlist(&Caches::pools, new Pool())) {}
ArenaPool::~ArenaPool() { delist(&Caches::pools, static_cast<Pool*>(impl_)); }

Lease::Lease(ArenaPool& pool, int64_t nbytes) : pool_(pool) {
  Pool& p = pool_of(pool_);
  {
    std::lock_guard<std::mutex> held(p.lock);
    if (!p.free.empty()) {
      base_ = handle(std::move(p.free.back()));
      p.free.pop_back();
    }
  }
  if (base_.impl() == nullptr) base_ = handle(at::detail::empty_cpu({nbytes}, at::kByte));
}

Lease::~Lease() {
  Pool& p = pool_of(pool_);
  try {
    std::lock_guard<std::mutex> held(p.lock);
    p.free.push_back(aten(base_));
  } catch (...) {  // no memory for the list: the arena is freed instead of kept
  }
}

Tensor Lease::slot(int64_t offset, Ints size, Ints stride, Dtype dtype) const {
  const at::Tensor base = aten(base_);
  const auto type = static_cast<c10::ScalarType>(dtype);
  at::Tensor t(at::detail::empty_cpu({0}, type));
  t.set_(base.storage(), offset / static_cast<int64_t>(c10::elementSize(type)),
         c10::IntArrayRef(size.begin(), size.size()),
         c10::IntArrayRef(stride.begin(), stride.size()));
  return handle(std::move(t));
}


void release_caches() {
  std::lock_guard<std::mutex> held(caches().lock);
  for (Pool* p : caches().pools) {
    std::lock_guard<std::mutex> pool_held(p->lock);
    p->free.clear();
  }
  for (Packed* p : caches().packed) {
    std::lock_guard<std::mutex> pack_held(p->lock);
    p->source = at::Tensor();
    p->packed = at::Tensor();
    p->version = -1;
  }
}

void check_index(const Tensor& flag, const char* message) {
  if (aten(flag).item<bool>()) throw IndexOutOfRange(message);
}

namespace {
int report(const char* what, char* err, int64_t err_len, int status) {
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, what, static_cast<size_t>(err_len - 1));
    err[err_len - 1] = '\0';
  }
  return status;
}
}  // namespace

int run_graph(void (*graph)(void* const* args, void** outputs), void* const* args,
              void** outputs, char* err, int64_t err_len) {
  try {
    graph(args, outputs);
    return kOk;
  } catch (const BadInput& e) {
    return report(e.what(), err, err_len, kBadInput);
  } catch (const IndexOutOfRange& e) {
    return report(e.what(), err, err_len, kIndexError);
  } catch (const c10::Error& e) {  // ATen's check failing: its message, not its backtrace
    return report(e.what_without_backtrace(), err, err_len, kFailed);
  } catch (const std::exception& e) {
    return report(e.what(), err, err_len, kFailed);
  }
}

void expect_rank(const Tensor& t, const char* name, int64_t rank) {
  if (t.impl() == nullptr) throw BadInput(std::string("input '") + name + "' is not a tensor");
  const c10::TensorImpl* i = impl_of(t);
  if (!i->device().is_cpu()) {
    throw BadInput(std::string("input '") + name + "': expected a CPU tensor, got one on " +
                   i->device().str());
  }
  if (i->dim() != rank) {
    throw BadInput(std::string("input '") + name + "': expected " + std::to_string(rank) +
                   " dimensions, got " + std::to_string(i->dim()));
  }
}

void expect_dtype(const Tensor& t, const char* name, Dtype want) {
  auto got = static_cast<int64_t>(c10::typeMetaToScalarType(impl_of(t)->dtype()));
  if (got != want) {
    throw BadInput(std::string("input '") + name + "': expected dtype " + dtype_name(want) +
                   ", got " + dtype_name(got));
  }
}

void expect_size(const Tensor& t, const char* name, int64_t dim, int64_t want) {
  if (t.size(dim) != want) {
    throw BadInput(std::string("input '") + name + "': dimension " + std::to_string(dim) +
                   " must be " + std::to_string(want) + ", got " + std::to_string(t.size(dim)));
  }
}

void expect_range(int64_t got, const char* name, int64_t dim, const char* sym, int64_t lo,
                  int64_t hi) {
  if (got < lo || got > hi) {
    throw BadInput(std::string("input '") + name + "': dimension " + std::to_string(dim) +
                   " (" + sym + ") is " + std::to_string(got) + ", outside the package's range [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

void expect_equal(int64_t got, int64_t want, const char* name, int64_t dim, const char* sym) {
  if (got != want) {
    throw BadInput(std::string("input '") + name + "': dimension " + std::to_string(dim) +
                   " must equal " + sym + " = " + std::to_string(want) + " (bound by an " +
                   "earlier input), got " + std::to_string(got));
  }
}

}  // namespace ember_aot
