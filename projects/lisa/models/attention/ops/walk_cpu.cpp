// Fused CPU kernels of the random walk's token-wise passes (projects/lisa/models/attention/ops/walk.py,
// _walk_forward / _walk_backward, where the notation is defined). The d x d products stay with BLAS;
// these replace the chains of elementwise operations around them, each a single pass over the rows.
// Every tensor is contiguous, (BH, n, width) per token or (BH, 1, width) per batch-head.
// walk_combine and walk_combine_backward write into outputs given by the caller, which runs them on
// one block of tokens at a time (the temporaries hops, proj and W then exist for one block only).
//
//   walk_prepare:   mk = max K, k_bar = K s / mk, mu = s sum_j k_bar_j;
//                   per token mq_i = max q_i, c_i = s / (q_i.mu / mq_i + eps), q_scale_i = c_i / mq_i,
//                   q_hat_i = q_scale_i q_i (an all-zero K or q_i stays zero)
//   walk_combine:   Y_i = w_i0 v_i + sum_(t>=1) w_it hop_it
//   walk_combine_backward: dw_i0 = G_i.v_i, dw_it = q_hat_i.p_it, d_q_hat_i = sum_t w_it p_it,
//                   W_it = w_it G_i                      (p_it = G_i M_t^T, W the input of dM = q_hat^T W)
//   walk_q_backward: e_i = -(q_hat_i.d_q_hat_i) / s, d_q_i = q_scale_i (d_q_hat_i + e_i mu)
//                   (+ eps c_i e_i / mq_i at the argmax of q_i), d_mu = sum_i e_i q_hat_i
//   row_argmax:     the index of the largest entry of each row (the first among equals), as
//                   torch.argmax(x, -1), which on the CPU takes ~10x longer for rows of a head's width.
//
// Sums over tokens are taken per block of kBlock rows, then over the blocks in order, so results do
// not depend on the number of threads.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lanes.h"

namespace {

constexpr int64_t kBlock = 128;

template <typename T>
LISA_INLINE T dot(const T* a, const T* b, int64_t len) {
  using L = Lanes<T>;
  typename L::vec acc = L::splat(0);
  int64_t j = 0;
  for (; j + L::n <= len; j += L::n) acc += L::load(a + j) * L::load(b + j);
  T s = L::sum(acc);
  for (; j < len; ++j) s += a[j] * b[j];
  return s;
}

template <typename T>
LISA_INLINE T max_of(const T* a, int64_t len) {
  using L = Lanes<T>;
  T best = a[0];
  int64_t j = 0;
  if (len >= L::n) {
    auto m = L::load(a);
    for (j = L::n; j + L::n <= len; j += L::n) {
      const auto x = L::load(a + j);
      m = x > m ? x : m;
    }
    for (int64_t l = 0; l < L::n; ++l) best = m[l] > best ? m[l] : best;
  }
  for (; j < len; ++j) best = a[j] > best ? a[j] : best;
  return best;
}

// The first index of the maximum of a row (a NaN maximum, i.e. a[0] NaN, equals nothing: the last index).
template <typename T>
LISA_INLINE int64_t argmax_of(const T* a, int64_t len) {
  const T best = max_of(a, len);
  int64_t at = 0;
  while (at < len - 1 && !(a[at] == best)) ++at;
  return at;
}

// out = a x (+ out if accumulate)
template <typename T>
LISA_INLINE void axpy(T* out, const T* x, T a, int64_t len, bool accumulate) {
  using L = Lanes<T>;
  const auto av = L::splat(a);
  int64_t j = 0;
  if (accumulate) {
    for (; j + L::n <= len; j += L::n) L::store(out + j, L::load(out + j) + av * L::load(x + j));
    for (; j < len; ++j) out[j] += a * x[j];
  } else {
    for (; j + L::n <= len; j += L::n) L::store(out + j, av * L::load(x + j));
    for (; j < len; ++j) out[j] = a * x[j];
  }
}

void check_rows(const at::Tensor& t, int64_t bh, int64_t n, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.dim() >= 2 && t.size(-2) == n &&
                  t.numel() == bh * n * t.size(-1),
              "walk_cpu: ", name, " must be a contiguous CPU tensor of ", bh, " x ", n, " rows");
}

// ---- walk_prepare --------------------------------------------------------------------------------

template <typename T>
LISA_CLONES void block_max(const T* k, T* out, int64_t rows, int64_t d) {
  *out = max_of(k, rows * d);
}

template <typename T>
LISA_CLONES void scale_sum_block(const T* k, T* k_bar, T* col_sum, T scale, int64_t rows, int64_t d) {
  for (int64_t j = 0; j < d; ++j) col_sum[j] = 0;
  for (int64_t i = 0; i < rows; ++i) {
    axpy(k_bar + i * d, k + i * d, scale, d, false);
    axpy(col_sum, k_bar + i * d, T(1), d, true);
  }
}

