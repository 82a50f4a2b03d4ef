// Paged-attention decode on CPU: one query token per sequence attends to its cached keys,
// read in place from the block pool (no gather copy, no padding). fp32 only.
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

static inline float dot(const float *a, const float *b, int d) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < d; i++) s += a[i] * b[i];
    return s;
}

void paged_decode_f32(const float *q, const float *kc, const float *vc, const int64_t *slots,
                      const int64_t *ctx, float *out, int B, int H, int KVH, int D, int Lmax,
                      float scale, int nthreads) {
    const int G = H / KVH;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int kh = 0; kh < KVH; kh++) {
            const int L = (int)ctx[b];
            const int64_t *sl = slots + (int64_t)b * Lmax;
            float *scores = (float *)malloc(sizeof(float) * (size_t)G * (size_t)(L > 0 ? L : 1));
            const float *qb = q + ((int64_t)b * H + (int64_t)kh * G) * D;
            // pass 1: scores of every key, for the G query heads sharing this KV head
            for (int t = 0; t < L; t++) {
                const float *k = kc + (sl[t] * KVH + kh) * D;
                for (int g = 0; g < G; g++) scores[g * L + t] = dot(qb + g * D, k, D) * scale;
            }
            for (int g = 0; g < G; g++) {
                float *s = scores + g * L, m = -INFINITY, sum = 0.f;
                for (int t = 0; t < L; t++) m = s[t] > m ? s[t] : m;
                for (int t = 0; t < L; t++) { s[t] = expf(s[t] - m); sum += s[t]; }
                const float inv = 1.f / sum;
                for (int t = 0; t < L; t++) s[t] *= inv;
            }
            // pass 2: weighted sum of values
            float *ob = out + ((int64_t)b * H + (int64_t)kh * G) * D;
            for (int i = 0; i < G * D; i++) ob[i] = 0.f;
            for (int t = 0; t < L; t++) {
                const float *v = vc + (sl[t] * KVH + kh) * D;
                for (int g = 0; g < G; g++) {
                    const float p = scores[g * L + t];
                    float *o = ob + g * D;
#pragma omp simd
                    for (int i = 0; i < D; i++) o[i] += p * v[i];
                }
            }
            free(scores);
        }
    }
}
