// Quantized GEMM y[M, N] = x[M, K] @ W[N, K]^T for int8 (Q8) and 4-bit (Q4, Q4_1-like) weights.
//
// Decode streams every weight once per step, so bytes per weight set the speed: int8 reads a
// quarter of fp32, 4-bit about an eighth. Activations are quantized per block of 32 to int8
// (scale xd = amax / 127, as llama.cpp's Q8_0), so the inner product is an integer dot.
//
// Weight layout ("row-interleaved"): rows in groups of 16, K in blocks of 32. One (group, block)
// tile holds 16 rows x 32 values with row r's 4 consecutive values k..k+3 adjacent, so one
// 512-bit load is 16 rows x 4 values: one VNNI dpbusd (u8 x s8 -> s32) per 4 values does 16
// rows at once, against the 4 activation bytes broadcast. Every weight tile is read once for all
// M activation rows (M small at decode, any M works).
//   Q8: w  u8 [G][KB][8][16][4], value q + 128 (q in -127..127); wd fp16 [G][KB][16]
//   Q4: w  u8 [G][KB][4][16][4], low nibble = q at k = 4j+i, high nibble = q at k = 16+4j+i
//       (q in 0..15, the nibble order of GGUF Q4_1); wd, wm fp16 [G][KB][16]; value = wd q + wm
// The unsigned weight is dotted with the signed activation; Q8 subtracts 128 * sum(xq) after.
//
// The same source is compiled once per ISA (generic, -mavx2, -mavx512*, -mavx512* -mamx-*) at install time; the
// Python side picks the library the CPU can run (CPUID). Every path does the same integer sums
// and the same float operations per output lane, in the same order.
#define _DEFAULT_SOURCE 1  // syscall() under -std=c11
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include "half.h"
#include "step_parts.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define QG_AVX512 1
#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define QG_AMX 1  // the `amx` variant: the avx512 one, q4 x int16 prefill tiles on AMX (amx_group below)
#endif
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QG_AVX2 1
#endif

#define QK 32    // values per block
#define QR 16    // rows per group
#define MT 4     // activation rows per register tile

// Decode batches stream every weight from memory once per step: while a tile works on its group(s), it asks for the
// bytes of the groups after them (weights, scales, mins; `n` groups' worth per block, the same block index) into
// L2, so that the next tile's loads overlap this tile's arithmetic (a batch-8 decode step 10.3 -> 7.7 ms on Zen 5).
// `pf` NULL: nothing asked (every row tile after a group's first, whose weights are then in cache). A hint only:
// the bits are untouched.
typedef struct {
    const uint8_t *w;
    const uint16_t *wd, *wm;
    int n;
} ahead_t;

static inline __attribute__((always_inline)) void prefetch_ahead(const ahead_t *pf, int b, int tile_bytes) {
    if (!pf) return;
    const char *w = (const char *)(pf->w + (int64_t)b * pf->n * tile_bytes);
    for (int l = 0; l < pf->n * tile_bytes; l += 64) __builtin_prefetch(w + l, 0, 2);
    __builtin_prefetch(pf->wd + b * pf->n * QR, 0, 2);
    if (pf->wm) __builtin_prefetch(pf->wm + b * pf->n * QR, 0, 2);
}

// The groups `ahead` groups past group g of a [G groups][KB blocks] weight: what g's first tile prefetches.
static ahead_t ahead_of(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g, int ahead,
                        int n) {
    const int64_t tile_bytes = q4 ? 256 : 512, at = (int64_t)(g + ahead) * KB;
    const ahead_t a = {w + at * tile_bytes, wd + at * QR, wm ? wm + at * QR : NULL, n};
    return a;
}

// Full tiles at the compile-time height MT, the rest of the rows one at a time at height 1 (each tile function's
// height a constant, so its accumulators stay in registers); the callers' q4, w, ..., mt, out and pf in scope (pf
// passed to the first tile only).
#define BY_HEIGHT(tile_fn)                                                                                             \
    do {                                                                                                               \
        if (mt == MT) {                                                                                                \
            tile_fn(q4, w, wd, wm, KB, xq, xd, xs, MT, out, pf);                                                       \
        } else {                                                                                                       \
            for (int t = 0; t < mt; t++) {                                                                             \
                float one[MT][QR];                                                                                     \
                tile_fn(q4, w, wd, wm, KB, xq + (int64_t)t * KB * QK, xd + (int64_t)t * KB, xs + (int64_t)t * KB, 1,   \
                        one, t == 0 ? pf : NULL);                                                                      \
                memcpy(out[t], one[0], sizeof(float) * QR);                                                            \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

int finserve_kernel_isa(void) {  // what this library was compiled for: 0 generic, 1 avx2, 2 avx512, 3 amx
#if defined(QG_AMX)
    return 3;
#elif defined(QG_AVX512)
    return 2;
#elif defined(QG_AVX2)
    return 1;
#else
    return 0;
#endif
}

// Bit 0: AVX2+FMA+F16C; bit 1: AVX-512 F/BW/VL/VNNI (and the OS saves their registers); bit 2: those and AMX-TILE/INT8
// (CPUID leaf 7 EDX bits 24 and 25) with the kernel's permission to use the tile data, which Linux grants per process
// on request (arch_prctl ARCH_REQ_XCOMP_PERM): asked here, once, so that a process told "amx" may use the tiles.
int finserve_cpu_features(void) {
    int f = 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= 1;
    if ((f & 1) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        f |= 2;
#if defined(__linux__) && defined(__x86_64__)
    unsigned a, b, c, d;
    if ((f & 2) && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&
        syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0)
        f |= 4;
#endif
#endif
    return f;
}

#if defined(QG_AVX2) || defined(QG_AVX512)
// One full block of 32 values rounded to integers of at most `top` in magnitude (127 for int8, 32767 for int16),
// vectorized: the values of the scalar loops in quantize_rows / quantize_rows16 (the maximum is exact, d and 1/d the
// same scalar operations, v * id one rounding, then round-to-nearest-even as nearbyintf in the default rounding mode).
// qi: the 32 integers in order, 8 per vector; *xd = d, *xs = their sum.
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
        qi[i] = _mm256_cvtps_epi32(r);  // already integral: exact
        sum = _mm256_add_epi32(sum, qi[i]);
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    *xd = d;
    *xs = _mm_cvtsi128_si32(s4);
}

// One full block of 32 values to int8 (|q| <= 127: the packs never saturate), in order.
static inline void quantize_block8_avx2(const float *v, int8_t *q, float *xd, int32_t *xs) {
    __m256i qi[4];
    round_block_avx2(v, 127.f, qi, xd, xs);
    // packs work within 128-bit halves: (0 lo, 1 lo, 0 hi, 1 hi) then bytes (01 lo, 23 lo, 01 hi, 23 hi): one
    // permute of 32-bit lanes puts the 32 values back in order
    const __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]), p16b = _mm256_packs_epi32(qi[2], qi[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#endif

// x [M, K] (row stride ldx) -> xq int8 [M, KB*32] (zero padded), xd [M, KB], xs [M, KB] = sum(xq).
static void quantize_rows(const float *x, int M, int K, int ldx, int KB, int8_t *xq, float *xd, int32_t *xs) {
    for (int m = 0; m < M; m++) {
        const float *xr = x + (int64_t)m * ldx;
        for (int b = 0; b < KB; b++) {
#if defined(QG_AVX2) || defined(QG_AVX512)
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

static inline int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if defined(QG_AVX2) && !defined(QG_AVX512)
// int8 activations on AVX2, the tile height a compile-time constant (as tile16_avx2 below).
static inline __attribute__((always_inline)) void tile8_avx2(int q4, const uint8_t *w, const uint16_t *wd,
                                                             const uint16_t *wm, int KB, const int8_t *xq,
                                                             const float *xd, const int32_t *xs, const int mt,
                                                             float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    for (int h = 0; h < 2; h++) {  // rows 8h..8h+7: 32 bytes of each 64-byte row-quad
        __m256 facc[MT];
        for (int t = 0; t < mt; t++) facc[t] = _mm256_setzero_ps();
        for (int b = 0; b < KB; b++) {
            const uint8_t *wt = w + (int64_t)b * tile_bytes + 32 * h;
            if (h == 0) prefetch_ahead(pf, b, tile_bytes);
            const __m256 wdv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + b * QR + 8 * h)));
            __m256i iacc[MT];
            for (int t = 0; t < mt; t++) iacc[t] = _mm256_setzero_si256();
            if (q4) {
                for (int j = 0; j < 4; j++) {
                    const __m256i wv = _mm256_loadu_si256((const __m256i *)(wt + j * 64));
                    const __m256i lo = _mm256_and_si256(wv, low), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), low);
                    for (int t = 0; t < mt; t++) {
                        const int8_t *xb = xq + (int64_t)t * KB * QK + b * QK;
                        // u4 x s8 pairs stay far below the int16 limit: 2 * 15 * 127 * 2 < 32767
                        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(xb + 4 * j))),
                                                           _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(xb + 16 + 4 * j))));
                        iacc[t] = _mm256_add_epi32(iacc[t], _mm256_madd_epi16(p, ones));
                    }
                }
                const __m256 wmv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wm + b * QR + 8 * h)));
                for (int t = 0; t < mt; t++) {
                    const float d = xd[(int64_t)t * KB + b];
                    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(iacc[t]), wdv);
                    facc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(d), facc[t]);
                    facc[t] = _mm256_fmadd_ps(wmv, _mm256_set1_ps(d * (float)xs[(int64_t)t * KB + b]), facc[t]);
                }
            } else {
                for (int j = 0; j < 8; j++) {
                    // maddubs needs u8 x s8 without int16 overflow: |q| x sign-adjusted x, |q| <= 127.
                    const __m256i ws = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(wt + j * 64)), flip);
                    const __m256i aw = _mm256_abs_epi8(ws);
                    for (int t = 0; t < mt; t++) {
                        const int8_t *xb = xq + (int64_t)t * KB * QK + b * QK;
                        const __m256i sx = _mm256_sign_epi8(_mm256_set1_epi32(load4(xb + 4 * j)), ws);
                        iacc[t] = _mm256_add_epi32(iacc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones));
                    }
                }
                for (int t = 0; t < mt; t++) {
                    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(iacc[t]), wdv);
                    facc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(xd[(int64_t)t * KB + b]), facc[t]);
                }
            }
        }
        for (int t = 0; t < mt; t++) _mm256_storeu_ps(out[t] + 8 * h, facc[t]);
    }
}
#endif

