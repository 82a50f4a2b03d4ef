// The fused step's model and per-call description (model.c, step.c, step_rows.c, step_matmul.c, step_lend.c). Internal.
#ifndef FS_STEP_H
#define FS_STEP_H
#include <stddef.h>
#include <stdint.h>

#include "parts.h"
#include "pool.h"

#define FS_LEND_MAX_B 8  // calls of up to this many tokens lend (helper buffers sized for it)

typedef struct {
    const uint8_t *w;
    const uint16_t *wd, *wm;  // wm: q4 only
    const float *bias;  // NULL: none
    int n, k, q4;  // W [n, k]
} qmat_t;

typedef struct {
    const float *in_norm, *post_norm;  // [hidden]
    qmat_t qkv, o, gu, down;  // gu: gate rows [0, I), up rows [I, 2I)
} layer_t;

typedef struct {
    int L, hidden, H, KVH, D, I, V, act16;
    float eps, scale;
    layer_t *layers;
    const float *norm;
    qmat_t head;
    const float *cos, *sin;  // [rope_rows, D]; sin carries rotate-half's signs
    int64_t rope_rows;
    int cap;  // tokens the scratch holds
    int64_t *lend_slots;  // a lent step's key slots (only valid ones)
    size_t lend_slots_cap;
    float *x, *h, *qkv, *attn, *act;  // [cap, hidden], [cap, max(hidden, H D)], [cap, (H + 2 KVH) D], [cap, H D], [cap, I]
    uint8_t *xq, *aq;  // quantized activations, K <= max(hidden, H D) / K = I
    float *xd, *ad;
    int32_t *xs, *as;
} model_t;

int fs_ensure_scratch(model_t *m, int B);  // 0: no memory

// One call, shared by the phase tasks (a helper in a lent phase copies it).
typedef struct {
    model_t *m;
    int B, Lmax, kv_type, nthreads, l;
    const int64_t *pos, *slot, *slots, *ctx, *slot_row;  // slot_row: each token's row of slots (NULL: its own)
    int att_parts;  // parts per (token, KV head): the call's most
    float *att;  // [B, KVH, att_parts, G (D + 2)]: o, m, s per part
    uint8_t *kv;  // [L, 2, S, KVH, D] of kv_type
    int64_t S;
    // the current matmul phase
    const qmat_t *mat;
    const uint8_t *xq;
    const float *xd;
    const int32_t *xs;
    float *y;  // [B, ldy]
    int ldy, accumulate, groups_per_task, ngroups;
    int mlp_blocks;  // FFN blocks of 32 per mlp task
    const float *norm_w;
    // the mlp phase's outputs (a helper's buffer in a lent task)
    float *act, *ad;
    uint8_t *aq;
    int32_t *as;
    int lend;  // heavy phases lent, light ones on the caller
    int raw;  // a helper's copy: outputs raw (the commit adds bias, accumulates)
    _Atomic uint64_t *beat;  // a helper's progress counter
    task_fn lent_task;  // the lent phase's task
    size_t res_act, res_aq, res_ad, res_as;  // mlp outputs' offsets in a helper's buffer (floats)
    size_t res_att;  // attention parts' offset
    int att_per;  // parts per lent attention task
    int64_t lctx[FS_LEND_MAX_B];  // a lent step's key counts, in the description: a late helper keeps them
} step_t;

static inline size_t fs_kv_elem(int kv_type) { return kv_type == FS_KV_F32 ? 4 : 2; }

// Phase tasks: step_rows.c per token or (token, KV head); step_matmul.c per weight group.
void task_norm(void *c, int b);
void task_quant_attn(void *c, int b);
void task_rope_store(void *c, int task);
void task_attend_part(void *c, int task);
void task_attend_combine(void *c, int bk);
void task_matmul(void *c, int task);
void task_mlp(void *c, int task);
void fs_store_group(step_t *s, const qmat_t *w, int g, const float *out);

// step_lend.c
int fs_step_lend_reserve(step_t *s, int helpers);
int fs_step_lend_tables(model_t *m, step_t *s);
void fs_step_lend(step_t *s, task_fn fn, commit_fn commit, int ntasks);
void task_attend_run(void *c, int task);
void commit_matmul(void *c, const float *res, int task);
void commit_mlp(void *c, const float *res, int task);
void commit_attend(void *c, const float *res, int task);
#endif
