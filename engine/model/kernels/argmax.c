// Greedy sampling's maxima, right after the LM head.
#include <math.h>

#include "fs.h"
#include "isa.h"

// out[i] = the first maximum's index in row i of x [n, V] (row stride ld) among non-NaN values (0 when all are NaN):
// torch.argmax with NaN as -inf.
void fs_argmax_rows(const float *x, int n, int V, int64_t ld, int64_t *out) {
    for (int i = 0; i < n; i++) {
        const float *row = x + (int64_t)i * ld;
        float best = -INFINITY;
        int64_t at = 0;
        int j = 0;
#if defined(__AVX2__)
        if (V >= 8) {  // 8 lanes, each keeping its first maximum; then the largest, at its smallest index
            __m256 vbest = _mm256_set1_ps(-INFINITY);
            __m256i vat = _mm256_setzero_si256(), idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i eight = _mm256_set1_epi32(8);
            for (; j + 8 <= V; j += 8) {
                const __m256 v = _mm256_loadu_ps(row + j);
                const __m256 gt = _mm256_cmp_ps(v, vbest, _CMP_GT_OQ);  // false for NaN
                vbest = _mm256_blendv_ps(vbest, v, gt);
                vat = _mm256_blendv_epi8(vat, idx, _mm256_castps_si256(gt));
                idx = _mm256_add_epi32(idx, eight);
            }
            float lb[8];
            int32_t la[8];
            _mm256_storeu_ps(lb, vbest);
            _mm256_storeu_si256((__m256i *)la, vat);
            for (int l = 0; l < 8; l++) {
                if (lb[l] > best || (lb[l] == best && la[l] < at)) {
                    best = lb[l];
                    at = la[l];
                }
            }
        }
#endif
        for (; j < V; j++) {
            if (row[j] > best) {  // false for NaN
                best = row[j];
                at = j;
            }
        }
        out[i] = at;
    }
}
