// The kernel library's ABI, mirrored once by engine/model/kernel_abi.py (ctypes). The loader compares fs_abi_version()
// and fs_abi_layout() with the mirror and refuses a library that disagrees: a change here bumps FS_ABI_VERSION and the
// mirror. Nothing else is exported.
#ifndef FS_H
#define FS_H
#include <stdint.h>

#define FS_API __attribute__((visibility("default")))
#define FS_ABI_VERSION 2

typedef enum { FS_KV_F32 = 0, FS_KV_BF16 = 1, FS_KV_F16 = 2 } fs_kv_type;      // K/V pool element
typedef enum { FS_W_INT8 = 0, FS_W_Q4 = 1 } fs_weight_format;                 // quantized weight layout
typedef enum { FS_ACT_SILU = 0, FS_ACT_GELU_TANH = 1 } fs_activation;         // FFN gate activation
typedef enum { FS_OK = 0, FS_ERR_NOMEM = -1, FS_ERR_ARG = -2, FS_ERR_UNSUPPORTED = -3 } fs_status;

// W [n, k] quantized in tiles.h's layout: groups of 16 rows x blocks of 32 values.
typedef struct {
    const uint8_t *w;      // int8: [G][KB][8][16][4]; q4: [G][KB][4][16][4]
    const uint16_t *wd;    // fp16 scales [G][KB][16]
    const uint16_t *wm;    // fp16 mins [G][KB][16] (q4), else NULL
    const float *bias;     // [n] or NULL
    int32_t n, k;
    int32_t format;        // fs_weight_format
    int32_t reserved;
} fs_qmat;

// A decoder layer. After `down`: per-family extensions; fs_model_new refuses (FS_ERR_UNSUPPORTED) all but the Llama
// value noted.
typedef struct {
    const float *attn_norm;       // [hidden] RMSNorm weight before attention
    const float *ffn_norm;        // [hidden] RMSNorm weight before the FFN
    fs_qmat qkv;                  // [(H + 2 KVH) D, hidden]: q rows, then k, then v
    fs_qmat o;                    // [hidden, H D]
    fs_qmat gate_up;              // [2 I, hidden]: gate rows, then up rows
    fs_qmat down;                 // [hidden, I]
    const float *q_norm;          // [D] per-head RMSNorm of q; NULL
    const float *k_norm;          // [D] per-head RMSNorm of k; NULL
    const float *post_attn_norm;  // [hidden] norm of the attention output before the residual; NULL
    const float *post_ffn_norm;  // [hidden] norm of the FFN output before the residual; NULL
    int32_t window;               // sliding-window keys; 0: full causal attention
    int32_t reserved;
} fs_layer;

// The model. fs_model_new keeps the weight pointers; the caller keeps the memory alive.
typedef struct {
    int32_t n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, vocab;
    int32_t act16;  // activations int16 (1) or int8 (0) per block of 32
    float eps;                    // RMSNorm epsilon
    float attn_scale;  // q.k multiplier: 1/sqrt(head_dim) in fp32 (Gemma's query_pre_attn_scalar, Granite's: others)
    float attn_softcap;           // tanh soft-cap of attention logits; 0: off
    float final_softcap;          // tanh soft-cap of the output logits; 0: off
    float residual_scale;         // multiplier of each block's output added to the residual; 1
    float logits_scale;           // multiplier of the output logits; 1
    int32_t activation;           // fs_activation: FS_ACT_SILU
    int32_t rotary_dims;          // dims of each head RoPE rotates: head_dim
    const fs_layer *layers;       // [n_layers]
    const float *final_norm;      // [hidden]
    fs_qmat head;                 // [vocab, hidden], no bias
    const float *rope_cos;        // [rope_rows, head_dim]
    const float *rope_sin;  // [rope_rows, head_dim], rotate-half's signs folded in
    int64_t rope_rows;            // positions the tables hold
} fs_model_desc;

