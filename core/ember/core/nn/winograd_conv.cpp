// Winograd F(2x2, 3x3) transforms for a 3x3, stride-1 convolution on channels-last float32
// data. Each 2x2 block of outputs (a tile) is computed from a 4x4 input patch d as
// A^T [U (.) (B^T d B)] A, where U = G g G^T is the transformed filter: 16 products per tile
// and channel pair instead of 36. The 16 elementwise products summed over input channels are
// 16 matrix products, which the caller runs (oneDNN or MKL); these kernels move the tiles in
// and out of that form. Vectors run over channels, which channels-last keeps contiguous.
//
// Tile t of a call covers batch b, tile row ty, tile column tx (t = (b * tiles_y + ty) *
// tiles_x + tx), counted from t0. Element (t, k, c) of the transformed tiles lives at
// t * tile_stride + k * point_stride + c, so the caller picks a tile-major or point-major
// layout for its matrix product.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

struct Tile {
  int64_t b, y, x;  // batch index and the top-left output coordinate of the tile
};

inline Tile locate(int64_t t, int64_t tiles_y, int64_t tiles_x) {
  const int64_t per_image = tiles_y * tiles_x;
  const int64_t r = t % per_image;
  return {t / per_image, (r / tiles_x) * 2, (r % tiles_x) * 2};
}

}  // namespace

// w: (k, c, 3, 3) contiguous; u: (16, k, c), point p of filter (k, c) at (p * k + k) * c + c:
// G g G^T, computed in double and rounded once.
extern "C" int ember_winograd_weight_f32(const float* w, float* u, int64_t k, int64_t c) {
  if (k < 1 || c < 1) return 1;
  constexpr int64_t kBlock = 64;  // filters per block: the 16 output rows are 16 streams
                                  // k * c apart, written a block at a time
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < k; ++o) {
    float buf[16][kBlock];
    for (int64_t i0 = 0; i0 < c; i0 += kBlock) {
      const int64_t len = std::min(kBlock, c - i0);
      const float* wo = w + (o * c + i0) * 9;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) {
        const float* g = wo + i * 9;
        double t[4][3];
        for (int s = 0; s < 3; ++s) {  // rows: G g
          const double g0 = g[s], g1 = g[3 + s], g2 = g[6 + s];
          t[0][s] = g0;
          t[1][s] = 0.5 * (g0 + g1 + g2);
          t[2][s] = 0.5 * (g0 - g1 + g2);
          t[3][s] = g2;
        }
        for (int r = 0; r < 4; ++r) {  // columns: (G g) G^T
          buf[r * 4 + 0][i] = static_cast<float>(t[r][0]);
          buf[r * 4 + 1][i] = static_cast<float>(0.5 * (t[r][0] + t[r][1] + t[r][2]));
          buf[r * 4 + 2][i] = static_cast<float>(0.5 * (t[r][0] - t[r][1] + t[r][2]));
          buf[r * 4 + 3][i] = static_cast<float>(t[r][2]);
        }
      }
      for (int p = 0; p < 16; ++p) std::copy_n(buf[p], len, u + (p * k + o) * c + i0);
    }
  }
  return 0;
}