#if defined(QG_AVX512)
// The end of a K block in the AVX-512 tiles: each row's integer sum of the block (int8 weights less 128 x sum(xq))
// scaled into its float accumulator, fma(sum * wd, d, acc), then q4's fma(wm, d * sum(xq), acc): the float operations
// of the scalar loops, per lane in the same order. One weight group, rows t < mt; the two-group tiles call it per group.
static inline __attribute__((always_inline)) void block_end_avx512(int q4, int b, int KB, const uint16_t *wd,
                                                                   const uint16_t *wm, const float *xd,
                                                                   const int32_t *xs, const int mt,
                                                                   const __m512i *isum, __m512 *facc) {
    const __m512 wdv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wd + b * QR)));
    const __m512 wmv = q4 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wm + b * QR))) : _mm512_setzero_ps();
    for (int t = 0; t < mt; t++) {
        const float d = xd[(int64_t)t * KB + b];
        const int32_t sx = xs[(int64_t)t * KB + b];
        const __m512i si = q4 ? isum[t] : _mm512_sub_epi32(isum[t], _mm512_set1_epi32(128 * sx));
        facc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(si), wdv), _mm512_set1_ps(d), facc[t]);
        if (q4) facc[t] = _mm512_fmadd_ps(wmv, _mm512_set1_ps(d * (float)sx), facc[t]);
    }
}

// A single-group tile's accumulators of a block (na per row) added into one sum per row, then block_end_avx512.
static inline __attribute__((always_inline)) void block_end_rows_avx512(int q4, int b, int KB, const uint16_t *wd,
                                                                        const uint16_t *wm, const float *xd,
                                                                        const int32_t *xs, const int mt, const int na,
                                                                        __m512i iacc[][4], __m512 *facc) {
    __m512i isum[MT];
    for (int t = 0; t < mt; t++) {
        isum[t] = iacc[t][0];
        for (int a = 1; a < na; a++) isum[t] = _mm512_add_epi32(isum[t], iacc[t][a]);
    }
    block_end_avx512(q4, b, KB, wd, wm, xd, xs, mt, isum, facc);
}
#endif

#if defined(QG_AVX512)
// int8 activations on AVX-512 VNNI: one dpbusd (u8 weight x s8 activation, 4 products per 32-bit lane) per 4 values
// of 16 rows, twice the multiply-adds per instruction of the int16 tiles' dpwssd; the tile height a compile-time
// constant (1 for decode rows, MT for prefill tiles) so that every accumulator lives in a register, each row's dot of
// a block split over NA independent accumulators (integer sums are exact in any order: the bits of every other ISA
// variant). Per lane the float operations of group_tile's scalar loop, in the same order.
static inline __attribute__((always_inline)) void tile8_avx512(int q4, const uint8_t *w, const uint16_t *wd,
                                                               const uint16_t *wm, int KB, const int8_t *xq,
                                                               const float *xd, const int32_t *xs, const int mt,
                                                               float out[MT][QR], const ahead_t *pf) {
    enum { NA_MAX = 4 };
    const int tile_bytes = q4 ? 256 : 512, na = mt == 1 ? 4 : 2;
    __m512 facc[MT];
    for (int t = 0; t < mt; t++) facc[t] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < KB; b++) {
        const uint8_t *wt = w + (int64_t)b * tile_bytes;
        prefetch_ahead(pf, b, tile_bytes);
        __m512i iacc[MT][NA_MAX];
        for (int t = 0; t < mt; t++)
            for (int a = 0; a < na; a++) iacc[t][a] = _mm512_setzero_si512();
        if (q4) {
            for (int j = 0; j < 4; j++) {  // low nibbles: k 4j..4j+3, high nibbles: k 16+4j..
                const __m512i v = _mm512_loadu_si512((const void *)(wt + j * 64));
                const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                const int a0 = (2 * j) % na, a1 = (2 * j + 1) % na;
                for (int t = 0; t < mt; t++) {
                    const int8_t *xb = xq + (int64_t)t * KB * QK + b * QK;
                    iacc[t][a0] = _mm512_dpbusd_epi32(iacc[t][a0], lo, _mm512_set1_epi32(load4(xb + 4 * j)));
                    iacc[t][a1] = _mm512_dpbusd_epi32(iacc[t][a1], hi, _mm512_set1_epi32(load4(xb + 16 + 4 * j)));
                }
            }
        } else {
            for (int j = 0; j < 8; j++) {
                const __m512i v = _mm512_loadu_si512((const void *)(wt + j * 64));
                for (int t = 0; t < mt; t++) {
                    const int8_t *xb = xq + (int64_t)t * KB * QK + b * QK;
                    iacc[t][j % na] = _mm512_dpbusd_epi32(iacc[t][j % na], v, _mm512_set1_epi32(load4(xb + 4 * j)));
                }
            }
        }
        block_end_rows_avx512(q4, b, KB, wd, wm, xd, xs, mt, na, iacc, facc);
    }
    for (int t = 0; t < mt; t++) _mm512_storeu_ps(out[t], facc[t]);
}

