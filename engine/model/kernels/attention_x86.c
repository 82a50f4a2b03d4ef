// SIMD attention parts: keys in blocks of 8, widened to fp32 once for the heads sharing them; softmax 8 lanes at a
// time; P.V in registers.
#include <math.h>

#include "attention.h"
#include "simd_exp.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
static inline __m256 kv_load8(const void *row, int kv_type, int i) {
    if (kv_type == FS_KV_F32) return _mm256_loadu_ps((const float *)row + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (kv_type == FS_KV_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

#ifndef PD_AHEAD
#define PD_AHEAD 16
#endif
// Prefetch the K (L1) and V (L2) rows of keys b0 + PD_AHEAD .. +8: a head's rows are 1 in KVH, a stride the prefetchers
// follow late.
static inline void prefetch_ahead(const void *kc, const void *vc, const int64_t *sl, int t0, int b0, int n, int KVH,
                                  int kh, int row) {
    for (int j = b0 + PD_AHEAD; j < b0 + PD_AHEAD + 8 && j < n; j++) {
        const int64_t at = (sl[t0 + j] * KVH + kh) * (int64_t)row;
        for (int b = 0; b < row; b += 64) {
            _mm_prefetch((const char *)kc + at + b, _MM_HINT_T0);
            _mm_prefetch((const char *)vc + at + b, _MM_HINT_T1);
        }
    }
}

// lane j = sum of a[j]
static inline __m256 hsum8x8(const __m256 *a) {
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 q0 = _mm256_hadd_ps(h01, h23), q1 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

static inline float hsum8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
}

// scores -> exp(score - m) in place; m[g] = max, s[g] = sum
static void softmax_part(float *scores, int n, int G, float *m, float *s) {
    for (int g = 0; g < G; g++) {
        float *sc = scores + (int64_t)g * n, mx = -INFINITY;
        int t0 = 0;
        if (n >= 8) {  // max is exact in any order; maxps keeps the old max on NaN
            __m256 vmx = _mm256_set1_ps(-INFINITY);
            for (; t0 + 8 <= n; t0 += 8) vmx = _mm256_max_ps(_mm256_loadu_ps(sc + t0), vmx);
            float lanes[8];
            _mm256_storeu_ps(lanes, vmx);
            for (int j = 0; j < 8; j++) mx = lanes[j] > mx ? lanes[j] : mx;
        }
        for (int t = t0; t < n; t++) mx = sc[t] > mx ? sc[t] : mx;
        const __m256 vm = _mm256_set1_ps(mx);
        __m256 vsum = _mm256_setzero_ps();
        int t = 0;
        for (; t + 8 <= n; t += 8) {
            const __m256 e = fs_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + t), vm));
            _mm256_storeu_ps(sc + t, e);
            vsum = _mm256_add_ps(vsum, e);
        }
        if (t < n) {
            float tmp[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            for (int j = 0; t + j < n; j++) tmp[j] = sc[t + j] - mx;
            const __m256 valid = _mm256_cmp_ps(_mm256_set_ps(7.f, 6.f, 5.f, 4.f, 3.f, 2.f, 1.f, 0.f),
                                               _mm256_set1_ps((float)(n - t)), _CMP_LT_OQ);
            const __m256 e = _mm256_and_ps(fs_exp8(_mm256_loadu_ps(tmp)), valid);
            _mm256_storeu_ps(tmp, e);
            for (int j = 0; t + j < n; j++) sc[t + j] = tmp[j];
            vsum = _mm256_add_ps(vsum, e);
        }
        m[g] = mx, s[g] = hsum8(vsum);
    }
}

// o[g] = sum_t p[g][t] v[t]: G x CH accumulators of 8 dims in registers, per lane one FMA chain in key order
static inline __attribute__((always_inline)) void pv_tile(const int G, const int CH, const void *vc, const int64_t *sl,
                                                          int t0, int n, int KVH, int kh, int D, int esz, int kv_type,
                                                          const float *scores, float *o) {
    for (int c0 = 0; c0 < D; c0 += 8 * CH) {
        __m256 acc[8][4];
        for (int g = 0; g < G; g++)
            for (int c = 0; c < CH; c++) acc[g][c] = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            const char *v = (const char *)vc + (sl[t0 + t] * KVH + kh) * (int64_t)D * esz;
            for (int c = 0; c < CH; c++) {
                const __m256 vv = kv_load8(v, kv_type, c0 + 8 * c);
                for (int g = 0; g < G; g++)
                    acc[g][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(scores + (int64_t)g * n + t), vv, acc[g][c]);
            }
        }
        for (int g = 0; g < G; g++)
            for (int c = 0; c < CH; c++) _mm256_storeu_ps(o + g * D + c0 + 8 * c, acc[g][c]);
    }
}

