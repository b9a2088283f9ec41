// Native CPU attention (see attention_native.py): online-softmax forward and the backward
// that recomputes each probability tile, OpenMP over (head, query block) units, GEMMs through
// the BLAS that torch links (wired in at load time by ember_attn_set_blas).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>
#include <algorithm>
#include <omp.h>

typedef void (*sgemm_t)(const char*, const char*, const int*, const int*, const int*,
                        const float*, const float*, const int*, const float*, const int*,
                        const float*, float*, const int*);
typedef void (*dgemm_t)(const char*, const char*, const int*, const int*, const int*,
                        const double*, const double*, const int*, const double*, const int*,
                        const double*, double*, const int*);

typedef int (*set_threads_t)(const int*);

static sgemm_t g_sgemm = nullptr;
static dgemm_t g_dgemm = nullptr;
static set_threads_t g_blas_local_threads = nullptr;  // MKL's mkl_set_num_threads_local

extern "C" void ember_attn_set_blas(void* s, void* d, void* local_threads) {
  g_sgemm = (sgemm_t)s;
  g_dgemm = (dgemm_t)d;
  g_blas_local_threads = (set_threads_t)local_threads;
}

// MKL's MKL_SET_NUM_THREADS_LOCAL(const int*) (Fortran binding), checked by _library().
// Each of our threads calls BLAS single-threaded (MKL would otherwise start its own team per
// call when our region has one thread); the thread's previous setting comes back after.
struct SequentialBlas {
  int previous = 0;
  SequentialBlas() {
    const int one = 1;
    if (g_blas_local_threads) previous = g_blas_local_threads(&one);
  }
  ~SequentialBlas() { if (g_blas_local_threads) g_blas_local_threads(&previous); }
};

// Row-major C[m x n] (ldc) = alpha * op(A) op(B) + beta * C, through column-major BLAS:
// C^T = op(B)^T op(A)^T. ta/tb: A/B are stored transposed (A is k x m, B is n x k).
static void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  const char tA = tb ? 'T' : 'N', tB = ta ? 'T' : 'N';
  g_sgemm(&tA, &tB, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}
