// RoI pooling kernels for CPU (see _roi_native.py): roi_align, roi_pool, ps_roi_align,
// ps_roi_pool, forward and backward, float and double. Forward splits boxes over OpenMP
// threads; backward splits input channel planes, so no two threads add into one plane.
// No fused multiply-adds: sums round term by term like torchvision's kernels, so results
// match it bit for bit.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using i64 = int64_t;

// One bilinear sample: four flat positions in an H x W plane and their weights.
template <typename T>
struct Tap {
  i64 p[4];
  T w[4];
};

// torchvision's sampling rule: points more than one pixel outside contribute nothing;
// others are clamped to the border, and the last row/column samples a single pixel.
template <typename T>
inline Tap<T> tap(T y, T x, i64 height, i64 width) {
  Tap<T> t{{0, 0, 0, 0}, {0, 0, 0, 0}};
  if (!(y >= T(-1) && y <= T(height) && x >= T(-1) && x <= T(width))) return t;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  i64 y0 = i64(y), x0 = i64(x), y1, x1;
  if (y0 >= height - 1) {
    y1 = y0 = height - 1;
    y = T(y0);
  } else {
    y1 = y0 + 1;
  }
  if (x0 >= width - 1) {
    x1 = x0 = width - 1;
    x = T(x0);
  } else {
    x1 = x0 + 1;
  }
  T ly = y - T(y0), lx = x - T(x0);
  T hy = T(1) - ly, hx = T(1) - lx;
  t.p[0] = y0 * width + x0;
  t.p[1] = y0 * width + x1;
  t.p[2] = y1 * width + x0;
  t.p[3] = y1 * width + x1;
  t.w[0] = hy * hx;
  t.w[1] = hy * lx;
  t.w[2] = ly * hx;
  t.w[3] = ly * lx;
  return t;
}

// Geometry of one box for the align kernels; `ps` selects ps_roi_align's rules.
template <typename T>
struct AlignBox {
  T start_h, start_w, bin_h, bin_w;
  int grid_h, grid_w;
  T count;
};

template <typename T>
AlignBox<T> align_box(const T* r, T scale, i64 ph, i64 pw, i64 sampling, bool aligned,
                      bool ps) {
  AlignBox<T> b;
  T off = (aligned || ps) ? T(0.5) : T(0);
  b.start_w = r[1] * scale - off;
  b.start_h = r[2] * scale - off;
  T rw = r[3] * scale - off - b.start_w;
  T rh = r[4] * scale - off - b.start_h;
  if (!aligned && !ps) {
    rw = std::max(rw, T(1));
    rh = std::max(rh, T(1));
  }
  b.bin_h = rh / T(ph);
  b.bin_w = rw / T(pw);
  b.grid_h = sampling > 0 ? int(sampling) : int(std::ceil(rh / T(ph)));
  b.grid_w = sampling > 0 ? int(sampling) : int(std::ceil(rw / T(pw)));
  int n = b.grid_h * b.grid_w;
  b.count = ps ? T(n) : T(std::max(n, 1));
  return b;
}

// The sample positions of bin (py, px), cell (iy, ix), in the order torchvision sums them.
template <typename T>
inline T sample_y(const AlignBox<T>& b, i64 py, int iy, bool ps) {
  T step = T(iy + 0.5f) * b.bin_h / T(b.grid_h);
  return ps ? (T(py) * b.bin_h + b.start_h) + step : (b.start_h + T(py) * b.bin_h) + step;
}

template <typename T>
inline T sample_x(const AlignBox<T>& b, i64 px, int ix, bool ps) {
  T step = T(ix + 0.5f) * b.bin_w / T(b.grid_w);
  return ps ? (T(px) * b.bin_w + b.start_w) + step : (b.start_w + T(px) * b.bin_w) + step;
}

template <typename T>
bool batch_ok(const T* rois, i64 k, i64 n) {
  for (i64 i = 0; i < k; ++i) {
    T b = rois[i * 5];
    if (!(b > T(-1) && b < T(n))) return false;  // truncates to an image index
  }
  return true;
}

