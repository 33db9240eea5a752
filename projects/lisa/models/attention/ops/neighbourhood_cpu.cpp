// Fused CPU kernel of LiSA's local branch (projects/lisa/models/attention/ops/neighbourhood.py):
// softmax attention over each grid token's k x k neighbourhood, forward and backward.
//
// Tensors are (..., p + H*W, d) contiguous, BH batch-heads in the leading dimensions (outputs
// allocated in the caller's layout, so the gradients need no reshape), the last H*W tokens on a
// row-major grid; the p prefix tokens are handled by the caller. Per grid token i and in-image
// neighbour j = i + o:
//
//   a_o(i) = softmax_o(scale q_i.k_j),   Y_i = w sum_o a_o(i) v_j
//   p_o(i) = G_i.v_j,   g_o(i) = w scale a_o(i) (p_o(i) - sum_o' a_o'(i) p_o'(i))
//   dq_i = sum_o g_o(i) k_j,   dk_j = sum_o g_o(i) q_i,   dv_j = w sum_o a_o(i) G_i
//   dw = sum_(i,o) a_o(i) p_o(i)
//
// Each output row is written by one task (dk, dv are gathered from their queries
// in a second pass), so results do not depend on the number of threads.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lanes.h"
#include "tokens.h"

namespace {

// Offsets per group in `dots`: one vector accumulator each, all in registers.
constexpr int64_t kGroup = 9;

// s_o = a . b_o for the rows b_o, o < m, where m is a multiple of kGroup (pad with zero
// rows): the products of a group advance together, lane by lane.
template <typename T>
LISA_INLINE void dots(const T* a, const T* const* b, int64_t m, int64_t d, T* s) {
  using L = Lanes<T>;
  for (int64_t o0 = 0; o0 < m; o0 += kGroup) {
    typename L::vec acc[kGroup];
    for (int64_t o = 0; o < kGroup; ++o) acc[o] = L::splat(0);  // (`= {}` compiles to a memset)
    int64_t c = 0;
    for (; c + L::n <= d; c += L::n) {
      const auto x = L::load(a + c);
      for (int64_t o = 0; o < kGroup; ++o) acc[o] += x * L::load(b[o0 + o] + c);
    }
    for (int64_t o = 0; o < kGroup; ++o) {
      T t = L::sum(acc[o]);
      for (int64_t cc = c; cc < d; ++cc) t += a[cc] * b[o0 + o][cc];
      s[o0 + o] = t;
    }
  }
}

// y[0, C lanes) = sum_o s_o b_o[0, C lanes): C independent accumulators, in registers.
template <typename T, int C>
LISA_INLINE void combine_block(T* y, const T* s, const T* const* b, int64_t m, int64_t c0) {
  using L = Lanes<T>;
  typename L::vec acc[C];
  for (int ch = 0; ch < C; ++ch) acc[ch] = L::splat(0);
  for (int64_t o = 0; o < m; ++o) {
    const auto so = L::splat(s[o]);
    for (int ch = 0; ch < C; ++ch) acc[ch] += so * L::load(b[o] + c0 + ch * L::n);
  }
  for (int ch = 0; ch < C; ++ch) L::store(y + c0 + ch * L::n, acc[ch]);
}

// y = sum_o s_o b_o over the rows b_o, o < m (y is written, not accumulated).
template <typename T>
LISA_INLINE void combine(T* y, const T* s, const T* const* b, int64_t m, int64_t d) {
  constexpr int64_t n = Lanes<T>::n;
  int64_t c = 0;
  for (; c + 8 * n <= d; c += 8 * n) combine_block<T, 8>(y, s, b, m, c);
  if (c + 4 * n <= d) combine_block<T, 4>(y, s, b, m, c), c += 4 * n;
  if (c + 2 * n <= d) combine_block<T, 2>(y, s, b, m, c), c += 2 * n;
  if (c + n <= d) combine_block<T, 1>(y, s, b, m, c), c += n;
  for (; c < d; ++c) {
    T t = 0;
    for (int64_t o = 0; o < m; ++o) t += s[o] * b[o][c];
    y[c] = t;
  }
}

// The geometry of one (H, W) grid and a k x k window.
struct Grid {
  int64_t h, w, r, kk;

  // idx[o]: grid index of token (y, x) + sign * (dy, dx) for offset o = (dy + r) (2r + 1) + dx + r,
  // or -1 where that token is outside the grid.
  LISA_INLINE void neighbours(int64_t y, int64_t x, int64_t sign, int64_t* idx) const {
    int64_t o = 0;
    for (int64_t dy = -r; dy <= r; ++dy) {
      for (int64_t dx = -r; dx <= r; ++dx, ++o) {
        const int64_t ny = y + sign * dy, nx = x + sign * dx;
        idx[o] = ny >= 0 && ny < h && nx >= 0 && nx < w ? ny * w + nx : -1;
      }
    }
  }
};

// Per-row scratch: one token's neighbours, rows gathered from them and per-offset scalars.
template <typename T>
struct Scratch {
  int64_t kk, m;  // m: kk rounded up to whole groups of `dots`; the padding reads zero rows
  std::vector<int64_t> idx;
  std::vector<T> zero, s, t;
  std::vector<const T*> a, b;

