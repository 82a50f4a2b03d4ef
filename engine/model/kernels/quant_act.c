// Activation quantization per block of 32: int8 (xd = amax / 127, llama.cpp's Q8_0) or int16 (xd = amax / 32767: within
// fp32 rounding of the dequantized weights x fp32 activations). xs = the block's sum of q (q4's min term, int8 weights'
// offset).
#include <math.h>

#include "isa.h"
#include "parts.h"

#define QK FS_QK

#if defined(FS_AVX2) || defined(FS_AVX512)
// A full block rounded to |q| <= top (127 or 32767) as the scalar loop: exact max, the same d and 1/d, one rounding of
// v * id, nearest even. qi: the 32 values in order, 8 per vector.
static inline void round_block_avx2(const float *v, float top, __m256i qi[4], float *xd, int32_t *xs) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 vv[4], amax8 = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        vv[i] = _mm256_loadu_ps(v + 8 * i);
        amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, vv[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float d = amax / top, id = d > 0.f ? 1.f / d : 0.f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(vv[i], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        qi[i] = _mm256_cvtps_epi32(r);  // integral: exact
        sum = _mm256_add_epi32(sum, qi[i]);
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    *xd = d;
    *xs = _mm_cvtsi128_si32(s4);
}

static inline void quantize_block8_avx2(const float *v, int8_t *q, float *xd, int32_t *xs) {
    __m256i qi[4];
    round_block_avx2(v, 127.f, qi, xd, xs);
    // packs work per 128-bit half: one permute restores the order
    const __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]), p16b = _mm256_packs_epi32(qi[2], qi[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#endif

// x [M, K] (row stride ldx) -> xq int8 [M, KB*32] (zero padded), xd, xs [M, KB]
static void quantize_rows(const float *x, int M, int K, int ldx, int KB, int8_t *xq, float *xd, int32_t *xs) {
    for (int m = 0; m < M; m++) {
        const float *xr = x + (int64_t)m * ldx;
        for (int b = 0; b < KB; b++) {
#if defined(FS_AVX2) || defined(FS_AVX512)
            if ((b + 1) * QK <= K) {
                quantize_block8_avx2(xr + b * QK, xq + (int64_t)m * KB * QK + b * QK, xd + (int64_t)m * KB + b,
                                     xs + (int64_t)m * KB + b);
                continue;
            }
#endif
            float v[QK], amax = 0.f;
            for (int i = 0; i < QK; i++) {
                const int k = b * QK + i;
                v[i] = k < K ? xr[k] : 0.f;
                amax = fmaxf(amax, fabsf(v[i]));
            }
            const float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
            int32_t s = 0;
            int8_t *q = xq + (int64_t)m * KB * QK + b * QK;
            for (int i = 0; i < QK; i++) {
                q[i] = (int8_t)nearbyintf(v[i] * id);
                s += q[i];
            }
            xd[(int64_t)m * KB + b] = d;
            xs[(int64_t)m * KB + b] = s;
        }
    }
}

// int16: each quad k..k+3 stored (x[k], x[k+2], x[k+1], x[k+3]), so a weight lane's bytes split into pairs (w0, w2) =
// lane & 0x00ff00ff, (w1, w3) = lane >> 8 meet one broadcast activation pair (vpdpwssd / pmaddwd).
#if defined(FS_AVX2) || defined(FS_AVX512)
static inline void quantize_block16_avx2(const float *v, int16_t *q, float *xd, int32_t *xs) {
    __m256i qi[4];
    round_block_avx2(v, 32767.f, qi, xd, xs);
    for (int i = 0; i < 4; i++) qi[i] = _mm256_shuffle_epi32(qi[i], _MM_SHUFFLE(3, 1, 2, 0));  // quads (0, 2, 1, 3)
    for (int i = 0; i < 4; i += 2) {  // packs interleaves 128-bit halves: restore the order
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[i], qi[i + 1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)(q + 8 * i), p);
    }
}
#endif

#if defined(FS_AVX512)
// quantize_block16_avx2's values 16 lanes at a time (saturated to int16 as packs does)
static inline void quantize_block16_avx512(const float *v, int16_t *q, float *xd, int32_t *xs) {
    const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const float d = amax / 32767.f, id = d > 0.f ? 1.f / d : 0.f;
    const __m512 idv = _mm512_set1_ps(id);
    const __m512i qa = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i qb = _mm512_cvt_roundps_epi32(_mm512_mul_ps(b, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i quad = _mm512_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);  // quads (0, 2, 1, 3)
    _mm256_storeu_si256((__m256i *)q, _mm512_cvtsepi32_epi16(_mm512_permutexvar_epi32(quad, qa)));
    _mm256_storeu_si256((__m256i *)(q + 16), _mm512_cvtsepi32_epi16(_mm512_permutexvar_epi32(quad, qb)));
    *xd = d;
    *xs = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
}
#endif

static void quantize_rows16(const float *x, int M, int K, int ldx, int KB, int16_t *xq, float *xd, int32_t *xs) {
    static const int order[4] = {0, 2, 1, 3};
    for (int m = 0; m < M; m++) {
        const float *xr = x + (int64_t)m * ldx;
        for (int b = 0; b < KB; b++) {
#if defined(FS_AVX2) || defined(FS_AVX512)
            if ((b + 1) * QK <= K) {
#if defined(FS_AVX512)
                quantize_block16_avx512(xr + b * QK, xq + (int64_t)m * KB * QK + b * QK, xd + (int64_t)m * KB + b,
                                        xs + (int64_t)m * KB + b);
#else
                quantize_block16_avx2(xr + b * QK, xq + (int64_t)m * KB * QK + b * QK, xd + (int64_t)m * KB + b,
                                      xs + (int64_t)m * KB + b);
#endif
                continue;
            }
#endif
            float v[QK], amax = 0.f;
            for (int i = 0; i < QK; i++) {
                const int k = b * QK + i;
                v[i] = k < K ? xr[k] : 0.f;
                amax = fmaxf(amax, fabsf(v[i]));
            }
            const float d = amax / 32767.f, id = d > 0.f ? 1.f / d : 0.f;
            int32_t s = 0;
            int16_t *q = xq + (int64_t)m * KB * QK + b * QK;
            for (int i = 0; i < QK; i++) {
                const int16_t qi = (int16_t)nearbyintf(v[i] * id);
                q[(i & ~3) + order[i & 3]] = qi;
                s += qi;
            }
            xd[(int64_t)m * KB + b] = d;
            xs[(int64_t)m * KB + b] = s;
        }
    }
}

void fs_quantize_act(int act16, const float *x, int M, int K, int ldx, int KB, void *xq, float *xd, int32_t *xs) {
    if (act16)
        quantize_rows16(x, M, K, ldx, KB, (int16_t *)xq, xd, xs);
    else
        quantize_rows(x, M, K, ldx, KB, (int8_t *)xq, xd, xs);
}
