// Fused CPU kernel of the kernel attentions' depthwise convolution (projects/lisa/models/attention/ops/depthwise.py).
//
// The depthwise k x k convolution of the values (FLatten's DWC, shared weights
// across heads), forward and backward, on the token layout itself: (..., p + H*W, d) contiguous
// (batch-heads in the leading dimensions, kept in the outputs), the last H*W tokens a row-major
// grid whose channels are contiguous (channels last), zero padding at the border; the p prefix
// tokens get zero. Per grid token i = (y, x), channel c:
//
//   out_i[c] = b[c] + sum_(dy, dx) w[c, dy + r, dx + r] x_(y + dy, x + dx)[c]
//   dx_j[c] = sum_(dy, dx) w[c, dy + r, dx + r] G_(j - (dy, dx))[c]       (gathered, no scatter)
//   dw[c, o] = sum_i G_i[c] x_(i + o)[c],   db[c] = sum_i G_i[c]
//
// The weight gradient is summed per (batch-head, grid row) first, then over the rows in a
// fixed order, so results do not depend on the number of threads.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "lanes.h"
#include "tokens.h"

namespace {

// The channels [0, d) in blocks of 4, 2 and 1 vectors, largest first: block(std::integral_constant<int, C>{}, c0)
// for each block of C vectors from channel c0; returns the first channel left for scalar code.
template <typename T, typename Block>
LISA_INLINE int64_t vector_blocks(int64_t d, const Block& block) {
  constexpr int64_t n = Lanes<T>::n;
  int64_t c = 0;
  for (; c + 4 * n <= d; c += 4 * n) block(std::integral_constant<int, 4>{}, c);
  if (c + 2 * n <= d) block(std::integral_constant<int, 2>{}, c), c += 2 * n;
  if (c + n <= d) block(std::integral_constant<int, 1>{}, c), c += n;
  return c;
}

// Channels [c0, c0 + C lanes) of one output grid row y:
// out[x, c] = (bias[c] or 0) + sum_o taps[o, c] in[(y, x) + o, c], the C vectors in registers.
template <typename T, int C>
LISA_INLINE void conv_block(const T* in, T* out, const T* taps, const T* bias, int64_t h, int64_t w, int64_t r,
                            int64_t y, int64_t d, int64_t c0) {
  using L = Lanes<T>;
  const int64_t k = 2 * r + 1;
  for (int64_t x = 0; x < w; ++x) {
    typename L::vec acc[C];
    for (int ch = 0; ch < C; ++ch) acc[ch] = bias != nullptr ? L::load(bias + c0 + ch * L::n) : L::splat(0);
    for (int64_t dy = std::max(-r, -y); dy <= std::min(r, h - 1 - y); ++dy) {
      const T* i_row = in + (y + dy) * w * d;
      const T* t_row = taps + (dy + r) * k * d;
      for (int64_t dx = std::max(-r, -x); dx <= std::min(r, w - 1 - x); ++dx) {
        const T* a = i_row + (x + dx) * d + c0;
        const T* t = t_row + (dx + r) * d + c0;
        for (int ch = 0; ch < C; ++ch) acc[ch] += L::load(t + ch * L::n) * L::load(a + ch * L::n);
      }
    }
    for (int ch = 0; ch < C; ++ch) L::store(out + (y * w + x) * d + c0 + ch * L::n, acc[ch]);
  }
}

// One output grid row y, all channels: conv_block over blocks of 4, 2, 1 vectors, then scalar channels.
template <typename T>
LISA_CLONES void conv_row(const T* in, T* out, const T* taps, const T* bias, int64_t h, int64_t w, int64_t r,
                          int64_t y, int64_t d) {
  int64_t c = vector_blocks<T>(d, [&](auto vectors, int64_t c0) LISA_INLINE_LAMBDA {
    conv_block<T, decltype(vectors)::value>(in, out, taps, bias, h, w, r, y, d, c0);
  });
  const int64_t k = 2 * r + 1;
  for (; c < d; ++c) {
    for (int64_t x = 0; x < w; ++x) {
      T acc = bias != nullptr ? bias[c] : T(0);
      for (int64_t dy = std::max(-r, -y); dy <= std::min(r, h - 1 - y); ++dy)
        for (int64_t dx = std::max(-r, -x); dx <= std::min(r, w - 1 - x); ++dx)
          acc += taps[((dy + r) * k + dx + r) * d + c] * in[((y + dy) * w + x + dx) * d + c];
      out[(y * w + x) * d + c] = acc;
    }
  }
}

// Channels [c0, c0 + C lanes) of the weight and bias gradients of grid row y:
// dw[o, c] = sum_x G[y, x, c] in[(y, x) + o, c], db[c] = sum_x G[y, x, c].
template <typename T, int C>
LISA_INLINE void weight_grad_block(const T* grad, const T* in, T* dw, T* db, int64_t h, int64_t w, int64_t r,
                                   int64_t y, int64_t d, int64_t c0) {
  using L = Lanes<T>;
  const int64_t k = 2 * r + 1;
  const T* g_row = grad + y * w * d + c0;
  typename L::vec acc[C];
  for (int ch = 0; ch < C; ++ch) acc[ch] = L::splat(0);
  for (int64_t x = 0; x < w; ++x)
    for (int ch = 0; ch < C; ++ch) acc[ch] += L::load(g_row + x * d + ch * L::n);
  for (int ch = 0; ch < C; ++ch) L::store(db + c0 + ch * L::n, acc[ch]);
  for (int64_t dy = -r; dy <= r; ++dy) {
    const bool inside = y + dy >= 0 && y + dy < h;
    for (int64_t dx = -r; dx <= r; ++dx) {
      for (int ch = 0; ch < C; ++ch) acc[ch] = L::splat(0);
      if (inside) {
        const T* i_row = in + (y + dy) * w * d + c0;
        for (int64_t x = std::max<int64_t>(0, -dx); x < std::min(w, w - dx); ++x)
          for (int ch = 0; ch < C; ++ch)
            acc[ch] += L::load(g_row + x * d + ch * L::n) * L::load(i_row + (x + dx) * d + ch * L::n);
      }
      for (int ch = 0; ch < C; ++ch) L::store(dw + ((dy + r) * k + dx + r) * d + c0 + ch * L::n, acc[ch]);
    }
  }
}

// Weight and bias gradients of grid row y, all channels (dw (k*k, d), db (d,)).
template <typename T>
LISA_CLONES void weight_grad_row(const T* grad, const T* in, T* dw, T* db, int64_t h, int64_t w, int64_t r,
                                 int64_t y, int64_t d) {
  int64_t c = vector_blocks<T>(d, [&](auto vectors, int64_t c0) LISA_INLINE_LAMBDA {
    weight_grad_block<T, decltype(vectors)::value>(grad, in, dw, db, h, w, r, y, d, c0);
  });
  const int64_t k = 2 * r + 1;
  for (; c < d; ++c) {
    T acc = 0;
    for (int64_t x = 0; x < w; ++x) acc += grad[(y * w + x) * d + c];
    db[c] = acc;
    for (int64_t dy = -r; dy <= r; ++dy) {
      for (int64_t dx = -r; dx <= r; ++dx) {
        acc = 0;
        if (y + dy >= 0 && y + dy < h)
          for (int64_t x = std::max<int64_t>(0, -dx); x < std::min(w, w - dx); ++x)
            acc += grad[(y * w + x) * d + c] * in[((y + dy) * w + x + dx) * d + c];
        dw[((dy + r) * k + dx + r) * d + c] = acc;
      }
    }
  }
}

void check_depthwise(const at::Tensor& x, const at::Tensor& weight, int64_t p, int64_t h, int64_t w) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.dim() >= 3, "depthwise_cpu: x must be a contiguous "
              "CPU tensor (..., p + H*W, d)");
  TORCH_CHECK(p >= 0 && h >= 1 && w >= 1 && x.size(-2) == p + h * w, "depthwise_cpu: N=", x.size(-2),
              " is not p + H*W for p=", p, ", H=", h, ", W=", w);
  TORCH_CHECK(weight.dim() == 4 && weight.size(0) == x.size(-1) && weight.size(1) == 1 &&
                  weight.size(2) == weight.size(3) && weight.size(2) % 2 == 1 &&
                  weight.scalar_type() == x.scalar_type(),
              "depthwise_cpu: weight must be (d, 1, k, k), k odd, of x's dtype");
}