  Scratch(int64_t kk_, int64_t len)
      : kk(kk_), m((kk_ + kGroup - 1) / kGroup * kGroup), idx(kk_), zero(len, T(0)), s(m), t(m),
        a(m, zero.data()), b(m, zero.data()) {}

  // rows[o] = row idx[o] of `base` (rows of `len` elements), the zero row outside the grid.
  LISA_INLINE void gather(const T* base, int64_t len, std::vector<const T*>& rows) const {
    for (int64_t o = 0; o < kk; ++o) rows[o] = idx[o] >= 0 ? base + idx[o] * len : zero.data();
  }
};

// Forward of grid row y of one (batch, head): attention weights and output.
template <typename T>
LISA_CLONES void forward_row(const T* q, const T* k, const T* v, T* out, T* attn, T w, T scale,
                             const Grid& g, int64_t y, int64_t d, int64_t dv) {
  Scratch<T> sc(g.kk, std::max(d, dv));
  for (int64_t x = 0; x < g.w; ++x) {
    const int64_t i = y * g.w + x;
    T* ai = attn + i * g.kk;
    g.neighbours(y, x, 1, sc.idx.data());
    sc.gather(k, d, sc.a);
    sc.gather(v, dv, sc.b);
    dots(q + i * d, sc.a.data(), sc.m, d, sc.s.data());
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t o = 0; o < g.kk; ++o) m = sc.idx[o] >= 0 ? std::max(m, scale * sc.s[o]) : m;
    T sum = 0;
    for (int64_t o = 0; o < g.kk; ++o) sum += (ai[o] = sc.idx[o] >= 0 ? std::exp(scale * sc.s[o] - m) : T(0));
    for (int64_t o = 0; o < g.kk; ++o) {
      ai[o] /= sum;
      sc.s[o] = w * ai[o];
    }
    combine(out + i * dv, sc.s.data(), sc.b.data(), g.kk, dv);
  }
}

// Backward, pass 1, grid row y of queries: g_o(i) (into `gw`), dq_i and this row's share of dw.
template <typename T>
LISA_CLONES T query_grad_row(const T* grad, const T* k, const T* v, const T* attn, T* gw, T* dq, T w, T scale,
                             const Grid& g, int64_t y, int64_t d, int64_t dv) {
  Scratch<T> sc(g.kk, std::max(d, dv));
  T dw = 0;
  for (int64_t x = 0; x < g.w; ++x) {
    const int64_t i = y * g.w + x;
    const T* ai = attn + i * g.kk;
    T* goi = gw + i * g.kk;
    g.neighbours(y, x, 1, sc.idx.data());
    sc.gather(k, d, sc.a);
    sc.gather(v, dv, sc.b);
    dots(grad + i * dv, sc.b.data(), sc.m, dv, sc.s.data());  // p_o(i); zero outside the grid
    T ap = 0;
    for (int64_t o = 0; o < g.kk; ++o) ap += ai[o] * sc.s[o];
    dw += ap;
    for (int64_t o = 0; o < g.kk; ++o) goi[o] = w * scale * ai[o] * (sc.s[o] - ap);
    combine(dq + i * d, goi, sc.a.data(), g.kk, d);
  }
  return dw;
}

// Backward, pass 2, grid row y of keys/values: dk_j and dv_j gathered from the queries i = j - o.
template <typename T>
LISA_CLONES void key_grad_row(const T* grad, const T* q, const T* attn, const T* gw, T* dk, T* dv_out, T w,
                              const Grid& g, int64_t y, int64_t d, int64_t dv) {
  Scratch<T> sc(g.kk, std::max(d, dv));
  for (int64_t x = 0; x < g.w; ++x) {
    const int64_t j = y * g.w + x;
    g.neighbours(y, x, -1, sc.idx.data());  // the queries reading token j, through offset o
    sc.gather(q, d, sc.a);
    sc.gather(grad, dv, sc.b);
    for (int64_t o = 0; o < g.kk; ++o) {
      const int64_t i = sc.idx[o];
      sc.s[o] = i >= 0 ? gw[i * g.kk + o] : T(0);
      sc.t[o] = i >= 0 ? w * attn[i * g.kk + o] : T(0);
    }
    combine(dk + j * d, sc.s.data(), sc.a.data(), g.kk, d);
    combine(dv_out + j * dv, sc.t.data(), sc.b.data(), g.kk, dv);
  }
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out_scale,
                  int64_t p, int64_t h, int64_t w, int64_t kernel_size) {
  for (const auto* t : {&q, &k, &v, &out_scale}) {
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == q.scalar_type(),
                "neighbourhood_cpu: expected contiguous CPU tensors of one dtype");
  }
  TORCH_CHECK(q.dim() >= 3 && q.sizes() == k.sizes() && v.dim() == q.dim() &&
                  v.sizes().slice(0, v.dim() - 1) == q.sizes().slice(0, q.dim() - 1) &&
                  out_scale.numel() == leading(q),
              "neighbourhood_cpu: expected q, k (..., N, d), v (..., N, dv), out_scale with one entry per "
              "leading index");
  TORCH_CHECK(p >= 0 && h >= 1 && w >= 1 && q.size(-2) == p + h * w, "neighbourhood_cpu: N=", q.size(-2),
              " is not p + H*W for p=", p, ", H=", h, ", W=", w);
  TORCH_CHECK(kernel_size >= 1 && kernel_size % 2 == 1, "neighbourhood_cpu: kernel_size=", kernel_size,
              " must be a positive odd int");
}

