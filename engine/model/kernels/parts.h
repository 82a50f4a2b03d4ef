// The compute pieces the fused step, the GEMM drivers and paged attention share. Internal.
#ifndef FS_PARTS_H
#define FS_PARTS_H
#include <stdint.h>

#include "fs.h"

#define FS_QK 32  // values per quantization block
#define FS_QR 16  // weight rows per interleaved group
#ifndef FS_MAX_BATCH
#define FS_MAX_BATCH 256  // tokens per fs_forward call (the tile buffers); fs_max_batch() tells the Python side
#endif

static inline int fs_kb(int k) { return (k + FS_QK - 1) / FS_QK; }  // blocks of 32 along K

// x [M, K] (row stride ldx) -> activation blocks xq [M, KB*32] (int16 when act16, else int8), scales xd and
// sums xs [M, KB]: what every matmul computes before its integer dots.
void fs_quantize_act(int act16, const float *x, int M, int K, int ldx, int KB, void *xq, float *xd, int32_t *xs);

// Group g (rows 16g..16g+15) of W against M quantized activation rows: out [M][16], no bias.
void fs_qgemm_group(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                    const void *xq, const float *xd, const int32_t *xs, int M, float *out);
// Groups g and g + 1 into out_g and out_g1 [M][16]: the values of two fs_qgemm_group calls.
void fs_qgemm_group2(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                     const void *xq, const float *xd, const int32_t *xs, int M, float *out_g, float *out_g1);

// Rows 16g..16g+15 (those below N) of the stored weights as dense fp32 into out [N, K].
void fs_dequant_group(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int N, int K, int g,
                      float *out);

#define FS_ATT_PART 512   // keys per attention part, cut from key 0: the cut depends on L only
#define FS_MAX_PARTS 64   // attention parts per token: 64 x 512 keys

// One query's G heads qb [G, D] sharing KV head kh attend to its L keys (slots sl): ob [G, D].
// scores: scratch of G * min(L, FS_ATT_PART) floats. The parts below, taken in order.
void fs_attend(const float *qb, const void *kc, const void *vc, const int64_t *sl, int L, int KVH, int kh, int D,
               int G, float scale, int kv_type, float *scores, float *ob);
int fs_attend_parts(int L);  // parts of a query with L keys
// Keys [t0, t1): unnormalized output o [G, D], score maximum m [G], sum of exp s [G]. prefetch: ask for the K/V rows
// ahead (a decode row's keys stream from memory; a prefill chunk's later tokens re-read the first token's keys).
void fs_attend_part(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                    int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                    int prefetch);
// Merges P parts (in order) into ob [G, D]; part p at parts + p * G * (D + 2): o [G * D], m [G], s [G].
void fs_attend_combine(int P, int G, int D, const float *parts, float *ob);
#endif
