// Direct-form lfilter y[n] = sum_k b[k] x[n-k] - sum_{k>=1} a[k] y[n-k], accumulated in
// float64 whatever the data type, one row at a time (see _iir_native.py); no OpenMP (callers
// split rows over ember.core.parallel's threads).
#include <cstdint>

// Orders up to 8: the last N inputs and outputs live in registers (N is a constant).
template <typename T, int N>
static void row_fixed(const T* in, T* out, int64_t time, const double* b, const double* a) {
  double xs[N + 1] = {0.0};  // xs[k] = x[n-k]
  double ys[N + 1] = {0.0};  // ys[k] = y[n-k], k >= 1
  for (int64_t n = 0; n < time; ++n) {
    for (int k = N; k >= 1; --k) xs[k] = xs[k - 1];
    xs[0] = static_cast<double>(in[n]);
    double acc = 0.0;
    for (int k = 0; k <= N; ++k) acc += b[k] * xs[k];
    for (int k = N; k >= 2; --k) acc -= a[k] * ys[k];
    acc -= a[1] * ys[1];  // the newest output last: the shortest dependency chain
    for (int k = N; k >= 2; --k) ys[k] = ys[k - 1];
    ys[1] = acc;
    out[n] = static_cast<T>(acc);
  }
}

// Any order: histories read back from the row (in float64 for T = double only, so this path
// keeps its own float64 copy of the outputs).
template <typename T>
static void row_any(const T* in, T* out, double* hist, int64_t time, const double* b,
                    const double* a, int64_t order) {
  for (int64_t n = 0; n < time; ++n) {
    double acc = 0.0;
    for (int64_t k = 0; k <= order && k <= n; ++k) acc += b[k] * static_cast<double>(in[n - k]);
    for (int64_t k = 1; k <= order && k <= n; ++k) acc -= a[k] * hist[n - k];
    hist[n] = acc;
    out[n] = static_cast<T>(acc);
  }
}

template <typename T>
static int rows(const T* x, T* y, double* scratch, int64_t time, const double* b,
                const double* a, int64_t channels, int64_t order, int64_t row0, int64_t row1) {
  if (order < 1 || time < 0 || channels < 1) return 1;
  for (int64_t r = row0; r < row1; ++r) {
    const double* cb = b + (r % channels) * (order + 1);
    const double* ca = a + (r % channels) * (order + 1);
    const T* in = x + r * time;
    T* out = y + r * time;
    switch (order) {
      case 1: row_fixed<T, 1>(in, out, time, cb, ca); break;
      case 2: row_fixed<T, 2>(in, out, time, cb, ca); break;
      case 3: row_fixed<T, 3>(in, out, time, cb, ca); break;
      case 4: row_fixed<T, 4>(in, out, time, cb, ca); break;
      case 5: row_fixed<T, 5>(in, out, time, cb, ca); break;
      case 6: row_fixed<T, 6>(in, out, time, cb, ca); break;
      case 7: row_fixed<T, 7>(in, out, time, cb, ca); break;
      case 8: row_fixed<T, 8>(in, out, time, cb, ca); break;
      default:
        if (scratch == nullptr) return 2;
        row_any<T>(in, out, scratch, time, cb, ca, order);
    }
  }
  return 0;
}

// rows [row0, row1) of x and y (each `time` long, contiguous); row r uses the normalised
// coefficients b, a [(r % channels) * (order + 1) ...]; `scratch` holds `time` doubles
// (needed above order 8 only).
extern "C" int ember_lfilter_rows_f32(const float* x, float* y, double* scratch, int64_t time,
                                      const double* b, const double* a, int64_t channels,
                                      int64_t order, int64_t row0, int64_t row1) {
  return rows<float>(x, y, scratch, time, b, a, channels, order, row0, row1);
}

extern "C" int ember_lfilter_rows_f64(const double* x, double* y, double* scratch,
                                      int64_t time, const double* b, const double* a,
                                      int64_t channels, int64_t order, int64_t row0,
                                      int64_t row1) {
  return rows<double>(x, y, scratch, time, b, a, channels, order, row0, row1);
}