// (d, 1, k, k) -> taps (k*k, d); flipped: tap o holds w[k*k - 1 - o] (the transposed convolution).
at::Tensor taps_of(const at::Tensor& weight, bool flipped) {
  auto taps = weight.flatten(1).t();
  return (flipped ? taps.flip(0) : taps).contiguous();
}

at::Tensor depthwise_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int64_t p,
                             int64_t h, int64_t w) {
  check_depthwise(x, weight, p, h, w);
  TORCH_CHECK(bias.numel() == x.size(-1) && bias.scalar_type() == x.scalar_type(), "depthwise_cpu: bias (d,)");
  const int64_t bh = leading(x), n = x.size(-2), d = x.size(-1), r = weight.size(2) / 2;
  auto out = at::empty_like(x);
  if (p > 0) out.narrow(-2, 0, p).zero_();
  const auto taps = taps_of(weight, false);
  const auto b = bias.contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "depthwise_cpu_forward", [&] {
    const scalar_t *xp = x.data_ptr<scalar_t>(), *tp = taps.data_ptr<scalar_t>(), *bp = b.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, bh * h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t i = row / h, y = row % h, tok = i * n + p;
        conv_row<scalar_t>(xp + tok * d, op + tok * d, tp, bp, h, w, r, y, d);
      }
    });
  });
  return out;
}

