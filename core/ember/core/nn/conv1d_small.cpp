// 1-d convolution whose reduction (input channels x kernel taps) is short: a waveform's first
// layer (1 channel, kernel 10). Per (batch, block of output frames) the taps are gathered once
// into a small [taps][frames] tile, then every output channel is a SIMD loop over the frames
// with its taps in registers; oneDNN's im2col + GEMM runs such shapes far below peak.
#include <algorithm>
#include <cstdint>

namespace {

constexpr int64_t kMaxTaps = 32;
constexpr int64_t kBlock = 256;  // frames per tile: kMaxTaps x kBlock floats = 32 KiB

template <int64_t R>
inline void channel(const float* __restrict__ tile, const float* __restrict__ wc, float b0,
                    float* __restrict__ o, int64_t n) {
  float wr[R];
  for (int64_t r = 0; r < R; ++r) wr[r] = wc[r];
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) {
    float acc = b0;
    for (int64_t r = 0; r < R; ++r) acc += wr[r] * tile[r * kBlock + t];
    o[t] = acc;
  }
}

inline void channel_any(const float* __restrict__ tile, const float* __restrict__ wc,
                        int64_t taps, float b0, float* __restrict__ o, int64_t n) {
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) o[t] = b0;
  for (int64_t r = 0; r < taps; ++r) {
    const float wr = wc[r];
    const float* __restrict__ row = tile + r * kBlock;
#pragma omp simd
    for (int64_t t = 0; t < n; ++t) o[t] += wr * row[t];
  }
}

}  // namespace

// x: (batch, cin, length), w: (cout, cin, kernel), bias: (cout) or null, out: (batch, cout,
// frames), all contiguous float32. Returns 0, or 1 when cin * kernel exceeds kMaxTaps.
extern "C" int ember_conv1d_small_f32(const float* x, const float* w, const float* bias,
                                      float* out, int64_t batch, int64_t cin, int64_t length,
                                      int64_t cout, int64_t kernel, int64_t stride,
                                      int64_t padding, int64_t dilation, int64_t frames) {
  const int64_t taps = cin * kernel;
  if (taps > kMaxTaps || taps < 1) return 1;
  const int64_t blocks = (frames + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < batch * blocks; ++u) {
    const int64_t b = u / blocks, t0 = (u % blocks) * kBlock;
    const int64_t n = std::min(kBlock, frames - t0);
    alignas(64) float tile[kMaxTaps * kBlock];
    for (int64_t ci = 0; ci < cin; ++ci) {
      const float* xr = x + (b * cin + ci) * length;
      for (int64_t k = 0; k < kernel; ++k) {
        float* row = tile + (ci * kernel + k) * kBlock;
        const int64_t first = t0 * stride + k * dilation - padding;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t p = first + t * stride;
          row[t] = (p >= 0 && p < length) ? xr[p] : 0.0f;
        }
      }
    }
    for (int64_t c = 0; c < cout; ++c) {
      const float* wc = w + c * taps;
      float* o = out + (b * cout + c) * frames + t0;
      const float b0 = bias ? bias[c] : 0.0f;
      switch (taps) {
        case 3: channel<3>(tile, wc, b0, o, n); break;
        case 4: channel<4>(tile, wc, b0, o, n); break;
        case 5: channel<5>(tile, wc, b0, o, n); break;
        case 8: channel<8>(tile, wc, b0, o, n); break;
        case 10: channel<10>(tile, wc, b0, o, n); break;
        case 16: channel<16>(tile, wc, b0, o, n); break;
        default: channel_any(tile, wc, taps, b0, o, n);
      }
    }
  }
  return 0;
}
