"""Ember's closed prim set: every pointwise operation a kernel may contain.

``PRIMS`` maps a prim name to ``(arity, kind, C++ template)``. In the template ``{0}``,
``{1}``, ``{2}`` are operand expressions and ``{T}`` is the C++ type the prim computes in.
Kinds: ``math`` (floating compute), ``arith`` (any numeric type), ``compare`` (bool result),
``logical`` (bool operands), ``bitwise`` (integers and bool), ``select`` (``where``).
Reductions are ``REDUCTIONS``; everything else is extern (ATen) or an eager fallback.
"""

from __future__ import annotations

PRIMS: dict[str, tuple[int, str, str]] = {
    # arithmetic
    "add": (2, "arith", "({0} + {1})"),
    "sub": (2, "arith", "({0} - {1})"),
    "mul": (2, "arith", "({0} * {1})"),
    "truediv": (2, "math", "({0} / {1})"),
    "neg": (1, "arith", "(-{0})"),
    "abs": (1, "arith", "std::abs({0})"),
    "maximum": (2, "arith", "e_max<{T}>({0}, {1})"),
    "minimum": (2, "arith", "e_min<{T}>({0}, {1})"),
    "sign": (1, "arith", "static_cast<{T}>(({0} > 0) - ({0} < 0))"),
    # floating-point math
    "exp": (1, "math", "e_exp({0})"),
    "exp2": (1, "math", "std::exp2({0})"),
    "expm1": (1, "math", "std::expm1({0})"),
    "log": (1, "math", "std::log({0})"),
    "log2": (1, "math", "std::log2({0})"),
    "log10": (1, "math", "std::log10({0})"),
    "log1p": (1, "math", "std::log1p({0})"),
    "sqrt": (1, "math", "std::sqrt({0})"),
    "rsqrt": (1, "math", "(static_cast<{T}>(1) / std::sqrt({0}))"),
    "reciprocal": (1, "math", "(static_cast<{T}>(1) / {0})"),
    "sigmoid": (1, "math", "(static_cast<{T}>(1) / (static_cast<{T}>(1) + e_exp(-{0})))"),
    "sin": (1, "math", "std::sin({0})"),
    "cos": (1, "math", "std::cos({0})"),
    "tan": (1, "math", "std::tan({0})"),
    "asin": (1, "math", "std::asin({0})"),
    "acos": (1, "math", "std::acos({0})"),
    "atan": (1, "math", "std::atan({0})"),
    "sinh": (1, "math", "std::sinh({0})"),
    "cosh": (1, "math", "std::cosh({0})"),
    "tanh": (1, "math", "std::tanh({0})"),
    "asinh": (1, "math", "std::asinh({0})"),
    "acosh": (1, "math", "std::acosh({0})"),
    "atanh": (1, "math", "std::atanh({0})"),
    "erf": (1, "math", "e_erf({0})"),
    "erfc": (1, "math", "std::erfc({0})"),
    "floor": (1, "math", "std::floor({0})"),
    "ceil": (1, "math", "std::ceil({0})"),
    "trunc": (1, "math", "std::trunc({0})"),
    "round": (1, "math", "std::nearbyint({0})"),
    "pow": (2, "math", "std::pow({0}, {1})"),
    "atan2": (2, "math", "std::atan2({0}, {1})"),
    "fmod": (2, "math", "e_fmod<{T}>({0}, {1})"),
    "remainder": (2, "math", "e_rem<{T}>({0}, {1})"),
    "floordiv": (2, "math", "e_floordiv<{T}>({0}, {1})"),
    "truncdiv": (2, "math", "e_truncdiv<{T}>({0}, {1})"),
    "isnan": (1, "math", "({0} != {0})"),
    "isinf": (1, "math", "(std::abs({0}) == INFINITY)"),
    # comparisons (operands in the promoted type, bool result)
    "eq": (2, "compare", "({0} == {1})"),
    "ne": (2, "compare", "({0} != {1})"),
    "lt": (2, "compare", "({0} < {1})"),
    "le": (2, "compare", "({0} <= {1})"),
    "gt": (2, "compare", "({0} > {1})"),
    "ge": (2, "compare", "({0} >= {1})"),
    # logic and bits
    "logical_and": (2, "logical", "({0} && {1})"),
    "logical_or": (2, "logical", "({0} || {1})"),
    "logical_xor": (2, "logical", "({0} != {1})"),
    "logical_not": (1, "logical", "(!{0})"),
    "bitwise_and": (2, "bitwise", "static_cast<{T}>({0} & {1})"),
    "bitwise_or": (2, "bitwise", "static_cast<{T}>({0} | {1})"),
    "bitwise_xor": (2, "bitwise", "static_cast<{T}>({0} ^ {1})"),
    "bitwise_not": (1, "bitwise", "static_cast<{T}>(~{0})"),
    "where": (3, "select", "({0} ? {1} : {2})"),
}

