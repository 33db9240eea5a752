// Shared by the fused CPU kernels (neighbourhood_cpu.cpp, depthwise_cpu.cpp): the token layout
// (..., N, d), batch-heads in the leading dimensions.
#pragma once

#include <torch/extension.h>

#include <cstdint>

namespace {

// The number of (batch, head) pairs: the product of the dimensions before (tokens, width).
inline int64_t leading(const at::Tensor& t) {
  int64_t bh = 1;
  for (int64_t i = 0; i + 2 < t.dim(); ++i) bh *= t.size(i);
  return bh;
}

}  // namespace
