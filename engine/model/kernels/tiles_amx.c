// q4 weights x int16 activations on AMX (amx), prefill rows: 16 rows x one 16-row group per tile product.
#include <stdlib.h>

#include "tiles.h"

#if defined(FS_AMX)
// A: a tile row = one block's 32 stored int16 values (quads 0, 2, 1, 3) = lo byte (unsigned) + 256 hi byte (signed).
// B_lo[kk][4n + (0, 1, 2, 3)] = (q(n, 2kk), 0, q(n, 2kk + 1), 0); B_hi the same one byte on. dpbuud(A, B_lo) sums the
// lo bytes' products, dpbsud(A, B_hi) the hi bytes'; sum = 256 hi + lo, exact, then block_end_avx512's float operations
// in block order: the same bits.
// Block b + 1's products are issued before block b's float work (two sets of result tiles), which bounds the loop.
// Tiles: 0, 1 lo/hi sums (even blocks), 2 A (even), 3 B_lo, 4 B_hi, 5, 6 sums (odd), 7 A (odd).
#define AMX_ROWS 16
typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg_t;

static __thread uint8_t *amx_buf;  // per thread: weight tiles (2 KB per block), then the rows' d * sum(xq)
static __thread size_t amx_cap;

__attribute__((target("amx-tile"))) static void amx_configure(void) {
    amx_cfg_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.colsb[i] = 64, c.rows[i] = AMX_ROWS;
    _tile_loadconfig(&c);
}

// one block's weight tiles of a group: B_lo at bt, B_hi at bt + 1024
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

// block b's two products for the row tile at a into tiles cl, ch
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

// rows [0, M) (M % 16 == 0) of group g -> out [M][16]; bt: KB x 2 KB, dsx: 16 x KB floats
__attribute__((target("amx-tile,amx-int8"))) static void amx_group(const uint8_t *w, const uint16_t *wd,
                                                                  const uint16_t *wm, int KB, int g,
                                                                  const int16_t *xq, const float *xd,
                                                                  const int32_t *xs, int M, float *out, uint8_t *bt,
                                                                  float *dsx) {
    const uint8_t *wg = w + (int64_t)g * KB * 256;
    const uint16_t *wdg = wd + (int64_t)g * KB * QR, *wmg = wm + (int64_t)g * KB * QR;
    const int64_t stride = (int64_t)KB * QK * 2;
    int32_t lo[AMX_ROWS][QR] __attribute__((aligned(64))), hi[AMX_ROWS][QR] __attribute__((aligned(64)));
    for (int b = 0; b < KB; b++) amx_weight_tiles(wg + (int64_t)b * 256, bt + (int64_t)b * 2048);
    for (int m0 = 0; m0 < M; m0 += AMX_ROWS) {
        const uint8_t *a = (const uint8_t *)(xq + (int64_t)m0 * KB * QK);
        for (int t = 0; t < AMX_ROWS; t++) {  // d * (float)sx per row and block, once
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
            // block_end_avx512's operations, d * sx from dsx
#pragma GCC unroll 16  // accumulators in registers
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

// Groups g .. g + n - 1, M >= 16: rows below M - M % 16 on AMX, the rest on the AVX-512 tiles. 0: not taken (format,
// rows, no buffer).
__attribute__((target("amx-tile"))) int fs_amx_groups(int q4, int act16, const uint8_t *w, const uint16_t *wd,
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
    amx_configure();  // per call: the tile state is the thread's
    for (int i = 0; i < n; i++)
        amx_group(w, wd, wm, KB, g + i, (const int16_t *)xq, xd, xs, full, outs[i], amx_buf,
                  (float *)(amx_buf + (size_t)KB * 2048));
    _tile_release();
    if (full < M)
        for (int i = 0; i < n; i++)
            fs_group_rows(q4, act16, w, wd, wm, KB, g + i, (const int16_t *)xq + (int64_t)full * KB * QK,
                          xd + (int64_t)full * KB, xs + (int64_t)full * KB, M - full, outs[i] + (int64_t)full * QR, 0);
    return 1;
}
#endif
