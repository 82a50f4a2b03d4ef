// The fused step: every layer of a Llama-family model for a batch of tokens (decode tokens, prefill chunks) in one
// native call. Per layer, phases over the pool:
// norm (per token: RMSNorm, quantized), qkv (per weight group), rope (per token and KV head: RoPE, K/V write), attend
// (per token, KV head and part of 512 keys; then merged), quant, o (+ residual), norm, mlp (per run of FFN blocks:
// gate, up, silu(gate) * up, quantized), down (+ residual); then the final norm and the LM head.
// The torch model (engine/model/llama.py) is the reference the tests compare against. A call of up to FS_LEND_MAX_B
// tokens lends its heavy phases (lend.c).
#include <stdlib.h>
#include <string.h>

#include "step.h"

// Phase timers for bench.native_phases (fs_profile(1), fs_profile_read): wall time per kind of phase, summed. Off: one
// branch per phase.
enum { PH_NORM, PH_QKV, PH_ROPE, PH_ATTEND, PH_COMBINE, PH_QUANT, PH_O, PH_MLP, PH_DOWN, PH_HEAD, PH_COUNT };
static int g_profile = 0;
static double g_phase_s[PH_COUNT];

void fs_profile(int on) {
    g_profile = on;
    for (int i = 0; i < PH_COUNT; i++) g_phase_s[i] = 0.0;
}

int fs_profile_read(double *out, int n) {
    for (int i = 0; i < n && i < PH_COUNT; i++) out[i] = g_phase_s[i];
    return PH_COUNT;
}

#define TIMED(ph, stmt)                                    \
    do {                                                   \
        const double t_ = g_profile ? fs_now_s() : 0.0;    \
        stmt;                                              \
        if (g_profile) g_phase_s[ph] += fs_now_s() - t_;   \
    } while (0)

static void matmul_phase(step_t *s, const qmat_t *w, const uint8_t *xq, const float *xd, const int32_t *xs, float *y,
                         int ldy, int accumulate) {
    s->mat = w, s->xq = xq, s->xd = xd, s->xs = xs, s->y = y, s->ldy = ldy, s->accumulate = accumulate;
    s->ngroups = (w->n + FS_QR - 1) / FS_QR;
    int per = s->ngroups / (s->nthreads * fs_mm_claims(s->B));
    s->groups_per_task = per < 1 ? 1 : per;
    const int ntasks = (s->ngroups + s->groups_per_task - 1) / s->groups_per_task;
    if (s->lend)
        fs_step_lend(s, task_matmul, commit_matmul, ntasks);
    else
        fs_parallel_for(s->nthreads, task_matmul, s, ntasks);
}

// B in range, logits rows increasing, known kv_type, positions within the RoPE tables, <= FS_MAX_PARTS parts. Returns
// the parts, or 0.
static int check_batch(const model_t *m, const fs_batch *c) {
    const int B = c->n_tokens, N = c->n_logits;
    if (B < 1 || B > FS_MAX_BATCH || N < 0 || N > B || (c->logit_rows == NULL && N != 0 && N != B)) return 0;
    if (c->kv_type != FS_KV_F32 && c->kv_type != FS_KV_BF16 && c->kv_type != FS_KV_F16) return 0;
    for (int i = 0; c->logit_rows && i < N; i++) {
        const int64_t r = c->logit_rows[i];
        if (r < i || r >= B || (i > 0 && r <= c->logit_rows[i - 1])) return 0;
    }
    int parts = 1;
    for (int b = 0; b < B; b++) {
        if (c->pos[b] < 0 || c->pos[b] >= m->rope_rows) return 0;
        const int p = fs_attend_parts((int)c->ctx[b]);
        parts = p > parts ? p : parts;
    }
    return parts > FS_MAX_PARTS ? 0 : parts;
}