// Two groups (32 rows) x MT activation rows with int8 activations, for prefill tiles and decode batches of MT or
// more: each broadcast activation quad feeds both groups' dots. Per row and lane the same integer sums and float
// operations, in the same order, as tile8_avx512: the same bits.
static inline __attribute__((always_inline)) void tile8x2_avx512(int q4, const uint8_t *wa, const uint16_t *wda,
                                                                 const uint16_t *wma, const uint8_t *wb,
                                                                 const uint16_t *wdb, const uint16_t *wmb, int KB,
                                                                 const int8_t *xq, const float *xd, const int32_t *xs,
                                                                 float outa[MT][QR], float outb[MT][QR],
                                                                 const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
    __m512 fa[MT], fb[MT];
    for (int t = 0; t < MT; t++) fa[t] = fb[t] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < KB; b++) {
        const uint8_t *ta = wa + (int64_t)b * tile_bytes, *tb = wb + (int64_t)b * tile_bytes;
        prefetch_ahead(pf, b, tile_bytes);
        __m512i ia[MT], ib[MT];
        for (int t = 0; t < MT; t++) ia[t] = ib[t] = _mm512_setzero_si512();
        if (q4) {
            for (int j = 0; j < 4; j++) {
                const __m512i va = _mm512_loadu_si512((const void *)(ta + j * 64));
                const __m512i vb = _mm512_loadu_si512((const void *)(tb + j * 64));
                const __m512i la = _mm512_and_si512(va, low), ha = _mm512_and_si512(_mm512_srli_epi16(va, 4), low);
                const __m512i lb = _mm512_and_si512(vb, low), hb = _mm512_and_si512(_mm512_srli_epi16(vb, 4), low);
                for (int t = 0; t < MT; t++) {
                    const int8_t *xb = xq + (int64_t)t * KB * QK + b * QK;
                    const __m512i xl = _mm512_set1_epi32(load4(xb + 4 * j)), xh = _mm512_set1_epi32(load4(xb + 16 + 4 * j));
                    ia[t] = _mm512_dpbusd_epi32(ia[t], la, xl);
                    ib[t] = _mm512_dpbusd_epi32(ib[t], lb, xl);
                    ia[t] = _mm512_dpbusd_epi32(ia[t], ha, xh);
                    ib[t] = _mm512_dpbusd_epi32(ib[t], hb, xh);
                }
            }
        } else {
            for (int j = 0; j < 8; j++) {
                const __m512i va = _mm512_loadu_si512((const void *)(ta + j * 64));
                const __m512i vb = _mm512_loadu_si512((const void *)(tb + j * 64));
                for (int t = 0; t < MT; t++) {
                    const __m512i x = _mm512_set1_epi32(load4(xq + (int64_t)t * KB * QK + b * QK + 4 * j));
                    ia[t] = _mm512_dpbusd_epi32(ia[t], va, x);
                    ib[t] = _mm512_dpbusd_epi32(ib[t], vb, x);
                }
            }
        }
        block_end_avx512(q4, b, KB, wda, wma, xd, xs, MT, ia, fa);
        block_end_avx512(q4, b, KB, wdb, wmb, xd, xs, MT, ib, fb);
    }
    for (int t = 0; t < MT; t++) _mm512_storeu_ps(outa[t], fa[t]), _mm512_storeu_ps(outb[t], fb[t]);
}
#endif

// One group (16 output rows) x MT activation rows, all K blocks: out[t][r] for t < mt.
static void group_tile(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int8_t *xq,
                       const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
#if defined(QG_AVX512)
    (void)tile_bytes;
    BY_HEIGHT(tile8_avx512);
#elif defined(QG_AVX2)
    (void)tile_bytes;
    BY_HEIGHT(tile8_avx2);
#else
    (void)pf;
    for (int t = 0; t < mt; t++) {
        const int8_t *xr = xq + (int64_t)t * KB * QK;
        for (int r = 0; r < QR; r++) {
            float acc = 0.f;
            for (int b = 0; b < KB; b++) {
                const uint8_t *wt = w + (int64_t)b * tile_bytes;
                int32_t s = 0;
                for (int k = 0; k < QK; k++) {
                    int32_t q;
                    if (q4) {
                        const uint8_t byte = wt[((k % 16) / 4) * 64 + r * 4 + k % 4];
                        q = k < 16 ? (byte & 0x0f) : (byte >> 4);
                    } else {
                        q = (int32_t)wt[(k / 4) * 64 + r * 4 + k % 4] - 128;
                    }
                    s += q * xr[b * QK + k];
                }
                const float d = xd[(int64_t)t * KB + b];
                acc = fmaf((float)s * half_to_float(wd[b * QR + r]), d, acc);
                if (q4) acc = fmaf(half_to_float(wm[b * QR + r]), d * (float)xs[(int64_t)t * KB + b], acc);
            }
            out[t][r] = acc;
        }
    }
#endif
}

// Precise activations: int16 per block of 32 (xd = amax / 32767), 256x finer than int8, so the
// result is within fp32 rounding of the dequantized weights times fp32 activations. Each quad of
// values k..k+3 is stored as (x[k], x[k+2], x[k+1], x[k+3]): a weight lane's bytes (w0 w1 w2 w3)
// split into int16 pairs (w0, w2) = lane & 0x00ff00ff and (w1, w3) = lane >> 8, each dotted with
// one broadcast 32-bit activation pair (VNNI vpdpwssd / AVX2 pmaddwd).
#if defined(QG_AVX2) || defined(QG_AVX512)
// One full block of 32 values to int16 (round_block_avx2: the scalar loop's values), each quad stored in (0, 2, 1, 3)
// order.
static inline void quantize_block16_avx2(const float *v, int16_t *q, float *xd, int32_t *xs) {
    __m256i qi[4];
    round_block_avx2(v, 32767.f, qi, xd, xs);
    for (int i = 0; i < 4; i++) qi[i] = _mm256_shuffle_epi32(qi[i], _MM_SHUFFLE(3, 1, 2, 0));  // each quad (0, 2, 1, 3)
    for (int i = 0; i < 4; i += 2) {  // packs interleaves 128-bit halves: put them back in order
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[i], qi[i + 1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)(q + 8 * i), p);
    }
}
#endif

