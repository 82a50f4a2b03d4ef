// Quantized matmul drivers: y[M, N] (row stride ldy) = x[M, K] @ W^T (+ bias), W in tiles.h's layout. Activations
// quantized per block (quant_act.c), then groups of 16 weight rows through the variant's tiles. fs_qgemm pairs groups
// (AMX where built); fs_qgemm_ref takes one group at a time: the reference the tests hold the paired and AMX paths to,
// bit for bit.
#include <stdlib.h>

#include "pool.h"
#include "tiles.h"

// ahead: the first row tile prefetches groups g + 2.. (the pair after a pair)
void fs_group_rows(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                   const void *xq, const float *xd, const int32_t *xs, int M, float *out, int ahead) {
    const int64_t tile_bytes = q4 ? 256 : 512;
    const uint8_t *wg = w + (int64_t)g * KB * tile_bytes;
    const uint16_t *wdg = wd + (int64_t)g * KB * QR, *wmg = wm ? wm + (int64_t)g * KB * QR : NULL;
    const ahead_t next = ahead_of(q4, w, wd, wm, KB, g, 2, 1);
    float tile[MT][QR];
    for (int m0 = 0; m0 < M; m0 += MT) {
        const int mt = M - m0 < MT ? M - m0 : MT;
        const int64_t xo = (int64_t)m0 * KB * QK;
        const ahead_t *pf = ahead && m0 == 0 ? &next : NULL;
        if (act16)
            fs_tile16(q4, wg, wdg, wmg, KB, (const int16_t *)xq + xo, xd + (int64_t)m0 * KB, xs + (int64_t)m0 * KB,
                      mt, tile, pf);
        else
            fs_tile8(q4, wg, wdg, wmg, KB, (const int8_t *)xq + xo, xd + (int64_t)m0 * KB, xs + (int64_t)m0 * KB,
                     mt, tile, pf);
        memcpy(out + (int64_t)m0 * QR, tile, sizeof(float) * QR * (size_t)mt);
    }
}

void fs_qgemm_group(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                    const void *xq, const float *xd, const int32_t *xs, int M, float *out) {
#if defined(FS_AMX)
    if (fs_amx_groups(q4, act16, w, wd, wm, KB, g, 1, xq, xd, xs, M, &out)) return;
#endif
    fs_group_rows(q4, act16, w, wd, wm, KB, g, xq, xd, xs, M, out, 1);
}

void fs_qgemm_group2(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                     const void *xq, const float *xd, const int32_t *xs, int M, float *out_g, float *out_g1) {
#if defined(FS_AMX)
    float *outs[2] = {out_g, out_g1};
    if (fs_amx_groups(q4, act16, w, wd, wm, KB, g, 2, xq, xd, xs, M, outs)) return;
#endif
#if defined(FS_AVX512)
    if (M >= MT) {  // two-group tiles over whole row tiles, the rest one group at a time
        const int full = fs_tile_pairs(q4, act16, w, wd, wm, KB, g, xq, xd, xs, M, out_g, out_g1);
        if (full == M) return;
        const int64_t xo = (int64_t)full * (act16 ? 2 : 1) * KB * QK;
        fs_group_rows(q4, act16, w, wd, wm, KB, g, (const uint8_t *)xq + xo, xd + (int64_t)full * KB,
                      xs + (int64_t)full * KB, M - full, out_g + (int64_t)full * QR, 0);
        fs_group_rows(q4, act16, w, wd, wm, KB, g + 1, (const uint8_t *)xq + xo, xd + (int64_t)full * KB,
                      xs + (int64_t)full * KB, M - full, out_g1 + (int64_t)full * QR, 0);
        return;
    }
#endif
    fs_qgemm_group(q4, act16, w, wd, wm, KB, g, xq, xd, xs, M, out_g);
    fs_qgemm_group(q4, act16, w, wd, wm, KB, g + 1, xq, xd, xs, M, out_g1);
}

typedef struct {
    int q4, act16, M, K, ldx, N, ldy, KB, groups_per_task, ngroups;
    const float *x, *bias;
    const uint8_t *w;
    const uint16_t *wd, *wm;
    uint8_t *xq;
    float *xd, *y;
    int32_t *xs;
} gemm_t;

static void task_gemm_quant(void *c, int m) {
    gemm_t *g = (gemm_t *)c;
    const size_t esz = g->act16 ? 2 : 1;
    fs_quantize_act(g->act16, g->x + (int64_t)m * g->ldx, 1, g->K, g->ldx, g->KB,
                    g->xq + (size_t)m * g->KB * FS_QK * esz, g->xd + (int64_t)m * g->KB, g->xs + (int64_t)m * g->KB);
}

static void task_gemm_groups(void *c, int task) {
    gemm_t *g = (gemm_t *)c;
    const size_t esz = g->act16 ? 2 : 1;
    float out[2][64 * FS_QR];
    int g0, g1;
    task_span(task, g->groups_per_task, g->ngroups, 0, &g0, &g1);
    for (int m0 = 0; m0 < g->M; m0 += 64) {  // 64 rows at a time: the group's weights stay in cache
        const int mt = g->M - m0 < 64 ? g->M - m0 : 64;
        const uint8_t *xq = g->xq + (size_t)m0 * g->KB * FS_QK * esz;
        const float *xd = g->xd + (int64_t)m0 * g->KB;
        const int32_t *xs = g->xs + (int64_t)m0 * g->KB;
        for (int gi = g0; gi < g1; gi += 2) {
            const int pair = gi + 1 < g1;
            if (pair)
                fs_qgemm_group2(g->q4, g->act16, g->w, g->wd, g->wm, g->KB, gi, xq, xd, xs, mt, out[0], out[1]);
            else
                fs_qgemm_group(g->q4, g->act16, g->w, g->wd, g->wm, g->KB, gi, xq, xd, xs, mt, out[0]);
            for (int h = 0; h <= pair; h++) {
                const int gg = gi + h, rows = g->N - gg * FS_QR < FS_QR ? g->N - gg * FS_QR : FS_QR;
                for (int t = 0; t < mt; t++) {
                    float *yr = g->y + (int64_t)(m0 + t) * g->ldy + gg * FS_QR;
                    const float *o = out[h] + t * FS_QR;
                    for (int r = 0; r < rows; r++) yr[r] = g->bias ? o[r] + g->bias[gg * FS_QR + r] : o[r];
                }
            }
        }
    }
}

