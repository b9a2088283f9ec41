// Ember's C++ kernel prelude, pasted at the top of every generated translation unit by
// ember.core.compiler.codegen.cpp (so the kernel cache key covers it). Helpers every kernel
// may call: NaN-propagating min/max, Python's remainder and floor division, float erf and
// SIMD exp, bfloat16 conversions. Kept tiny: g++ time is the cold-compile budget.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <omp.h>
// select without a branch for floats: g++ 12 if-converts `c ? a : b` in a loop only when the
// loop calls no function but a builtin, so a select beside our SIMD exp (gelu's backward, a
// clamped erf) would leave the whole loop scalar; bit masks need no if-conversion
template <typename T> static inline T e_sel(bool c, T a, T b) {
  if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) {
    using U = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
    U ua, ub, m = U(0) - static_cast<U>(c);
    std::memcpy(&ua, &a, sizeof(T)); std::memcpy(&ub, &b, sizeof(T));
    U r = (ua & m) | (ub & ~m);
    T out; std::memcpy(&out, &r, sizeof(T)); return out;
  } else {
    return c ? a : b;
  }
}
template <typename T> static inline T e_max(T a, T b) { return e_sel<T>((a != a) | (a > b), a, b); }
template <typename T> static inline T e_min(T a, T b) { return e_sel<T>((a != a) | (a < b), a, b); }
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
// coefficients), within 2.4e-7 of glibc and cheaper than a libmvec erff call, so SIMD loops
// (gelu and its backward) need none; erf(+-4) rounds to +-1 in float.
static inline double e_erf(double x) { return std::erf(x); }
static inline float e_erf(float x) {
  float c = e_sel<float>(x < -4.f, -4.f, x);
  c = e_sel<float>(c > 4.f, 4.f, c);
  float z = c * c;
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
// weak: a graph's library may be linked from several translation units, each defining these
#define E_HELPER __attribute__((weak, visibility("hidden")))
extern "C" {
__attribute__((simd("notinbranch"), visibility("hidden"))) float e_expf(float);
#if defined(__AVX512F__) && defined(__AVX512VL__)
E_HELPER e_v16 _ZGVeN16v_e_expf(e_v16 x) { return e_vexp(x); }
#endif
E_HELPER e_v8 _ZGVdN8v_e_expf(e_v8 x) { return e_vexp(x); }
E_HELPER e_v8 _ZGVcN8v_e_expf(e_v8 x) { return e_vexp(x); }
E_HELPER e_v4 _ZGVbN4v_e_expf(e_v4 x) { return e_vexp(x); }
E_HELPER float e_expf_scalar(float x) { return std::exp(x); }
}
// the scalar e_expf is glibc's: defining it in C++ would make g++ clone it for SIMD itself
asm(".weak e_expf\n.hidden e_expf\n.set e_expf, e_expf_scalar");
static inline float e_exp(float x) { return e_expf(x); }
#else
static inline float e_exp(float x) { return std::exp(x); }
#endif
static inline float e_bf16_to_f(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
// round to nearest even; NaN -> quiet NaN. Branch-free: with a branch, g++ leaves any loop
// that also calls the SIMD exp scalar ("control flow in loop")
static inline uint16_t e_f_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
  return static_cast<uint16_t>((r & ~nan) | (0x7fc0u & nan));
}
// the bfloat16 bits of a float that is a bfloat16 value already (no rounding needed)
static inline uint16_t e_bf16_bits(float f) {
  uint32_t u; std::memcpy(&u, &f, 4); return static_cast<uint16_t>(u >> 16);
}
// e_bf16_to_f(e_f_to_bf16(f)) in 32-bit lanes: the same bits without packing to 16 bits and
// widening back
static inline float e_round_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t nan = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
  r = (r & ~nan) | (0x7fc00000u & nan);
  float o; std::memcpy(&o, &r, 4); return o;
}
