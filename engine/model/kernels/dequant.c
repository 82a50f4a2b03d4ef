// Dequantization (tiles.h's layout) to dense fp32: w = d q (int8) or d q + m (q4), dequantize()'s values in
// engine/model/quant.py. For prefill-sized batches (a dense GEMM on them) and a tied LM head read as the embedding
// table.
#include "half.h"
#include "pool.h"
#include "tiles.h"

// row r's 32 values of a tile: bytes gathered into k order, widened (mul, then add: no FMA)
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
// dequant_row 8 lanes at a time: the same products and sums
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
        for (int h = 0; h < 2; h++) {  // bytes 16h..16h+15: quads 4h..4h+3
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

// stored row 16g + r -> row [K]
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

void fs_dequant_group(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int N, int K, int g,
                      float *out) {
    for (int r = 0; r < QR && g * QR + r < N; r++) dequant_one_row(q4, w, wd, wm, K, g, r, out + (int64_t)(g * QR + r) * K);
}

void fs_dequant_rows(const fs_qmat *w, int count, const int64_t *ids, float *out) {
    const int q4 = w->format == FS_W_Q4;
    for (int i = 0; i < count; i++)
        dequant_one_row(q4, w->w, w->wd, w->wm, w->k, (int)(ids[i] / QR), (int)(ids[i] % QR), out + (int64_t)i * w->k);
}

// groups of 16 rows claimed from the pool
typedef struct {
    int q4, N, K, per, ngroups;
    const uint8_t *w;
    const uint16_t *wd, *wm;
    float *out;
} dequant_t;

static void task_dequant(void *c, int task) {
    dequant_t *d = (dequant_t *)c;
    int g0, g1;
    task_span(task, d->per, d->ngroups, 0, &g0, &g1);
    for (int g = g0; g < g1; g++) fs_dequant_group(d->q4, d->w, d->wd, d->wm, d->N, d->K, g, d->out);
}

void fs_dequant(const fs_qmat *w, float *out, int nthreads) {
    dequant_t d = {.q4 = w->format == FS_W_Q4, .N = w->n, .K = w->k, .w = w->w, .wd = w->wd, .wm = w->wm, .out = out,
                   .ngroups = (w->n + FS_QR - 1) / FS_QR};
    nthreads = nthreads < 1 ? 1 : nthreads;
    fs_note_caller_cpu();
    const int per = d.ngroups / (nthreads * FS_CLAIMS);
    d.per = per < 1 ? 1 : per;
    fs_parallel_for(nthreads, task_dequant, &d, (d.ngroups + d.per - 1) / d.per);
}