# reduction name -> (OpenMP reduction operator, initial value as a Python number)
REDUCTIONS: dict[str, tuple[str, float]] = {
    "sum": ("+", 0),
    "prod": ("*", 1),
    "max": ("max", float("-inf")),
    "min": ("min", float("inf")),
    "any": ("|", 0),
}

# glibc's libmvec has SIMD versions of these; declaring them lets `omp simd` loops call
# them (glibc only declares them under -ffast-math, which would break NaN semantics).
MVEC_UNARY = ("acos acosh asin asinh atan atanh cbrt cos cosh erfc erf exp10 exp2 exp expm1 "
              "log10 log1p log2 log sin sinh tan tanh").split()
MVEC_BINARY = ("atan2", "pow")


def mvec_declarations() -> str:
    lines = ['extern "C" {', '#define E_SIMD __attribute__((__simd__("notinbranch")))']
    for f in MVEC_UNARY:
        lines.append(f"E_SIMD float {f}f(float); E_SIMD double {f}(double);")
    for f in MVEC_BINARY:
        lines.append(f"E_SIMD float {f}f(float, float); E_SIMD double {f}(double, double);")
    return "\n".join(lines + ["}"]) + "\n"


# Helpers every translation unit starts with (NaN-propagating min/max, Python remainder,
# bfloat16 conversions); kept tiny because g++ time is the cold-compile budget.
CPP_PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <omp.h>
template <typename T> static inline T e_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> static inline T e_min(T a, T b) { return (a != a || a < b) ? a : b; }
// integers: C++ % (truncating, the dividend's sign); lowering only emits integer fmod and
// remainder with a constant divisor other than 0 and -1, so % is defined
template <typename T> static inline T e_fmod(T a, T b) {
  if constexpr (std::is_integral<T>::value) return static_cast<T>(a % b);
  else return std::fmod(a, b);
}
template <typename T> static inline T e_truncdiv(T a, T b) {
  if constexpr (std::is_integral<T>::value) return static_cast<T>(a / b);
  else return std::trunc(a / b);
}
template <typename T> static inline T e_rem(T a, T b) {
  T r = e_fmod<T>(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
}
template <typename T> static inline T e_floordiv(T a, T b) {
  if constexpr (std::is_integral<T>::value) {  // b: a constant other than 0 and -1 (lowering)
    T q = static_cast<T>(a / b);
    return (a % b != 0 && ((a < 0) != (b < 0))) ? static_cast<T>(q - 1) : q;
  }
  if (b == 0) return a / b;
  T m = std::fmod(a, b), d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
  if (d == 0) return std::copysign(static_cast<T>(0), a / b);
  T f = std::floor(d);
  return (d - f > static_cast<T>(0.5)) ? f + 1 : f;
}
// float erf inline: a minimax rational x*P(x^2)/Q(x^2) on [-4, 4] (Eigen's published
// coefficients), within 2.4e-7 of glibc and 2.4x faster than its vector erff here, so SIMD
// loops (gelu and its backward) need no libmvec call; erf(+-4) rounds to +-1 in float.
static inline double e_erf(double x) { return std::erf(x); }
static inline float e_erf(float x) {
  float c = x < -4.f ? -4.f : (x > 4.f ? 4.f : x), z = c * c;
  float p = z * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = p * z - 2.10102402082508e-06f; p = p * z - 5.69250639462346e-05f;
  p = p * z - 7.34990630326855e-04f; p = p * z - 2.95459980854025e-03f;
  p = p * z - 1.60960333262415e-02f;
  float q = z * -1.45660718464996e-05f - 2.13374055278905e-04f;
  q = q * z - 1.68282697438203e-03f; q = q * z - 7.37332916720468e-03f;
  q = q * z - 1.42647390514189e-02f;
  return c * p / q;
}
// float exp in SIMD loops: our own vector variants of e_expf, which g++'s vectorizer calls in
// `omp simd` loops: 2^k * exp(r) with r = x - k ln2 (two-part ln2), a degree-7 Taylor
// polynomial (truncation 6e-9 relative; within 1.1 ulp of glibc's scalar expf) and an exact
// scaling by 2^k that gets overflow, denormals and NaN right (vscalefps on AVX-512; two
// exponent-field multiplies on AVX2, which round once as vscalefps does, so both levels give
// the same bits). Clamping x to [-104, 89] keeps k small. GCC builtins, not <immintrin.h>:
// the header costs 0.4 s of g++ time per graph. Without AVX2+FMA, float exp is glibc's.
static inline double e_exp(double x) { return std::exp(x); }
#if defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__) && !defined(__clang__)
typedef float e_v8 __attribute__((vector_size(32)));
typedef float e_v4 __attribute__((vector_size(16)));
typedef int e_i8 __attribute__((vector_size(32)));
typedef int e_i4 __attribute__((vector_size(16)));
static inline e_v8 e_vfma(e_v8 a, e_v8 b, e_v8 c) { return __builtin_ia32_vfmaddps256(a, b, c); }
static inline e_v4 e_vfma(e_v4 a, e_v4 b, e_v4 c) { return __builtin_ia32_vfmaddps(a, b, c); }
// MAXPS/MINPS return the second operand when either is NaN: a NaN x passes through
static inline e_v8 e_vmax(e_v8 a, e_v8 b) { return __builtin_ia32_maxps256(a, b); }
static inline e_v4 e_vmax(e_v4 a, e_v4 b) { return __builtin_ia32_maxps(a, b); }
static inline e_v8 e_vmin(e_v8 a, e_v8 b) { return __builtin_ia32_minps256(a, b); }
static inline e_v4 e_vmin(e_v4 a, e_v4 b) { return __builtin_ia32_minps(a, b); }
#if defined(__AVX512F__) && defined(__AVX512VL__)
typedef float e_v16 __attribute__((vector_size(64)));
#define E_M16 (unsigned short)-1
#define E_M8 (unsigned char)-1
static inline e_v16 e_vround(e_v16 v) { return __builtin_ia32_rndscaleps_mask(v, 8, v, E_M16, 4); }
static inline e_v8 e_vround(e_v8 v) { return __builtin_ia32_rndscaleps_256_mask(v, 8, v, E_M8); }
static inline e_v4 e_vround(e_v4 v) { return __builtin_ia32_rndscaleps_128_mask(v, 8, v, E_M8); }
static inline e_v16 e_vscalef(e_v16 p, e_v16 k) {
  return __builtin_ia32_scalefps512_mask(p, k, p, E_M16, 4);
}
static inline e_v8 e_vscalef(e_v8 p, e_v8 k) {
  return __builtin_ia32_scalefps256_mask(p, k, p, E_M8);
}
static inline e_v4 e_vscalef(e_v4 p, e_v4 k) {
  return __builtin_ia32_scalefps128_mask(p, k, p, E_M8);
}
static inline e_v16 e_vfma(e_v16 a, e_v16 b, e_v16 c) {
  return __builtin_ia32_vfmaddps512_mask(a, b, c, E_M16, 4);
}
static inline e_v16 e_vmax(e_v16 a, e_v16 b) {
  return __builtin_ia32_maxps512_mask(a, b, b, E_M16, 4);
}
static inline e_v16 e_vmin(e_v16 a, e_v16 b) {
  return __builtin_ia32_minps512_mask(a, b, b, E_M16, 4);
}
#else
static inline e_v8 e_vround(e_v8 v) { return __builtin_ia32_roundps256(v, 8); }
static inline e_v4 e_vround(e_v4 v) { return __builtin_ia32_roundps(v, 8); }
// p * 2^k for integral k in [-150, 128]: two factors 2^(k/2) and 2^(k - k/2) are normal
// floats, the first product is exact, the second rounds once (to a denormal, or to inf)
template <typename V, typename I> static inline V e_vscale2(V p, V k) {
  I ki = __builtin_convertvector(k, I), k1 = ki >> 1, k2 = ki - k1;
  return p * (V)((k1 + 127) << 23) * (V)((k2 + 127) << 23);
}
static inline e_v8 e_vscalef(e_v8 p, e_v8 k) { return e_vscale2<e_v8, e_i8>(p, k); }
static inline e_v4 e_vscalef(e_v4 p, e_v4 k) { return e_vscale2<e_v4, e_i4>(p, k); }
#endif
template <typename V> static inline V e_vexp(V x) {
  V z = {};
  V c = e_vmin(z + 89.f, e_vmax(z - 104.f, x));
  V k = e_vround(c * 1.44269504088896341f);
  V r = e_vfma(k, z - 0.693359375f, c);
  r = e_vfma(k, z + 2.12194440e-4f, r);
  V p = z + 1.f / 5040;
  const float coef[] = {1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};
  for (float q : coef) p = e_vfma(p, r, z + q);
  return e_vscalef(p, k);
}
extern "C" {
__attribute__((simd("notinbranch"), visibility("hidden"))) float e_expf(float);
#if defined(__AVX512F__) && defined(__AVX512VL__)
__attribute__((visibility("hidden"))) e_v16 _ZGVeN16v_e_expf(e_v16 x) { return e_vexp(x); }
#endif
__attribute__((visibility("hidden"))) e_v8 _ZGVdN8v_e_expf(e_v8 x) { return e_vexp(x); }
__attribute__((visibility("hidden"))) e_v8 _ZGVcN8v_e_expf(e_v8 x) { return e_vexp(x); }
__attribute__((visibility("hidden"))) e_v4 _ZGVbN4v_e_expf(e_v4 x) { return e_vexp(x); }
__attribute__((visibility("hidden"))) float e_expf_scalar(float x) { return std::exp(x); }
}
// the scalar e_expf is glibc's: defining it in C++ would make g++ clone it for SIMD itself
asm(".globl e_expf\n.hidden e_expf\n.set e_expf, e_expf_scalar");
static inline float e_exp(float x) { return e_expf(x); }
#else
static inline float e_exp(float x) { return std::exp(x); }
#endif
static inline float e_bf16_to_f(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t e_f_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if (f != f) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""


def table_markdown() -> str:
    """The prim set as a Markdown table (for the docs); ``|`` escaped for table cells."""
    def esc(text: str) -> str:
        return text.replace("|", "\\|")
    rows = ["| prim | arity | kind | C++ |", "|---|---|---|---|"]
    rows += [f"| {n} | {a} | {k} | `{esc(t)}` |" for n, (a, k, t) in PRIMS.items()]
    rows += [f"| {n} (reduction) | 1 | reduction | `{esc(op)}` from {init} |"
             for n, (op, init) in REDUCTIONS.items()]
    return "\n".join(rows)
