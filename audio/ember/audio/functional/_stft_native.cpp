// projection @ |STFT|^2 on float32 in one pass (see _stft_native.py): sixteen frames per
// group, one per SIMD lane, through a Stockham FFT; no OpenMP (callers split frame ranges).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

constexpr int V = 16;

struct Stage { int radix, n, s; std::vector<float> twr, twi; };  // tw[(p * radix + k)]
struct Plan {
  int n_fft = 0, m = 0;            // m: complex FFT length (n_fft / 2 when even)
  bool half = false;
  std::vector<Stage> stages;
  std::vector<float> wr, wi;       // split-step twiddles e^{-2 pi i k / n_fft}, k <= m
};

static std::vector<int> factorise(int n) {
  std::vector<int> f;
  while (n % 4 == 0) { f.push_back(4); n /= 4; }
  while (n % 2 == 0) { f.push_back(2); n /= 2; }
  for (int p = 3; p * p <= n; p += 2)
    while (n % p == 0) { f.push_back(p); n /= p; }
  if (n > 1) f.push_back(n);
  return f;
}

static std::shared_ptr<Plan> make_plan(int n_fft) {
  auto plan = std::make_shared<Plan>();
  plan->n_fft = n_fft;
  plan->half = n_fft % 2 == 0 && n_fft > 2;
  plan->m = plan->half ? n_fft / 2 : n_fft;
  int n = plan->m, s = 1;
  for (int r : factorise(plan->m)) {
    Stage st{r, n, s, {}, {}};
    int m = n / r;
    st.twr.resize(size_t(m) * r);
    st.twi.resize(size_t(m) * r);
    for (int p = 0; p < m; ++p)
      for (int k = 0; k < r; ++k) {
        double a = -2.0 * M_PI * double(p) * double(k) / double(n);
        st.twr[p * r + k] = float(std::cos(a));
        st.twi[p * r + k] = float(std::sin(a));
      }
    plan->stages.push_back(std::move(st));
    n = m;
    s *= r;
  }
  plan->wr.resize(plan->m + 1);
  plan->wi.resize(plan->m + 1);
  for (int k = 0; k <= plan->m; ++k) {
    double a = -2.0 * M_PI * double(k) / double(n_fft);
    plan->wr[k] = float(std::cos(a));
    plan->wi[k] = float(std::sin(a));
  }
  return plan;
}

static std::shared_ptr<Plan> get_plan(int n_fft) {
  static std::mutex lock;
  static std::map<int, std::shared_ptr<Plan>> plans;
  std::lock_guard<std::mutex> guard(lock);
  auto& p = plans[n_fft];
  if (!p) p = make_plan(n_fft);
  return p;
}

// One radix-R Stockham step over V lanes: reads x, writes y (both [len][V] re/im planes).
// b_k = sum_j a_j w_R^{jk} with a_j = x[q + s (p + j m)], then y[q + s (R p + k)] = b_k w_n^{pk}.
template <int R>
static void butterflies(const Stage& st, const float* xr, const float* xi, float* yr,
                        float* yi) {
  const int m = st.n / R, s = st.s;
  float cr[R], ci[R];  // cos / sin of 2 pi j / R
  for (int j = 0; j < R; ++j) {
    cr[j] = float(std::cos(2.0 * M_PI * j / R));
    ci[j] = float(std::sin(2.0 * M_PI * j / R));
  }
  for (int p = 0; p < m; ++p) {
    const float* twr = &st.twr[size_t(p) * R];
    const float* twi = &st.twi[size_t(p) * R];
    for (int q = 0; q < s; ++q) {
      const float* ar[R]; const float* ai[R];
      float* br[R]; float* bi[R];
      for (int j = 0; j < R; ++j) {
        ar[j] = xr + size_t(q + s * (p + j * m)) * V;
        ai[j] = xi + size_t(q + s * (p + j * m)) * V;
        br[j] = yr + size_t(q + s * (R * p + j)) * V;
        bi[j] = yi + size_t(q + s * (R * p + j)) * V;
      }
      #pragma omp simd
      for (int l = 0; l < V; ++l) {
        float outr[R], outi[R];
        if constexpr (R == 2) {
          outr[0] = ar[0][l] + ar[1][l]; outi[0] = ai[0][l] + ai[1][l];
          outr[1] = ar[0][l] - ar[1][l]; outi[1] = ai[0][l] - ai[1][l];
        } else if constexpr (R == 4) {
          float t0r = ar[0][l] + ar[2][l], t0i = ai[0][l] + ai[2][l];
          float t1r = ar[0][l] - ar[2][l], t1i = ai[0][l] - ai[2][l];
          float t2r = ar[1][l] + ar[3][l], t2i = ai[1][l] + ai[3][l];
          float t3r = ar[1][l] - ar[3][l], t3i = ai[1][l] - ai[3][l];
          outr[0] = t0r + t2r; outi[0] = t0i + t2i;
          outr[2] = t0r - t2r; outi[2] = t0i - t2i;
          outr[1] = t1r + t3i; outi[1] = t1i - t3r;  // t1 - i t3
          outr[3] = t1r - t3i; outi[3] = t1i + t3r;  // t1 + i t3
        } else {  // odd R: pairs (j, R - j) share the cosine and negate the sine
          float sr[R / 2 + 1], si[R / 2 + 1], dr[R / 2 + 1], di[R / 2 + 1];
          float b0r = ar[0][l], b0i = ai[0][l];
          for (int j = 1; j <= R / 2; ++j) {
            sr[j] = ar[j][l] + ar[R - j][l]; si[j] = ai[j][l] + ai[R - j][l];
            dr[j] = ar[j][l] - ar[R - j][l]; di[j] = ai[j][l] - ai[R - j][l];
            b0r += sr[j]; b0i += si[j];
          }
          outr[0] = b0r; outi[0] = b0i;
          for (int k = 1; k <= R / 2; ++k) {
            float er = ar[0][l], ei = ai[0][l], orr = 0.f, oi = 0.f;
            for (int j = 1; j <= R / 2; ++j) {
              int jk = (j * k) % R;
              er += cr[jk] * sr[j]; ei += cr[jk] * si[j];
              orr += ci[jk] * dr[j]; oi += ci[jk] * di[j];
            }
            // w^{jk} = cos - i sin: b_k = e + (-i) o, b_{R-k} = e + i o
            outr[k] = er + oi; outi[k] = ei - orr;
            outr[R - k] = er - oi; outi[R - k] = ei + orr;
          }
        }
        br[0][l] = outr[0]; bi[0][l] = outi[0];
        for (int k = 1; k < R; ++k) {
          br[k][l] = outr[k] * twr[k] - outi[k] * twi[k];
          bi[k][l] = outr[k] * twi[k] + outi[k] * twr[k];
        }
      }
    }
  }
}

