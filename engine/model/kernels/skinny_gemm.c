// y[M, N] = x[M, K] @ w[N, K]^T for a small M (a decode batch), fp32.
//
// Decode reads every weight once per step; that is the whole cost at small batch. MKL's sgemm
// for M = 2..8 on this CPU costs about M times its M = 1 gemv (it does not share the weight
// stream across rows), so a batch of 8 decoded 2.4x slower per step than a batch of 1. Here
// each weight row is read once and dotted with all M inputs while it is in L1.
#include <stdint.h>

#include "fs.h"

void fs_skinny_gemm(const float *x, const float *w, const float *bias, float *y, int M, int N, int K,
                    int nthreads) {
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int n = 0; n < N; n++) {
        const float *wr = w + (int64_t)n * K;
        for (int m = 0; m < M; m++) {
            const float *xr = x + (int64_t)m * K;
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int k = 0; k < K; k++) s += xr[k] * wr[k];
            y[(int64_t)m * N + n] = bias ? s + bias[n] : s;
        }
    }
}
