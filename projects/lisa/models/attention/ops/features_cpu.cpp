// Fused CPU kernel of the kernel attentions' focused kernel features (projects/lisa/models/attention/ops/features.py).
//
// The kernel features of q and k with FLatten's focusing function, from the rows of
// the qkv projection (B, N, 3C) (columns [q | k | v], C = heads * d), split into heads
// (B, heads, N, d) each. Per token and channel c, with s = softplus(scale) and the positional
// encoding e added to k only:
//
//   a = relu(r (+ e)),   x = (a + 1e-6) / s,   f_p(x) = ||x|| / ||x^p|| x^p  (over the C channels)
//
// evaluated scale-free as in base.focus: m = max(x), u = x / m, f = m ||u|| / ||u^p|| u^p.
// Backward (m drops out, f is 1-homogeneous), with U = ||u||, P = ||u^p|| and h = G.u^p:
//
//   df/dx_j = p u_j^(p-1) (U / P) (G_j - h u^p_j / P^2) + h u_j / (U P)
//   dr_j = [r_j (+ e_j) > 0] df/dx_j / s_j,   ds_j = -sum_tokens df/dx_j x_j / s_j
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lanes.h"

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define LISA_MXCSR 1
#endif

namespace {

// u^p for the exponent P = 3 or 2 (exact products, as torch.pow with a scalar exponent), or
// P = 0: any p by std::pow.
template <int P, typename T>
LISA_INLINE T power(T u, T p) {
  if constexpr (P == 3) return u * u * u;
  if constexpr (P == 2) return u * u;
  return std::pow(u, p);
}

// u^(p - 1), the derivative's power.
template <int P, typename T>
LISA_INLINE T power_less_one(T u, T p) {
  if constexpr (P == 3) return u * u;
  if constexpr (P == 2) return u;
  return std::pow(u, p - T(1));
}

template <int P, typename V, typename T>
LISA_INLINE V power_vec(V u, T p) {
  if constexpr (P == 3) return u * u * u;
  if constexpr (P == 2) return u * u;
  V out;
  for (int64_t l = 0; l < Lanes<T>::n; ++l) out[l] = std::pow(u[l], p);
  return out;
}

template <int P, typename V, typename T>
LISA_INLINE V power_less_one_vec(V u, T p) {
  if constexpr (P == 3) return u * u;
  if constexpr (P == 2) return u;
  V out;
  for (int64_t l = 0; l < Lanes<T>::n; ++l) out[l] = std::pow(u[l], p - T(1));
  return out;
}

// x = (relu(r (+ e)) + 1e-6) / s over the C channels of one token; returns m = max(x).
template <typename T>
LISA_INLINE T prepare_row(const T* r, const T* e, const T* s, T* x, int64_t c_all) {
  using L = Lanes<T>;
  typename L::vec vm = L::splat(0);
  int64_t c = 0;
  for (; c + L::n <= c_all; c += L::n) {
    auto z = L::load(r + c);
    if (e != nullptr) z += L::load(e + c);
    z = z > L::splat(0) ? z : L::splat(0);
    const auto xv = (z + T(1e-6)) / L::load(s + c);
    L::store(x + c, xv);
    vm = vm > xv ? vm : xv;
  }
  T m = 0;
  for (int64_t l = 0; l < L::n; ++l) m = std::max(m, vm[l]);
  for (; c < c_all; ++c) {
    const T z = e != nullptr ? r[c] + e[c] : r[c];
    x[c] = (std::max(z, T(0)) + T(1e-6)) / s[c];
    m = std::max(m, x[c]);
  }
  return m;
}

// Focused features of one token row into the head layout: head j's d channels at out + j * stride.
template <int P, typename T>
LISA_INLINE void features_row(const T* r, const T* e, const T* s, T* out, T* x, int64_t c_all, int64_t d,
                              int64_t stride, T p) {
  using L = Lanes<T>;
  const T m = prepare_row(r, e, s, x, c_all);
  typename L::vec vsu = L::splat(0), vsup = L::splat(0);
  int64_t c = 0;
  for (; c + L::n <= c_all; c += L::n) {
    const auto u = L::load(x + c) / m;
    const auto up = power_vec<P>(u, p);
    vsu += u * u;
    vsup += up * up;
    L::store(x + c, up);
  }
  T su = L::sum(vsu), sup = L::sum(vsup);
  for (; c < c_all; ++c) {
    const T u = x[c] / m, up = power<P>(u, p);
    su += u * u;
    sup += up * up;
    x[c] = up;
  }
  const T factor = m * std::sqrt(su) / std::sqrt(sup);
  for (int64_t j = 0; j < c_all / d; ++j) {
    T* o = out + j * stride;
    const T* xs = x + j * d;
    for (int64_t i = 0; i < d; ++i) o[i] = xs[i] * factor;
  }
}

// Backward of one token row: dr (C) written from G (head layout), ds (C) accumulated.
// Scratch: x, u, g (C each).
template <int P, typename T>
LISA_INLINE void features_grad_row(const T* r, const T* e, const T* s, const T* g_heads, T* dr, T* ds, T* x, T* u,
                                   T* g, int64_t c_all, int64_t d, int64_t stride, T p) {
  using L = Lanes<T>;
  for (int64_t j = 0; j < c_all / d; ++j) std::copy(g_heads + j * stride, g_heads + j * stride + d, g + j * d);
  const T m = prepare_row(r, e, s, x, c_all);
  typename L::vec vsu = L::splat(0), vsup = L::splat(0), vh = L::splat(0);
  int64_t c = 0;
  for (; c + L::n <= c_all; c += L::n) {
    const auto uc = L::load(x + c) / m;
    const auto up = power_vec<P>(uc, p);
    L::store(u + c, uc);
    vsu += uc * uc;
    vsup += up * up;
    vh += L::load(g + c) * up;
  }
  T su = L::sum(vsu), sup = L::sum(vsup), h = L::sum(vh);
  for (int64_t cc = c; cc < c_all; ++cc) {
    const T uc = x[cc] / m, up = power<P>(uc, p);
    u[cc] = uc;
    su += uc * uc;
    sup += up * up;
    h += g[cc] * up;
  }
  const T nu = std::sqrt(su), nup = std::sqrt(sup);
  const T a = p * nu / nup, b = h / sup, c2 = h / (nu * nup);
  for (c = 0; c + L::n <= c_all; c += L::n) {
    const auto uc = L::load(u + c);
    const auto dx = a * power_less_one_vec<P>(uc, p) * (L::load(g + c) - b * power_vec<P>(uc, p)) + c2 * uc;
    auto z = L::load(r + c);
    if (e != nullptr) z += L::load(e + c);
    const auto sc = L::load(s + c);
    L::store(dr + c, z > L::splat(0) ? dx / sc : L::splat(0));
    L::store(ds + c, L::load(ds + c) - dx * L::load(x + c) / sc);
  }
  for (; c < c_all; ++c) {
    const T uc = u[c];
    const T dx = a * power_less_one<P>(uc, p) * (g[c] - b * power<P>(uc, p)) + c2 * uc;
    const T z = e != nullptr ? r[c] + e[c] : r[c];
    dr[c] = z > T(0) ? dx / s[c] : T(0);
    ds[c] -= dx * x[c] / s[c];
  }
}

// Rows [row0, row1) of the features (q and k of each token): forward.
template <int P, typename T>
LISA_CLONES void features_rows(const T* qkv, const T* pos, const T* s, T* q, T* k, T* v, T* x, int64_t row0,
                               int64_t row1, int64_t n, int64_t heads, int64_t d, T p) {
  const int64_t c_all = heads * d;
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t i = row / n, t = row % n, o = i * heads * n * d + t * d;
    const T* r = qkv + row * 3 * c_all;
    features_row<P>(r, static_cast<const T*>(nullptr), s, q + o, x, c_all, d, n * d, p);
    features_row<P>(r + c_all, pos != nullptr ? pos + t * c_all : nullptr, s, k + o, x, c_all, d, n * d, p);
    for (int64_t h = 0; h < heads; ++h) std::copy_n(r + 2 * c_all + h * d, d, v + o + h * n * d);
  }
}