// Every bilinear sample of a box, bin by bin (row-major), cells in torchvision's order.
template <typename T>
void fill_taps(const AlignBox<T>& b, i64 ph, i64 pw, i64 h, i64 w, bool ps,
               std::vector<Tap<T>>& taps) {
  const i64 gh = std::max(b.grid_h, 0), gw = std::max(b.grid_w, 0);
  taps.resize(size_t(ph * pw * gh * gw));
  size_t t = 0;
  for (i64 py = 0; py < ph; ++py)
    for (i64 px = 0; px < pw; ++px)
      for (int iy = 0; iy < gh; ++iy) {
        T y = sample_y(b, py, iy, ps);
        for (int ix = 0; ix < gw; ++ix) taps[t++] = tap(y, sample_x(b, px, ix, ps), h, w);
      }
}

// roi_align / ps_roi_align forward: out [K, C_out, PH, PW].
template <typename T>
int align_fwd(const T* in, const T* rois, T* out, i64 n, i64 c, i64 h, i64 w, i64 k,
              i64 ph, i64 pw, double scale_d, i64 sampling, bool aligned, bool ps,
              int threads) {
  if (!batch_ok(rois, k, n)) return 1;
  const T scale = T(scale_d);
  const i64 c_out = ps ? c / (ph * pw) : c;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (i64 r = 0; r < k; ++r) {
    const T* roi = rois + r * 5;
    const i64 bi = i64(roi[0]);
    AlignBox<T> b = align_box(roi, scale, ph, pw, sampling, aligned, ps);
    std::vector<Tap<T>> taps;
    fill_taps(b, ph, pw, h, w, ps, taps);
    const i64 cells = i64(std::max(b.grid_h, 0)) * std::max(b.grid_w, 0);
    for (i64 co = 0; co < c_out; ++co) {
      for (i64 bin = 0; bin < ph * pw; ++bin) {
        const i64 ci = ps ? co * ph * pw + bin : co;
        const T* plane = in + (bi * c + ci) * h * w;
        const Tap<T>* tp = taps.data() + bin * cells;
        T acc = 0;
        for (i64 j = 0; j < cells; ++j)
          acc += tp[j].w[0] * plane[tp[j].p[0]] + tp[j].w[1] * plane[tp[j].p[1]] +
                 tp[j].w[2] * plane[tp[j].p[2]] + tp[j].w[3] * plane[tp[j].p[3]];
        out[(r * c_out + co) * ph * pw + bin] = acc / b.count;
      }
    }
  }
  return 0;
}

// roi_align forward on a channels-last input [N, H, W, C]: out [K, C, PH, PW]. Each tap
// reads C contiguous values, so the sum runs over channel vectors, term by term in the
// order of align_fwd (equal results).
template <typename T>
int align_nhwc_fwd(const T* in, const T* rois, T* out, i64 n, i64 c, i64 h, i64 w, i64 k,
                   i64 ph, i64 pw, double scale_d, i64 sampling, bool aligned, int threads) {
  if (!batch_ok(rois, k, n)) return 1;
  const T scale = T(scale_d);
  const i64 bins = ph * pw;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<T> acc(static_cast<size_t>(c));
    std::vector<Tap<T>> taps;
#pragma omp for schedule(dynamic)
    for (i64 r = 0; r < k; ++r) {
      const T* roi = rois + r * 5;
      const T* img = in + i64(roi[0]) * h * w * c;
      AlignBox<T> b = align_box(roi, scale, ph, pw, sampling, aligned, false);
      const i64 cells = i64(std::max(b.grid_h, 0)) * std::max(b.grid_w, 0);
      fill_taps(b, ph, pw, h, w, false, taps);
      T* a = acc.data();
      for (i64 bin = 0; bin < bins; ++bin) {
        std::fill(acc.begin(), acc.end(), T(0));
        for (i64 j = 0; j < cells; ++j) {
          const Tap<T>& q = taps[size_t(bin * cells + j)];
          const T *p0 = img + q.p[0] * c, *p1 = img + q.p[1] * c, *p2 = img + q.p[2] * c,
                  *p3 = img + q.p[3] * c;
          const T w0 = q.w[0], w1 = q.w[1], w2 = q.w[2], w3 = q.w[3];
#pragma omp simd
          for (i64 ci = 0; ci < c; ++ci)
            a[ci] += w0 * p0[ci] + w1 * p1[ci] + w2 * p2[ci] + w3 * p3[ci];
        }
        for (i64 ci = 0; ci < c; ++ci) out[(r * c + ci) * bins + bin] = a[ci] / b.count;
      }
    }
  }
  return 0;
}

