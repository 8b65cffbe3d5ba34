// The host copy the measurement scripts share: non-temporal (cache-bypassing) 16-byte stores,
// 64 bytes at a time, then a store fence, as the staged path's CopyBytes does for the bulk of a
// piece. n must be a multiple of 64 and dst 16-byte aligned.
#pragma once
#include <emmintrin.h>
#include <cstddef>

static inline void nt_copy(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m128i* p = (const __m128i*)(s + i);
    __m128i* o = (__m128i*)(d + i);
    __m128i a = _mm_loadu_si128(p), b = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2), e = _mm_loadu_si128(p + 3);
    _mm_stream_si128(o, a); _mm_stream_si128(o + 1, b); _mm_stream_si128(o + 2, c); _mm_stream_si128(o + 3, e);
  }
  _mm_sfence();
}