// Rows [row0, row1): backward into d_qkv's q and k columns, ds accumulated.
template <int P, typename T>
LISA_CLONES void features_grad_rows(const T* qkv, const T* pos, const T* s, const T* gq, const T* gk, const T* gv,
                                    T* dqkv, T* ds, T* x, T* u, T* g, int64_t row0, int64_t row1, int64_t n,
                                    int64_t heads, int64_t d, T p) {
  const int64_t c_all = heads * d;
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t i = row / n, t = row % n, o = i * heads * n * d + t * d;
    const T* r = qkv + row * 3 * c_all;
    T* dr = dqkv + row * 3 * c_all;
    features_grad_row<P>(r, static_cast<const T*>(nullptr), s, gq + o, dr, ds, x, u, g, c_all, d, n * d, p);
    features_grad_row<P>(r + c_all, pos != nullptr ? pos + t * c_all : nullptr, s, gk + o, dr + c_all, ds, x, u, g,
                         c_all, d, n * d, p);
    for (int64_t h = 0; h < heads; ++h) std::copy_n(gv + o + h * n * d, d, dr + 2 * c_all + h * d);
  }
}

// Flush-to-zero and denormals-are-zero for the life of the guard (the calling thread): the
// features square u^p = (x / max x)^p, and for ReLU's zeros (x = 1e-6 / s) that is below
// float's smallest normal number; denormal arithmetic costs ~100 cycles an operation. What is
// flushed is below 1e-38 next to sums >= 1 (the maximum's u^p = 1): the same float results.
struct FlushDenormals {
#ifdef LISA_MXCSR
  unsigned int csr;
  FlushDenormals() : csr(_mm_getcsr()) { _mm_setcsr(csr | 0x8040); }
  ~FlushDenormals() { _mm_setcsr(csr); }
#endif
};

