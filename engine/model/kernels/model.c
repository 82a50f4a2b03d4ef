// The fused step's model: its weights (pointers into the caller's tensors, which it keeps alive) and its scratch.
#include <math.h>
#include <stdlib.h>

#include "step.h"

static qmat_t make_mat(const int64_t *p, int n, int k, int q4) {
    qmat_t m = {(const uint8_t *)(intptr_t)p[0], (const uint16_t *)(intptr_t)p[1], (const uint16_t *)(intptr_t)p[2],
                (const float *)(intptr_t)p[3], n, k, q4};
    return m;
}

// dims: L, hidden, H, KVH, D, I, V, q4 (layer matrices), q4_head, act16.
// ptrs: per layer [in_norm, post_norm, then (w, wd, wm, bias) for qkv, o, gate_up, down] (18 each),
//       then final norm, head (w, wd, wm), cos, sin.
void *fs_model_new(const int32_t *dims, float eps, const int64_t *ptrs) {
    model_t *m = (model_t *)calloc(1, sizeof(model_t));
    if (!m) return NULL;
    m->L = dims[0], m->hidden = dims[1], m->H = dims[2], m->KVH = dims[3], m->D = dims[4], m->I = dims[5];
    m->V = dims[6], m->act16 = dims[9];
    const int q4 = dims[7], q4_head = dims[8];
    m->eps = eps;
    m->scale = 1.f / sqrtf((float)m->D);
    m->layers = (layer_t *)calloc((size_t)m->L, sizeof(layer_t));
    if (!m->layers) {
        free(m);
        return NULL;
    }
    const int qkv_n = (m->H + 2 * m->KVH) * m->D;
    for (int l = 0; l < m->L; l++) {
        const int64_t *p = ptrs + (int64_t)l * 18;
        layer_t *ly = &m->layers[l];
        ly->in_norm = (const float *)(intptr_t)p[0];
        ly->post_norm = (const float *)(intptr_t)p[1];
        ly->qkv = make_mat(p + 2, qkv_n, m->hidden, q4);
        ly->o = make_mat(p + 6, m->hidden, m->H * m->D, q4);
        ly->gu = make_mat(p + 10, 2 * m->I, m->hidden, q4);
        ly->down = make_mat(p + 14, m->hidden, m->I, q4);
    }
    const int64_t *t = ptrs + (int64_t)m->L * 18;
    m->norm = (const float *)(intptr_t)t[0];
    const int64_t head[4] = {t[1], t[2], t[3], 0};
    m->head = make_mat(head, m->V, m->hidden, q4_head);
    m->cos = (const float *)(intptr_t)t[4];
    m->sin = (const float *)(intptr_t)t[5];
    return m;
}

static void free_scratch(model_t *m) {
    free(m->x), free(m->h), free(m->qkv), free(m->attn), free(m->act);
    free(m->xq), free(m->aq), free(m->xd), free(m->ad), free(m->xs), free(m->as);
    m->x = m->h = m->qkv = m->attn = m->act = NULL;
    m->xq = m->aq = NULL;
    m->xd = m->ad = NULL;
    m->xs = m->as = NULL;
    m->cap = 0;
}

// The caller frees or moves memory a late helper may read (its K/V pool).
void fs_quiesce(void) { fs_lend_quiesce_locked(); }

void fs_model_free(void *handle) {
    model_t *m = (model_t *)handle;
    if (!m) return;
    fs_lend_quiesce_locked();
    free_scratch(m);
    free(m->lend_slots);
    free(m->layers);
    free(m);
}

int fs_ensure_scratch(model_t *m, int B) {
    if (m->cap >= B) return 1;
    fs_lend_quiesce_locked();
    free_scratch(m);
    const int kx = m->hidden > m->H * m->D ? m->hidden : m->H * m->D;
    const size_t kbx = (size_t)fs_kb(kx), kbi = (size_t)fs_kb(m->I), b = (size_t)B;
    m->x = (float *)malloc(sizeof(float) * b * (size_t)m->hidden);
    m->h = (float *)malloc(sizeof(float) * b * (size_t)kx);
    m->qkv = (float *)malloc(sizeof(float) * b * (size_t)((m->H + 2 * m->KVH) * m->D));
    m->attn = (float *)malloc(sizeof(float) * b * (size_t)(m->H * m->D));
    m->act = (float *)malloc(sizeof(float) * b * kbi * FS_QK);
    m->xq = (uint8_t *)malloc(2 * b * kbx * FS_QK);
    m->aq = (uint8_t *)malloc(2 * b * kbi * FS_QK);
    m->xd = (float *)malloc(sizeof(float) * b * kbx);
    m->ad = (float *)malloc(sizeof(float) * b * kbi);
    m->xs = (int32_t *)malloc(sizeof(int32_t) * b * kbx);
    m->as = (int32_t *)malloc(sizeof(int32_t) * b * kbi);
    if (!m->x || !m->h || !m->qkv || !m->attn || !m->act || !m->xq || !m->aq || !m->xd || !m->ad || !m->xs || !m->as) {
        free_scratch(m);
        return 0;
    }
    m->cap = B;
    return 1;
}

