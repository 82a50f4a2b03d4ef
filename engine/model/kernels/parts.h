// The compute pieces the fused step, the GEMM drivers and paged attention share. Internal.
#ifndef FS_PARTS_H
#define FS_PARTS_H
#include <stdint.h>

#include "fs.h"

#define FS_QK 32  // values per quantization block
#define FS_QR 16  // weight rows per interleaved group
#ifndef FS_MAX_BATCH
#define FS_MAX_BATCH 256  // tokens per fs_forward call (the tile buffers)
#endif

static inline int fs_kb(int k) { return (k + FS_QK - 1) / FS_QK; }  // blocks of 32 along K

// x [M, K] (row stride ldx) -> xq [M, KB*32] int16 (act16) or int8, scales xd and sums xs [M, KB]
void fs_quantize_act(int act16, const float *x, int M, int K, int ldx, int KB, void *xq, float *xd, int32_t *xs);

// group g (rows 16g..16g+15) x M activation rows -> out [M][16], no bias
void fs_qgemm_group(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                    const void *xq, const float *xd, const int32_t *xs, int M, float *out);
// groups g, g + 1 -> out_g, out_g1 [M][16]: two fs_qgemm_group calls' values
void fs_qgemm_group2(int q4, int act16, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int KB, int g,
                     const void *xq, const float *xd, const int32_t *xs, int M, float *out_g, float *out_g1);

// rows 16g..16g+15 (< N) as fp32 into out [N, K]
void fs_dequant_group(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int N, int K, int g,
                      float *out);

#define FS_ATT_PART 512  // keys per attention part, cut from key 0
#define FS_MAX_PARTS 64   // attention parts per token: 64 x 512 keys

// G heads qb [G, D] on KV head kh over L keys (slots sl) -> ob [G, D]; scores: G * min(L, FS_ATT_PART) floats
void fs_attend(const float *qb, const void *kc, const void *vc, const int64_t *sl, int L, int KVH, int kh, int D,
               int G, float scale, int kv_type, float *scores, float *ob);
int fs_attend_parts(int L);  // parts of a query with L keys
// keys [t0, t1) -> unnormalized o [G, D], max m [G], sum of exp s [G]; prefetch: ask for the K/V rows ahead
void fs_attend_part(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                    int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s,
                    int prefetch);
// P parts merged in order into ob [G, D]; part p at parts + p G (D + 2): o, m, s
void fs_attend_combine(int P, int G, int D, const float *parts, float *ob);
#endif
