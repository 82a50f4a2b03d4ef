// Matmul tiles' shared pieces. A (group, block) tile is 16 rows x 32 values, row r's k..k+3 adjacent (one 512-bit load
// = 16 rows x 4 values):
// int8: w u8 [G][KB][8][16][4] = q + 128, q in -127..127; wd fp16 [G][KB][16]
// q4:   w u8 [G][KB][4][16][4], lo nibble q(k = 4j+i), hi nibble q(k = 16+4j+i) (GGUF Q4_1); wd, wm fp16 [G][KB][16]; w
// = wd q + wm
// Every variant: the same integer sums and float operations per output lane, in order: the same bits. Internal.
#ifndef FS_TILES_H
#define FS_TILES_H
#include <stdint.h>
#include <string.h>

#include "isa.h"
#include "parts.h"

#define QK FS_QK
#define QR FS_QR
#define MT 4  // activation rows per register tile

// Prefetch hint: the next `n` groups' weights, scales, mins per block into L2 while this tile computes. NULL: none.
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

static inline ahead_t ahead_of(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g, int ahead,
                        int n) {
    const int64_t tile_bytes = q4 ? 256 : 512, at = (int64_t)(g + ahead) * KB;
    const ahead_t a = {w + at * tile_bytes, wd + at * QR, wm ? wm + at * QR : NULL, n};
    return a;
}

// Whole tiles at height MT, the rest one row at a time (the height a constant: accumulators in registers); pf to the
// first tile only.
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

// The variant's tile (tiles_generic.c, tiles_avx2.c, tiles_avx512.c): activation rows t < mt <= MT x the group's 16
// rows, all K blocks -> out[t][r].
void fs_tile8(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int8_t *xq,
              const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf);
void fs_tile16(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int16_t *xq,
               const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf);
// group g, rows [0, M); ahead: the first row tile prefetches groups g + 2..
void fs_group_rows(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                   const void *xq, const float *xd, const int32_t *xs, int M, float *out, int ahead);
#if defined(FS_AVX512)
// groups g, g + 1 over rows [0, M - M % MT) on the two-group tiles; returns the rows done
int fs_tile_pairs(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                  const void *xq, const float *xd, const int32_t *xs, int M, float *out_g, float *out_g1);
#endif
#if defined(FS_AMX)
// q4 x int16 on AMX, groups g .. g + n - 1; 0: not taken (the caller's path)
int fs_amx_groups(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g, int n,
                  const void *xq, const float *xd, const int32_t *xs, int M, float **outs);
#endif
#endif