int fs_forward(void *handle, const fs_batch *c) {
    model_t *m = (model_t *)handle;
    const int parts = m ? check_batch(m, c) : 0;
    if (!parts) return FS_ERR_ARG;
    const int B = c->n_tokens, N = c->n_logits;
    if (!fs_ensure_scratch(m, B)) return FS_ERR_NOMEM;
    step_t s = {.m = m, .B = B, .Lmax = c->slots_stride, .kv_type = c->kv_type,
                .nthreads = c->threads < 1 ? 1 : c->threads, .pos = c->pos, .slot = c->slot, .slots = c->slots,
                .ctx = c->ctx, .slot_row = c->slot_row, .kv = (uint8_t *)c->kv, .S = c->kv_slots, .act = m->act,
                .ad = m->ad, .aq = m->aq, .as = m->as};
    // a decode batch on 2+ threads lends its matmul, mlp and attention phases; its light phases run on the caller
    fs_note_caller_cpu();
    s.lend = FS_LEND_ON && s.nthreads > 1 && B <= FS_LEND_MAX_B && fs_step_lend_reserve(&s, s.nthreads - 1);
    s.att_parts = parts;
    const int mlp_per = fs_kb(m->I) / (s.nthreads * fs_mm_claims(B));
    s.mlp_blocks = mlp_per < 1 ? 1 : mlp_per;
    s.att = (float *)malloc(sizeof(float) * (size_t)B * m->KVH * parts * (size_t)(m->H / m->KVH) * (m->D + 2));
    if (!s.att) return FS_ERR_NOMEM;
    if (s.lend && !fs_step_lend_tables(m, &s)) s.lend = 0;
    const int light = s.lend ? 1 : s.nthreads;
    const int att_n = B * m->KVH * parts, att_per = att_n / (s.nthreads * FS_ATT_CLAIMS);
    s.att_per = att_per < 1 ? 1 : att_per;
    memcpy(m->x, c->x, sizeof(float) * (size_t)B * (size_t)m->hidden);
    const int qkv_n = (m->H + 2 * m->KVH) * m->D;
    for (int l = 0; l < m->L; l++) {
        const layer_t *ly = &m->layers[l];
        s.l = l;
        s.norm_w = ly->in_norm;
        TIMED(PH_NORM, fs_parallel_rows(light, task_norm, &s, B));
        TIMED(PH_QKV, matmul_phase(&s, &ly->qkv, m->xq, m->xd, m->xs, m->qkv, qkv_n, 0));
        TIMED(PH_ROPE, fs_parallel_rows(light, task_rope_store, &s, B * m->KVH));
        if (s.lend)
            TIMED(PH_ATTEND, fs_step_lend(&s, task_attend_run, commit_attend, (att_n + s.att_per - 1) / s.att_per));
        else
            TIMED(PH_ATTEND, fs_parallel_rows_by(s.nthreads, task_attend_part, &s, att_n, FS_ATT_CLAIMS, 1));
        TIMED(PH_COMBINE, fs_parallel_rows(light, task_attend_combine, &s, B * m->KVH));
        TIMED(PH_QUANT, fs_parallel_rows(light, task_quant_attn, &s, B));
        TIMED(PH_O, matmul_phase(&s, &ly->o, m->xq, m->xd, m->xs, m->x, m->hidden, 1));
        s.norm_w = ly->post_norm;
        TIMED(PH_NORM, fs_parallel_rows(light, task_norm, &s, B));
        s.mat = &ly->gu, s.xq = m->xq, s.xd = m->xd, s.xs = m->xs;
        const int mlp_tasks = (fs_kb(m->I) + s.mlp_blocks - 1) / s.mlp_blocks;
        if (s.lend)
            TIMED(PH_MLP, fs_step_lend(&s, task_mlp, commit_mlp, mlp_tasks));
        else
            TIMED(PH_MLP, fs_parallel_for(s.nthreads, task_mlp, &s, mlp_tasks));
        TIMED(PH_DOWN, matmul_phase(&s, &ly->down, m->aq, m->ad, m->as, m->x, m->hidden, 1));
    }
    free(s.att);
    if (N == 0) return FS_OK;
    if (c->logit_rows != NULL && N < B) {  // wanted rows to the front (increasing: in place)
        for (int i = 0; i < N; i++) {
            const int64_t r = c->logit_rows[i];
            if (r != i) memcpy(m->x + (int64_t)i * m->hidden, m->x + r * m->hidden, sizeof(float) * (size_t)m->hidden);
        }
    }
    s.B = N;
    s.norm_w = m->norm;
    TIMED(PH_NORM, fs_parallel_rows(light, task_norm, &s, N));
    TIMED(PH_HEAD, matmul_phase(&s, &m->head, m->xq, m->xd, m->xs, c->logits, m->V, 0));
    return FS_OK;
}