#if defined(QG_AVX512)
// quantize_block16_avx2's values 16 lanes at a time (the maximum and the sum are exact in any order; d and 1/d the same
// scalar operations; one rounding of v * id to nearest even, saturated to int16 as packs does): half the instructions
// per block, which were ~6% of a 256-token prefill.
static inline void quantize_block16_avx512(const float *v, int16_t *q, float *xd, int32_t *xs) {
    const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const float d = amax / 32767.f, id = d > 0.f ? 1.f / d : 0.f;
    const __m512 idv = _mm512_set1_ps(id);
    const __m512i qa = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i qb = _mm512_cvt_roundps_epi32(_mm512_mul_ps(b, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i quad = _mm512_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);  // each quad (0, 2, 1, 3)
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
#if defined(QG_AVX2) || defined(QG_AVX512)
            if ((b + 1) * QK <= K) {
#if defined(QG_AVX512)
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

static inline int32_t load2x16(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if defined(QG_AVX2) && !defined(QG_AVX512)
// The AVX2 tile with its height a compile-time constant (1 for decode rows, MT for prefill tiles), so
// that every accumulator lives in a register. Each row's operations are the same in both: a row gives
// the same bits in a tile of 1 or of MT.
static inline __attribute__((always_inline)) void tile16_avx2(int q4, const uint8_t *w, const uint16_t *wd,
                                                              const uint16_t *wm, int KB, const int16_t *xq,
                                                              const float *xd, const int32_t *xs, const int mt,
                                                              float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
    const __m256i even = _mm256_set1_epi32(0x00ff00ff), nib = _mm256_set1_epi16(0x000f);
    const __m256i nib16 = _mm256_set1_epi16(0x00f0), nib256 = _mm256_set1_epi16(0x0f00);
    for (int h = 0; h < 2; h++) {  // rows 8h..8h+7: 32 bytes of each 64-byte row-quad
        __m256 facc[MT];
        for (int t = 0; t < mt; t++) facc[t] = _mm256_setzero_ps();
        for (int b = 0; b < KB; b++) {
            const uint8_t *wt = w + (int64_t)b * tile_bytes + 32 * h;
            if (h == 0) prefetch_ahead(pf, b, tile_bytes);
            const __m256 wdv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + b * QR + 8 * h)));
            __m256i iacc[MT];
            for (int t = 0; t < mt; t++) iacc[t] = _mm256_setzero_si256();
            const int quads = q4 ? 4 : 8;
            if (q4 && mt == 1) {  // a decode row: nibbles 1, 2 left in place (16, 256 x the weight), as tile16_avx512
                __m256i s16 = _mm256_setzero_si256(), s256 = _mm256_setzero_si256();
                const int16_t *xb = xq + b * QK;
                for (int j = 0; j < 4; j++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(wt + j * 64));
                    iacc[0] = _mm256_add_epi32(iacc[0], _mm256_madd_epi16(_mm256_and_si256(v, nib),
                                                                          _mm256_set1_epi32(load2x16(xb + 4 * j))));
                    s256 = _mm256_add_epi32(s256, _mm256_madd_epi16(_mm256_and_si256(v, nib256),
                                                                    _mm256_set1_epi32(load2x16(xb + 4 * j + 2))));
                    s16 = _mm256_add_epi32(s16, _mm256_madd_epi16(_mm256_and_si256(v, nib16),
                                                                  _mm256_set1_epi32(load2x16(xb + 16 + 4 * j))));
                    const __m256i x3 = _mm256_set1_epi32(load2x16(xb + 18 + 4 * j));
                    iacc[0] = _mm256_add_epi32(iacc[0], _mm256_madd_epi16(_mm256_srli_epi16(v, 12), x3));
                }
                s256 = _mm256_srai_epi32(s256, 8);
                iacc[0] = _mm256_add_epi32(iacc[0], _mm256_add_epi32(s256, _mm256_srai_epi32(s16, 4)));
            } else  // prefill tiles, int8 weights: each nibble shifted down
            for (int j = 0; j < quads; j++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(wt + j * 64));
                __m256i pa, pb, ha = _mm256_setzero_si256(), hb = _mm256_setzero_si256();
                if (q4) {
                    pa = _mm256_and_si256(v, nib);
                    pb = _mm256_and_si256(_mm256_srli_epi16(v, 8), nib);
                    ha = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                    hb = _mm256_srli_epi16(v, 12);
                } else {
                    pa = _mm256_and_si256(v, even);
                    pb = _mm256_srli_epi16(v, 8);
                }
                for (int t = 0; t < mt; t++) {
                    const int16_t *xb = xq + (int64_t)t * KB * QK + b * QK;
                    __m256i p = _mm256_add_epi32(_mm256_madd_epi16(pa, _mm256_set1_epi32(load2x16(xb + 4 * j))),
                                                 _mm256_madd_epi16(pb, _mm256_set1_epi32(load2x16(xb + 4 * j + 2))));
                    if (q4) {
                        p = _mm256_add_epi32(p, _mm256_madd_epi16(ha, _mm256_set1_epi32(load2x16(xb + 16 + 4 * j))));
                        p = _mm256_add_epi32(p, _mm256_madd_epi16(hb, _mm256_set1_epi32(load2x16(xb + 18 + 4 * j))));
                    }
                    iacc[t] = _mm256_add_epi32(iacc[t], p);
                }
            }
            const __m256 wmv = q4 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wm + b * QR + 8 * h)))
                                  : _mm256_setzero_ps();
            for (int t = 0; t < mt; t++) {
                const float d = xd[(int64_t)t * KB + b];
                const int32_t sx = xs[(int64_t)t * KB + b];
                const __m256i isum = q4 ? iacc[t] : _mm256_sub_epi32(iacc[t], _mm256_set1_epi32(128 * sx));
                facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(isum), wdv), _mm256_set1_ps(d), facc[t]);
                if (q4) facc[t] = _mm256_fmadd_ps(wmv, _mm256_set1_ps(d * (float)sx), facc[t]);
            }
        }
        for (int t = 0; t < mt; t++) _mm256_storeu_ps(out[t] + 8 * h, facc[t]);
    }
}
#endif

#if defined(QG_AVX512)
// The AVX-512 tile, its height a compile-time constant (1 for decode rows, MT for prefill tiles) so that every
// accumulator lives in a register. Each row's integer dot of a block is split over NA independent accumulators
// (4 for one row, 2 per row for MT) instead of one chain of a block's 16 dependent vpdpwssd: no faster for one row
// with the weights in cache, faster when they stream from memory (more loads in flight). Integer sums are exact in
// any order, so the bits are those of the
// other ISA variants; the float operations per lane are unchanged and in the same order.
static inline __attribute__((always_inline)) void tile16_avx512(int q4, const uint8_t *w, const uint16_t *wd,
                                                                const uint16_t *wm, int KB, const int16_t *xq,
                                                                const float *xd, const int32_t *xs, const int mt,
                                                                float out[MT][QR], const ahead_t *pf) {
    enum { NA_MAX = 4 };
    const int tile_bytes = q4 ? 256 : 512, na = mt == 1 ? 4 : 2;
    __m512 facc[MT];
    for (int t = 0; t < mt; t++) facc[t] = _mm512_setzero_ps();
    const __m512i even = _mm512_set1_epi32(0x00ff00ff), nib = _mm512_set1_epi16(0x000f);
    const __m512i nib16 = _mm512_set1_epi16(0x00f0), nib256 = _mm512_set1_epi16(0x0f00);
    for (int b = 0; b < KB; b++) {
        const uint8_t *wt = w + (int64_t)b * tile_bytes;
        prefetch_ahead(pf, b, tile_bytes);
        __m512i iacc[MT][NA_MAX];
        for (int t = 0; t < mt; t++)
            for (int a = 0; a < na; a++) iacc[t][a] = _mm512_setzero_si512();
        const int quads = q4 ? 4 : 8;
        for (int j = 0; j < quads; j++) {
            const __m512i v = _mm512_loadu_si512((const void *)(wt + j * 64));
            __m512i pa, pb, ha = _mm512_setzero_si512(), hb = _mm512_setzero_si512();
            if (q4 && mt == 1) {  // nibbles 1, 2 left in place (16, 256 x the weight, scaled back below)
                pa = _mm512_and_si512(v, nib);
                pb = _mm512_and_si512(v, nib256);
                ha = _mm512_and_si512(v, nib16);
                hb = _mm512_srli_epi16(v, 12);
            } else if (q4) {  // nibbles: low = k 4j.., high = k 16+4j..
                pa = _mm512_and_si512(v, nib);
                pb = _mm512_and_si512(_mm512_srli_epi16(v, 8), nib);
                ha = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                hb = _mm512_srli_epi16(v, 12);
            } else {
                pa = _mm512_and_si512(v, even);
                pb = _mm512_srli_epi16(v, 8);
            }
            for (int t = 0; t < mt; t++) {
                const int16_t *xb = xq + (int64_t)t * KB * QK + b * QK;
                // accumulator for each product: q4 a quad's 4 products go to 4 (or 2) different ones; int8
                // weights' 2 products per quad alternate by quad parity over 4 (or 2)
                const int a0 = q4 ? 0 : (2 * j) % na, a1 = q4 ? 1 % na : (2 * j + 1) % na;
                iacc[t][a0] = _mm512_dpwssd_epi32(iacc[t][a0], pa, _mm512_set1_epi32(load2x16(xb + 4 * j)));
                iacc[t][a1] = _mm512_dpwssd_epi32(iacc[t][a1], pb, _mm512_set1_epi32(load2x16(xb + 4 * j + 2)));
                if (q4) {
                    iacc[t][2 % na] = _mm512_dpwssd_epi32(iacc[t][2 % na], ha, _mm512_set1_epi32(load2x16(xb + 16 + 4 * j)));
                    iacc[t][3 % na] = _mm512_dpwssd_epi32(iacc[t][3 % na], hb, _mm512_set1_epi32(load2x16(xb + 18 + 4 * j)));
                }
            }
        }
        if (q4 && mt == 1) {  // exact: 256 (16) x the sum, which fits: 8 products per lane of |x| <= 32767, <= 3840
            iacc[0][1] = _mm512_srai_epi32(iacc[0][1], 8);
            iacc[0][2] = _mm512_srai_epi32(iacc[0][2], 4);
        }
        block_end_rows_avx512(q4, b, KB, wd, wm, xd, xs, mt, na, iacc, facc);
    }
    for (int t = 0; t < mt; t++) _mm512_storeu_ps(out[t], facc[t]);
}
#endif

