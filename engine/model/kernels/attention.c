// Attention over a paged K/V pool, read in place (no gather, no padding); 16-bit rows widened in registers.
// q, out [B, H, D]; kc, vc [S, KVH, D] one layer's pool of kv_type; slots [B, Lmax] (t < ctx[b] read); ctx [B].
// Query head h reads KV head h / (H / KVH), as HF's repeat_kv.
#include <math.h>
#include <stdlib.h>

#include "attention.h"
#include "half.h"
#include "pool.h"

static inline float dot_f32(const float *a, const float *b, int d) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < d; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy_f32(float *o, float p, const float *v, int d) {
#pragma omp simd
    for (int i = 0; i < d; i++) o[i] += p * v[i];
}

#if defined(PD_AVX512)
// row[i..i+16) as fp32, lanes past d masked off
static inline __m512 load16(const uint16_t *row, int kv_type, int i, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + i);
    if (kv_type == FS_KV_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

static inline __mmask16 lanes(int i, int d) { return d - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (d - i)) - 1); }

static float dot_16(const float *q, const uint16_t *k, int kv_type, int d) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
        const __mmask16 m = lanes(i, d);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load16(k, kv_type, i, m), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static void axpy_16(float *o, float p, const uint16_t *v, int kv_type, int d) {
    const __m512 pv = _mm512_set1_ps(p);
    for (int i = 0; i < d; i += 16) {
        const __mmask16 m = lanes(i, d);
        _mm512_mask_storeu_ps(o + i, m, _mm512_fmadd_ps(pv, load16(v, kv_type, i, m), _mm512_maskz_loadu_ps(m, o + i)));
    }
}
#elif defined(PD_AVX2)
static inline __m256 load8(const uint16_t *row, int kv_type, int i) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(row + i));
    if (kv_type == FS_KV_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

static inline float widen(uint16_t h, int kv_type) { return kv_type == FS_KV_BF16 ? bf16_to_float(h) : half_to_float(h); }

static float dot_16(const float *q, const uint16_t *k, int kv_type, int d) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= d; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, kv_type, i), acc);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    float s = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
    for (; i < d; i++) s += q[i] * widen(k[i], kv_type);
    return s;
}

static void axpy_16(float *o, float p, const uint16_t *v, int kv_type, int d) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= d; i += 8) _mm256_storeu_ps(o + i, _mm256_fmadd_ps(pv, load8(v, kv_type, i), _mm256_loadu_ps(o + i)));
    for (; i < d; i++) o[i] += p * widen(v[i], kv_type);
}
#else
static float dot_16(const float *q, const uint16_t *k, int kv_type, int d) {
    float s = 0.f;
    if (kv_type == FS_KV_BF16) {
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < d; i++) s += q[i] * bf16_to_float(k[i]);
    } else {
        for (int i = 0; i < d; i++) s += q[i] * half_to_float(k[i]);
    }
    return s;
}

static void axpy_16(float *o, float p, const uint16_t *v, int kv_type, int d) {
    if (kv_type == FS_KV_BF16) {
#pragma omp simd
        for (int i = 0; i < d; i++) o[i] += p * bf16_to_float(v[i]);
    } else {
        for (int i = 0; i < d; i++) o[i] += p * half_to_float(v[i]);
    }
}
#endif

static inline const void *row_at(const void *pool, int kv_type, int64_t slot, int KVH, int kh, int D) {
    const int64_t idx = (slot * KVH + kh) * D;
    return kv_type == FS_KV_F32 ? (const void *)((const float *)pool + idx) : (const void *)((const uint16_t *)pool + idx);
}

static inline float dot_kv(const float *q, const void *k, int kv_type, int d) {
    return kv_type == FS_KV_F32 ? dot_f32(q, (const float *)k, d) : dot_16(q, (const uint16_t *)k, kv_type, d);
}

static inline void axpy_kv(float *o, float p, const void *v, int kv_type, int d) {
    if (kv_type == FS_KV_F32) axpy_f32(o, p, (const float *)v, d);
    else axpy_16(o, p, (const uint16_t *)v, kv_type, d);
}

// One query's G heads over keys [t0, t1): scores, m[g] = max, s[g] = sum exp(score - m), o[g] = sum exp(score - m) v.
// Keys are cut into parts of FS_ATT_PART from key 0 (depends on L only); fs_attend_combine merges parts in order.
void fs_attend_portable(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                        int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s) {
    const int n = t1 - t0;
    for (int t = 0; t < n; t++) {
        const void *k = row_at(kc, kv_type, sl[t0 + t], KVH, kh, D);
        for (int g = 0; g < G; g++) scores[g * n + t] = dot_kv(qb + g * D, k, kv_type, D) * scale;
    }
    for (int g = 0; g < G; g++) {
        float *sc = scores + g * n, mx = -INFINITY, sum = 0.f;
        for (int t = 0; t < n; t++) mx = sc[t] > mx ? sc[t] : mx;
        for (int t = 0; t < n; t++) { sc[t] = expf(sc[t] - mx); sum += sc[t]; }
        m[g] = mx, s[g] = sum;
    }
    for (int i = 0; i < G * D; i++) o[i] = 0.f;
    for (int t = 0; t < n; t++) {
        const void *v = row_at(vc, kv_type, sl[t0 + t], KVH, kh, D);
        for (int g = 0; g < G; g++) axpy_kv(o + g * D, scores[g * n + t], v, kv_type, D);
    }
}

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))  // else attention_x86.c
void fs_attend_part(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                    int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                    int prefetch) {
    (void)prefetch;
    fs_attend_portable(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, o, m, s);
}
#endif

