// y[M, N] = x[M, K] @ w[N, K]^T (+ bias), fp32, small M (decode through the torch path): each weight row read once for
// all M rows while in L1 (a dense GEMM streams W per row). Runs of rows from the pool.
#include <stdint.h>

#include "fs.h"
#include "pool.h"

typedef struct {
    const float *x, *w, *bias;
    float *y;
    int M, N, K, per;
} skinny_t;

static void task_skinny(void *c, int task) {
    const skinny_t *s = (const skinny_t *)c;
    int n0, n1;
    task_span(task, s->per, s->N, 0, &n0, &n1);
    for (int n = n0; n < n1; n++) {
        const float *wr = s->w + (int64_t)n * s->K;
        for (int m = 0; m < s->M; m++) {
            const float *xr = s->x + (int64_t)m * s->K;
            float acc = 0.f;
#pragma omp simd reduction(+ : acc)
            for (int k = 0; k < s->K; k++) acc += xr[k] * wr[k];
            s->y[(int64_t)m * s->N + n] = s->bias ? acc + s->bias[n] : acc;
        }
    }
}

void fs_skinny_gemm(const float *x, const float *w, const float *bias, float *y, int M, int N, int K, int nthreads) {
    nthreads = nthreads < 1 ? 1 : nthreads;
    const int per = N / (nthreads * FS_CLAIMS);
    skinny_t s = {.x = x, .w = w, .bias = bias, .y = y, .M = M, .N = N, .K = K, .per = per < 1 ? 1 : per};
    fs_note_caller_cpu();
    fs_parallel_for(nthreads, task_skinny, &s, (N + s.per - 1) / s.per);
}
