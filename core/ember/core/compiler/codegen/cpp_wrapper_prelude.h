// What every generated C++ wrapper (ahead-of-time packages) starts with: a tensor handle and
// the calls a wrapper makes, declared without ATen's headers. Their bodies
// (cpp_wrapper_runtime.cpp, cpp_wrapper_dispatch.cpp) use ATen and the dispatcher; they are
// built once per machine and linked into every package, so a wrapper itself compiles in a
// fraction of a second.
#pragma once
#include <cstdint>
#include <initializer_list>

namespace ember_aot {

// c10::ScalarType, c10::Layout and c10::MemoryFormat values (the runtime checks them).
enum Dtype : int64_t {
  kByte = 0, kChar = 1, kShort = 2, kInt = 3, kLong = 4, kHalf = 5, kFloat = 6, kDouble = 7,
  kComplexFloat = 9, kComplexDouble = 10, kBool = 11, kBFloat16 = 15,
};
enum Layout : int64_t { kStrided = 0 };
enum MemoryFormat : int64_t { kContiguousFormat = 0, kPreserveFormat = 1, kChannelsLast = 2 };

void incref(void* impl);
void decref(void* impl);

// One owned reference to an at::Tensor's implementation; null is an undefined tensor.
class Tensor {
 public:
  Tensor() = default;
  static Tensor adopt(void* impl) {
    Tensor t;
    t.impl_ = impl;
    return t;
  }
  Tensor(const Tensor& o) : impl_(o.impl_) {
    if (impl_ != nullptr) incref(impl_);
  }
  Tensor(Tensor&& o) noexcept : impl_(o.impl_) { o.impl_ = nullptr; }
  Tensor& operator=(Tensor o) noexcept {
    void* mine = impl_;
    impl_ = o.impl_;
    o.impl_ = mine;
    return *this;
  }
  ~Tensor() {
    if (impl_ != nullptr) decref(impl_);
  }
  void* impl() const { return impl_; }
  void* data() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;

 private:
  void* impl_ = nullptr;
};

using Ints = std::initializer_list<int64_t>;

// One element of a ``Scalar?[]`` argument: None, an integer or a float.
struct OptScalar {
  enum Kind : int { kNone, kInt, kFloat } kind;
  int64_t i;
  double f;
};

Tensor arg(void* const* args, int64_t i);  // the at::Tensor* the loader passed at ``i``
void* release(Tensor t);                   // a new at::Tensor the caller owns
// ``t`` of ``dtype`` laid out with ``stride``: a copy only when the dtype or a dimension
// longer than 1 disagrees (an extern's kernel may return another dtype than its fake kernel
// says: ``_batch_norm_with_update``'s bfloat16 running statistics).
Tensor fix(const Tensor& t, Ints size, Ints stride, Dtype dtype);
// ``t``, or a copy of it where it shares memory with one of ``dsts`` that is about to be
// written (other than ``dsts[own]`` holding exactly ``t``).
Tensor apart(const Tensor& t, std::initializer_list<Tensor> dsts, int64_t own);
// The graph's new value of a buffer or input it updates in place, copied into it.
void write_back(const Tensor& dst, const Tensor& src);
// A view with ``offset`` counted from ``t``'s first element (``t`` may itself be a view).
Tensor view(const Tensor& t, Ints size, Ints stride, int64_t offset);
Tensor empty(Ints size, Ints stride, Dtype dtype);
// A graph's arenas (codegen/arena.py): byte allocations that its internal buffers of static
// size are carved from, kept between calls. The wrapper keeps one pool per graph (a
// function-local static); its idle arenas go when the loader releases the model
// (release_caches) or the library is unloaded.
class ArenaPool {
 public:
  ArenaPool();
  ~ArenaPool();
  ArenaPool(const ArenaPool&) = delete;
  ArenaPool& operator=(const ArenaPool&) = delete;
  void* impl() const { return impl_; }