// Returns (dx, dw, db): dx like x (prefix rows zero), dw like weight, db (d,).
std::vector<at::Tensor> depthwise_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                                           int64_t p, int64_t h, int64_t w) {
  check_depthwise(x, weight, p, h, w);
  TORCH_CHECK(grad.sizes() == x.sizes() && grad.is_contiguous() && grad.scalar_type() == x.scalar_type(),
              "depthwise_cpu: grad must be contiguous and match x");
  const int64_t bh = leading(x), n = x.size(-2), d = x.size(-1), r = weight.size(2) / 2;
  const int64_t kk = (2 * r + 1) * (2 * r + 1);
  auto dx = at::empty_like(x);
  if (p > 0) dx.narrow(-2, 0, p).zero_();
  auto dw_rows = at::empty({bh * h, kk, d}, x.options());
  auto db_rows = at::empty({bh * h, d}, x.options());
  const auto taps = taps_of(weight, true);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "depthwise_cpu_backward", [&] {
    const scalar_t *gp = grad.data_ptr<scalar_t>(), *xp = x.data_ptr<scalar_t>(), *tp = taps.data_ptr<scalar_t>();
    scalar_t *dxp = dx.data_ptr<scalar_t>(), *dwp = dw_rows.data_ptr<scalar_t>(), *dbp = db_rows.data_ptr<scalar_t>();
    at::parallel_for(0, bh * h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t i = row / h, y = row % h, tok = i * n + p;
        // dx_j = sum_o w[o] G_(j - o): the forward's gather with the flipped taps.
        conv_row<scalar_t>(gp + tok * d, dxp + tok * d, tp, nullptr, h, w, r, y, d);
        weight_grad_row<scalar_t>(gp + tok * d, xp + tok * d, dwp + row * kk * d, dbp + row * d, h, w, r, y, d);
      }
    });
  });
  auto dw = dw_rows.sum(0).t().reshape(weight.sizes()).contiguous();  // the layout the fake promises
  return {dx, dw, db_rows.sum(0)};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("depthwise_forward", &depthwise_forward, "depthwise conv of grid tokens, forward (CPU)");
  m.def("depthwise_backward", &depthwise_backward, "depthwise conv of grid tokens, backward (CPU)");
}