// roi_align / ps_roi_align backward: grad_in [N, C, H, W] (zeroed) += the adjoint.
template <typename T>
int align_bwd(const T* grad, const T* rois, T* gin, i64 n, i64 c, i64 h, i64 w, i64 k,
              i64 ph, i64 pw, double scale_d, i64 sampling, bool aligned, bool ps,
              int threads) {
  if (!batch_ok(rois, k, n)) return 1;
  const T scale = T(scale_d);
  const i64 c_out = ps ? c / (ph * pw) : c;
  const i64 bins = ph * pw;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (i64 ci = 0; ci < c; ++ci) {
    const i64 co = ps ? ci / bins : ci;
    if (co >= c_out) continue;
    for (i64 r = 0; r < k; ++r) {
      const T* roi = rois + r * 5;
      T* plane = gin + (i64(roi[0]) * c + ci) * h * w;
      AlignBox<T> b = align_box(roi, scale, ph, pw, sampling, aligned, ps);
      const i64 lo = ps ? ci % bins : 0, hi = ps ? lo + 1 : bins;
      for (i64 bin = lo; bin < hi; ++bin) {
        const i64 py = bin / pw, px = bin % pw;
        const T g = grad[(r * c_out + co) * bins + bin];
        for (int iy = 0; iy < b.grid_h; ++iy) {
          T y = sample_y(b, py, iy, ps);
          for (int ix = 0; ix < b.grid_w; ++ix) {
            Tap<T> t = tap(y, sample_x(b, px, ix, ps), h, w);
            for (int q = 0; q < 4; ++q) plane[t.p[q]] += g * t.w[q] / b.count;
          }
        }
      }
    }
  }
  return 0;
}

// Integer bin of roi_pool / ps_roi_pool: [h0, h1) x [w0, w1), clipped to [0, lim_h/lim_w].
struct PoolBin {
  i64 h0, h1, w0, w1;
  bool empty() const { return h1 <= h0 || w1 <= w0; }
};

template <typename T>
struct PoolBox {
  i64 sh, sw;
  T bin_h, bin_w;
};

template <typename T>
PoolBox<T> pool_box(const T* r, T scale, i64 ph, i64 pw, i64 extra) {
  PoolBox<T> b;
  b.sw = i64(std::round(r[1] * scale));
  b.sh = i64(std::round(r[2] * scale));
  i64 ew = i64(std::round(r[3] * scale)), eh = i64(std::round(r[4] * scale));
  i64 rw = std::max<i64>(ew - b.sw + extra, 1), rh = std::max<i64>(eh - b.sh + extra, 1);
  b.bin_h = T(rh) / T(ph);
  b.bin_w = T(rw) / T(pw);
  return b;
}

template <typename T>
PoolBin pool_bin(const PoolBox<T>& b, i64 py, i64 px, i64 lim_h, i64 lim_w) {
  auto clip = [](i64 v, i64 hi) { return std::min(std::max(v, i64(0)), hi); };
  PoolBin r;
  r.h0 = clip(i64(std::floor(T(py) * b.bin_h)) + b.sh, lim_h);
  r.h1 = clip(i64(std::ceil(T(py + 1) * b.bin_h)) + b.sh, lim_h);
  r.w0 = clip(i64(std::floor(T(px) * b.bin_w)) + b.sw, lim_w);
  r.w1 = clip(i64(std::ceil(T(px + 1) * b.bin_w)) + b.sw, lim_w);
  return r;
}