#if defined(QG_AVX512)
// Two groups (32 rows) x MT activation rows at once, for prefill tiles: each broadcast activation pair feeds
// both groups' dots (the one-group tile spends a broadcast per dot). Per row and lane the same integer sums
// and float operations, in the same order, as tile16_avx512: the same bits.
static inline __attribute__((always_inline)) void tile16x2_avx512(int q4, const uint8_t *wa, const uint16_t *wda, const uint16_t *wma, const uint8_t *wb,
                            const uint16_t *wdb, const uint16_t *wmb, int KB, const int16_t *xq, const float *xd,
                            const int32_t *xs, float outa[MT][QR], float outb[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512, quads = q4 ? 4 : 8;
    __m512 fa[MT], fb[MT];
    for (int t = 0; t < MT; t++) fa[t] = fb[t] = _mm512_setzero_ps();
    const __m512i even = _mm512_set1_epi32(0x00ff00ff), nib = _mm512_set1_epi16(0x000f);
    for (int b = 0; b < KB; b++) {
        const uint8_t *ta = wa + (int64_t)b * tile_bytes, *tb = wb + (int64_t)b * tile_bytes;
        prefetch_ahead(pf, b, tile_bytes);
        __m512i ia[MT], ib[MT];
        for (int t = 0; t < MT; t++) ia[t] = ib[t] = _mm512_setzero_si512();
        for (int j = 0; j < quads; j++) {
            const __m512i va = _mm512_loadu_si512((const void *)(ta + j * 64));
            const __m512i vb = _mm512_loadu_si512((const void *)(tb + j * 64));
            const int parts = q4 ? 4 : 2;
            for (int part = 0; part < parts; part++) {
                __m512i pa, pb;
                int xo;  // the activation pair this part of the quad is dotted with
                if (q4) {  // nibbles: low = k 4j.., high = k 16+4j..; (0, 2) and (1, 3) of each quad
                    const int shift = (part & 1) * 8 + (part >> 1) * 4;
                    pa = shift == 12 ? _mm512_srli_epi16(va, 12) : _mm512_and_si512(_mm512_srli_epi16(va, shift), nib);
                    pb = shift == 12 ? _mm512_srli_epi16(vb, 12) : _mm512_and_si512(_mm512_srli_epi16(vb, shift), nib);
                    xo = (part >> 1) * 16 + 4 * j + (part & 1) * 2;
                } else {
                    pa = part ? _mm512_srli_epi16(va, 8) : _mm512_and_si512(va, even);
                    pb = part ? _mm512_srli_epi16(vb, 8) : _mm512_and_si512(vb, even);
                    xo = 4 * j + part * 2;
                }
                for (int t = 0; t < MT; t++) {
                    const __m512i x = _mm512_set1_epi32(load2x16(xq + (int64_t)t * KB * QK + b * QK + xo));
                    ia[t] = _mm512_dpwssd_epi32(ia[t], pa, x);
                    ib[t] = _mm512_dpwssd_epi32(ib[t], pb, x);
                }
            }
        }
        block_end_avx512(q4, b, KB, wda, wma, xd, xs, MT, ia, fa);
        block_end_avx512(q4, b, KB, wdb, wmb, xd, xs, MT, ib, fb);
    }
    for (int t = 0; t < MT; t++) _mm512_storeu_ps(outa[t], fa[t]), _mm512_storeu_ps(outb[t], fb[t]);
}
#endif

static void group_tile16(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int16_t *xq,
                         const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
#if defined(QG_AVX512)
    (void)tile_bytes;
    // q4 a compile-time constant in each copy: no branches in the block loop, the sums kept in registers (a decode
    // row's matmul ~5-10% faster, the Xeon)
    if (q4) { const int q4 = 1; BY_HEIGHT(tile16_avx512); } else { const int q4 = 0; BY_HEIGHT(tile16_avx512); }
#elif defined(QG_AVX2)
    (void)tile_bytes;
    if (q4 && mt == 1) {  // q4 a constant for decode rows only: for prefill tiles it made gcc's code slower
        const int q4 = 1;
        BY_HEIGHT(tile16_avx2);
    } else {
        BY_HEIGHT(tile16_avx2);
    }
#else
    (void)pf;
    static const int order[4] = {0, 2, 1, 3};
    for (int t = 0; t < mt; t++) {
        const int16_t *xr = xq + (int64_t)t * KB * QK;
        for (int r = 0; r < QR; r++) {
            float acc = 0.f;
            for (int b = 0; b < KB; b++) {
                const uint8_t *wt = w + (int64_t)b * tile_bytes;
                int32_t s = 0;
                for (int k = 0; k < QK; k++) {
                    int32_t q;
                    if (q4) {
                        const uint8_t byte = wt[((k % 16) / 4) * 64 + r * 4 + k % 4];
                        q = k < 16 ? (byte & 0x0f) : (byte >> 4);
                    } else {
                        q = wt[(k / 4) * 64 + r * 4 + k % 4];
                    }
                    s += q * xr[b * QK + (k & ~3) + order[k & 3]];
                }
                const int32_t sx = xs[(int64_t)t * KB + b];
                const float d = xd[(int64_t)t * KB + b];
                if (!q4) s -= 128 * sx;
                acc = fmaf((float)s * half_to_float(wd[b * QR + r]), d, acc);
                if (q4) acc = fmaf(half_to_float(wm[b * QR + r]), d * (float)sx, acc);
            }
            out[t][r] = acc;
        }
    }
#endif
}

// y[M, N] (row stride ldy) = x[M, K] @ W^T (+ bias). q4 = 0: Q8 weights, 1: Q4 weights (wm used);
// act16 = 1: int16 activations (precise), 0: int8 activations (fastest, llama.cpp's Q8_0 precision).
void qgemm_f32(int q4, int act16, const float *x, int M, int K, int ldx, const uint8_t *w, const uint16_t *wd,
               const uint16_t *wm, int N, const float *bias, float *y, int ldy, int nthreads) {
    const int KB = (K + QK - 1) / QK, G = (N + QR - 1) / QR;
    const int64_t tile_bytes = q4 ? 256 : 512;
    void *xq = malloc((size_t)M * KB * QK * (act16 ? 2 : 1));
    float *xd = (float *)malloc(sizeof(float) * (size_t)M * KB);
    int32_t *xs = (int32_t *)malloc(sizeof(int32_t) * (size_t)M * KB);
    if (act16)
        quantize_rows16(x, M, K, ldx, KB, (int16_t *)xq, xd, xs);
    else
        quantize_rows(x, M, K, ldx, KB, (int8_t *)xq, xd, xs);
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int g = 0; g < G; g++) {
        float out[MT][QR];
        const uint8_t *wg = w + (int64_t)g * KB * tile_bytes;
        const uint16_t *wdg = wd + (int64_t)g * KB * QR, *wmg = wm ? wm + (int64_t)g * KB * QR : NULL;
        const int rows = N - g * QR < QR ? N - g * QR : QR;
        for (int m0 = 0; m0 < M; m0 += MT) {
            const int mt = M - m0 < MT ? M - m0 : MT;
            const int64_t xo = (int64_t)m0 * KB * QK;
            if (act16)
                group_tile16(q4, wg, wdg, wmg, KB, (const int16_t *)xq + xo, xd + (int64_t)m0 * KB,
                             xs + (int64_t)m0 * KB, mt, out, NULL);
            else
                group_tile(q4, wg, wdg, wmg, KB, (const int8_t *)xq + xo, xd + (int64_t)m0 * KB,
                           xs + (int64_t)m0 * KB, mt, out, NULL);
            for (int t = 0; t < mt; t++) {
                float *yr = y + (int64_t)(m0 + t) * ldy + g * QR;
                for (int r = 0; r < rows; r++) yr[r] = bias ? out[t][r] + bias[g * QR + r] : out[t][r];
            }
        }
    }
    free(xq);
    free(xd);
    free(xs);
}