static int gemm_buffers(gemm_t *g) {
    g->xq = (uint8_t *)malloc((size_t)g->M * g->KB * FS_QK * (g->act16 ? 2 : 1));
    g->xd = (float *)malloc(sizeof(float) * (size_t)g->M * g->KB);
    g->xs = (int32_t *)malloc(sizeof(int32_t) * (size_t)g->M * g->KB);
    if (g->xq && g->xd && g->xs) return 1;
    free(g->xq), free(g->xd), free(g->xs);
    return 0;
}

static gemm_t gemm_of(const fs_qmat *w, int act16, const float *x, int M, int ldx, float *y, int ldy) {
    const gemm_t g = {.q4 = w->format == FS_W_Q4, .act16 = act16, .M = M, .K = w->k, .ldx = ldx, .N = w->n,
                      .ldy = ldy, .KB = fs_kb(w->k), .x = x, .bias = w->bias, .w = w->w, .wd = w->wd, .wm = w->wm,
                      .y = y};
    return g;
}

int fs_qgemm(const fs_qmat *w, int act16, const float *x, int M, int ldx, float *y, int ldy, int nthreads) {
    gemm_t g = gemm_of(w, act16, x, M, ldx, y, ldy);
    if (!gemm_buffers(&g)) return FS_ERR_NOMEM;
    nthreads = nthreads < 1 ? 1 : nthreads;
    fs_note_caller_cpu();
    fs_parallel_for(nthreads, task_gemm_quant, &g, M);
    g.ngroups = (g.N + FS_QR - 1) / FS_QR;
    const int per = g.ngroups / (nthreads * FS_CLAIMS);
    g.groups_per_task = per < 1 ? 1 : per;
    fs_parallel_for(nthreads, task_gemm_groups, &g, (g.ngroups + g.groups_per_task - 1) / g.groups_per_task);
    free(g.xq), free(g.xd), free(g.xs);
    return FS_OK;
}

// Reference: the variant's single-group tiles only (no pairs, no AMX, no prefetch).
static void task_gemm_ref(void *c, int task) {
    const gemm_t *g = (const gemm_t *)c;
    const int q4 = g->q4, KB = g->KB, M = g->M;
    const int64_t tile_bytes = q4 ? 256 : 512;
    int g0, g1;
    task_span(task, g->groups_per_task, g->ngroups, 0, &g0, &g1);
    for (int gi = g0; gi < g1; gi++) {
        float out[MT][QR];
        const uint8_t *wg = g->w + (int64_t)gi * KB * tile_bytes;
        const uint16_t *wdg = g->wd + (int64_t)gi * KB * QR, *wmg = g->wm ? g->wm + (int64_t)gi * KB * QR : NULL;
        const int rows = g->N - gi * QR < QR ? g->N - gi * QR : QR;
        for (int m0 = 0; m0 < M; m0 += MT) {
            const int mt = M - m0 < MT ? M - m0 : MT;
            const int64_t xo = (int64_t)m0 * KB * QK;
            const float *xd = g->xd + (int64_t)m0 * KB;
            const int32_t *xs = g->xs + (int64_t)m0 * KB;
            if (g->act16)
                fs_tile16(q4, wg, wdg, wmg, KB, (const int16_t *)g->xq + xo, xd, xs, mt, out, NULL);
            else
                fs_tile8(q4, wg, wdg, wmg, KB, (const int8_t *)g->xq + xo, xd, xs, mt, out, NULL);
            for (int t = 0; t < mt; t++) {
                float *yr = g->y + (int64_t)(m0 + t) * g->ldy + gi * QR;
                for (int r = 0; r < rows; r++) yr[r] = g->bias ? out[t][r] + g->bias[gi * QR + r] : out[t][r];
            }
        }
    }
}

int fs_qgemm_ref(const fs_qmat *w, int act16, const float *x, int M, int ldx, float *y, int ldy, int nthreads) {
    gemm_t g = gemm_of(w, act16, x, M, ldx, y, ldy);
    if (!gemm_buffers(&g)) return FS_ERR_NOMEM;
    nthreads = nthreads < 1 ? 1 : nthreads;
    fs_note_caller_cpu();
    fs_quantize_act(act16, x, M, g.K, ldx, g.KB, g.xq, g.xd, g.xs);
    g.ngroups = (g.N + QR - 1) / QR;
    const int per = g.ngroups / (nthreads * FS_CLAIMS);
    g.groups_per_task = per < 1 ? 1 : per;
    fs_parallel_for(nthreads, task_gemm_ref, &g, (g.ngroups + g.groups_per_task - 1) / g.groups_per_task);
    free(g.xq), free(g.xd), free(g.xs);
    return FS_OK;
}