 private:
  void* impl_;
};

// One call's arena, ``nbytes`` long: taken from the pool (made when none is free, so a
// concurrent call gets its own) and given back when the call ends, by return or by throw.
class Lease {
 public:
  Lease(ArenaPool& pool, int64_t nbytes);
  ~Lease();
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  // The buffer ``offset`` bytes into the arena.
  Tensor slot(int64_t offset, Ints size, Ints stride, Dtype dtype) const;

 private:
  ArenaPool& pool_;
  Tensor base_;
};

// A linear layer's call site on a packaged weight: ``run`` computes ``x @ w^T (+ bias)``
// through oneDNN on the weight reordered into its blocked layout once, and again only if
// the weight changes in place (its version counter), where the product is large enough to
// repay oneDNN's fixed cost per call; smaller products, and builds without oneDNN, call
// ATen's addmm / mm. ``w`` is the [N, K] weight as packaged; an undefined ``bias``: none.
class PackedLinear {
 public:
  PackedLinear();
  ~PackedLinear();
  PackedLinear(const PackedLinear&) = delete;
  PackedLinear& operator=(const PackedLinear&) = delete;
  Tensor run(const Tensor& x, const Tensor& w, const Tensor& bias);

 private:
  void* impl_;
};

// A 2-D convolution's call site on a packaged weight: oneDNN's convolution on the weight
// reordered into its blocked layout once (for the first call's input sizes; other sizes
// reorder it again inside oneDNN), and again only if the weight changes in place.
class PackedConv {
 public:
  PackedConv();
  ~PackedConv();
  PackedConv(const PackedConv&) = delete;
  PackedConv& operator=(const PackedConv&) = delete;
  Tensor run(const Tensor& x, const Tensor& w, const Tensor& bias, Ints stride, Ints padding,
             Ints dilation, int64_t groups);

 private:
  void* impl_;
};

// Empties what the package keeps between calls (idle arenas, packed weights): its loader
// calls it through ``ember_aot_release`` when the model goes, since the library may stay
// mapped.
void release_caches();

// Raises the JIT wrapper's IndexError (status kIndexError) when ``flag`` holds true.
void check_index(const Tensor& flag, const char* message);

// Input checks: what was expected, named after the input.
void expect_rank(const Tensor& t, const char* name, int64_t rank);
void expect_dtype(const Tensor& t, const char* name, Dtype want);
void expect_size(const Tensor& t, const char* name, int64_t dim, int64_t want);
void expect_range(int64_t got, const char* name, int64_t dim, const char* sym, int64_t lo,
                  int64_t hi);
void expect_equal(int64_t got, int64_t want, const char* name, int64_t dim, const char* sym);

void* op(const char* name, const char* overload);  // a dispatcher handle, found once

// Runs a wrapper's graph, turning what it throws into the C entry's status and message:
// kOk, kBadInput (an input that does not match the package), kIndexError, kFailed.
int run_graph(void (*graph)(void* const* args, void** outputs), void* const* args,
              void** outputs, char* err, int64_t err_len);

// One boxed dispatcher call: the arguments pushed in schema order, then ``run``, then the
// returns read back.
class Call {
 public:
  explicit Call(void* op);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  Call& tensor(const Tensor& t);
  Call& none();
  Call& i(int64_t v);
  Call& f(double v);
  Call& b(bool v);
  Call& str(const char* v);
  Call& cpu();
  Call& ints(Ints v);
  Call& floats(std::initializer_list<double> v);
  Call& bools(std::initializer_list<bool> v);
  Call& tensors(std::initializer_list<Tensor> v);
  Call& optional_tensors(std::initializer_list<Tensor> v);  // null: None
  Call& optional_scalars(std::initializer_list<OptScalar> v);
  void run();
  Tensor out(int64_t k) const;       // the k-th return
  Tensor out_list(int64_t k) const;  // element k of the first return, a Tensor[]

 private:
  void* op_;
  void* stack_;
};

}  // namespace ember_aot