void fs_quantize_act(int act16, const float *x, int M, int K, int ldx, int KB, void *xq, float *xd, int32_t *xs) {
    if (act16)
        quantize_rows16(x, M, K, ldx, KB, (int16_t *)xq, xd, xs);
    else
        quantize_rows(x, M, K, ldx, KB, (int8_t *)xq, xd, xs);
}

// Group g's rows; `ahead`: its first row tile prefetches the group two past it (fs_qgemm_group2 calls it for groups g
// and g + 1, so that the pair after them arrives while they are computed).
static void group_rows(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                       const void *xq, const float *xd, const int32_t *xs, int M, float *out, int ahead) {
    const int64_t tile_bytes = q4 ? 256 : 512;
    const uint8_t *wg = w + (int64_t)g * KB * tile_bytes;
    const uint16_t *wdg = wd + (int64_t)g * KB * QR, *wmg = wm ? wm + (int64_t)g * KB * QR : NULL;
    const ahead_t next = ahead_of(q4, w, wd, wm, KB, g, 2, 1);
    float tile[MT][QR];
    for (int m0 = 0; m0 < M; m0 += MT) {
        const int mt = M - m0 < MT ? M - m0 : MT;
        const int64_t xo = (int64_t)m0 * KB * QK;
        const ahead_t *pf = ahead && m0 == 0 ? &next : NULL;
        if (act16)
            group_tile16(q4, wg, wdg, wmg, KB, (const int16_t *)xq + xo, xd + (int64_t)m0 * KB, xs + (int64_t)m0 * KB,
                         mt, tile, pf);
        else
            group_tile(q4, wg, wdg, wmg, KB, (const int8_t *)xq + xo, xd + (int64_t)m0 * KB, xs + (int64_t)m0 * KB,
                       mt, tile, pf);
        memcpy(out + (int64_t)m0 * QR, tile, sizeof(float) * QR * (size_t)mt);
    }
}

#if defined(QG_AMX)
// q4 weights x int16 activations on AMX (the `amx` variant), for prefill: 16 activation rows x one 16-row weight group
// per tile product, the integer sums exact, so the same bits as every other variant. Each stored activation value
// (int16, in quad order 0, 2, 1, 3) is its low byte (unsigned) plus 256 x its high byte (signed); a tile row of 64 bytes
// is one block's 32 values as stored (A). The weight tiles interleave each 4-bit weight with a zero byte: B_lo[kk][4n +
// (0, 1, 2, 3)] = (q(n, p), 0, q(n, p + 1), 0) for stored positions p = 2kk (the words the AVX-512 tile's nibble masks
// make), B_hi the same one byte on. A x B_lo, unsigned x unsigned, sums the low bytes' products; A x B_hi, signed x
// unsigned, the high bytes' (the other bytes meet the zeros). Then sum = 256 hi + lo, and block_end_avx512's float
// operations per lane, in block order. A tile product costs the same at any depth, and the float work per row and block
// (6 vector operations) is what bounds it: each block's products are issued before the previous block's float work
// (two sets of result tiles), so that the tile unit runs beside it.
// Tiles (16 rows x 64 bytes): 0, 1 low and high sums (even blocks), 2 A (even), 3 B_lo, 4 B_hi, 5, 6 sums (odd), 7 A (odd).
#define AMX_ROWS 16
typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg_t;

static __thread uint8_t *amx_buf;  // per thread: a group's weight tiles (2 KB per block), then the rows' d * sum(xq)
static __thread size_t amx_cap;

__attribute__((target("amx-tile"))) static void amx_configure(void) {
    amx_cfg_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.colsb[i] = 64, c.rows[i] = AMX_ROWS;
    _tile_loadconfig(&c);
}

// One block's weight tiles of one group: B_lo at bt, B_hi at bt + 1024 (16 rows of 64 bytes each).
static inline void amx_weight_tiles(const uint8_t *wt, uint8_t *bt) {
    const __m512i nib = _mm512_set1_epi16(0x000f);
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_loadu_si512((const void *)(wt + j * 64));
        const __m512i r[4] = {_mm512_and_si512(v, nib), _mm512_and_si512(_mm512_srli_epi16(v, 8), nib),
                              _mm512_and_si512(_mm512_srli_epi16(v, 4), nib), _mm512_srli_epi16(v, 12)};
        const int row[4] = {2 * j, 2 * j + 1, 8 + 2 * j, 9 + 2 * j};  // stored positions 4j, 4j + 2, 16 + 4j, 18 + 4j
        for (int i = 0; i < 4; i++) {
            _mm512_store_si512((void *)(bt + row[i] * 64), r[i]);
            _mm512_store_si512((void *)(bt + 1024 + row[i] * 64), _mm512_slli_epi16(r[i], 8));
        }
    }
}

// Block b's two products for the row tile at a (one block of 16 rows, `stride` bytes apart) into tiles cl, ch.
#define AMX_ISSUE(bt, b, a, stride, cl, ch, at)                                                                        \
    do {                                                                                                               \
        _tile_loadd(3, (bt) + (int64_t)(b) * 2048, 64);                                                                \
        _tile_loadd(4, (bt) + (int64_t)(b) * 2048 + 1024, 64);                                                         \
        _tile_zero(cl);                                                                                                \
        _tile_zero(ch);                                                                                                \
        _tile_loadd(at, (a) + (int64_t)(b) * QK * 2, stride);                                                          \
        _tile_dpbuud(cl, at, 3);                                                                                       \
        _tile_dpbsud(ch, at, 4);                                                                                       \
    } while (0)