// x: (n, h, w, c) contiguous; v: the transformed tiles t0 .. t0 + count - 1; tiles past the
// last real one (t >= n * tiles_y * tiles_x) are written as zeros.
extern "C" int ember_winograd_input_f32(const float* x, float* v, int64_t n, int64_t h,
                                        int64_t w, int64_t c, int64_t pad_h, int64_t pad_w,
                                        int64_t tiles_y, int64_t tiles_x, int64_t t0,
                                        int64_t count, int64_t tile_stride,
                                        int64_t point_stride) {
  if (c < 1 || count < 0) return 1;
  const std::vector<float> zeros(c, 0.0f);
  const int64_t total = n * tiles_y * tiles_x;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = t0 + i;
    float* out = v + i * tile_stride;
    const float* p[16];
    if (t >= total) {
      for (int k = 0; k < 16; ++k) std::fill_n(out + k * point_stride, c, 0.0f);
      continue;
    }
    const Tile tile = locate(t, tiles_y, tiles_x);
    for (int r = 0; r < 4; ++r) {
      const int64_t yy = tile.y - pad_h + r;
      for (int s = 0; s < 4; ++s) {
        const int64_t xx = tile.x - pad_w + s;
        const bool inside = yy >= 0 && yy < h && xx >= 0 && xx < w;
        p[r * 4 + s] = inside ? x + ((tile.b * h + yy) * w + xx) * c : zeros.data();
      }
    }
    float* __restrict__ o[16];
    for (int k = 0; k < 16; ++k) o[k] = out + k * point_stride;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) {
      float d[4][4], u[4][4];
      for (int r = 0; r < 4; ++r)
        for (int s = 0; s < 4; ++s) d[r][s] = p[r * 4 + s][ch];
      for (int s = 0; s < 4; ++s) {  // rows: B^T d
        u[0][s] = d[0][s] - d[2][s];
        u[1][s] = d[1][s] + d[2][s];
        u[2][s] = d[2][s] - d[1][s];
        u[3][s] = d[1][s] - d[3][s];
      }
      for (int r = 0; r < 4; ++r) {  // columns: (B^T d) B
        o[r * 4 + 0][ch] = u[r][0] - u[r][2];
        o[r * 4 + 1][ch] = u[r][1] + u[r][2];
        o[r * 4 + 2][ch] = u[r][2] - u[r][1];
        o[r * 4 + 3][ch] = u[r][1] - u[r][3];
      }
    }
  }
  return 0;
}

// m: the 16 products of tiles t0 .. t0 + count - 1 (k output channels each), laid out like v
// above; y: (n, out_h, out_w, k) contiguous. Adds bias, then other (laid out as y), each
// unless null, and clamps at zero when relu is set. Tiles past the last real one are skipped.
extern "C" int ember_winograd_output_f32(const float* m, const float* bias, const float* other,
                                         float* y,
                                         int64_t n, int64_t out_h, int64_t out_w, int64_t k,
                                         int64_t tiles_y, int64_t tiles_x, int64_t t0,
                                         int64_t count, int64_t tile_stride,
                                         int64_t point_stride, int64_t relu) {
  if (k < 1 || count < 0) return 1;
  const std::vector<float> zeros(k, 0.0f);
  const float* b = bias != nullptr ? bias : zeros.data();
  const int64_t total = n * tiles_y * tiles_x;
  const int64_t last = std::min(count, total - t0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < last; ++i) {
    const Tile tile = locate(t0 + i, tiles_y, tiles_x);
    const float* in = m + i * tile_stride;
    const float* q[16];
    for (int j = 0; j < 16; ++j) q[j] = in + j * point_stride;
    // outputs past the bottom or right edge go to a scratch row that is never read
    std::vector<float> spill;
    float* __restrict__ o[4];
    const float* add[4];
    for (int r = 0; r < 2; ++r) {
      for (int s = 0; s < 2; ++s) {
        const int64_t yy = tile.y + r, xx = tile.x + s;
        if (yy < out_h && xx < out_w) {
          const int64_t at = ((tile.b * out_h + yy) * out_w + xx) * k;
          o[r * 2 + s] = y + at;
          add[r * 2 + s] = other != nullptr ? other + at : zeros.data();
        } else {
          if (spill.empty()) spill.resize(k);
          o[r * 2 + s] = spill.data();
          add[r * 2 + s] = zeros.data();
        }
      }
    }
    const bool clamp = relu != 0;
#pragma omp simd
    for (int64_t ch = 0; ch < k; ++ch) {
      float s[2][4];
      for (int col = 0; col < 4; ++col) {  // rows: A^T M
        const float m0 = q[col][ch], m1 = q[4 + col][ch], m2 = q[8 + col][ch],
                    m3 = q[12 + col][ch];
        s[0][col] = m0 + m1 + m2;
        s[1][col] = m1 - m2 - m3;
      }
      for (int r = 0; r < 2; ++r) {  // columns: (A^T M) A
        float a = (s[r][0] + s[r][1] + s[r][2] + b[ch]) + add[r * 2 + 0][ch];
        float e = (s[r][1] - s[r][2] - s[r][3] + b[ch]) + add[r * 2 + 1][ch];
        if (clamp) {
          a = a < 0.0f ? 0.0f : a;  // NaN passes through, as torch's relu keeps it
          e = e < 0.0f ? 0.0f : e;
        }
        o[r * 2 + 0][ch] = a;
        o[r * 2 + 1][ch] = e;
      }
    }
  }
  return 0;
}