// Returns (out, attn): out like v with its prefix rows left for the caller, attn (BH, H*W, k*k).
std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& out_scale, int64_t p, int64_t h, int64_t w, double scale,
                                int64_t kernel_size) {
  check_inputs(q, k, v, out_scale, p, h, w, kernel_size);
  const Grid g{h, w, kernel_size / 2, kernel_size * kernel_size};
  const int64_t bh = leading(q), n = q.size(-2), d = q.size(-1), dv = v.size(-1);
  auto out = at::empty_like(v);
  auto attn = at::empty({bh, h * w, g.kk}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "neighbourhood_cpu_forward", [&] {
    const scalar_t *qp = q.data_ptr<scalar_t>(), *kp = k.data_ptr<scalar_t>(), *vp = v.data_ptr<scalar_t>();
    const scalar_t* ws = out_scale.data_ptr<scalar_t>();
    scalar_t *op = out.data_ptr<scalar_t>(), *ap = attn.data_ptr<scalar_t>();
    at::parallel_for(0, bh * h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / h, y = row % h;
        const int64_t tok = b * n + p;
        forward_row<scalar_t>(qp + tok * d, kp + tok * d, vp + tok * dv, op + tok * dv, ap + b * h * w * g.kk,
                              ws[b], static_cast<scalar_t>(scale), g, y, d, dv);
      }
    });
  });
  return {out, attn};
}

// Returns (dq, dk, dv, dw_rows): gradients like q, k, v with the prefix rows left for the caller, and
// dw's share of each (batch-head, grid row) as (BH, H).
std::vector<at::Tensor> backward(const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const at::Tensor& out_scale, const at::Tensor& attn,
                                 int64_t p, int64_t h, int64_t w, double scale, int64_t kernel_size) {
  check_inputs(q, k, v, out_scale, p, h, w, kernel_size);
  TORCH_CHECK(grad.sizes() == v.sizes() && grad.is_contiguous() && attn.is_contiguous() &&
                  grad.scalar_type() == q.scalar_type() && attn.scalar_type() == q.scalar_type(),
              "neighbourhood_cpu: grad must match v, attn must come from forward");
  const Grid g{h, w, kernel_size / 2, kernel_size * kernel_size};
  const int64_t bh = leading(q), n = q.size(-2), d = q.size(-1), dv = v.size(-1);
  auto dq = at::empty_like(q), dk = at::empty_like(k), dvt = at::empty_like(v);
  auto gw = at::empty_like(attn);
  auto dw_rows = at::empty({bh, h}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "neighbourhood_cpu_backward", [&] {
    const scalar_t *gp = grad.data_ptr<scalar_t>(), *qp = q.data_ptr<scalar_t>(), *kp = k.data_ptr<scalar_t>(),
                   *vp = v.data_ptr<scalar_t>(), *ap = attn.data_ptr<scalar_t>(), *ws = out_scale.data_ptr<scalar_t>();
    scalar_t *gwp = gw.data_ptr<scalar_t>(), *dqp = dq.data_ptr<scalar_t>(), *dkp = dk.data_ptr<scalar_t>(),
             *dvp = dvt.data_ptr<scalar_t>(), *dwp = dw_rows.data_ptr<scalar_t>();
    at::parallel_for(0, bh * h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / h, y = row % h, tok = b * n + p, cell = b * h * w * g.kk;
        dwp[row] = query_grad_row<scalar_t>(gp + tok * dv, kp + tok * d, vp + tok * dv, ap + cell, gwp + cell,
                                            dqp + tok * d, ws[b], static_cast<scalar_t>(scale), g, y, d, dv);
      }
    });
    at::parallel_for(0, bh * h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / h, y = row % h, tok = b * n + p, cell = b * h * w * g.kk;
        key_grad_row<scalar_t>(gp + tok * dv, qp + tok * d, ap + cell, gwp + cell, dkp + tok * d, dvp + tok * dv,
                               ws[b], g, y, d, dv);
      }
    });
  });
  return {dq, dk, dvt, dw_rows};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "LiSA local branch, forward (CPU)");
  m.def("backward", &backward, "LiSA local branch, backward (CPU)");
}
