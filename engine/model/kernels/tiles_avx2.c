// AVX2 tiles (avx2): 8 rows per vector, rows 8h..8h+7 in half h. No VNNI: int8 weights via maddubs (|q| <= 127: no
// int16 overflow), int16 activations via madd.
#include "tiles.h"

#if defined(FS_AVX2)
static inline __attribute__((always_inline)) void tile8_avx2(int q4, const uint8_t *w, const uint16_t *wd,
                                                             const uint16_t *wm, int KB, const int8_t *xq,
                                                             const float *xd, const int32_t *xs, const int mt,
                                                             float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    for (int h = 0; h < 2; h++) {  // rows 8h..8h+7: 32 bytes of each 64-byte quad
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
                        // u4 x s8 pairs: 2 * 15 * 127 * 2 < 32767
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
                    // maddubs: |q| x sign-adjusted x
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

// int16 activations; a row's operations are the same at height 1 or MT.
static inline __attribute__((always_inline)) void tile16_avx2(int q4, const uint8_t *w, const uint16_t *wd,
                                                              const uint16_t *wm, int KB, const int16_t *xq,
                                                              const float *xd, const int32_t *xs, const int mt,
                                                              float out[MT][QR], const ahead_t *pf) {
    const int tile_bytes = q4 ? 256 : 512;
    const __m256i even = _mm256_set1_epi32(0x00ff00ff), nib = _mm256_set1_epi16(0x000f);
    const __m256i nib16 = _mm256_set1_epi16(0x00f0), nib256 = _mm256_set1_epi16(0x0f00);
    for (int h = 0; h < 2; h++) {  // rows 8h..8h+7: 32 bytes of each 64-byte quad
        __m256 facc[MT];
        for (int t = 0; t < mt; t++) facc[t] = _mm256_setzero_ps();
        for (int b = 0; b < KB; b++) {
            const uint8_t *wt = w + (int64_t)b * tile_bytes + 32 * h;
            if (h == 0) prefetch_ahead(pf, b, tile_bytes);
            const __m256 wdv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + b * QR + 8 * h)));
            __m256i iacc[MT];
            for (int t = 0; t < mt; t++) iacc[t] = _mm256_setzero_si256();
            const int quads = q4 ? 4 : 8;
            if (q4 && mt == 1) {  // one row: nibbles 1, 2 in place (x16, x256), as tile16_avx512
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
            } else  // each nibble shifted down
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

void fs_tile8(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int8_t *xq,
              const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    BY_HEIGHT(tile8_avx2);
}

void fs_tile16(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, const int16_t *xq,
               const float *xd, const int32_t *xs, int mt, float out[MT][QR], const ahead_t *pf) {
    if (q4 && mt == 1) {  // q4 constant for height 1 only (gcc's prefill tiles were slower with it)
        const int q4 = 1;
        BY_HEIGHT(tile16_avx2);
    } else {
        BY_HEIGHT(tile16_avx2);
    }
}
#endif
