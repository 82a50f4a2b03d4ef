// The fused step's matmul phases: a projection's weight groups (QKV, O, down, LM head) and the FFN's gate and up groups
// with silu(gate) * up, quantized. The GEMM's tiles: a row's outputs are the torch path's quantized matmuls'.
#include <math.h>
#include <string.h>

#include "isa.h"
#include "simd_exp.h"
#include "step.h"

void fs_store_group(step_t *s, const qmat_t *w, int g, const float *out) {  // out [B][16] into y (+ bias)
    const int rows = w->n - g * FS_QR < FS_QR ? w->n - g * FS_QR : FS_QR;
    const float *bias = w->bias ? w->bias + g * FS_QR : NULL;
    for (int t = 0; t < s->B; t++) {  // a branch-free loop per case (vectorised, same bits)
        float *yr = s->y + (int64_t)t * s->ldy + g * FS_QR;
        const float *o = out + t * FS_QR;
        if (s->raw)
            memcpy(yr, o, sizeof(float) * (size_t)rows);
        else if (bias && s->accumulate)
            for (int r = 0; r < rows; r++) yr[r] = yr[r] + (o[r] + bias[r]);
        else if (bias)
            for (int r = 0; r < rows; r++) yr[r] = o[r] + bias[r];
        else if (s->accumulate)
            for (int r = 0; r < rows; r++) yr[r] = yr[r] + o[r];
        else if (rows == FS_QR)  // a constant size: one vector move
            memcpy(yr, o, sizeof(float) * FS_QR);
        else
            memcpy(yr, o, sizeof(float) * (size_t)rows);
    }
}


void task_matmul(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const qmat_t *w = s->mat;
    const int KB = fs_kb(w->k);
    float out[2][FS_MAX_BATCH * FS_QR];  // FS_MAX_BATCH tokens per call at most
    int g0, g1;
    task_span(task, s->groups_per_task, s->ngroups, 0, &g0, &g1);
    for (int g = g0; g < g1; g += 2) {
        if (g + 1 < g1) {  // two groups share each activation load
            fs_qgemm_group2(w->q4, m->act16, w->w, w->wd, w->wm, KB, g, s->xq, s->xd, s->xs, s->B, out[0], out[1]);
            fs_store_group(s, w, g, out[0]);
            fs_store_group(s, w, g + 1, out[1]);
        } else {
            fs_qgemm_group(w->q4, m->act16, w->w, w->wd, w->wm, KB, g, s->xq, s->xd, s->xs, s->B, out[0]);
            fs_store_group(s, w, g, out[0]);
        }
        fs_bump(s->beat);
    }
}

// a[r] = silu(gate[r]) * up[r] = gate / (1 + e^-gate) * up for r < live, else 0. The FFN width is a multiple of 16, so
// vector chunks are all live or all not.
static inline void silu_mul(const float *gate, const float *up, int live, float *a) {
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.f), sign = _mm512_set1_ps(-0.f);
    for (int r = 0; r < FS_QK; r += 16) {
        if (r + 16 > live) {
            _mm512_storeu_ps(a + r, _mm512_setzero_ps());
            continue;
        }
        const __m512 g = _mm512_loadu_ps(gate + r);
        const __m512i neg = _mm512_xor_si512(_mm512_castps_si512(g), _mm512_castps_si512(sign));  // -g, as fs_exp8's
        const __m512 e = fs_exp16(_mm512_castsi512_ps(neg));
        _mm512_storeu_ps(a + r, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + r)));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
    for (int r = 0; r < FS_QK; r += 8) {
        if (r + 8 > live) {
            _mm256_storeu_ps(a + r, _mm256_setzero_ps());
            continue;
        }
        const __m256 g = _mm256_loadu_ps(gate + r);
        const __m256 e = fs_exp8(_mm256_xor_ps(g, sign));
        _mm256_storeu_ps(a + r, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + r)));
    }
#else
    for (int r = 0; r < FS_QK; r++) a[r] = r < live ? gate[r] / (1.f + expf(-gate[r])) * up[r] : 0.f;
#endif
}

// channels 16g..16g+31 of the gate (base 0) or up (base I/16) half -> out_g, out_g1 [B][16]; 0 at or past I
static void ffn_groups(step_t *s, int base, int g, float *out_g, float *out_g1) {
    const qmat_t *w = s->mat;
    model_t *m = s->m;
    const int KB = fs_kb(w->k), I = m->I;
    if ((g + 1) * FS_QR < I) {
        fs_qgemm_group2(w->q4, m->act16, w->w, w->wd, w->wm, KB, base + g, s->xq, s->xd, s->xs, s->B, out_g, out_g1);
        return;
    }
    if (g * FS_QR < I)
        fs_qgemm_group(w->q4, m->act16, w->w, w->wd, w->wm, KB, base + g, s->xq, s->xd, s->xs, s->B, out_g);
    else
        memset(out_g, 0, sizeof(float) * FS_QR * (size_t)s->B);
    memset(out_g1, 0, sizeof(float) * FS_QR * (size_t)s->B);
}

// FFN blocks j0..j1-1 (32 channels each): every gate group of the range (contiguous in gate_up) into act, then per
// block its up groups, silu(gate) * up in place, quantized as block j of the down input. Each half is one run of
// weights.
void task_mlp(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int I = m->I, KBI = fs_kb(I), up0 = I / FS_QR;
    int j0, j1;
    task_span(task, s->mlp_blocks, KBI, 0, &j0, &j1);
    float out[2][FS_MAX_BATCH * FS_QR];
    for (int j = j0; j < j1; j++) {  // gate groups 2j, 2j + 1
        ffn_groups(s, 0, 2 * j, out[0], out[1]);
        for (int t = 0; t < s->B; t++)
            for (int h = 0; h < 2; h++)
                memcpy(s->act + (int64_t)t * KBI * FS_QK + j * FS_QK + h * FS_QR, out[h] + t * FS_QR, sizeof(float) * FS_QR);
        fs_bump(s->beat);
    }
    const size_t esz = m->act16 ? 2 : 1;
    for (int j = j0; j < j1; j++) {
        ffn_groups(s, up0, 2 * j, out[0], out[1]);
        for (int t = 0; t < s->B; t++) {
            float up[FS_QK];
            memcpy(up, out[0] + t * FS_QR, sizeof(float) * FS_QR);
            memcpy(up + FS_QR, out[1] + t * FS_QR, sizeof(float) * FS_QR);
            float *a = s->act + (int64_t)t * KBI * FS_QK + j * FS_QK;  // gate, overwritten lane by lane
            silu_mul(a, up, I - j * FS_QK, a);
            const int64_t blk = (int64_t)t * KBI + j;
            fs_quantize_act(m->act16, a, 1, FS_QK, FS_QK, 1, s->aq + (size_t)blk * FS_QK * esz, s->ad + blk, s->as + blk);
        }
        fs_bump(s->beat);
    }
}

