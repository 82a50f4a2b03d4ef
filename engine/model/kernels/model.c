// The fused step's model: the caller's weights (pointers; the caller keeps them alive) and scratch. fs_model_new
// refuses what the step does not compute.
#include <stdlib.h>

#include "step.h"

// W [n, k] as the step reads it; 0: shape, format or pointers wrong
static int take_mat(const fs_qmat *q, int n, int k, int bias_ok, qmat_t *out) {
    if (q->n != n || q->k != k || !q->w || !q->wd || (q->format != FS_W_INT8 && q->format != FS_W_Q4)) return 0;
    if ((q->format == FS_W_Q4) != (q->wm != NULL) || (q->bias && !bias_ok)) return 0;
    const qmat_t m = {q->w, q->wd, q->wm, q->bias, n, k, q->format == FS_W_Q4};
    *out = m;
    return 1;
}

// per-family extensions at their Llama defaults; 0: one is not
static int llama_defaults(const fs_model_desc *d) {
    if (d->attn_softcap != 0.f || d->final_softcap != 0.f || d->residual_scale != 1.f || d->logits_scale != 1.f ||
        d->activation != FS_ACT_SILU || d->rotary_dims != d->head_dim)
        return 0;
    for (int l = 0; l < d->n_layers; l++) {
        const fs_layer *ly = &d->layers[l];
        if (ly->q_norm || ly->k_norm || ly->post_attn_norm || ly->post_ffn_norm || ly->window != 0) return 0;
    }
    return 1;
}

// even head dims (RoPE halves) <= 512, <= 8 query heads per KV head, FFN width % 16 (silu_mul's whole vectors)
static int shape_ok(const fs_model_desc *d) {
    return d->n_layers > 0 && d->hidden > 0 && d->n_heads > 0 && d->n_kv_heads > 0 && d->head_dim > 0 &&
           d->ffn > 0 && d->vocab > 0 && d->head_dim % 2 == 0 && d->head_dim <= 512 &&
           d->n_heads % d->n_kv_heads == 0 && d->n_heads / d->n_kv_heads <= 8 && d->ffn % 16 == 0 && d->layers &&
           d->final_norm && d->rope_cos && d->rope_sin && d->rope_rows > 0 && d->attn_scale > 0.f;
}

int fs_model_new(const fs_model_desc *d, void **out) {
    *out = NULL;
    if (!shape_ok(d)) return FS_ERR_ARG;
    if (!llama_defaults(d)) return FS_ERR_UNSUPPORTED;
    model_t *m = (model_t *)calloc(1, sizeof(model_t));
    if (!m) return FS_ERR_NOMEM;
    m->L = d->n_layers, m->hidden = d->hidden, m->H = d->n_heads, m->KVH = d->n_kv_heads, m->D = d->head_dim;
    m->I = d->ffn, m->V = d->vocab, m->act16 = d->act16 != 0;
    m->eps = d->eps;
    m->scale = d->attn_scale;
    m->layers = (layer_t *)calloc((size_t)m->L, sizeof(layer_t));
    if (!m->layers) {
        free(m);
        return FS_ERR_NOMEM;
    }
    const int qkv_n = (m->H + 2 * m->KVH) * m->D;
    int ok = take_mat(&d->head, m->V, m->hidden, 0, &m->head);
    for (int l = 0; l < m->L && ok; l++) {
        const fs_layer *src = &d->layers[l];
        layer_t *ly = &m->layers[l];
        ly->in_norm = src->attn_norm;
        ly->post_norm = src->ffn_norm;
        ok = ly->in_norm && ly->post_norm && take_mat(&src->qkv, qkv_n, m->hidden, 1, &ly->qkv) &&
             take_mat(&src->o, m->hidden, m->H * m->D, 1, &ly->o) &&
             take_mat(&src->gate_up, 2 * m->I, m->hidden, 1, &ly->gu) &&
             take_mat(&src->down, m->hidden, m->I, 1, &ly->down);
    }
    if (!ok) {
        free(m->layers);
        free(m);
        return FS_ERR_ARG;
    }
    m->norm = d->final_norm;
    m->cos = d->rope_cos, m->sin = d->rope_sin, m->rope_rows = d->rope_rows;
    *out = m;
    return FS_OK;
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

// before the caller frees memory a late helper may read (its K/V pool)
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