static void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  const char tA = tb ? 'T' : 'N', tB = ta ? 'T' : 'N';
  g_dgemm(&tA, &tB, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

// exp for float that vectorises (Cody-Waite reduction, degree-6 polynomial, ~1 ulp).
static inline float fast_exp(float x0) {
  const float x = std::min(std::max(x0, -87.0f), 88.5f);
  float n = std::nearbyint(x * 1.44269504088896341f);
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x0 < -87.0f ? 0.0f : p * scale;  // below: 0 (incl. -inf), no denormals
}
static inline double fast_exp(double x) { return std::exp(x); }

template <typename T>
struct Problem {
  const T *q, *k, *v;        // [heads, L, E], [kv_heads, S, E], [kv_heads, S, Ev]
  T scale;                   // scores = scale * q k^T
  int64_t heads, h, group;   // heads = N * H; group = H / Hkv
  int64_t L, S, E, Ev;
  const void* mask;          // null, uint8 (keep) or T (added); strides over (n, h, i, j)
  int mask_kind;             // 0 none, 1 bool, 2 additive
  int64_t ms[4];
  int causal;
  int64_t bq, bk;
  float dropout_p;           // dropout: keep (scaled by keep_scale) where uniform >= dropout_p
  T keep_scale;
  uint64_t seed, offset;
  int64_t kv_head(int64_t f) const { return (f / h) * (h / group) + (f % h) / group; }
};

// Dropout multipliers of tile rows [i0, i1) x cols [j0, j1) of head f: Philox-4x32-10 of
// (seed, offset + (f*L + i)*S + j), the stream attention_dropout.keep_scale draws.
static inline float philox_uniform(uint64_t seed, uint64_t counter) {
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t prod_b = (uint64_t)c2 * 0xCD9E8D57u, prod_a = (uint64_t)c0 * 0xD2511F53u;
    c0 = (uint32_t)(prod_b >> 32) ^ c1 ^ k0;
    c2 = (uint32_t)(prod_a >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)prod_b;
    c3 = (uint32_t)prod_a;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  int32_t x = (int32_t)c0;
  if (x < 0) x = -x - 1;
  return (float)x * 4.6566127342e-10f;
}

template <typename T>
static void keep_tile(const Problem<T>& P, int64_t f, int64_t i0, int64_t i1, int64_t j0,
                      int64_t j1, T* keep) {
  const int64_t nk = j1 - j0;
  for (int64_t r = 0; r < i1 - i0; ++r) {
    const uint64_t base = P.offset + (uint64_t)((f * P.L + i0 + r) * P.S + j0);
    T* row = keep + r * nk;
#pragma omp simd
    for (int64_t c = 0; c < nk; ++c)
      row[c] = philox_uniform(P.seed, base + c) >= P.dropout_p ? P.keep_scale : T(0);
  }
}

// Scores tile rows [i0, i1) x cols [j0, j1) of head f: q k^T plus causal/mask (-inf).
template <typename T>
static void scores(const Problem<T>& P, int64_t f, int64_t i0, int64_t i1, int64_t j0,
                   int64_t j1, T* s) {
  const int nq = (int)(i1 - i0), nk = (int)(j1 - j0);
  const int64_t g = P.kv_head(f);
  gemm(false, true, nq, nk, (int)P.E, P.scale, P.q + (f * P.L + i0) * P.E, (int)P.E,
       P.k + (g * P.S + j0) * P.E, (int)P.E, T(0), s, nk);
  const T ninf = -std::numeric_limits<T>::infinity();
  if (P.causal && j1 - 1 > i0) {
    for (int r = 0; r < nq; ++r) {
      int64_t first = std::max<int64_t>(i0 + r + 1 - j0, 0);
      for (int64_t c = first; c < nk; ++c) s[(int64_t)r * nk + c] = ninf;
    }
  }
  if (P.mask_kind) {
    const int64_t b = f / P.h, hh = f % P.h;
    for (int r = 0; r < nq; ++r) {
      T* row = s + (int64_t)r * nk;
      int64_t base = b * P.ms[0] + hh * P.ms[1] + (i0 + r) * P.ms[2] + j0 * P.ms[3];
      if (P.mask_kind == 1) {
        const uint8_t* m = (const uint8_t*)P.mask + base;
        for (int c = 0; c < nk; ++c) if (!m[c * P.ms[3]]) row[c] = ninf;
      } else {
        const T* m = (const T*)P.mask + base;
        for (int c = 0; c < nk; ++c) row[c] += m[c * P.ms[3]];
      }
    }
  }
}

template <typename T>
static int64_t key_end(const Problem<T>& P, int64_t i1) {
  return P.causal ? std::min(P.S, i1) : P.S;
}

template <typename T>
static void forward(const Problem<T>& P, T* out, T* lse, int nthreads) {
  const int64_t nblocks = (P.L + P.bq - 1) / P.bq, units = P.heads * nblocks;
  const T ninf = -std::numeric_limits<T>::infinity();
#pragma omp parallel num_threads(nthreads)
  {
    SequentialBlas sequential;
    std::vector<T> s(P.bq * P.bk), acc(P.bq * P.Ev), mx(P.bq), sum(P.bq);
    std::vector<T> keep(P.dropout_p > 0 ? P.bq * P.bk : 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t unit = units - 1 - u;  // causal: the longest rows first
      const int64_t f = unit / nblocks, i0 = (unit % nblocks) * P.bq;
      const int64_t i1 = std::min(P.L, i0 + P.bq), nq = i1 - i0;
      std::fill(acc.begin(), acc.begin() + nq * P.Ev, T(0));
      std::fill(mx.begin(), mx.begin() + nq, ninf);
      std::fill(sum.begin(), sum.begin() + nq, T(0));
      const int64_t end = key_end(P, i1);
      for (int64_t j0 = 0; j0 < end; j0 += P.bk) {
        const int64_t j1 = std::min(end, j0 + P.bk), nk = j1 - j0;
        scores(P, f, i0, i1, j0, j1, s.data());
        for (int64_t r = 0; r < nq; ++r) {
          T* row = s.data() + r * nk;
          T m = ninf;
#pragma omp simd reduction(max : m)
          for (int64_t c = 0; c < nk; ++c) m = row[c] > m ? row[c] : m;
          const T m_new = std::max(m, mx[r]);
          if (m_new == ninf) {  // every key so far masked: this row contributes nothing
            std::fill(row, row + nk, T(0));
            continue;
          }
          T total = 0;
#pragma omp simd reduction(+ : total)
          for (int64_t c = 0; c < nk; ++c) {
            T p = fast_exp(row[c] - m_new);
            row[c] = p;
            total += p;
          }
          if (m_new != mx[r]) {
            const T alpha = mx[r] == ninf ? T(0) : fast_exp(mx[r] - m_new);
            T* a = acc.data() + r * P.Ev;
            for (int64_t c = 0; c < P.Ev; ++c) a[c] *= alpha;
            sum[r] *= alpha;
            mx[r] = m_new;
          }
          sum[r] += total;
        }
        if (P.dropout_p > 0) {  // the normaliser (sum) counts every key; the values see dropout
          keep_tile(P, f, i0, i1, j0, j1, keep.data());
          for (int64_t e = 0; e < nq * nk; ++e) s[e] *= keep[e];
        }
        const int64_t g = P.kv_head(f);
        gemm(false, false, (int)nq, (int)P.Ev, (int)nk, T(1), s.data(), (int)nk,
             P.v + (g * P.S + j0) * P.Ev, (int)P.Ev, T(1), acc.data(), (int)P.Ev);
      }
      for (int64_t r = 0; r < nq; ++r) {
        T* o = out + (f * P.L + i0 + r) * P.Ev;
        const T* a = acc.data() + r * P.Ev;
        if (sum[r] > 0) {
          const T inv = T(1) / sum[r];
          for (int64_t c = 0; c < P.Ev; ++c) o[c] = a[c] * inv;
          lse[f * P.L + i0 + r] = mx[r] + std::log(sum[r]);
        } else {
          for (int64_t c = 0; c < P.Ev; ++c) o[c] = 0;
          lse[f * P.L + i0 + r] = ninf;
        }
      }
    }
  }
}

// dq [heads, L, E]; dk, dv: [threads, kv_heads, S, *]
// accumulated per thread, summed by the caller. lse/delta: [heads, L].
template <typename T>
static void backward(const Problem<T>& P, const T* go, const T* lse, const T* delta, T* dq,
                     T* dk, T* dv, int nthreads) {
  const int64_t nblocks = (P.L + P.bq - 1) / P.bq, units = P.heads * nblocks;
  const int64_t kv_heads = P.heads / P.group;
  const T ninf = -std::numeric_limits<T>::infinity();
#pragma omp parallel num_threads(nthreads)
  {
    SequentialBlas sequential;
    std::vector<T> p(P.bq * P.bk), dp(P.bq * P.bk);
    std::vector<T> keep(P.dropout_p > 0 ? P.bq * P.bk : 0);
    T* my_dk = dk + (int64_t)omp_get_thread_num() * kv_heads * P.S * P.E;
    T* my_dv = dv + (int64_t)omp_get_thread_num() * kv_heads * P.S * P.Ev;
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t unit = units - 1 - u;
      const int64_t f = unit / nblocks, i0 = (unit % nblocks) * P.bq;
      const int64_t i1 = std::min(P.L, i0 + P.bq), nq = i1 - i0;
      const int64_t g = P.kv_head(f);
      const T* go_i = go + (f * P.L + i0) * P.Ev;
      const T* q_i = P.q + (f * P.L + i0) * P.E;
      T* dq_i = dq + (f * P.L + i0) * P.E;
      const int64_t end = key_end(P, i1);
      for (int64_t j0 = 0; j0 < end; j0 += P.bk) {
        const int64_t j1 = std::min(end, j0 + P.bk), nk = j1 - j0;
        scores(P, f, i0, i1, j0, j1, p.data());
        for (int64_t r = 0; r < nq; ++r) {
          T* row = p.data() + r * nk;
          const T l = lse[f * P.L + i0 + r];
          if (l == ninf) {
            std::fill(row, row + nk, T(0));
            continue;
          }
#pragma omp simd
          for (int64_t c = 0; c < nk; ++c) row[c] = fast_exp(row[c] - l);
        }
        // dV_j += (P * keep)^T dO_i ; dP = (dO_i V_j^T) * keep
        const T* p_used = p.data();
        if (P.dropout_p > 0) {
          keep_tile(P, f, i0, i1, j0, j1, keep.data());
          for (int64_t e = 0; e < nq * nk; ++e) dp[e] = p[e] * keep[e];
          p_used = dp.data();
        }
        gemm(true, false, (int)nk, (int)P.Ev, (int)nq, T(1), p_used, (int)nk, go_i,
             (int)P.Ev, T(1), my_dv + (g * P.S + j0) * P.Ev, (int)P.Ev);
        gemm(false, true, (int)nq, (int)nk, (int)P.Ev, T(1), go_i, (int)P.Ev,
             P.v + (g * P.S + j0) * P.Ev, (int)P.Ev, T(0), dp.data(), (int)nk);
        if (P.dropout_p > 0)
          for (int64_t e = 0; e < nq * nk; ++e) dp[e] *= keep[e];
        for (int64_t r = 0; r < nq; ++r) {
          const T d = delta[f * P.L + i0 + r];
          T* ds = dp.data() + r * nk;
          const T* pr = p.data() + r * nk;
#pragma omp simd
          for (int64_t c = 0; c < nk; ++c) ds[c] = pr[c] * (ds[c] - d);
        }
        // dQ_i += dS K_j ; dK_j += dS^T Q_i
        gemm(false, false, (int)nq, (int)P.E, (int)nk, P.scale, dp.data(), (int)nk,
             P.k + (g * P.S + j0) * P.E, (int)P.E, T(1), dq_i, (int)P.E);
        gemm(true, false, (int)nk, (int)P.E, (int)nq, P.scale, dp.data(), (int)nk, q_i,
             (int)P.E, T(1), my_dk + (g * P.S + j0) * P.E, (int)P.E);
      }
    }
  }
}