// One fs_forward call: B tokens (decode tokens, prefill chunks' tokens in position order).
typedef struct {
    int32_t n_tokens;             // B, 1..fs_max_batch()
    int32_t n_logits;             // N, 0..B
    const float *x;               // [B, hidden] embeddings
    const int64_t *pos;           // [B] positions
    const int64_t *slot;          // [B] the pool slot each token's K/V is written to
    const int64_t *ctx;           // [B] keys each token attends to (a prefill token: its position + 1)
    const int64_t *slots;         // [R, slots_stride] key slots per table row, in position order
    const int64_t *slot_row;      // [B] the table row each token reads; NULL: row b
    int32_t slots_stride;         // Lmax
    int32_t kv_type;              // fs_kv_type
    void *kv;                     // [layers, 2, kv_slots, KVH, D] of kv_type
    int64_t kv_slots;             // S
    int32_t threads;  // the caller and threads - 1 pool workers
    int32_t reserved;
    const int64_t *logit_rows;    // [N] increasing rows whose logits are wanted; NULL with N == B: every row
    float *logits;                // [N, vocab] out
} fs_batch;

// One token draw (sample.c) from a row of logits: temperature, min-p, top-k, top-p, then the inverse CDF at u.
typedef struct {
    int64_t row;        // logits row the draw reads
    int64_t top_k;      // <= 0 or >= V: off
    double u;           // uniform in [0, 1)
    float temperature;  // > 0 (the caller clamps it)
    float top_p;        // >= 1: off
    float log_min_p;    // log(min_p); -inf: off
    int64_t token;      // out: the token; -1 when the row has no usable probability (the caller takes greedy)
    int64_t last_idx;   // out: the kept set's last token in the order (y desc, index asc), and its y: the kept set is
    float last_y;       //      every token with y > last_y, and those with y == last_y and index <= last_idx
} fs_draw;

FS_API int fs_abi_version(void);
// sizeof and offsetof of every field of fs_qmat, fs_layer, fs_model_desc, fs_batch, fs_draw in order -> out[0..cap); returns the
// count
FS_API int fs_abi_layout(int64_t *out, int cap);
FS_API int fs_kernel_isa(void);   // 0 generic, 1 avx2, 2 avx512, 3 amx
FS_API int fs_cpu_features(void); // bit 0 avx2, 1 avx512, 2 amx (cpuid.c)
FS_API int fs_max_batch(void);

// The fused step (step.c). fs_model_new: FS_OK and *out, or an fs_status.
FS_API int fs_model_new(const fs_model_desc *desc, void **out);
FS_API void fs_model_free(void *model);
FS_API int fs_forward(void *model, const fs_batch *batch);
FS_API void fs_quiesce(void);  // before the caller frees memory a late lent helper may read
FS_API void fs_profile(int on);   // phase timers on (and zeroed) or off
FS_API int fs_profile_read(double *out, int n);

// Matmuls (gemm.c): y[M, N] (row stride ldy) = x[M, K] (stride ldx) @ W^T (+ bias). fs_qgemm pairs groups (AMX where
// built); fs_qgemm_ref one group at a time (the tests' reference).
FS_API int fs_qgemm(const fs_qmat *w, int act16, const float *x, int M, int ldx, float *y, int ldy, int threads);
FS_API int fs_qgemm_ref(const fs_qmat *w, int act16, const float *x, int M, int ldx, float *y, int ldy, int threads);
FS_API void fs_skinny_gemm(const float *x, const float *w, const float *bias, float *y, int M, int N, int K,
                           int threads);
// Dequantization (dequant.c): W -> out [n, k] fp32; stored rows ids[0..count) -> out [count, k].
FS_API void fs_dequant(const fs_qmat *w, float *out, int threads);
FS_API void fs_dequant_rows(const fs_qmat *w, int count, const int64_t *ids, float *out);
// Sampling (sample.c): fills draws[0..n) from logits [*, V] (row stride ld); FS_OK or FS_ERR_NOMEM.
FS_API int fs_sample_rows(const float *logits, int64_t ld, int64_t V, int64_t n, fs_draw *draws);
FS_API void fs_argmax_rows(const float *x, int n, int V, int64_t ld, int64_t *out);
// Paged decode attention (attention.c): q, out [B, H, D]; kc, vc [S, KVH, D]; slots [B, Lmax]; ctx [B].
FS_API void fs_paged_decode(const float *q, const void *kc, const void *vc, const int64_t *slots, const int64_t *ctx,
                            float *out, int B, int H, int KVH, int D, int Lmax, float scale, int threads,
                            int kv_type);

// Test hooks: the test library only (hooks.c).
FS_API void fs_set_lend(int on);
FS_API void fs_set_lend_stall(int every);
FS_API void fs_lend_counts(int64_t *out);
FS_API int fs_pool_check(int generations, int threads);
#endif