// Rows per task of the features' kernels: fixed, so the sums of ds do not depend on the threads.
constexpr int64_t kRowBlock = 64;

void check_features(const at::Tensor& qkv, const c10::optional<at::Tensor>& pos, const at::Tensor& s,
                    int64_t heads) {
  TORCH_CHECK(qkv.device().is_cpu() && qkv.is_contiguous() && qkv.dim() == 3 && qkv.size(2) % 3 == 0,
              "features_cpu: qkv must be a contiguous CPU tensor (B, N, 3C)");
  const int64_t c_all = qkv.size(2) / 3;
  TORCH_CHECK(heads >= 1 && c_all % heads == 0, "features_cpu: heads must divide C");
  TORCH_CHECK(s.is_contiguous() && s.numel() == c_all && s.scalar_type() == qkv.scalar_type(),
              "features_cpu: s must be (C,) of qkv's dtype");
  if (pos.has_value())
    TORCH_CHECK(pos->is_contiguous() && pos->numel() == qkv.size(1) * c_all &&
                    pos->scalar_type() == qkv.scalar_type(),
                "features_cpu: pos must be contiguous (1, N, C) of qkv's dtype");
}

// Returns q, k, v (B, heads, N, d) contiguous: q, k focused, v copied.
std::vector<at::Tensor> features_forward(const at::Tensor& qkv, const c10::optional<at::Tensor>& pos,
                                         const at::Tensor& s, int64_t heads, double p) {
  check_features(qkv, pos, s, heads);
  const int64_t b = qkv.size(0), n = qkv.size(1), c_all = qkv.size(2) / 3, d = c_all / heads;
  auto q = at::empty({b, heads, n, d}, qkv.options()), k = at::empty_like(q), v = at::empty_like(q);
  AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "features_cpu_forward", [&] {
    const scalar_t *rp = qkv.data_ptr<scalar_t>(), *sp = s.data_ptr<scalar_t>();
    const scalar_t* ep = pos.has_value() ? pos->data_ptr<scalar_t>() : nullptr;
    scalar_t *qp = q.data_ptr<scalar_t>(), *kp = k.data_ptr<scalar_t>(), *vp = v.data_ptr<scalar_t>();
    const int64_t blocks = (b * n + kRowBlock - 1) / kRowBlock;
    const auto pv = static_cast<scalar_t>(p);
    at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      const FlushDenormals guard;
      std::vector<scalar_t> x(c_all);
      const int64_t row0 = begin * kRowBlock, row1 = std::min(b * n, end * kRowBlock);
      if (p == 3)
        features_rows<3>(rp, ep, sp, qp, kp, vp, x.data(), row0, row1, n, heads, d, pv);
      else if (p == 2)
        features_rows<2>(rp, ep, sp, qp, kp, vp, x.data(), row0, row1, n, heads, d, pv);
      else
        features_rows<0>(rp, ep, sp, qp, kp, vp, x.data(), row0, row1, n, heads, d, pv);
    });
  });
  return {q, k, v};
}

