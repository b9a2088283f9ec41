// The prelude's calls through ATen's dispatcher: boxed calls of any operator (Call, op) and
// the packed-weight call sites (PackedLinear, PackedConv). Apart from cpp_wrapper_runtime.cpp
// because the dispatcher's headers take most of the runtime's build time; the two compile in
// parallel.
#include "cpp_wrapper_runtime.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ember_aot {

using detail::aten;
using detail::handle;
using detail::Packed;

namespace {

std::vector<c10::IValue>& stack_of(void* s) { return *static_cast<std::vector<c10::IValue>*>(s); }

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

PackedConv::PackedConv() : impl_(detail::enlist_packed()) {}
PackedConv::~PackedConv() { detail::delist_packed(static_cast<Packed*>(impl_)); }

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

PackedLinear::PackedLinear() : impl_(detail::enlist_packed()) {}
PackedLinear::~PackedLinear() { detail::delist_packed(static_cast<Packed*>(impl_)); }

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
