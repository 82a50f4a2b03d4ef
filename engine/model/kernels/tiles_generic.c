// Portable tiles (generic): per output, each block's integer dot, then acc = fma(sum * wd, d, acc) and, q4, acc =
// fma(wm, d * sum(xq), acc): the float operations every SIMD tile repeats per lane, in this order.
#include <math.h>

#include "half.h"
#include "tiles.h"

#if !defined(FS_AVX2) && !defined(FS_AVX512)
void fs_tile8(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int8_t *xq,
              const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
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
}

// int16 quads stored (0, 2, 1, 3); int8 weights' bytes less 128 sum(xq)
void fs_tile16(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int16_t *xq,
               const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
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
}
#endif