// roi_pool forward: max over each bin, argmax the flat h * W + w position (-1 if empty).
template <typename T>
int pool_fwd(const T* in, const T* rois, T* out, int32_t* arg, i64 n, i64 c, i64 h, i64 w,
             i64 k, i64 ph, i64 pw, double scale_d, int threads) {
  if (!batch_ok(rois, k, n)) return 1;
  const T scale = T(scale_d);
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (i64 r = 0; r < k; ++r) {
    const T* roi = rois + r * 5;
    const i64 bi = i64(roi[0]);
    PoolBox<T> b = pool_box(roi, scale, ph, pw, 1);
    for (i64 py = 0; py < ph; ++py)
      for (i64 px = 0; px < pw; ++px) {
        PoolBin bin = pool_bin(b, py, px, h, w);
        for (i64 ci = 0; ci < c; ++ci) {
          const T* plane = in + (bi * c + ci) * h * w;
          T best = bin.empty() ? T(0) : T(-FLT_MAX);
          int32_t where = -1;
          for (i64 y = bin.h0; y < bin.h1; ++y)
            for (i64 x = bin.w0; x < bin.w1; ++x)
              if (plane[y * w + x] > best) {
                best = plane[y * w + x];
                where = int32_t(y * w + x);
              }
          const i64 o = ((r * c + ci) * ph + py) * pw + px;
          out[o] = best;
          arg[o] = where;
        }
      }
  }
  return 0;
}

template <typename T>
int pool_bwd(const T* grad, const T* rois, const int32_t* arg, T* gin, i64 n, i64 c, i64 h,
             i64 w, i64 k, i64 ph, i64 pw, int threads) {
  if (!batch_ok(rois, k, n)) return 1;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (i64 ci = 0; ci < c; ++ci)
    for (i64 r = 0; r < k; ++r) {
      T* plane = gin + (i64(rois[r * 5]) * c + ci) * h * w;
      for (i64 j = 0; j < ph * pw; ++j) {
        const i64 o = (r * c + ci) * ph * pw + j;
        if (arg[o] >= 0) plane[arg[o]] += grad[o];
      }
    }
  return 0;
}

// ps_roi_pool forward: mean over each bin of its own channel. torchvision clips the
// forward bins to H - 1 / W - 1 (the last row and column are never read); so do we.
template <typename T>
int ps_pool_fwd(const T* in, const T* rois, T* out, i64 n, i64 c, i64 h, i64 w, i64 k,
                i64 ph, i64 pw, double scale_d, int threads) {
  if (!batch_ok(rois, k, n)) return 1;
  const T scale = T(scale_d);
  const i64 bins = ph * pw, c_out = c / bins;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (i64 r = 0; r < k; ++r) {
    const T* roi = rois + r * 5;
    const i64 bi = i64(roi[0]);
    PoolBox<T> b = pool_box(roi, scale, ph, pw, 0);
    for (i64 co = 0; co < c_out; ++co)
      for (i64 j = 0; j < bins; ++j) {
        PoolBin bin = pool_bin(b, j / pw, j % pw, h - 1, w - 1);
        const T* plane = in + (bi * c + co * bins + j) * h * w;
        T acc = 0;
        for (i64 y = bin.h0; y < bin.h1; ++y)
          for (i64 x = bin.w0; x < bin.w1; ++x) acc += plane[y * w + x];
        T area = T((bin.h1 - bin.h0) * (bin.w1 - bin.w0));
        out[(r * c_out + co) * bins + j] = bin.empty() ? T(0) : acc / area;
      }
  }
  return 0;
}

