// Direct-form lfilter y[n] = sum_k b[k] x[n-k] - sum_{k>=1} a[k] y[n-k] in float64, one row
// at a time (see _iir_native.py); no OpenMP (callers split rows over ember.core.parallel).
#include <cstdint>

// One output sample; `full` when n >= order (no bounds checks).
template <bool full>
static inline double step(const double* in, const double* out, int64_t n, const double* b,
                          const double* a, int64_t order) {
  double acc = b[0] * in[n];
  for (int64_t k = order; k >= 1; --k) {
    if (!full && n - k < 0) continue;
    acc += b[k] * in[n - k];
  }
  for (int64_t k = order; k >= 2; --k) {
    if (!full && n - k < 0) continue;
    acc -= a[k] * out[n - k];
  }
  if (full || n >= 1) acc -= a[1] * out[n - 1];  // newest output last: shortest chain
  return acc;
}

// rows [row0, row1) of x and y (each `time` long, contiguous); row r uses the normalised
// coefficients b, a [(r % channels) * (order + 1) ...] (a[0] == 1 is not read).
extern "C" int ember_lfilter_rows(const double* x, double* y, int64_t time, const double* b,
                                  const double* a, int64_t channels, int64_t order,
                                  int64_t row0, int64_t row1) {
  if (order < 1 || time < 0 || channels < 1) return 1;
  for (int64_t r = row0; r < row1; ++r) {
    const double* cb = b + (r % channels) * (order + 1);
    const double* ca = a + (r % channels) * (order + 1);
    const double* in = x + r * time;
    double* out = y + r * time;
    int64_t head = order < time ? order : time;
    for (int64_t n = 0; n < head; ++n) out[n] = step<false>(in, out, n, cb, ca, order);
    for (int64_t n = head; n < time; ++n) out[n] = step<true>(in, out, n, cb, ca, order);
  }
  return 0;
}