#if defined(PD_AVX512)
static inline __m512 kv_load16(const void *row, int kv_type, int i) {
    if (kv_type == FS_KV_F32) return _mm512_loadu_ps((const float *)row + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i));
    if (kv_type == FS_KV_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

// lane j = sum of a[j]'s 16 lanes (pairwise halves: sum j lands at float 4j or 4(j-4)+2)
static inline __m256 hsum8x16(const __m512 *a) {
    __m512 b[4], c[2];
    for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 f = _mm512_add_ps(e, _mm512_shuffle_ps(e, e, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i at = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(at, f));
}

// scores of GH <= 3 heads x 8 keys: GH x 8 accumulators in registers
static inline __attribute__((always_inline)) void qk_tile16(const int GH, const float *q, const char *const *k,
                                                            int kv_type, int D, __m256 scale, __m256 *out) {
    __m512 acc[3][8];
    for (int g = 0; g < GH; g++)
        for (int j = 0; j < 8; j++) acc[g][j] = _mm512_setzero_ps();
    for (int i = 0; i < D; i += 16) {
        __m512 qv[3];
        for (int g = 0; g < GH; g++) qv[g] = _mm512_loadu_ps(q + g * D + i);
        for (int j = 0; j < 8; j++) {
            const __m512 kv = kv_load16(k[j], kv_type, i);
            for (int g = 0; g < GH; g++) acc[g][j] = _mm512_fmadd_ps(qv[g], kv, acc[g][j]);
        }
    }
    for (int g = 0; g < GH; g++) out[g] = _mm256_mul_ps(hsum8x16(acc[g]), scale);
}

// pv_tile on 16 lanes
static inline __attribute__((always_inline)) void pv_tile16(const int G, const int CH, const void *vc,
                                                            const int64_t *sl, int t0, int n, int KVH, int kh, int D,
                                                            int esz, int kv_type, const float *scores, float *o) {
    for (int c0 = 0; c0 < D; c0 += 16 * CH) {
        __m512 acc[8][4];
        for (int g = 0; g < G; g++)
            for (int c = 0; c < CH; c++) acc[g][c] = _mm512_setzero_ps();
        for (int t = 0; t < n; t++) {
            const char *v = (const char *)vc + (sl[t0 + t] * KVH + kh) * (int64_t)D * esz;
            __m512 vv[4];
            for (int c = 0; c < CH; c++) vv[c] = kv_load16(v, kv_type, c0 + 16 * c);
            for (int g = 0; g < G; g++) {
                const __m512 p = _mm512_set1_ps(scores[(int64_t)g * n + t]);
                for (int c = 0; c < CH; c++) acc[g][c] = _mm512_fmadd_ps(p, vv[c], acc[g][c]);
            }
        }
        for (int g = 0; g < G; g++)
            for (int c = 0; c < CH; c++) _mm512_storeu_ps(o + g * D + c0 + 16 * c, acc[g][c]);
    }
}

// 8 keys x G heads, 3 at a time: scores[g][b0..b0+8), only keys < n
static void qk_block16(const float *qb, const char *const *k, int kv_type, int D, int G, __m256 vscale, float *scores,
                       int n, int b0) {
    for (int g0 = 0; g0 < G; g0 += 3) {
        __m256 sv[3];
        const float *q = qb + g0 * D;
        const int gh = G - g0 < 3 ? G - g0 : 3;
        if (gh == 3) qk_tile16(3, q, k, kv_type, D, vscale, sv);
        else if (gh == 2) qk_tile16(2, q, k, kv_type, D, vscale, sv);
        else qk_tile16(1, q, k, kv_type, D, vscale, sv);
        for (int g = 0; g < gh; g++) {
            float *dst = scores + (int64_t)(g0 + g) * n + b0;
            if (b0 + 8 <= n) {
                _mm256_storeu_ps(dst, sv[g]);
            } else {
                float tmp[8];
                _mm256_storeu_ps(tmp, sv[g]);
                for (int j = 0; b0 + j < n; j++) dst[j] = tmp[j];
            }
        }
    }
}

// P.V through the widest tile D allows (G x CH <= 16 accumulators)
static void pv16(const void *vc, const int64_t *sl, int t0, int n, int KVH, int kh, int D, int G, int esz,
                 int kv_type, const float *scores, float *o) {
    const int chunks = D / 16;
    switch (G) {
#define PV16_CASE(GC, CHMAX)                                                                                      \
    case GC:                                                                                                      \
        if (CHMAX >= 4 && chunks % 4 == 0) pv_tile16(GC, 4, vc, sl, t0, n, KVH, kh, D, esz, kv_type, scores, o); \
        else if (chunks % 2 == 0) pv_tile16(GC, 2, vc, sl, t0, n, KVH, kh, D, esz, kv_type, scores, o);          \
        else pv_tile16(GC, 1, vc, sl, t0, n, KVH, kh, D, esz, kv_type, scores, o);                               \
        return;
        PV16_CASE(1, 4) PV16_CASE(2, 4) PV16_CASE(3, 4) PV16_CASE(4, 4)
        PV16_CASE(5, 2) PV16_CASE(6, 2) PV16_CASE(7, 2) PV16_CASE(8, 2)
#undef PV16_CASE
        default:
            return;
    }
}

// AVX-512 part: D % 16 == 0, G <= 8.
static void part_avx512(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                        int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                        int prefetch) {
    const int n = t1 - t0, esz = kv_type == FS_KV_F32 ? 4 : 2, row = D * esz;
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int b0 = 0; b0 < n; b0 += 8) {
        const char *k[8];
        for (int j = 0; j < 8; j++)  // past the end: the first key again (valid, unused)
            k[j] = (const char *)kc + ((b0 + j < n ? sl[t0 + b0 + j] : sl[t0]) * KVH + kh) * (int64_t)row;
        if (prefetch) prefetch_ahead(kc, vc, sl, t0, b0, n, KVH, kh, row);
        qk_block16(qb, k, kv_type, D, G, vscale, scores, n, b0);
    }
    softmax_part(scores, n, G, m, s);
    pv16(vc, sl, t0, n, KVH, kh, D, G, esz, kv_type, scores, o);
}
#endif

// AVX2 part (AVX-512 builds too, other shapes): 8 independent FMA chains per head and block of keys.
void fs_attend_part(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                    int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                    int prefetch) {
    if (D % 8 != 0 || D > 512) {  // portable part
        fs_attend_portable(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, o, m, s);
        return;
    }
#if defined(PD_AVX512)
    if (D % 16 == 0 && G <= 8) {
        part_avx512(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, o, m, s, prefetch);
        return;
    }
#endif
    const int n = t1 - t0, esz = kv_type == FS_KV_F32 ? 4 : 2;
    const __m256 vscale = _mm256_set1_ps(scale);
    float kf[8 * 512];  // 8 keys widened once for all G heads (exact)
    for (int b0 = 0; b0 < n; b0 += 8) {
        const float *k[8];
        if (prefetch) prefetch_ahead(kc, vc, sl, t0, b0, n, KVH, kh, D * esz);
        for (int j = 0; j < 8; j++) {  // past the end: the first key again
            const char *row = (const char *)kc + ((b0 + j < n ? sl[t0 + b0 + j] : sl[t0]) * KVH + kh) * (int64_t)D * esz;
            if (kv_type == FS_KV_F32) {
                k[j] = (const float *)row;
            } else {
                for (int i = 0; i < D; i += 8) _mm256_storeu_ps(kf + j * D + i, kv_load8(row, kv_type, i));
                k[j] = kf + j * D;
            }
        }
        for (int g = 0; g < G; g++) {
            const float *q = qb + g * D;
            __m256 acc[8];
            for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
            for (int i = 0; i < D; i += 8) {
                const __m256 qv = _mm256_loadu_ps(q + i);
                for (int j = 0; j < 8; j++) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j] + i), acc[j]);
            }
            const __m256 sv = _mm256_mul_ps(hsum8x8(acc), vscale);
            if (b0 + 8 <= n) {
                _mm256_storeu_ps(scores + (int64_t)g * n + b0, sv);
            } else {
                float tmp[8];
                _mm256_storeu_ps(tmp, sv);
                for (int j = 0; b0 + j < n; j++) scores[(int64_t)g * n + b0 + j] = tmp[j];
            }
        }
    }
    softmax_part(scores, n, G, m, s);
    switch (G) {  // register tile where the shape allows; same sums
#define PV_CASE(GC, CH)                                                                      \
    case GC:                                                                                 \
        if (D % (8 * CH) == 0) {                                                             \
            pv_tile(GC, CH, vc, sl, t0, n, KVH, kh, D, esz, kv_type, scores, o);             \
            return;                                                                          \
        }                                                                                    \
        break;
        PV_CASE(1, 4) PV_CASE(2, 4) PV_CASE(3, 4) PV_CASE(4, 2) PV_CASE(5, 2) PV_CASE(6, 2) PV_CASE(7, 1) PV_CASE(8, 1)
#undef PV_CASE
        default:
            break;
    }
    for (int i = 0; i < G * D; i++) o[i] = 0.f;
    for (int t = 0; t < n; t++) {
        const char *v = (const char *)vc + (sl[t0 + t] * KVH + kh) * (int64_t)D * esz;
        for (int i = 0; i < D; i += 8) {
            const __m256 vv = kv_load8(v, kv_type, i);
            for (int g = 0; g < G; g++) {
                float *op = o + g * D + i;
                _mm256_storeu_ps(op, _mm256_fmadd_ps(_mm256_set1_ps(scores[(int64_t)g * n + t]), vv, _mm256_loadu_ps(op)));
            }
        }
    }
}
#endif