// ps_roi_pool backward: the adjoint of the forward above (same clipped bins).
template <typename T>
int ps_pool_bwd(const T* grad, const T* rois, T* gin, i64 n, i64 c, i64 h, i64 w, i64 k,
                i64 ph, i64 pw, double scale_d, int threads) {
  if (!batch_ok(rois, k, n)) return 1;
  const T scale = T(scale_d);
  const i64 bins = ph * pw, c_out = c / bins;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (i64 ci = 0; ci < c_out * bins; ++ci) {
    const i64 co = ci / bins, j = ci % bins;
    for (i64 r = 0; r < k; ++r) {
      const T* roi = rois + r * 5;
      PoolBox<T> b = pool_box(roi, scale, ph, pw, 0);
      PoolBin bin = pool_bin(b, j / pw, j % pw, h - 1, w - 1);
      if (bin.empty()) continue;
      T* plane = gin + (i64(roi[0]) * c + ci) * h * w;
      T g = grad[(r * c_out + co) * bins + j] / T((bin.h1 - bin.h0) * (bin.w1 - bin.w0));
      for (i64 y = bin.h0; y < bin.h1; ++y)
        for (i64 x = bin.w0; x < bin.w1; ++x) plane[y * w + x] += g;
    }
  }
  return 0;
}

}  // namespace

#define EMBER_ROI_EXPORTS(T, S)                                                            \
  extern "C" int ember_roi_align_fwd_##S(const T* in, const T* rois, T* out, i64 n, i64 c, \
                                         i64 h, i64 w, i64 k, i64 ph, i64 pw, double scale, \
                                         i64 sampling, int aligned, int ps, int threads) {  \
    return align_fwd<T>(in, rois, out, n, c, h, w, k, ph, pw, scale, sampling, aligned,    \
                        ps, threads);                                                      \
  }                                                                                        \
  extern "C" int ember_roi_align_nhwc_fwd_##S(const T* in, const T* rois, T* out, i64 n,   \
                                              i64 c, i64 h, i64 w, i64 k, i64 ph, i64 pw,  \
                                              double scale, i64 sampling, int aligned,     \
                                              int threads) {                               \
    return align_nhwc_fwd<T>(in, rois, out, n, c, h, w, k, ph, pw, scale, sampling,        \
                             aligned, threads);                                            \
  }                                                                                        \
  extern "C" int ember_roi_align_bwd_##S(const T* g, const T* rois, T* gin, i64 n, i64 c,  \
                                         i64 h, i64 w, i64 k, i64 ph, i64 pw, double scale, \
                                         i64 sampling, int aligned, int ps, int threads) {  \
    return align_bwd<T>(g, rois, gin, n, c, h, w, k, ph, pw, scale, sampling, aligned, ps, \
                        threads);                                                          \
  }                                                                                        \
  extern "C" int ember_roi_pool_fwd_##S(const T* in, const T* rois, T* out, int32_t* arg,  \
                                        i64 n, i64 c, i64 h, i64 w, i64 k, i64 ph, i64 pw,  \
                                        double scale, int threads) {                        \
    return pool_fwd<T>(in, rois, out, arg, n, c, h, w, k, ph, pw, scale, threads);         \
  }                                                                                        \
  extern "C" int ember_roi_pool_bwd_##S(const T* g, const T* rois, const int32_t* arg,     \
                                        T* gin, i64 n, i64 c, i64 h, i64 w, i64 k, i64 ph,  \
                                        i64 pw, int threads) {                              \
    return pool_bwd<T>(g, rois, arg, gin, n, c, h, w, k, ph, pw, threads);                 \
  }                                                                                        \
  extern "C" int ember_ps_roi_pool_fwd_##S(const T* in, const T* rois, T* out, i64 n,      \
                                           i64 c, i64 h, i64 w, i64 k, i64 ph, i64 pw,      \
                                           double scale, int threads) {                     \
    return ps_pool_fwd<T>(in, rois, out, n, c, h, w, k, ph, pw, scale, threads);           \
  }                                                                                        \
  extern "C" int ember_ps_roi_pool_bwd_##S(const T* g, const T* rois, T* gin, i64 n,       \
                                           i64 c, i64 h, i64 w, i64 k, i64 ph, i64 pw,      \
                                           double scale, int threads) {                     \
    return ps_pool_bwd<T>(g, rois, gin, n, c, h, w, k, ph, pw, scale, threads);            \
  }

EMBER_ROI_EXPORTS(float, f32)
EMBER_ROI_EXPORTS(double, f64)