template <typename T>
LISA_CLONES void scale_q_rows(const T* q, const T* mu, T* q_hat, T* mq, T* c, T* q_scale, int64_t rows, int64_t d,
                              T s, T eps) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* qi = q + i * d;
    const T m = max_of(qi, d);
    const bool nonzero = m > 0;
    const T ci = s / ((nonzero ? dot(qi, mu, d) / m : T(0)) + eps);
    const T scale = nonzero ? ci / m : T(0);
    mq[i] = m, c[i] = ci, q_scale[i] = scale;
    axpy(q_hat + i * d, qi, scale, d, false);
  }
}

std::vector<at::Tensor> walk_prepare(const at::Tensor& q, const at::Tensor& k, double eps) {
  const int64_t n = k.size(-2), d = k.size(-1), bh = k.numel() / (n * d);
  check_rows(q, bh, n, "q");
  check_rows(k, bh, n, "k");
  TORCH_CHECK(q.size(-1) == d && q.scalar_type() == k.scalar_type(), "walk_cpu: q and k must match");
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto col = [&](int64_t width) {  // (..., 1, width) beside the (..., n, d) inputs
    auto sizes = k.sizes().vec();
    sizes.end()[-2] = 1, sizes.back() = width;
    return at::empty(sizes, k.options());
  };
  auto per_token = [&]() {
    auto sizes = q.sizes().vec();
    sizes.back() = 1;
    return at::empty(sizes, q.options());
  };
  auto q_hat = at::empty_like(q), k_bar = at::empty_like(k);
  auto mq = per_token(), c = per_token(), q_scale = per_token();
  auto mk = col(1), k_scale = col(1), mu = col(d);
  auto partial = at::empty({bh * blocks, d}, k.options());
  AT_DISPATCH_FLOATING_TYPES(k.scalar_type(), "walk_prepare", [&] {
    const scalar_t *qp = q.data_ptr<scalar_t>(), *kp = k.data_ptr<scalar_t>();
    scalar_t *qh = q_hat.data_ptr<scalar_t>(), *kb = k_bar.data_ptr<scalar_t>(), *pp = partial.data_ptr<scalar_t>();
    scalar_t *mkp = mk.data_ptr<scalar_t>(), *ksp = k_scale.data_ptr<scalar_t>(), *mup = mu.data_ptr<scalar_t>();
    const auto s = static_cast<scalar_t>(1 / std::sqrt(static_cast<double>(n)));
    auto rows_of = [&](int64_t blk) { return std::min(kBlock, n - (blk % blocks) * kBlock); };
    auto offset = [&](int64_t blk) { return ((blk / blocks) * n + (blk % blocks) * kBlock) * d; };
    // max K per batch-head: block maxima, then their maximum
    at::parallel_for(0, bh * blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) block_max(kp + offset(blk), pp + blk * d, rows_of(blk), d);
    });
    for (int64_t g = 0; g < bh; ++g) {
      scalar_t m = pp[g * blocks * d];
      for (int64_t blk = 1; blk < blocks; ++blk) m = std::max(m, pp[(g * blocks + blk) * d]);
      mkp[g] = m, ksp[g] = m > 0 ? s / m : scalar_t(0);
    }
    // k_bar and its column sums per block, then mu in block order
    at::parallel_for(0, bh * blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk)
        scale_sum_block(kp + offset(blk), kb + offset(blk), pp + blk * d, ksp[blk / blocks], rows_of(blk), d);
    });
    for (int64_t g = 0; g < bh; ++g) {
      scalar_t* m = mup + g * d;
      for (int64_t j = 0; j < d; ++j) m[j] = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) axpy(m, pp + (g * blocks + blk) * d, scalar_t(1), d, true);
      for (int64_t j = 0; j < d; ++j) m[j] *= s;
    }
    scalar_t *mqp = mq.data_ptr<scalar_t>(), *cp = c.data_ptr<scalar_t>(), *qsp = q_scale.data_ptr<scalar_t>();
    at::parallel_for(0, bh * blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t o = offset(blk) / d;
        scale_q_rows(qp + o * d, mup + (blk / blocks) * d, qh + o * d, mqp + o, cp + o, qsp + o, rows_of(blk), d, s,
                     static_cast<scalar_t>(eps));
      }
    });
  });
  return {q_hat, k_bar, mq, mk, c, q_scale, k_scale, mu};
}

// ---- walk_combine and its backward ---------------------------------------------------------------

