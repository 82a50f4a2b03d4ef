// The fused step's side of lent phases (lend.c): where a helper's copy writes, how the caller commits a finished task,
// the memory a late helper may read.
#include <stdlib.h>
#include <string.h>

#include "step.h"

_Static_assert(sizeof(step_t) <= FS_LEND_DESC_MAX, "a lent phase's description must fit lend.c's copy");

// a helper's task on its copy: outputs raw into res
static void step_lent_run(void *desc, int task, float *res, _Atomic uint64_t *beat) {
    step_t c;
    memcpy(&c, desc, sizeof c);
    c.raw = 1, c.beat = beat, c.y = res;
    c.act = res + c.res_act, c.aq = (uint8_t *)(res + c.res_aq), c.ad = res + c.res_ad;
    c.as = (int32_t *)(res + c.res_as), c.att = res + c.res_att;
    c.ctx = c.lctx;  // its key counts, agreeing with its Lmax
    c.lent_task(&c, task);
}

void fs_step_lend(step_t *s, task_fn fn, commit_fn commit, int ntasks) {
    s->lent_task = fn;
    fs_lend_for(s->nthreads, s, sizeof *s, step_lent_run, fn, s, commit, ntasks);
}

// a finished matmul task: rows, bias and accumulation as fs_store_group
void commit_matmul(void *c, const float *res, int task) {
    step_t *s = (step_t *)c;
    const qmat_t *w = s->mat;
    int g0, g1;
    task_span(task, s->groups_per_task, s->ngroups, 0, &g0, &g1);
    if (!w->bias && !s->accumulate) {
        const int r0 = g0 * FS_QR, r1 = g1 * FS_QR < w->n ? g1 * FS_QR : w->n;
        for (int t = 0; t < s->B; t++)
            memcpy(s->y + (int64_t)t * s->ldy + r0, res + (int64_t)t * s->ldy + r0, sizeof(float) * (size_t)(r1 - r0));
        return;
    }
    float out[FS_LEND_MAX_B * FS_QR];
    for (int g = g0; g < g1; g++) {
        const int rows = w->n - g * FS_QR < FS_QR ? w->n - g * FS_QR : FS_QR;
        for (int t = 0; t < s->B; t++)
            memcpy(out + t * FS_QR, res + (int64_t)t * s->ldy + g * FS_QR, sizeof(float) * (size_t)rows);
        fs_store_group(s, w, g, out);
    }
}

// a finished mlp task: its blocks' quantized activations, scales, sums
void commit_mlp(void *c, const float *res, int task) {
    step_t *s = (step_t *)c;
    const model_t *m = s->m;
    const int KBI = fs_kb(m->I);
    int j0, j1;
    task_span(task, s->mlp_blocks, KBI, 0, &j0, &j1);
    const size_t esz = m->act16 ? 2 : 1, n = (size_t)(j1 - j0);
    const uint8_t *aq = (const uint8_t *)(res + s->res_aq);
    const float *ad = res + s->res_ad;
    const int32_t *as = (const int32_t *)(res + s->res_as);
    for (int t = 0; t < s->B; t++) {
        const size_t blk = (size_t)t * KBI + j0;
        memcpy(s->aq + blk * FS_QK * esz, aq + blk * FS_QK * esz, n * FS_QK * esz);
        memcpy(s->ad + blk, ad + blk, n * sizeof(float));
        memcpy(s->as + blk, as + blk, n * sizeof(int32_t));
    }
}

// a lent attention task: att_per parts, the last runs first
void task_attend_run(void *c, int task) {
    step_t *s = (step_t *)c;
    int i0, i1;
    task_span(task, s->att_per, s->B * s->m->KVH * s->att_parts, 1, &i0, &i1);
    for (int i = i0; i < i1; i++) {
        task_attend_part(s, i);
        fs_bump(s->beat);
    }
}

void commit_attend(void *c, const float *res, int task) {
    step_t *s = (step_t *)c;
    const model_t *m = s->m;
    int i0, i1;
    task_span(task, s->att_per, s->B * m->KVH * s->att_parts, 1, &i0, &i1);
    const size_t part = (size_t)(m->H / m->KVH) * (size_t)(m->D + 2);
    memcpy(s->att + (size_t)i0 * part, res + s->res_att + (size_t)i0 * part, sizeof(float) * (size_t)(i1 - i0) * part);
}

// Helper buffers for FS_LEND_MAX_B tokens; the mlp and attention outputs' offsets set in s. 0: no lending this call.
int fs_step_lend_reserve(step_t *s, int helpers) {
    const model_t *m = s->m;
    const size_t B = FS_LEND_MAX_B, KBI = (size_t)fs_kb(m->I);
    size_t ld = (size_t)((m->H + 2 * m->KVH) * m->D);
    ld = ld > (size_t)m->hidden ? ld : (size_t)m->hidden;
    ld = ld > (size_t)m->V ? ld : (size_t)m->V;
    s->res_act = B * ld, s->res_aq = s->res_act + B * KBI * FS_QK, s->res_ad = s->res_aq + B * KBI * FS_QK / 2;
    s->res_as = s->res_ad + B * KBI;
    s->res_att = s->res_as + B * KBI;
    const size_t need = s->res_att + B * (size_t)m->KVH * FS_MAX_PARTS * (size_t)(m->H / m->KVH) * (size_t)(m->D + 2);
    return fs_lend_reserve(helpers, need);
}

// A lent step's attention reads key slots from a copy the model owns (the caller's table may be gone when a late helper
// reads) and key counts from the description (lctx). The copy is zeroed when made and holds only valid slots: a late
// helper reads inside the pool, never out of bounds. 0: no memory.
int fs_step_lend_tables(model_t *m, step_t *s) {
    int64_t L = 1;
    for (int b = 0; b < s->B; b++) L = s->ctx[b] > L ? s->ctx[b] : L;
    const size_t need = (size_t)s->B * (size_t)L;
    if (m->lend_slots_cap < need) {  // grown by half again
        const size_t cap = need + need / 2;
        fs_lend_quiesce_locked();
        free(m->lend_slots);
        m->lend_slots = (int64_t *)calloc(cap, sizeof(int64_t));
        m->lend_slots_cap = m->lend_slots ? cap : 0;
        if (!m->lend_slots) return 0;
    }
    for (int b = 0; b < s->B; b++) {
        const int64_t srow = s->slot_row ? s->slot_row[b] : b;
        memcpy(m->lend_slots + (size_t)b * L, s->slots + srow * s->Lmax, sizeof(int64_t) * (size_t)s->ctx[b]);
        s->lctx[b] = s->ctx[b];
    }
    s->slots = m->lend_slots, s->ctx = s->lctx, s->slot_row = NULL, s->Lmax = (int)L;
    return 1;
}