// Any radix: the direct DFT with the table of w_R^{jk} (large primes only).
static void butterflies_any(const Stage& st, const float* xr, const float* xi, float* yr,
                            float* yi) {
  const int R = st.radix, m = st.n / R, s = st.s;
  std::vector<float> cr(R), ci(R), accr(size_t(R) * V), acci(size_t(R) * V);
  for (int j = 0; j < R; ++j) {
    cr[j] = float(std::cos(2.0 * M_PI * j / R));
    ci[j] = float(-std::sin(2.0 * M_PI * j / R));
  }
  for (int p = 0; p < m; ++p)
    for (int q = 0; q < s; ++q) {
      std::fill(accr.begin(), accr.end(), 0.f);
      std::fill(acci.begin(), acci.end(), 0.f);
      for (int j = 0; j < R; ++j) {
        const float* ar = xr + size_t(q + s * (p + j * m)) * V;
        const float* ai = xi + size_t(q + s * (p + j * m)) * V;
        for (int k = 0; k < R; ++k) {
          const float wr = cr[(j * k) % R], wi = ci[(j * k) % R];
          float* o_r = &accr[size_t(k) * V];
          float* o_i = &acci[size_t(k) * V];
          #pragma omp simd
          for (int l = 0; l < V; ++l) {
            o_r[l] += ar[l] * wr - ai[l] * wi;
            o_i[l] += ar[l] * wi + ai[l] * wr;
          }
        }
      }
      for (int k = 0; k < R; ++k) {
        const float tr = st.twr[size_t(p) * R + k], ti = st.twi[size_t(p) * R + k];
        float* br = yr + size_t(q + s * (R * p + k)) * V;
        float* bi = yi + size_t(q + s * (R * p + k)) * V;
        #pragma omp simd
        for (int l = 0; l < V; ++l) {
          br[l] = accr[size_t(k) * V + l] * tr - acci[size_t(k) * V + l] * ti;
          bi[l] = accr[size_t(k) * V + l] * ti + acci[size_t(k) * V + l] * tr;
        }
      }
    }
}

// FFT of V lanes in (ar, ai); the result lands in (ar, ai) or (br, bi): returns which.
static bool fft(const Plan& plan, float* ar, float* ai, float* br, float* bi) {
  bool in_b = false;
  for (const Stage& st : plan.stages) {
    const float* xr = in_b ? br : ar; const float* xi = in_b ? bi : ai;
    float* yr = in_b ? ar : br; float* yi = in_b ? ai : bi;
    switch (st.radix) {
      case 2: butterflies<2>(st, xr, xi, yr, yi); break;
      case 3: butterflies<3>(st, xr, xi, yr, yi); break;
      case 4: butterflies<4>(st, xr, xi, yr, yi); break;
      case 5: butterflies<5>(st, xr, xi, yr, yi); break;
      case 7: butterflies<7>(st, xr, xi, yr, yi); break;
      default: butterflies_any(st, xr, xi, yr, yi); break;
    }
    in_b = !in_b;
  }
  return in_b;
}

