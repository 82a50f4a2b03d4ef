// The ABI's own description: version and struct layouts, compared with kernel_abi.py's mirror at load.
#include <stddef.h>

#include "fs.h"
#include "parts.h"

int fs_abi_version(void) { return FS_ABI_VERSION; }

int fs_max_batch(void) { return FS_MAX_BATCH; }

#define F(T, f) (int64_t)offsetof(T, f)
static const int64_t g_layout[] = {
    sizeof(fs_qmat), F(fs_qmat, w), F(fs_qmat, wd), F(fs_qmat, wm), F(fs_qmat, bias), F(fs_qmat, n), F(fs_qmat, k),
    F(fs_qmat, format), F(fs_qmat, reserved),
    sizeof(fs_layer), F(fs_layer, attn_norm), F(fs_layer, ffn_norm), F(fs_layer, qkv), F(fs_layer, o),
    F(fs_layer, gate_up), F(fs_layer, down), F(fs_layer, q_norm), F(fs_layer, k_norm), F(fs_layer, post_attn_norm),
    F(fs_layer, post_ffn_norm), F(fs_layer, window), F(fs_layer, reserved),
    sizeof(fs_model_desc), F(fs_model_desc, n_layers), F(fs_model_desc, hidden), F(fs_model_desc, n_heads),
    F(fs_model_desc, n_kv_heads), F(fs_model_desc, head_dim), F(fs_model_desc, ffn), F(fs_model_desc, vocab),
    F(fs_model_desc, act16), F(fs_model_desc, eps), F(fs_model_desc, attn_scale), F(fs_model_desc, attn_softcap),
    F(fs_model_desc, final_softcap), F(fs_model_desc, residual_scale), F(fs_model_desc, logits_scale),
    F(fs_model_desc, activation), F(fs_model_desc, rotary_dims), F(fs_model_desc, layers),
    F(fs_model_desc, final_norm), F(fs_model_desc, head), F(fs_model_desc, rope_cos), F(fs_model_desc, rope_sin),
    F(fs_model_desc, rope_rows),
    sizeof(fs_batch), F(fs_batch, n_tokens), F(fs_batch, n_logits), F(fs_batch, x), F(fs_batch, pos),
    F(fs_batch, slot), F(fs_batch, ctx), F(fs_batch, slots), F(fs_batch, slot_row), F(fs_batch, slots_stride),
    F(fs_batch, kv_type), F(fs_batch, kv), F(fs_batch, kv_slots), F(fs_batch, threads), F(fs_batch, reserved),
    F(fs_batch, logit_rows), F(fs_batch, logits),
    sizeof(fs_draw), F(fs_draw, row), F(fs_draw, top_k), F(fs_draw, u), F(fs_draw, temperature), F(fs_draw, top_p),
    F(fs_draw, log_min_p), F(fs_draw, token), F(fs_draw, last_idx), F(fs_draw, last_y),
};

int fs_abi_layout(int64_t *out, int cap) {
    const int n = (int)(sizeof g_layout / sizeof g_layout[0]);
    for (int i = 0; i < n && i < cap; i++) out[i] = g_layout[i];
    return n;
}