template <typename T>
static Problem<T> problem(const void* q, const void* k, const void* v, const int64_t* dims,
                          const void* mask, int mask_kind, const int64_t* ms, int causal,
                          double scale, double dropout_p) {
  Problem<T> P;
  P.q = (const T*)q; P.k = (const T*)k; P.v = (const T*)v;
  P.scale = (T)scale;
  P.heads = dims[0]; P.h = dims[1]; P.group = dims[2];
  P.L = dims[3]; P.S = dims[4]; P.E = dims[5]; P.Ev = dims[6];
  P.bq = dims[7]; P.bk = dims[8];
  P.mask = mask; P.mask_kind = mask_kind;
  for (int i = 0; i < 4; ++i) P.ms[i] = ms[i];
  P.causal = causal;
  P.dropout_p = (float)dropout_p;  // compared in float32, as keep_scale does
  P.keep_scale = dropout_p >= 1.0 ? T(0) : T(1.0 / (1.0 - dropout_p));
  P.seed = (uint64_t)dims[9];
  P.offset = (uint64_t)dims[10];
  return P;
}

// dims: heads, H, group, L, S, E, Ev, block_q, block_k, dropout seed, dropout offset.
// is_double selects float64.
extern "C" void ember_attn_forward(int is_double, const void* q, const void* k, const void* v,
                                   const int64_t* dims, const void* mask, int mask_kind,
                                   const int64_t* ms, int causal, double scale,
                                   double dropout_p, void* out, void* lse, int nthreads) {
  if (is_double) {
    auto P = problem<double>(q, k, v, dims, mask, mask_kind, ms, causal, scale, dropout_p);
    forward(P, (double*)out, (double*)lse, nthreads);
  } else {
    auto P = problem<float>(q, k, v, dims, mask, mask_kind, ms, causal, scale, dropout_p);
    forward(P, (float*)out, (float*)lse, nthreads);
  }
}

extern "C" void ember_attn_backward(int is_double, const void* q, const void* k, const void* v,
                                    const int64_t* dims, const void* mask, int mask_kind,
                                    const int64_t* ms, int causal, double scale,
                                    double dropout_p, const void* go,
                                    const void* lse, const void* delta, void* dq, void* dk,
                                    void* dv, int nthreads) {
  if (is_double) {
    auto P = problem<double>(q, k, v, dims, mask, mask_kind, ms, causal, scale, dropout_p);
    backward(P, (const double*)go, (const double*)lse, (const double*)delta, (double*)dq,
             (double*)dk, (double*)dv, nthreads);
  } else {
    auto P = problem<float>(q, k, v, dims, mask, mask_kind, ms, causal, scale, dropout_p);
    backward(P, (const float*)go, (const float*)lse, (const float*)delta, (float*)dq,
             (float*)dk, (float*)dv, nthreads);
  }
}
