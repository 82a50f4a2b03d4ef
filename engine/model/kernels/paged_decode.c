// Paged-attention decode on CPU: one query token per sequence attends to its cached keys,
// read in place from the block pool (no gather copy, no padding). Queries and outputs are fp32;
// the K/V pool is fp32, bf16 or fp16 (kv_type), and 16-bit rows are widened in registers as they
// are read (bf16: a 16-bit shift; fp16: F16C / AVX-512 cvtph), so a 16-bit pool costs half the
// memory traffic of an fp32 one and no fp32 copy of it is ever made.
//
// q    [B, H, D]          query of each decode sequence
// kc   [S, KVH, D]        one layer's K pool (S = num_blocks * block_size slots)
// vc   [S, KVH, D]        one layer's V pool
// slots[B, Lmax] int64    slot of key t of sequence b (only t < ctx[b] is read)
// ctx  [B] int64          number of keys of sequence b (including the new token)
// out  [B, H, D]
// Query head h uses KV head h / (H / KVH), as in HF's repeat_kv.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include "half.h"
#include "simd_exp.h"
#include "step_parts.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define PD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PD_AVX2 1
#endif

enum { KV_F32 = 0, KV_BF16 = 1, KV_F16 = 2 };

static inline float dot_f32(const float *a, const float *b, int d) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < d; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy_f32(float *o, float p, const float *v, int d) {
#pragma omp simd
    for (int i = 0; i < d; i++) o[i] += p * v[i];
}

#if defined(PD_AVX512)
// 16 values of a 16-bit row from index i (mask m: the lanes that exist), widened to fp32.
static inline __m512 load16(const uint16_t *row, int kv_type, int i, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + i);
    if (kv_type == KV_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

static inline __mmask16 lanes(int i, int d) { return d - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (d - i)) - 1); }

static float dot_16(const float *q, const uint16_t *k, int kv_type, int d) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
        const __mmask16 m = lanes(i, d);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load16(k, kv_type, i, m), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static void axpy_16(float *o, float p, const uint16_t *v, int kv_type, int d) {
    const __m512 pv = _mm512_set1_ps(p);
    for (int i = 0; i < d; i += 16) {
        const __mmask16 m = lanes(i, d);
        _mm512_mask_storeu_ps(o + i, m, _mm512_fmadd_ps(pv, load16(v, kv_type, i, m), _mm512_maskz_loadu_ps(m, o + i)));
    }
}
#elif defined(PD_AVX2)
static inline __m256 load8(const uint16_t *row, int kv_type, int i) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(row + i));
    if (kv_type == KV_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

static inline float widen(uint16_t h, int kv_type) { return kv_type == KV_BF16 ? bf16_to_float(h) : half_to_float(h); }

static float dot_16(const float *q, const uint16_t *k, int kv_type, int d) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= d; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, kv_type, i), acc);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    float s = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
    for (; i < d; i++) s += q[i] * widen(k[i], kv_type);  // head dims that are not a multiple of 8
    return s;
}

static void axpy_16(float *o, float p, const uint16_t *v, int kv_type, int d) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= d; i += 8) _mm256_storeu_ps(o + i, _mm256_fmadd_ps(pv, load8(v, kv_type, i), _mm256_loadu_ps(o + i)));
    for (; i < d; i++) o[i] += p * widen(v[i], kv_type);
}
#else
static float dot_16(const float *q, const uint16_t *k, int kv_type, int d) {
    float s = 0.f;
    if (kv_type == KV_BF16) {
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < d; i++) s += q[i] * bf16_to_float(k[i]);
    } else {
        for (int i = 0; i < d; i++) s += q[i] * half_to_float(k[i]);
    }
    return s;
}

static void axpy_16(float *o, float p, const uint16_t *v, int kv_type, int d) {
    if (kv_type == KV_BF16) {
#pragma omp simd
        for (int i = 0; i < d; i++) o[i] += p * bf16_to_float(v[i]);
    } else {
        for (int i = 0; i < d; i++) o[i] += p * half_to_float(v[i]);
    }
}
#endif