template <typename T>
LISA_CLONES void combine_rows(const T* v, const T* hops, const T* w, T* out, int64_t rows, int64_t dv, int64_t steps) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* wi = w + i * steps;
    T* o = out + i * dv;
    axpy(o, v + i * dv, wi[0], dv, false);
    for (int64_t t = 1; t < steps; ++t) axpy(o, hops + (i * (steps - 1) + t - 1) * dv, wi[t], dv, true);
  }
}

// Writes out (like v): the caller passes one block of tokens at a time into its output.
void walk_combine(const at::Tensor& v, const at::Tensor& hops, const at::Tensor& w, at::Tensor& out) {
  const int64_t n = v.size(-2), dv = v.size(-1), bh = v.numel() / (n * dv), steps = w.size(-1);
  check_rows(v, bh, n, "v");
  check_rows(hops, bh, n, "hops");
  check_rows(w, bh, n, "weights");
  check_rows(out, bh, n, "out");
  TORCH_CHECK(steps >= 2 && hops.size(-1) == (steps - 1) * dv && out.size(-1) == dv,
              "walk_cpu: hops must be (..., n, (T - 1) dv), out like v");
  AT_DISPATCH_FLOATING_TYPES(v.scalar_type(), "walk_combine", [&] {
    const scalar_t *vp = v.data_ptr<scalar_t>(), *hp = hops.data_ptr<scalar_t>(), *wp = w.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, bh * n, kBlock, [&](int64_t r0, int64_t r1) {
      combine_rows(vp + r0 * dv, hp + r0 * (steps - 1) * dv, wp + r0 * steps, op + r0 * dv, r1 - r0, dv, steps);
    });
  });
}

template <typename T>
LISA_CLONES void combine_grad_rows(const T* g, const T* v, const T* q_hat, const T* proj, const T* w, T* w_grad,
                                   T* d_q_hat, T* d_w, int64_t rows, int64_t d, int64_t dv, int64_t steps) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* gi = g + i * dv;
    const T* wi = w + i * steps;
    T* dwi = d_w + i * steps;
    dwi[0] = dot(gi, v + i * dv, dv);
    for (int64_t t = 1; t < steps; ++t) {
      const T* p = proj + (i * (steps - 1) + t - 1) * d;
      dwi[t] = dot(q_hat + i * d, p, d);
      axpy(d_q_hat + i * d, p, wi[t], d, t > 1);
      axpy(w_grad + (i * (steps - 1) + t - 1) * dv, gi, wi[t], dv, false);
    }
  }
}

// Writes d_q_hat (like q_hat) and d_w (like w), returns W: the caller passes one block of tokens at a time.
at::Tensor walk_combine_backward(const at::Tensor& grad, const at::Tensor& v, const at::Tensor& q_hat,
                                 const at::Tensor& proj, const at::Tensor& w, at::Tensor& d_q_hat, at::Tensor& d_w) {
  const int64_t n = v.size(-2), dv = v.size(-1), bh = v.numel() / (n * dv), d = q_hat.size(-1), steps = w.size(-1);
  check_rows(grad, bh, n, "grad");
  check_rows(v, bh, n, "v");
  check_rows(q_hat, bh, n, "q_hat");
  check_rows(proj, bh, n, "proj");
  check_rows(w, bh, n, "weights");
  check_rows(d_q_hat, bh, n, "d_q_hat");
  check_rows(d_w, bh, n, "d_w");
  TORCH_CHECK(steps >= 2 && grad.size(-1) == dv && proj.size(-1) == (steps - 1) * d && d_q_hat.size(-1) == d &&
                  d_w.size(-1) == steps,
              "walk_cpu: proj must be (..., n, (T - 1) d), grad like v, d_q_hat like q_hat, d_w like w");
  auto sizes = grad.sizes().vec();
  sizes.back() = (steps - 1) * dv;
  auto w_grad = at::empty(sizes, grad.options());
  AT_DISPATCH_FLOATING_TYPES(v.scalar_type(), "walk_combine_backward", [&] {
    const scalar_t *gp = grad.data_ptr<scalar_t>(), *vp = v.data_ptr<scalar_t>(), *qp = q_hat.data_ptr<scalar_t>();
    const scalar_t *pp = proj.data_ptr<scalar_t>(), *wp = w.data_ptr<scalar_t>();
    scalar_t *wg = w_grad.data_ptr<scalar_t>(), *dq = d_q_hat.data_ptr<scalar_t>(), *dw = d_w.data_ptr<scalar_t>();
    at::parallel_for(0, bh * n, kBlock, [&](int64_t r0, int64_t r1) {
      combine_grad_rows(gp + r0 * dv, vp + r0 * dv, qp + r0 * d, pp + r0 * (steps - 1) * d, wp + r0 * steps,
                        wg + r0 * (steps - 1) * dv, dq + r0 * d, dw + r0 * steps, r1 - r0, d, dv, steps);
    });
  });
  return w_grad;
}