// Rows [0, M) of group g (M a multiple of 16) into out [M][16]; bt: KB x 2 KB for the weight tiles, dsx: 16 x KB floats.
__attribute__((target("amx-tile,amx-int8"))) static void amx_group(const uint8_t *w, const uint16_t *wd,
                                                                  const uint16_t *wm, int KB, int g,
                                                                  const int16_t *xq, const float *xd,
                                                                  const int32_t *xs, int M, float *out, uint8_t *bt,
                                                                  float *dsx) {
    const uint8_t *wg = w + (int64_t)g * KB * 256;
    const uint16_t *wdg = wd + (int64_t)g * KB * QR, *wmg = wm + (int64_t)g * KB * QR;
    const int64_t stride = (int64_t)KB * QK * 2;  // bytes from one activation row to the next
    int32_t lo[AMX_ROWS][QR] __attribute__((aligned(64))), hi[AMX_ROWS][QR] __attribute__((aligned(64)));
    for (int b = 0; b < KB; b++) amx_weight_tiles(wg + (int64_t)b * 256, bt + (int64_t)b * 2048);
    for (int m0 = 0; m0 < M; m0 += AMX_ROWS) {
        const uint8_t *a = (const uint8_t *)(xq + (int64_t)m0 * KB * QK);
        for (int t = 0; t < AMX_ROWS; t++) {  // the scalar loops' d * (float)sx, once per row and block
            const float *d = xd + (int64_t)(m0 + t) * KB;
            const int32_t *sx = xs + (int64_t)(m0 + t) * KB;
            int b = 0;
            for (; b + 16 <= KB; b += 16)
                _mm512_storeu_ps(dsx + t * KB + b, _mm512_mul_ps(_mm512_loadu_ps(d + b),
                                                                 _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(sx + b)))));
            for (; b < KB; b++) dsx[t * KB + b] = d[b] * (float)sx[b];
        }
        __m512 acc[AMX_ROWS];
#pragma GCC unroll 16
        for (int t = 0; t < AMX_ROWS; t++) acc[t] = _mm512_setzero_ps();
        AMX_ISSUE(bt, 0, a, stride, 0, 1, 2);
        for (int b = 0; b < KB; b++) {
            if (b & 1) {
                _tile_stored(5, lo, 64);
                _tile_stored(6, hi, 64);
                if (b + 1 < KB) AMX_ISSUE(bt, b + 1, a, stride, 0, 1, 2);
            } else {
                _tile_stored(0, lo, 64);
                _tile_stored(1, hi, 64);
                if (b + 1 < KB) AMX_ISSUE(bt, b + 1, a, stride, 5, 6, 7);
            }
            const __m512 wdv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wdg + b * QR)));
            const __m512 wmv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wmg + b * QR)));
            // block_end_avx512's operations, with d * (float)sx taken from dsx: calling it per 4 rows (its scalar
            // product and broadcast per row and block) made a 256-token prefill 193-204 -> 211-217 ms (3 pairs)
#pragma GCC unroll 16  // the accumulators stay in registers
            for (int t = 0; t < AMX_ROWS; t++) {
                const __m512i si = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512((const void *)hi[t]), 8),
                                                    _mm512_load_si512((const void *)lo[t]));
                const float d = xd[(int64_t)(m0 + t) * KB + b];
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(si), wdv), _mm512_set1_ps(d), acc[t]);
                acc[t] = _mm512_fmadd_ps(wmv, _mm512_set1_ps(dsx[t * KB + b]), acc[t]);
            }
        }
#pragma GCC unroll 16
        for (int t = 0; t < AMX_ROWS; t++) _mm512_storeu_ps(out + (int64_t)(m0 + t) * QR, acc[t]);
    }
}

// Groups g .. g + n - 1 of q4 weights against int16 activations, rows [0, M) when M >= 16: the first M - M % 16 rows
// on the tiles, the rest on the AVX-512 tiles (the same bits). Returns 0 when it did nothing (other formats, fewer rows,
// no buffer), and the caller takes the AVX-512 path.
__attribute__((target("amx-tile"))) static int amx_groups(int q4, int act16, const uint8_t *w, const uint16_t *wd,
                                                         const uint16_t *wm, int KB, int g, int n, const void *xq,
                                                         const float *xd, const int32_t *xs, int M, float **outs) {
    if (!q4 || !act16 || M < AMX_ROWS) return 0;
    const size_t need = (size_t)KB * 2048 + sizeof(float) * AMX_ROWS * (size_t)KB;
    if (need > amx_cap) {
        free(amx_buf);
        amx_buf = (uint8_t *)aligned_alloc(64, (need + 63) / 64 * 64);
        amx_cap = amx_buf ? need : 0;
        if (!amx_buf) return 0;
    }
    const int full = M / AMX_ROWS * AMX_ROWS;
    amx_configure();  // per call: the tile state is the thread's, and other code on this thread may change it
    for (int i = 0; i < n; i++)
        amx_group(w, wd, wm, KB, g + i, (const int16_t *)xq, xd, xs, full, outs[i], amx_buf,
                  (float *)(amx_buf + (size_t)KB * 2048));
    _tile_release();
    if (full < M)
        for (int i = 0; i < n; i++)
            group_rows(q4, act16, w, wd, wm, KB, g + i, (const int16_t *)xq + (int64_t)full * KB * QK,
                       xd + (int64_t)full * KB, xs + (int64_t)full * KB, M - full, outs[i] + (int64_t)full * QR, 0);
    return 1;
}
#endif

void fs_qgemm_group(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                    const void *xq, const float *xd, const int32_t *xs, int M, float *out) {
#if defined(QG_AMX)
    if (amx_groups(q4, act16, w, wd, wm, KB, g, 1, xq, xd, xs, M, &out)) return;
#endif
    group_rows(q4, act16, w, wd, wm, KB, g, xq, xd, xs, M, out, 1);
}

void fs_qgemm_group2(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                     const void *xq, const float *xd, const int32_t *xs, int M, float *out_g, float *out_g1) {
#if defined(QG_AMX)
    float *outs[2] = {out_g, out_g1};
    if (amx_groups(q4, act16, w, wd, wm, KB, g, 2, xq, xd, xs, M, outs)) return;
#endif
#if defined(QG_AVX512)
    if (M >= MT) {
        const int64_t tile_bytes = q4 ? 256 : 512;
        const uint8_t *wa = w + (int64_t)g * KB * tile_bytes, *wb = wa + (int64_t)KB * tile_bytes;
        const uint16_t *wda = wd + (int64_t)g * KB * QR, *wdb = wda + (int64_t)KB * QR;
        const uint16_t *wma = wm ? wm + (int64_t)g * KB * QR : NULL, *wmb = wm ? wma + (int64_t)KB * QR : NULL;
        const int full = M / MT * MT;
        const ahead_t next = ahead_of(q4, w, wd, wm, KB, g, 2, 2);
        for (int m0 = 0; m0 < full; m0 += MT) {
            const ahead_t *pf = m0 == 0 ? &next : NULL;
            const float *d = xd + (int64_t)m0 * KB;
            const int32_t *s = xs + (int64_t)m0 * KB;
            float(*oa)[QR] = (float(*)[QR])(out_g + (int64_t)m0 * QR), (*ob)[QR] = (float(*)[QR])(out_g1 + (int64_t)m0 * QR);
            // the format a constant in each call: the inlined tile has no branch on it
            if (act16) {
                const int16_t *x = (const int16_t *)xq + (int64_t)m0 * KB * QK;
                if (q4)
                    tile16x2_avx512(1, wa, wda, wma, wb, wdb, wmb, KB, x, d, s, oa, ob, pf);
                else
                    tile16x2_avx512(0, wa, wda, wma, wb, wdb, wmb, KB, x, d, s, oa, ob, pf);
            } else {
                const int8_t *x = (const int8_t *)xq + (int64_t)m0 * KB * QK;
                if (q4)
                    tile8x2_avx512(1, wa, wda, wma, wb, wdb, wmb, KB, x, d, s, oa, ob, pf);
                else
                    tile8x2_avx512(0, wa, wda, wma, wb, wdb, wmb, KB, x, d, s, oa, ob, pf);
            }
        }
        if (full == M) return;
        const int64_t xo = (int64_t)full * (act16 ? 2 : 1) * KB * QK;
        group_rows(q4, act16, w, wd, wm, KB, g, (const uint8_t *)xq + xo, xd + (int64_t)full * KB,
                   xs + (int64_t)full * KB, M - full, out_g + (int64_t)full * QR, 0);
        group_rows(q4, act16, w, wd, wm, KB, g + 1, (const uint8_t *)xq + xo, xd + (int64_t)full * KB,
                   xs + (int64_t)full * KB, M - full, out_g1 + (int64_t)full * QR, 0);
        return;
    }
#endif
    fs_qgemm_group(q4, act16, w, wd, wm, KB, g, xq, xd, xs, M, out_g);
    fs_qgemm_group(q4, act16, w, wd, wm, KB, g + 1, xq, xd, xs, M, out_g1);
}