// Row `slot` of head kh in a pool of rows of D elements of kv_type.
static inline const void *row_at(const void *pool, int kv_type, int64_t slot, int KVH, int kh, int D) {
    const int64_t idx = (slot * KVH + kh) * D;
    return kv_type == KV_F32 ? (const void *)((const float *)pool + idx) : (const void *)((const uint16_t *)pool + idx);
}

static inline float dot_kv(const float *q, const void *k, int kv_type, int d) {
    return kv_type == KV_F32 ? dot_f32(q, (const float *)k, d) : dot_16(q, (const uint16_t *)k, kv_type, d);
}

static inline void axpy_kv(float *o, float p, const void *v, int kv_type, int d) {
    if (kv_type == KV_F32) axpy_f32(o, p, (const float *)v, d);
    else axpy_16(o, p, (const uint16_t *)v, kv_type, d);
}

// Attention of one query's G heads over keys [t0, t1) of its L keys: scores, their maximum m[g], the
// sum of exp(score - m) s[g] and the unnormalized sum of exp(score - m) * value o[g*D..]. A query's
// keys are cut into parts of FS_ATT_PART keys from key 0 (a layout that depends on L alone), the parts
// are independent (threads may take them in any order) and fs_attend_combine merges them in part order.
static void part_portable(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                          int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s) {
    const int n = t1 - t0;
    for (int t = 0; t < n; t++) {
        const void *k = row_at(kc, kv_type, sl[t0 + t], KVH, kh, D);
        for (int g = 0; g < G; g++) scores[g * n + t] = dot_kv(qb + g * D, k, kv_type, D) * scale;
    }
    for (int g = 0; g < G; g++) {
        float *sc = scores + g * n, mx = -INFINITY, sum = 0.f;
        for (int t = 0; t < n; t++) mx = sc[t] > mx ? sc[t] : mx;
        for (int t = 0; t < n; t++) { sc[t] = expf(sc[t] - mx); sum += sc[t]; }
        m[g] = mx, s[g] = sum;
    }
    for (int i = 0; i < G * D; i++) o[i] = 0.f;
    for (int t = 0; t < n; t++) {
        const void *v = row_at(vc, kv_type, sl[t0 + t], KVH, kh, D);
        for (int g = 0; g < G; g++) axpy_kv(o + g * D, scores[g * n + t], v, kv_type, D);
    }
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// 8 values of a K/V row from index i, widened to fp32.
static inline __m256 kv_load8(const void *row, int kv_type, int i) {
    if (kv_type == KV_F32) return _mm256_loadu_ps((const float *)row + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (kv_type == KV_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

#ifndef PD_AHEAD
#define PD_AHEAD 16
#endif
// A head's K/V rows are 1 in KVH of the pool's, a stride the hardware prefetchers follow late: the rows of the
// block of 8 keys PD_AHEAD keys past b0 are asked for, the keys into L1 and the values into L2 for the pass
// over them after the softmax.
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

// The sums of 8 vectors' lanes, as one vector: lane j = the sum of a[j]'s 8 lanes.
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

// Each head's scores of the part -> exp(score - max) in place, with the maximum m[g] and the sum s[g].
static void softmax_part(float *scores, int n, int G, float *m, float *s) {
    for (int g = 0; g < G; g++) {
        float *sc = scores + (int64_t)g * n, mx = -INFINITY;
        int t0 = 0;
        if (n >= 8) {  // the maximum 8 lanes at a time (a maximum is exact in any order: the scalar loop's value;
                       // maxps returns its second operand when one is NaN, so a NaN score is skipped as there)
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

// The values' weighted sum o[g] = sum over t of scores[g][t] * v[t], dims in chunks of 8 CH, the G x CH
// accumulators in registers (G and CH compile-time constants): each output lane is the same chain of FMAs
// in key order as the plain loop's, which kept o in memory and re-read it per value row.
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
// 16 values of a K/V row from index i, widened to fp32.
static inline __m512 kv_load16(const void *row, int kv_type, int i) {
    if (kv_type == KV_F32) return _mm512_loadu_ps((const float *)row + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i));
    if (kv_type == KV_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

// The lane sums of 8 vectors as one: lane j of the result = the sum of a[j]'s 16 lanes. Halves are
// added pairwise (256-bit halves, then 128-bit quarters, then pairs, then neighbours), so after four
// levels key j's sum sits at float 4j (j < 4) or 4(j - 4) + 2, which the last permute gathers.
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

// Scores of GH query heads (GH <= 3, compile-time) against 8 keys: each key's row is widened once per 16
// dims and feeds the GH heads; the GH x 8 accumulators (24 at most) stay in registers.
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

// As pv_tile, 16 lanes: G x CH accumulators of 16 dims in registers, values widened once per key.
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

// One block of 8 keys (rows k) against a KV head's G query heads qb [G, D], in groups of up to 3 heads:
// scores [G][n] from key b0 on (the part's last block stores only the keys that exist).
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

// The values' weighted sum of one KV head through the widest register tile the head dim allows (G x CH
// <= 16 accumulators).
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

// The AVX-512 part (D a multiple of 16, G <= 8): keys in blocks of 8 (qk_block16), the softmax as the
// AVX2 part's, the values' sum in registers (pv16), the rows ahead prefetched (with both, 2.2x faster
// over 4,096 fp16 keys than the AVX2 part on a Zen 5).
static void part_avx512(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                        int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                        int prefetch) {
    const int n = t1 - t0, esz = kv_type == KV_F32 ? 4 : 2, row = D * esz;
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int b0 = 0; b0 < n; b0 += 8) {
        const char *k[8];
        for (int j = 0; j < 8; j++)  // past the part's last key: its first key again (valid memory, unused)
            k[j] = (const char *)kc + ((b0 + j < n ? sl[t0 + b0 + j] : sl[t0]) * KVH + kh) * (int64_t)row;
        if (prefetch) prefetch_ahead(kc, vc, sl, t0, b0, n, KVH, kh, row);
        qk_block16(qb, k, kv_type, D, G, vscale, scores, n, b0);
    }
    softmax_part(scores, n, G, m, s);
    pv16(vc, sl, t0, n, KVH, kh, D, G, esz, kv_type, scores, o);
}
#endif

// AVX2 (also in the AVX-512 build): keys in blocks of 8 (widened to fp32 once for the G heads), each block's
// 8 dot products per query head as 8 independent FMA chains reduced together; exp 8 lanes at a time; the
// values' weighted sum in registers (pv_tile).
void fs_attend_part(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                    int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                    int prefetch) {
    if (D % 8 != 0 || D > 512) {  // head dims that are not a multiple of 8, or past the widened-key buffer
        part_portable(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, o, m, s);
        return;
    }
#if defined(PD_AVX512)
    if (D % 16 == 0 && G <= 8) {
        part_avx512(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, o, m, s, prefetch);
        return;
    }
#endif
    const int n = t1 - t0, esz = kv_type == KV_F32 ? 4 : 2;
    const __m256 vscale = _mm256_set1_ps(scale);
    float kf[8 * 512];  // a block's 8 keys widened to fp32 once, for all G heads (the widening is exact)
    for (int b0 = 0; b0 < n; b0 += 8) {
        const float *k[8];
        if (prefetch) prefetch_ahead(kc, vc, sl, t0, b0, n, KVH, kh, D * esz);
        for (int j = 0; j < 8; j++) {  // past the part's last key: its first key again (valid memory, unused)
            const char *row = (const char *)kc + ((b0 + j < n ? sl[t0 + b0 + j] : sl[t0]) * KVH + kh) * (int64_t)D * esz;
            if (kv_type == KV_F32) {
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
    switch (G) {  // the register-resident tile where the shape allows it, else the loop below (same sums)
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
#else
void fs_attend_part(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                    int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                    int prefetch) {
    (void)prefetch;
    part_portable(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, o, m, s);
}
#endif

// ob[g*D..] = the softmax-weighted values over all parts: parts merged in part order, each rescaled from
// its own maximum to the overall one. o_parts [P][G*D], m_parts / s_parts [P][G].
void fs_attend_combine(int P, int G, int D, const float *parts, float *ob) {
    const int64_t stride = (int64_t)G * (D + 2);  // one part: o [G * D], then m [G], then s [G]
    if (P == 1) {  // the loop below with w = 1: (0 + 1 * o) * (1 / (0 + 1 * s)) is o * (1 / s), the same values
                   // (but for a -0 staying -0, which the next step's quantization maps to 0 as it does +0)
        for (int g = 0; g < G; g++) {
            const float inv = 1.f / parts[G * D + G + g], *op = parts + g * D;
            float *out = ob + g * D;
            for (int i = 0; i < D; i++) out[i] = op[i] * inv;
        }
        return;
    }
    for (int g = 0; g < G; g++) {
        float mx = -INFINITY;
        for (int p = 0; p < P; p++) {
            const float mp = parts[p * stride + G * D + g];
            mx = mp > mx ? mp : mx;
        }
        float sum = 0.f;
        float *out = ob + g * D;
        for (int i = 0; i < D; i++) out[i] = 0.f;
        for (int p = 0; p < P; p++) {
            const float *part = parts + p * stride;
            const float w = P == 1 ? 1.f : expf(part[G * D + g] - mx);
            sum += w * part[G * D + G + g];
            const float *op = part + g * D;
            for (int i = 0; i < D; i++) out[i] += w * op[i];
        }
        const float inv = 1.f / sum;
        for (int i = 0; i < D; i++) out[i] *= inv;
    }
}

int fs_attend_parts(int L) { return L <= 0 ? 1 : (L + FS_ATT_PART - 1) / FS_ATT_PART; }

void fs_attend(const float *qb, const void *kc, const void *vc, const int64_t *sl, int L, int KVH, int kh, int D,
               int G, float scale, int kv_type, float *scores, float *ob) {
    // scores: G * FS_ATT_PART floats of scratch (or G * L when L is shorter)
    const int P = fs_attend_parts(L);
    float stack[16384];  // 64 KB: P * G * (D + 2) floats for up to 8,192 keys of 8 heads of 64
    const size_t need = (size_t)P * (size_t)G * (size_t)(D + 2);
    float *buf = need <= sizeof(stack) / sizeof(float) ? stack : (float *)malloc(sizeof(float) * need);
    if (!buf) return;
    for (int p = 0; p < P; p++) {
        const int t0 = p * FS_ATT_PART, t1 = t0 + FS_ATT_PART < L ? t0 + FS_ATT_PART : L;
        float *part = buf + (size_t)p * G * (D + 2);
        fs_attend_part(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, part, part + G * D,
                       part + G * D + G, 1);
    }
    fs_attend_combine(P, G, D, buf, ob);
    if (buf != stack) free(buf);
}

void paged_decode(const float *q, const void *kc, const void *vc, const int64_t *slots, const int64_t *ctx,
                  float *out, int B, int H, int KVH, int D, int Lmax, float scale, int nthreads, int kv_type) {
    const int G = H / KVH;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int kh = 0; kh < KVH; kh++) {
            const int L = (int)ctx[b];
            const int part = L < FS_ATT_PART ? (L > 0 ? L : 1) : FS_ATT_PART;
            float *scores = (float *)malloc(sizeof(float) * (size_t)G * (size_t)part);
            fs_attend(q + ((int64_t)b * H + (int64_t)kh * G) * D, kc, vc, slots + (int64_t)b * Lmax, L, KVH, kh, D, G,
                      scale, kv_type, scores, out + ((int64_t)b * H + (int64_t)kh * G) * D);
            free(scores);
        }
    }
}