// ---- walk_q_backward -----------------------------------------------------------------------------

template <typename T>
LISA_CLONES void q_grad_rows(T* d_q, const T* q_hat, const T* mu, const T* mq, const T* c, const T* q_scale, T* d_mu,
                             int64_t rows, int64_t d, T inv_s, T eps) {
  for (int64_t j = 0; j < d; ++j) d_mu[j] = 0;
  for (int64_t i = 0; i < rows; ++i) {
    T* g = d_q + i * d;
    const T* qi = q_hat + i * d;
    const T e = -dot(qi, g, d) * inv_s;
    axpy(d_mu, qi, e, d, true);
    axpy(g, mu, e, d, true);  // d_q_hat + e mu
    for (int64_t j = 0; j < d; ++j) g[j] *= q_scale[i];
    if (mq[i] > 0) g[argmax_of(qi, d)] += e * c[i] * eps / mq[i];
  }
}

// d_q_hat is overwritten by d_q; returns d_mu (..., 1, d).
at::Tensor walk_q_backward(at::Tensor& d_q_hat, const at::Tensor& q_hat, const at::Tensor& mu, const at::Tensor& mq,
                           const at::Tensor& c, const at::Tensor& q_scale, double eps) {
  const int64_t n = q_hat.size(-2), d = q_hat.size(-1), bh = q_hat.numel() / (n * d);
  check_rows(d_q_hat, bh, n, "d_q_hat");
  check_rows(q_hat, bh, n, "q_hat");
  check_rows(mq, bh, n, "mq");
  check_rows(c, bh, n, "c");
  check_rows(q_scale, bh, n, "q_scale");
  check_rows(mu, bh, 1, "mu");
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto partial = at::empty({bh * blocks, d}, q_hat.options());
  auto d_mu = at::zeros_like(mu);
  AT_DISPATCH_FLOATING_TYPES(q_hat.scalar_type(), "walk_q_backward", [&] {
    scalar_t *gp = d_q_hat.data_ptr<scalar_t>(), *pp = partial.data_ptr<scalar_t>(), *dmu = d_mu.data_ptr<scalar_t>();
    const scalar_t *qp = q_hat.data_ptr<scalar_t>(), *mup = mu.data_ptr<scalar_t>(), *mqp = mq.data_ptr<scalar_t>();
    const scalar_t *cp = c.data_ptr<scalar_t>(), *qsp = q_scale.data_ptr<scalar_t>();
    const auto inv_s = static_cast<scalar_t>(std::sqrt(static_cast<double>(n)));
    at::parallel_for(0, bh * blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t g = blk / blocks, r0 = g * n + (blk % blocks) * kBlock;
        q_grad_rows(gp + r0 * d, qp + r0 * d, mup + g * d, mqp + r0, cp + r0, qsp + r0, pp + blk * d,
                    std::min(kBlock, n - (blk % blocks) * kBlock), d, inv_s, static_cast<scalar_t>(eps));
      }
    });
    for (int64_t blk = 0; blk < bh * blocks; ++blk) axpy(dmu + (blk / blocks) * d, pp + blk * d, scalar_t(1), d, true);
  });
  return d_mu;
}

// ---- row_argmax ----------------------------------------------------------------------------------

template <typename T>
LISA_CLONES void argmax_rows(const T* x, int64_t* out, int64_t r0, int64_t r1, int64_t len) {
  for (int64_t i = r0; i < r1; ++i) out[i] = argmax_of(x + i * len, len);
}

// (..., L) contiguous floating -> (..., 1) int64.
at::Tensor row_argmax(const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.dim() >= 1 && x.size(-1) >= 1,
              "row_argmax: x must be a contiguous CPU tensor with rows of at least one entry");
  auto sizes = x.sizes().vec();
  const int64_t len = sizes.back(), rows = x.numel() / len;
  sizes.back() = 1;
  auto out = at::empty(sizes, x.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "row_argmax", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    int64_t* op = out.data_ptr<int64_t>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / len),
                     [&](int64_t begin, int64_t end) { argmax_rows(xp, op, begin, end, len); });
  });
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("walk_prepare", &walk_prepare, "the walk's scaled features (CPU)");
  m.def("walk_combine", &walk_combine, "the walk's per-token weighted sum of its terms (CPU)");
  m.def("walk_combine_backward", &walk_combine_backward, "backward of walk_combine and of the hops (CPU)");
  m.def("walk_q_backward", &walk_q_backward, "backward of the scaled q features, in place (CPU)");
  m.def("row_argmax", &row_argmax, "index of the largest entry of each row (CPU)");
}
