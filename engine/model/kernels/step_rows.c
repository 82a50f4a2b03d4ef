// The fused step's row phases: per token (norms, quantization) or per (token, KV head) (RoPE and K/V write, attention
// parts, their merge). A row's result depends on its own inputs only: a token gives the same bits alone, in any batch
// or chunk, or decoded.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "isa.h"
#include "step.h"

// x . x as 8 interleaved partial sums (value i into sum i % 8), added pairwise: the same bits scalar or 8 lanes, a
// chain an eighth as long
static float sum_squares(const float *x, int K) {
    float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int i = 0;
#if defined(__AVX2__)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= K; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    _mm256_storeu_ps(p, acc);
#endif
    for (; i < K; i++) p[i % 8] += x[i] * x[i];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

void task_norm(void *c, int b) {  // h = rmsnorm(x[b]) * w, quantized
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int K = m->hidden, KB = fs_kb(K);
    const float *x = m->x + (int64_t)b * K;
    float *h = m->h + (int64_t)b * K;
    const float ss = sum_squares(x, K);
    const float r = 1.f / sqrtf(ss / (float)K + m->eps);
    for (int i = 0; i < K; i++) h[i] = x[i] * r * s->norm_w[i];
    const size_t esz = m->act16 ? 2 : 1;
    fs_quantize_act(m->act16, h, 1, K, K, KB, m->xq + (size_t)b * KB * FS_QK * esz, m->xd + (int64_t)b * KB,
                    m->xs + (int64_t)b * KB);
}

void task_quant_attn(void *c, int b) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int K = m->H * m->D, KB = fs_kb(K);
    const size_t esz = m->act16 ? 2 : 1;
    fs_quantize_act(m->act16, m->attn + (int64_t)b * K, 1, K, K, KB, m->xq + (size_t)b * KB * FS_QK * esz,
                    m->xd + (int64_t)b * KB, m->xs + (int64_t)b * KB);
}


static void rope(float *v, const float *cs, const float *sn, int D) {  // v cos + roll(v, D/2) sin
    float tmp[512];
    const int half = D / 2;
#if defined(__AVX2__)
    if (half % 8 == 0) {  // 8 lanes per half: the same products and sums (no FMA)
        for (int i = 0; i < half; i += 8) {
            const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
            _mm256_storeu_ps(tmp + i, _mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(cs + i)),
                                                    _mm256_mul_ps(b, _mm256_loadu_ps(sn + i))));
            _mm256_storeu_ps(tmp + half + i, _mm256_add_ps(_mm256_mul_ps(b, _mm256_loadu_ps(cs + half + i)),
                                                           _mm256_mul_ps(a, _mm256_loadu_ps(sn + half + i))));
        }
        memcpy(v, tmp, sizeof(float) * (size_t)D);
        return;
    }
#endif
    for (int i = 0; i < D; i++) tmp[i] = v[i] * cs[i] + v[(i + half) % D] * sn[i];
    memcpy(v, tmp, sizeof(float) * (size_t)D);
}

static void store_row(uint8_t *dst, int kv_type, const float *src, int D) {
    if (kv_type == FS_KV_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)D);
    } else {
        uint16_t *d16 = (uint16_t *)dst;
        int i = 0;
#if defined(__F16C__) && defined(__AVX__)
        if (kv_type == FS_KV_F16)  // float_to_half's rounding, 8 at a time
            for (; i + 8 <= D; i += 8)
                _mm_storeu_si128((__m128i *)(d16 + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < D; i++) d16[i] = kv_type == FS_KV_BF16 ? float_to_bf16(src[i]) : float_to_half(src[i]);
    }
}

// Per (token, KV head): RoPE of the query heads and key, the K/V write. Before any attention: a chunk's tokens read
// each other's keys.
void task_rope_store(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int b = task / m->KVH, kh = task % m->KVH, D = m->D, G = m->H / m->KVH;
    float *row = m->qkv + (int64_t)b * (m->H + 2 * m->KVH) * D;
    float *q = row + (int64_t)kh * G * D, *k = row + (int64_t)(m->H + kh) * D, *v = row + (int64_t)(m->H + m->KVH + kh) * D;
    const float *cs = m->cos + s->pos[b] * D, *sn = m->sin + s->pos[b] * D;
    for (int g = 0; g < G; g++) rope(q + g * D, cs, sn, D);
    rope(k, cs, sn, D);
    const size_t esz = fs_kv_elem(s->kv_type), plane = (size_t)s->S * m->KVH * D * esz;
    uint8_t *kc = s->kv + (size_t)s->l * 2 * plane, *vc = kc + plane;
    const size_t at = ((size_t)s->slot[b] * m->KVH + kh) * D * esz;
    store_row(kc + at, s->kv_type, k, D);
    store_row(vc + at, s->kv_type, v, D);
}

// Per (token, KV head, part): attention over part p of the token's ctx[b] keys, in position order; the parts merged in
// order after.
void task_attend_part(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int P = s->att_parts, p = task % P, bk = task / P, b = bk / m->KVH, kh = bk % m->KVH, D = m->D;
    const int G = m->H / m->KVH, L = (int)s->ctx[b];
    if (p >= fs_attend_parts(L)) return;
    const float *q = m->qkv + (int64_t)b * (m->H + 2 * m->KVH) * D + (int64_t)kh * G * D;
    const size_t esz = fs_kv_elem(s->kv_type), plane = (size_t)s->S * m->KVH * D * esz;
    const uint8_t *kc = s->kv + (size_t)s->l * 2 * plane, *vc = kc + plane;
    const int64_t srow = s->slot_row ? s->slot_row[b] : b;
    const int t0 = p * FS_ATT_PART, t1 = t0 + FS_ATT_PART < L ? t0 + FS_ATT_PART : L;
    float stack_scores[8 * FS_ATT_PART];
    float *scores = G <= 8 ? stack_scores : (float *)malloc(sizeof(float) * (size_t)G * FS_ATT_PART);
    if (!scores) return;
    float *part = s->att + ((size_t)bk * P + p) * (size_t)G * (D + 2);
    // a chunk's later tokens re-read its first token's keys: no prefetch
    const int follows = s->slot_row && b > 0 && s->slot_row[b - 1] == srow;
    fs_attend_part(q, kc, vc, s->slots + srow * s->Lmax, t0, t1, m->KVH, kh, D, G, m->scale, s->kv_type, scores, part,
                   part + G * D, part + G * D + G, !follows);
    if (scores != stack_scores) free(scores);
}

void task_attend_combine(void *c, int bk) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int P = s->att_parts, b = bk / m->KVH, kh = bk % m->KVH, D = m->D, G = m->H / m->KVH;
    fs_attend_combine(fs_attend_parts((int)s->ctx[b]), G, D, s->att + (size_t)bk * P * G * (D + 2),
                      m->attn + (int64_t)b * m->H * D + (int64_t)kh * G * D);
}