// ob [G, D] = parts merged in order, each rescaled from its max to the overall one; part p: o [G D], m [G], s [G].
void fs_attend_combine(int P, int G, int D, const float *parts, float *ob) {
    const int64_t stride = (int64_t)G * (D + 2);
    if (P == 1) {  // w = 1: the loop's values (-0 stays -0; quantization maps it to 0)
        for (int g = 0; g < G; g++) {
            const float inv = 1.f / parts[G * D + G + g], *op = parts + g * D;
            float *out = ob + g * D;
            for (int i = 0; i < D; i++) out[i] = op[i] * inv;
        }
        return;
    }
    for (int g = 0; g < G; g++) {
        float mx = -INFINITY;
        for (int p = 0; p < P; p++) {
            const float mp = parts[p * stride + G * D + g];
            mx = mp > mx ? mp : mx;
        }
        float sum = 0.f;
        float *out = ob + g * D;
        for (int i = 0; i < D; i++) out[i] = 0.f;
        for (int p = 0; p < P; p++) {
            const float *part = parts + p * stride;
            const float w = P == 1 ? 1.f : expf(part[G * D + g] - mx);
            sum += w * part[G * D + G + g];
            const float *op = part + g * D;
            for (int i = 0; i < D; i++) out[i] += w * op[i];
        }
        const float inv = 1.f / sum;
        for (int i = 0; i < D; i++) out[i] *= inv;
    }
}

int fs_attend_parts(int L) { return L <= 0 ? 1 : (L + FS_ATT_PART - 1) / FS_ATT_PART; }

void fs_attend(const float *qb, const void *kc, const void *vc, const int64_t *sl, int L, int KVH, int kh, int D,
               int G, float scale, int kv_type, float *scores, float *ob) {
    // scores: G * min(L, FS_ATT_PART) floats
    const int P = fs_attend_parts(L);
    float stack[16384];  // P * G * (D + 2) floats: 8,192 keys of 8 heads of 64
    const size_t need = (size_t)P * (size_t)G * (size_t)(D + 2);
    float *buf = need <= sizeof(stack) / sizeof(float) ? stack : (float *)malloc(sizeof(float) * need);
    if (!buf) return;
    for (int p = 0; p < P; p++) {
        const int t0 = p * FS_ATT_PART, t1 = t0 + FS_ATT_PART < L ? t0 + FS_ATT_PART : L;
        float *part = buf + (size_t)p * G * (D + 2);
        fs_attend_part(qb, kc, vc, sl, t0, t1, KVH, kh, D, G, scale, kv_type, scores, part, part + G * D,
                       part + G * D + G, 1);
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // fs_attend_part (another file) writes the parts
    fs_attend_combine(P, G, D, buf, ob);
#pragma GCC diagnostic pop
    if (buf != stack) free(buf);
}

typedef struct {
    const float *q;
    const void *kc, *vc;
    const int64_t *slots, *ctx;
    float *out;
    int H, KVH, D, Lmax, kv_type;
    float scale;
} paged_t;

static void task_paged(void *c, int task) {  // one (sequence, KV head)
    const paged_t *p = (const paged_t *)c;
    const int b = task / p->KVH, kh = task % p->KVH, G = p->H / p->KVH, D = p->D;
    const int L = (int)p->ctx[b];
    const int part = L < FS_ATT_PART ? (L > 0 ? L : 1) : FS_ATT_PART;
    float *scores = (float *)malloc(sizeof(float) * (size_t)G * (size_t)part);
    fs_attend(p->q + ((int64_t)b * p->H + (int64_t)kh * G) * D, p->kc, p->vc, p->slots + (int64_t)b * p->Lmax, L,
              p->KVH, kh, D, G, p->scale, p->kv_type, scores, p->out + ((int64_t)b * p->H + (int64_t)kh * G) * D);
    free(scores);
}

void fs_paged_decode(const float *q, const void *kc, const void *vc, const int64_t *slots, const int64_t *ctx,
                     float *out, int B, int H, int KVH, int D, int Lmax, float scale, int nthreads, int kv_type) {
    paged_t p = {.q = q, .kc = kc, .vc = vc, .slots = slots, .ctx = ctx, .out = out, .H = H, .KVH = KVH, .D = D,
                 .Lmax = Lmax, .kv_type = kv_type, .scale = scale};
    fs_note_caller_cpu();
    fs_parallel_for(nthreads, task_paged, &p, B * KVH);
}
