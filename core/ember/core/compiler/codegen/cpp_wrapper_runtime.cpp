// The bodies of cpp_wrapper_prelude.h: the only part of an ahead-of-time package that sees
// ATen's headers. Built once per machine and compiler flags (cached), linked into every package.
#include "cpp_wrapper_prelude.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

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

namespace {

c10::TensorImpl* impl_of(const Tensor& t) { return static_cast<c10::TensorImpl*>(t.impl()); }

// A new reference to ``t`` as an at::Tensor (undefined for a null handle).
at::Tensor aten(const Tensor& t) {
  if (t.impl() == nullptr) return at::Tensor();
  return at::Tensor(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(
      impl_of(t)));
}

Tensor handle(at::Tensor t) {
  if (!t.defined()) return Tensor();
  return Tensor::adopt(t.unsafeReleaseTensorImpl());
}

std::vector<c10::IValue>& stack_of(void* s) { return *static_cast<std::vector<c10::IValue>*>(s); }

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

struct Packed {
  std::mutex lock;
  at::Tensor source;  // the weight packed (held, so its address cannot be reused)
  int64_t version = -1;
  at::Tensor packed;
};

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

namespace {

// oneDNN's linear costs ~15 us a call before any arithmetic: below this many multiply-adds
// ATen's sgemm was faster even on a packed weight ([1, 256] @ [256, 768]: 20.8 us vs 22.6;
// [8, 1024] @ [1024, 1024]: 336 vs 99). The wrapper packs only weights of at least
// PACKED_MIN_WEIGHT elements (cpp_wrapper.py).
constexpr int64_t kPackedMinMacs = int64_t{1} << 20;  // M * K * N

const c10::OperatorHandle* find_op(const char* name) {
  auto found = c10::Dispatcher::singleton().findSchema({name, ""});
  return found ? new c10::OperatorHandle(*found) : nullptr;
}

at::Tensor call_op(const c10::OperatorHandle& op, std::vector<c10::IValue> stack) {
  op.callBoxed(&stack);
  return stack.at(0).toTensor();
}

int64_t version_of(const at::Tensor& t) {
  // inference tensors keep no version counter (and cannot change outside inference mode)
  return t.is_inference() ? 0 : static_cast<int64_t>(t._version());
}

// ``w`` packed by ``pack``: the copy kept in ``slot``, made again when the weight is another
// tensor or has changed in place since.
template <typename Pack>
at::Tensor packed_weight(void* slot, const at::Tensor& w, Pack pack) {
  Packed& p = *static_cast<Packed*>(slot);
  std::lock_guard<std::mutex> held(p.lock);
  const int64_t version = version_of(w);
  if (!p.packed.defined() || !p.source.is_same(w) || p.version != version) {
    p.packed = pack();
    p.source = w;
    p.version = version;
  }
  return p.packed;
}

}  // namespace

PackedConv::PackedConv() : impl_(enlist(&Caches::packed, new Packed())) {}
PackedConv::~PackedConv() { delist(&Caches::packed, static_cast<Packed*>(impl_)); }

Tensor PackedConv::run(const Tensor& x_, const Tensor& w_, const Tensor& bias_, Ints stride,
                       Ints padding, Ints dilation, int64_t groups) {
  static const c10::OperatorHandle* reorder = find_op("mkldnn::_reorder_convolution_weight");
  static const c10::OperatorHandle* conv = find_op("mkldnn::_convolution_pointwise");
  static const c10::OperatorHandle convolution =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  const at::Tensor x = aten(x_), w = aten(w_), bias = aten(bias_);
  const c10::IValue b = bias.defined() ? c10::IValue(bias) : c10::IValue();
  auto ints = [](Ints v) { return c10::List<int64_t>(c10::ArrayRef<int64_t>(v.begin(), v.size())); };
  if (reorder == nullptr || conv == nullptr) {
    return handle(call_op(convolution, {x, w, b, ints(stride), ints(padding), ints(dilation),
                                        false, c10::List<int64_t>({0, 0}), groups}));
  }
  const at::Tensor packed = packed_weight(impl_, w, [&] {
    return call_op(*reorder, {w, ints(padding), ints(stride), ints(dilation), groups,
                              c10::List<int64_t>(x.sizes())});
  });
  return handle(call_op(*conv, {x, packed, b, ints(padding), ints(stride), ints(dilation),
                                groups, std::string("none"),
                                c10::List<std::optional<c10::Scalar>>(), std::string("")}));
}

PackedLinear::PackedLinear() : impl_(enlist(&Caches::packed, new Packed())) {}
PackedLinear::~PackedLinear() { delist(&Caches::packed, static_cast<Packed*>(impl_)); }

Tensor PackedLinear::run(const Tensor& x_, const Tensor& w_, const Tensor& bias_) {
  static const c10::OperatorHandle* reorder = find_op("mkldnn::_reorder_linear_weight");
  static const c10::OperatorHandle* linear = find_op("mkldnn::_linear_pointwise");
  static const c10::OperatorHandle addmm =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::addmm", "");
  static const c10::OperatorHandle mm =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
  const at::Tensor x = aten(x_), w = aten(w_), bias = aten(bias_);
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / std::max<int64_t>(k, 1);
  // bfloat16 (packed only for CPUs with AVX-512, where ATen's addmm calls oneDNN too): the
  // packed call was faster at every size tried, [1, 256] @ [256, 1024] 26 us vs 45
  const bool small = w.scalar_type() == at::kFloat && m * k * n < kPackedMinMacs;
  if (reorder == nullptr || linear == nullptr || small) {
    if (bias.defined()) return handle(call_op(addmm, {bias, x, w.t(), 1, 1}));
    return handle(call_op(mm, {x, w.t()}));
  }
  const at::Tensor packed =
      packed_weight(impl_, w, [&] { return call_op(*reorder, {w, c10::IValue()}); });
  return handle(call_op(*linear, {x, packed, bias.defined() ? c10::IValue(bias) : c10::IValue(),
                                  std::string("none"), c10::List<std::optional<c10::Scalar>>(),
                                  std::string("")}));
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

void* op(const char* name, const char* overload) {
  return new c10::OperatorHandle(c10::Dispatcher::singleton().findSchemaOrThrow(name, overload));
}

Call::Call(void* op) : op_(op), stack_(new std::vector<c10::IValue>()) {
  stack_of(stack_).reserve(12);
}
Call::~Call() { delete &stack_of(stack_); }

Call& Call::tensor(const Tensor& t) {
  stack_of(stack_).emplace_back(aten(t));
  return *this;
}
Call& Call::none() {
  stack_of(stack_).emplace_back();
  return *this;
}
Call& Call::i(int64_t v) {
  stack_of(stack_).emplace_back(v);
  return *this;
}
Call& Call::f(double v) {
  stack_of(stack_).emplace_back(v);
  return *this;
}
Call& Call::b(bool v) {
  stack_of(stack_).emplace_back(v);
  return *this;
}
Call& Call::str(const char* v) {
  stack_of(stack_).emplace_back(std::string(v));
  return *this;
}
Call& Call::cpu() {
  stack_of(stack_).emplace_back(c10::Device(c10::DeviceType::CPU));
  return *this;
}
Call& Call::ints(Ints v) {
  stack_of(stack_).emplace_back(c10::List<int64_t>(c10::ArrayRef<int64_t>(v.begin(), v.size())));
  return *this;
}
Call& Call::floats(std::initializer_list<double> v) {
  stack_of(stack_).emplace_back(c10::List<double>(c10::ArrayRef<double>(v.begin(), v.size())));
  return *this;
}
Call& Call::bools(std::initializer_list<bool> v) {
  stack_of(stack_).emplace_back(c10::List<bool>(c10::ArrayRef<bool>(v.begin(), v.size())));
  return *this;
}
Call& Call::tensors(std::initializer_list<Tensor> v) {
  c10::List<at::Tensor> list;
  list.reserve(v.size());
  for (const Tensor& t : v) list.push_back(aten(t));
  stack_of(stack_).emplace_back(std::move(list));
  return *this;
}
Call& Call::optional_tensors(std::initializer_list<Tensor> v) {
  c10::List<std::optional<at::Tensor>> list;
  list.reserve(v.size());
  for (const Tensor& t : v) {
    list.push_back(t.impl() == nullptr ? std::optional<at::Tensor>() : aten(t));
  }
  stack_of(stack_).emplace_back(std::move(list));
  return *this;
}

Call& Call::optional_scalars(std::initializer_list<OptScalar> v) {
  c10::List<std::optional<c10::Scalar>> list;
  list.reserve(v.size());
  for (const OptScalar& x : v) {
    if (x.kind == OptScalar::kNone) {
      list.push_back(std::nullopt);
    } else if (x.kind == OptScalar::kInt) {
      list.push_back(c10::Scalar(x.i));
    } else {
      list.push_back(c10::Scalar(x.f));
    }
  }
  stack_of(stack_).emplace_back(std::move(list));
  return *this;
}

void Call::run() { static_cast<c10::OperatorHandle*>(op_)->callBoxed(&stack_of(stack_)); }

Tensor Call::out(int64_t k) const { return handle(stack_of(stack_).at(k).toTensor()); }

Tensor Call::out_list(int64_t k) const {
  return handle(stack_of(stack_).at(0).toTensorVector().at(k));
}

}  // namespace ember_aot
