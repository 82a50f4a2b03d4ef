// The matmul tiles' shared pieces. One (group, block) tile of the weights holds 16 rows x 32 values, row r's values
// k..k+3 adjacent, so one 512-bit load is 16 rows x 4 values:
//   int8: w u8 [G][KB][8][16][4], value q + 128 (q in -127..127); wd fp16 [G][KB][16]
//   q4:   w u8 [G][KB][4][16][4], low nibble = q at k = 4j+i, high nibble = q at k = 16+4j+i (GGUF Q4_1's order);
//         wd, wm fp16 [G][KB][16]; value = wd q + wm
// Every variant does the same integer sums and the same float operations per output lane, in the same order: the
// same bits on every ISA. Internal.
#ifndef FS_TILES_H
#define FS_TILES_H
#include <stdint.h>
#include <string.h>

#include "isa.h"
#include "parts.h"

#define QK FS_QK
#define QR FS_QR
#define MT 4  // activation rows per register tile

// While a tile works on its group(s) it asks for the bytes of the groups after them into L2 (weights, scales, mins;
// `n` groups per block), so the next tile's loads overlap this one's arithmetic. NULL: nothing asked. A hint only.
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
static inline ahead_t ahead_of(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g, int ahead,
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


static inline int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline int32_t load2x16(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

// One group's tile for the variant (tiles_generic.c, tiles_avx2.c or tiles_avx512.c): rows t < mt <= MT of the
// activations against the group's 16 rows, all K blocks, into out[t][r]; int8 (tile8) or int16 (tile16) activations.
void fs_tile8(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int8_t *xq,
              const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf);
void fs_tile16(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int16_t *xq,
               const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf);
// Group g's rows [0, M) through fs_tile8/16; ahead: its first row tile prefetches the groups two past it.
void fs_group_rows(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                   const void *xq, const float *xd, const int32_t *xs, int M, float *out, int ahead);
#if defined(FS_AVX512)
// Groups g, g + 1 over rows [0, M - M % MT) on the two-group tiles; returns the rows done.
int fs_tile_pairs(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                  const void *xq, const float *xd, const int32_t *xs, int M, float *out_g, float *out_g1);
#endif
#if defined(FS_AMX)
// Groups g .. g + n - 1 of q4 weights x int16 activations on AMX; 0 when it did nothing (the caller's path then).
int fs_amx_groups(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g, int n,
                  const void *xq, const float *xd, const int32_t *xs, int M, float **outs);
#endif
#endif