// One row's 32 values of one tile (16 rows x 32 values): its bytes gathered into k order, widened in
// 16-lane loops the compiler vectorizes (the same float operations as dequantize() in quant.py).
static inline void dequant_row(int q4, const uint8_t *tile, int r, float d, float m, float *v) {
    uint8_t bytes[QK];
    const int C = q4 ? 4 : 8;
    for (int j = 0; j < C; j++) memcpy(bytes + 4 * j, tile + (j * QR + r) * 4, 4);
    if (q4) {
        for (int i = 0; i < 16; i++) v[i] = (float)(bytes[i] & 15) * d + m;
        for (int i = 0; i < 16; i++) v[16 + i] = (float)(bytes[i] >> 4) * d + m;
    } else {
        for (int i = 0; i < QK; i++) v[i] = (float)((int)bytes[i] - 128) * d;
    }
}

#if defined(__AVX2__)
// dequant_row for a whole block of 32, 8 lanes at a time: the same products and sums (mul, then add: no FMA),
// so the same values bit for bit.
static inline void dequant_row_avx2(int q4, const uint8_t *tile, int r, float d, float m, float *v) {
    const __m256 dv = _mm256_set1_ps(d);
    if (q4) {
        const __m128i b = _mm_setr_epi32(load4((const int8_t *)tile + r * 4), load4((const int8_t *)tile + (QR + r) * 4),
                                         load4((const int8_t *)tile + (2 * QR + r) * 4),
                                         load4((const int8_t *)tile + (3 * QR + r) * 4));
        const __m128i low = _mm_set1_epi8(0x0f);
        const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
        const __m256 mv = _mm256_set1_ps(m);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int i = 0; i < 4; i++) {
            const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
            _mm256_storeu_ps(v + 8 * i, _mm256_add_ps(_mm256_mul_ps(q, dv), mv));
        }
    } else {
        const __m128i flip = _mm_set1_epi8((char)0x80);
        for (int h = 0; h < 2; h++) {  // bytes 16h..16h+15: chunks j = 4h..4h+3
            const __m128i b = _mm_xor_si128(
                _mm_setr_epi32(load4((const int8_t *)tile + ((4 * h) * QR + r) * 4),
                               load4((const int8_t *)tile + ((4 * h + 1) * QR + r) * 4),
                               load4((const int8_t *)tile + ((4 * h + 2) * QR + r) * 4),
                               load4((const int8_t *)tile + ((4 * h + 3) * QR + r) * 4)), flip);  // q = byte - 128
            const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
            const __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
            _mm256_storeu_ps(v + 16 * h, _mm256_mul_ps(q0, dv));
            _mm256_storeu_ps(v + 16 * h + 8, _mm256_mul_ps(q1, dv));
        }
    }
}
#endif

// Row r of group g (stored row 16g + r) as dense fp32 into row [K].
static void dequant_one_row(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int K, int g, int r,
                            float *row) {
    const int KB = (K + QK - 1) / QK, C = q4 ? 4 : 8;
    for (int b = 0; b < KB; b++) {
        const int64_t tile_id = (int64_t)g * KB + b;
        const float d = half_to_float(wd[tile_id * QR + r]);
        const float m = q4 ? half_to_float(wm[tile_id * QR + r]) : 0.f;
        const uint8_t *tile = w + tile_id * C * QR * 4;
        const int width = K - b * QK < QK ? K - b * QK : QK;
#if defined(__AVX2__)
        if (width == QK) {
            dequant_row_avx2(q4, tile, r, d, m, row + b * QK);
            continue;
        }
#endif
        float v[QK];
        dequant_row(q4, tile, r, d, m, v);
        memcpy(row + b * QK, v, sizeof(float) * (size_t)width);
    }
}

// Rows 16g..16g+15 (those below N) of the stored weights as dense fp32 into out [N, K] (row stride K): w = d q
// (int8) or d q + m (q4), the values dequantize() in engine/model/quant.py gives. For prefill-sized batches,
// where a dense GEMM (MKL) on these beats the integer kernel; decode_step.c's fs_dequant runs the groups on
// its pool.
void fs_dequant_group(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int N, int K, int g,
                      float *out) {
    for (int r = 0; r < QR && g * QR + r < N; r++) dequant_one_row(q4, w, wd, wm, K, g, r, out + (int64_t)(g * QR + r) * K);
}

// Stored rows ids[0..n-1] (each < N) as dense fp32 into out [n, K]: a tied LM head read as the embedding
// table, one row per token of a step, without a dense copy of the table.
void fs_dequant_rows(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int K, int n,
                     const int64_t *ids, float *out) {
    for (int i = 0; i < n; i++)
        dequant_one_row(q4, w, wd, wm, K, (int)(ids[i] / QR), (int)(ids[i] % QR), out + (int64_t)i * K);
}

// out[i] = the index of the first maximum of row i of x [n, V] (row stride ld) among its values that are not
// NaN (0 when every value is NaN): torch.argmax of the row with NaN replaced by -inf.
void fs_argmax_rows(const float *x, int n, int V, int64_t ld, int64_t *out) {
    for (int i = 0; i < n; i++) {
        const float *row = x + (int64_t)i * ld;
        float best = -INFINITY;
        int64_t at = 0;
        int j = 0;
#if defined(__AVX2__)
        if (V >= 8) {  // 8 lanes, each keeping its first maximum; then the largest, at its smallest index
            __m256 vbest = _mm256_set1_ps(-INFINITY);
            __m256i vat = _mm256_setzero_si256(), idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i eight = _mm256_set1_epi32(8);
            for (; j + 8 <= V; j += 8) {
                const __m256 v = _mm256_loadu_ps(row + j);
                const __m256 gt = _mm256_cmp_ps(v, vbest, _CMP_GT_OQ);  // false for NaN
                vbest = _mm256_blendv_ps(vbest, v, gt);
                vat = _mm256_blendv_epi8(vat, idx, _mm256_castps_si256(gt));
                idx = _mm256_add_epi32(idx, eight);
            }
            float lb[8];
            int32_t la[8];
            _mm256_storeu_ps(lb, vbest);
            _mm256_storeu_si256((__m256i *)la, vat);
            for (int l = 0; l < 8; l++) {
                if (lb[l] > best || (lb[l] == best && la[l] < at)) {
                    best = lb[l];
                    at = la[l];
                }
            }
        }
#endif
        for (; j < V; j++) {
            if (row[j] > best) {  // false for NaN
                best = row[j];
                at = j;
            }
        }
        out[i] = at;
    }
}
