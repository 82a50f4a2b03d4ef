// The kernel library's ABI: what engine/model/kernel_abi.py mirrors. Everything else is internal (hidden).
#ifndef FS_H
#define FS_H
#include <stdint.h>

#define FS_API __attribute__((visibility("default")))

// K/V pool element type.
typedef enum { FS_KV_F32 = 0, FS_KV_BF16 = 1, FS_KV_F16 = 2 } fs_kv_type;

FS_API int finserve_kernel_isa(void);
FS_API int finserve_cpu_features(void);
FS_API int fs_max_batch(void);

FS_API void *fs_model_new(const int32_t *dims, float eps, const int64_t *ptrs);
FS_API void fs_model_free(void *handle);
FS_API int fs_forward(void *handle, int B, const float *x_in, const int64_t *pos, const int64_t *slot,
                      const int64_t *slots, const int64_t *slot_row, const int64_t *ctx, int Lmax, void *kv, int64_t S,
                      int kv_type, int nthreads, int N, const int64_t *out_rows, float *logits);
FS_API void fs_quiesce(void);
FS_API void fs_profile(int on);
FS_API int fs_profile_read(double *out, int n);

FS_API int fs_qgemm(int q4, int act16, const float *x, int M, int K, int ldx, const uint8_t *w, const uint16_t *wd,
                    const uint16_t *wm, int N, const float *bias, float *y, int ldy, int nthreads);
FS_API void qgemm_f32(int q4, int act16, const float *x, int M, int K, int ldx, const uint8_t *w, const uint16_t *wd,
                      const uint16_t *wm, int N, const float *bias, float *y, int ldy, int nthreads);
FS_API void fs_dequant(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int N, int K, float *out,
                       int nthreads);
FS_API void fs_dequant_rows(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int K, int n,
                            const int64_t *ids, float *out);
FS_API void fs_argmax_rows(const float *x, int n, int V, int64_t ld, int64_t *out);
FS_API void paged_decode(const float *q, const void *kc, const void *vc, const int64_t *slots, const int64_t *ctx,
                         float *out, int B, int H, int KVH, int D, int Lmax, float scale, int nthreads, int kv_type);
FS_API void skinny_gemm_f32(const float *x, const float *w, const float *bias, float *y, int M, int N, int K,
                            int nthreads);

// test hooks
FS_API void fs_set_lend(int on);
FS_API void fs_set_lend_stall(int every);
FS_API void fs_lend_counts(int64_t *out);
FS_API int fs_pool_check(int generations, int nthreads);
#endif