extern "C" int ember_stft_power_project(
    const float* x, int64_t length, const float* lpad, int64_t n_left, const float* rpad,
    int64_t n_right, const float* window, int64_t n_fft, int64_t hop, int64_t f0,
    int64_t f1, const float* proj, const int32_t* lo, const int32_t* hi, int64_t rows_out,
    int64_t n_bins, float* out, int64_t out_stride) {
  if (n_fft < 1 || hop < 1 || n_bins != n_fft / 2 + 1) return 1;
  auto plan_ptr = get_plan(int(n_fft));
  const Plan& plan = *plan_ptr;
  const int m = plan.m;
  std::vector<float> buf(size_t(4) * m * V + size_t(n_bins) * V);
  float *ar = buf.data(), *ai = ar + size_t(m) * V, *br = ai + size_t(m) * V,
        *bi = br + size_t(m) * V, *pw = bi + size_t(m) * V;
  auto sample = [&](int64_t j) -> float {  // padded signal, zero past its end
    if (j < n_left) return lpad[j];
    j -= n_left;
    if (j < length) return x[j];
    j -= length;
    return j < n_right ? rpad[j] : 0.f;
  };
  for (int64_t g = f0; g < f1; g += V) {
    const int valid = int(std::min<int64_t>(V, f1 - g));
    const int64_t first = g * hop, last = (g + valid - 1) * hop + n_fft;  // sample span
    const bool inside = first >= n_left && last <= n_left + length && valid == V;
    // gather windowed samples: lane l holds frame g + l; even samples re, odd im (half)
    if (inside && plan.half) {
      const float* src = x + (first - n_left);
      for (int i = 0; i < m; ++i) {
        const float w0 = window[2 * i], w1 = window[2 * i + 1];
        #pragma omp simd
        for (int l = 0; l < V; ++l) {
          ar[i * V + l] = src[l * hop + 2 * i] * w0;
          ai[i * V + l] = src[l * hop + 2 * i + 1] * w1;
        }
      }
    } else {
      for (int l = 0; l < V; ++l) {
        const int64_t start = (g + l) * hop;
        for (int i = 0; i < m; ++i) {
          const int64_t j = plan.half ? start + 2 * i : start + i;
          const float w0 = plan.half ? window[2 * i] : window[i];
          ar[i * V + l] = l < valid ? sample(j) * w0 : 0.f;
          ai[i * V + l] = l < valid && plan.half ? sample(j + 1) * window[2 * i + 1] : 0.f;
        }
      }
    }
    const bool in_b = fft(plan, ar, ai, br, bi);
    const float* zr = in_b ? br : ar;
    const float* zi = in_b ? bi : ai;
    if (plan.half) {
      // X_k = E + w^k O, E = (Z_k + conj Z_{m-k}) / 2, O = -i (Z_k - conj Z_{m-k}) / 2
      for (int k = 0; k <= m; ++k) {
        const float* pr = zr + size_t(k % m) * V; const float* pi = zi + size_t(k % m) * V;
        const float* qr = zr + size_t((m - k) % m) * V;
        const float* qi = zi + size_t((m - k) % m) * V;
        const float wr = plan.wr[k], wi = plan.wi[k];
        float* o = pw + size_t(k) * V;
        #pragma omp simd
        for (int l = 0; l < V; ++l) {
          float er = 0.5f * (pr[l] + qr[l]), ei = 0.5f * (pi[l] - qi[l]);
          float orr = 0.5f * (pi[l] + qi[l]), oi = -0.5f * (pr[l] - qr[l]);
          float xr_ = er + wr * orr - wi * oi, xi_ = ei + wr * oi + wi * orr;
          o[l] = xr_ * xr_ + xi_ * xi_;
        }
      }
    } else {
      for (int k = 0; k < n_bins; ++k) {
        float* o = pw + size_t(k) * V;
        #pragma omp simd
        for (int l = 0; l < V; ++l)
          o[l] = zr[size_t(k) * V + l] * zr[size_t(k) * V + l] +
                 zi[size_t(k) * V + l] * zi[size_t(k) * V + l];
      }
    }
    for (int64_t r = 0; r < rows_out; ++r) {
      float acc[V] = {0};
      const float* w = proj + r * n_bins;
      for (int k = lo[r]; k < hi[r]; ++k) {
        const float c = w[k];
        const float* p = pw + size_t(k) * V;
        #pragma omp simd
        for (int l = 0; l < V; ++l) acc[l] += c * p[l];
      }
      float* dst = out + r * out_stride + g;
      if (valid == V) {
        #pragma omp simd
        for (int l = 0; l < V; ++l) dst[l] = acc[l];
      } else {
        for (int l = 0; l < valid; ++l) dst[l] = acc[l];
      }
    }
  }
  return 0;
}
