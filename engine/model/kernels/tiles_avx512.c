// AVX-512 tiles (avx512, amx): 16 rows per vector; dpbusd (int8 x) or dpwssd (int16 x) per 4 values x 16 rows vs
// broadcast activations. Height 1 (decode) or MT (prefill) is a constant: accumulators in registers. A block's dot may
// be split over accumulators (exact in any order).
#include "tiles.h"

#if defined(FS_AVX512)
// Block end: per row sum (int8 weights: less 128 sum(xq)) -> acc = fma(sum * wd, d, acc); q4: acc = fma(wm, d *
// sum(xq), acc).
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

// na accumulators per row summed, then block_end_avx512
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

// int8 activations: dpbusd u8 w x s8 x, 4 products per lane; na = 4 (one row) or 2 accumulators per row.
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
            for (int j = 0; j < 4; j++) {  // lo: k 4j.., hi: k 16+4j..
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

// Two groups x MT rows, int8 activations: each broadcast quad feeds both groups. tile8_avx512's sums and order.
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

// int16 activations (quads stored 0, 2, 1, 3): (w0, w2) = lane & 0x00ff00ff, (w1, w3) = lane >> 8, dpwssd with a
// broadcast pair. na accumulators per row: more loads in flight when weights stream from memory.
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
            if (q4 && mt == 1) {  // nibbles 1, 2 in place (x16, x256), scaled back below
                pa = _mm512_and_si512(v, nib);
                pb = _mm512_and_si512(v, nib256);
                ha = _mm512_and_si512(v, nib16);
                hb = _mm512_srli_epi16(v, 12);
            } else if (q4) {  // lo: k 4j.., hi: k 16+4j..
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
                // q4: a quad's products spread over the accumulators; int8: alternate by quad parity
                const int a0 = q4 ? 0 : (2 * j) % na, a1 = q4 ? 1 % na : (2 * j + 1) % na;
                iacc[t][a0] = _mm512_dpwssd_epi32(iacc[t][a0], pa, _mm512_set1_epi32(load2x16(xb + 4 * j)));
                iacc[t][a1] = _mm512_dpwssd_epi32(iacc[t][a1], pb, _mm512_set1_epi32(load2x16(xb + 4 * j + 2)));
                if (q4) {
                    iacc[t][2 % na] = _mm512_dpwssd_epi32(iacc[t][2 % na], ha, _mm512_set1_epi32(load2x16(xb + 16 + 4 * j)));
                    iacc[t][3 % na] = _mm512_dpwssd_epi32(iacc[t][3 % na], hb, _mm512_set1_epi32(load2x16(xb + 18 + 4 * j)));
                }
            }
        }
        if (q4 && mt == 1) {  // exact: 8 products per lane, |x| <= 32767, fits
            iacc[0][1] = _mm512_srai_epi32(iacc[0][1], 8);
            iacc[0][2] = _mm512_srai_epi32(iacc[0][2], 4);
        }
        block_end_rows_avx512(q4, b, KB, wd, wm, xd, xs, mt, na, iacc, facc);
    }
    for (int t = 0; t < mt; t++) _mm512_storeu_ps(out[t], facc[t]);
}

// Two groups x MT rows, int16 activations: each broadcast pair feeds both groups. tile16_avx512's sums and order.
static inline __attribute__((always_inline)) void tile16x2_avx512(int q4, const uint8_t *wa, const uint16_t *wda,
                                                                  const uint16_t *wma, const uint8_t *wb,
                                                                  const uint16_t *wdb, const uint16_t *wmb, int KB,
                                                                  const int16_t *xq, const float *xd,
                                                                  const int32_t *xs, float outa[MT][QR],
                                                                  float outb[MT][QR], const ahead_t *pf) {
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
                int xo;  // the activation pair this part meets
                if (q4) {  // (0, 2), (1, 3) of each quad; lo: k 4j.., hi: k 16+4j..
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

void fs_tile8(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int8_t *xq,
              const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    BY_HEIGHT(tile8_avx512);
}

void fs_tile16(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int16_t *xq,
               const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    // q4 a constant per copy: no branch in the block loop
    if (q4) { const int q4 = 1; BY_HEIGHT(tile16_avx512); } else { const int q4 = 0; BY_HEIGHT(tile16_avx512); }
}

int fs_tile_pairs(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                  const void *xq, const float *xd, const int32_t *xs, int M, float *out_g, float *out_g1) {
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
        // formats constant per call: no branch in the inlined tile
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
    return full;
}
#endif