// Returns (d_qkv (B, N, 3C), d_s (C,)) from the gradients of q, k, v (B, heads, N, d).
std::vector<at::Tensor> features_backward(const at::Tensor& gq, const at::Tensor& gk, const at::Tensor& gv,
                                          const at::Tensor& qkv, const c10::optional<at::Tensor>& pos,
                                          const at::Tensor& s, int64_t heads, double p) {
  check_features(qkv, pos, s, heads);
  const int64_t b = qkv.size(0), n = qkv.size(1), c_all = qkv.size(2) / 3, d = c_all / heads;
  for (const auto* g : {&gq, &gk, &gv})
    TORCH_CHECK(g->is_contiguous() && g->sizes() == at::IntArrayRef({b, heads, n, d}) &&
                    g->scalar_type() == qkv.scalar_type(),
                "features_cpu: gradients must be contiguous (B, heads, N, d)");
  auto dqkv = at::empty_like(qkv);
  const int64_t blocks = (b * n + kRowBlock - 1) / kRowBlock;
  auto ds_blocks = at::zeros({blocks, c_all}, qkv.options());
  AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "features_cpu_backward", [&] {
    const scalar_t *rp = qkv.data_ptr<scalar_t>(), *sp = s.data_ptr<scalar_t>();
    const scalar_t* ep = pos.has_value() ? pos->data_ptr<scalar_t>() : nullptr;
    const scalar_t *gqp = gq.data_ptr<scalar_t>(), *gkp = gk.data_ptr<scalar_t>(), *gvp = gv.data_ptr<scalar_t>();
    scalar_t *dp = dqkv.data_ptr<scalar_t>(), *dsp = ds_blocks.data_ptr<scalar_t>();
    const auto pv = static_cast<scalar_t>(p);
    at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      const FlushDenormals guard;
      std::vector<scalar_t> x(c_all), u(c_all), g(c_all);
      for (int64_t blk = begin; blk < end; ++blk) {
        const int64_t row0 = blk * kRowBlock, row1 = std::min(b * n, (blk + 1) * kRowBlock);
        scalar_t* ds = dsp + blk * c_all;
        if (p == 3)
          features_grad_rows<3>(rp, ep, sp, gqp, gkp, gvp, dp, ds, x.data(), u.data(), g.data(), row0, row1, n, heads, d, pv);
        else if (p == 2)
          features_grad_rows<2>(rp, ep, sp, gqp, gkp, gvp, dp, ds, x.data(), u.data(), g.data(), row0, row1, n, heads, d, pv);
        else
          features_grad_rows<0>(rp, ep, sp, gqp, gkp, gvp, dp, ds, x.data(), u.data(), g.data(), row0, row1, n, heads, d, pv);
      }
    });
  });
  return {dqkv, ds_blocks.sum(0)};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("features_forward", &features_forward, "focused kernel features of q, k split into heads (CPU)");
  m.def("features_backward", &features_backward, "focused kernel features, backward (CPU)");
}
