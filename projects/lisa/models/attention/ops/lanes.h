// Shared by the fused CPU kernels (*_cpu.cpp beside this file): function
// multiversioning of the hot loops and 32-byte vector lanes.
#pragma once

#include <cstdint>

// Hot loops are compiled for AVX2 + FMA too and picked at load time on x86-64.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LISA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LISA_CLONES
#endif
// Helpers of the cloned functions: inlined, hence compiled for each clone's target.
#define LISA_INLINE inline __attribute__((always_inline))
// The same for a lambda passed to such a helper (a lambda is implicitly inline).
#define LISA_INLINE_LAMBDA __attribute__((always_inline))

// 32-byte vectors (GCC/Clang vector extensions): AVX2 registers in the x86-64-v3 clone.
namespace {

template <typename T>
struct Lanes {
  typedef T vec __attribute__((vector_size(32)));
  static constexpr int64_t n = 32 / sizeof(T);
  LISA_INLINE static vec load(const T* p) {
    vec x;
    __builtin_memcpy(&x, p, sizeof(x));
    return x;
  }
  LISA_INLINE static void store(T* p, vec x) { __builtin_memcpy(p, &x, sizeof(x)); }
  LISA_INLINE static vec splat(T a) { return vec{} + a; }
  LISA_INLINE static T sum(vec x) {
    T s = 0;
    for (int64_t l = 0; l < n; ++l) s += x[l];
    return s;
  }
};

}  // namespace
