// The family activations of the fused step: GELU (tanh form) for GeGLU and the tanh soft-cap of attention scores and
// output logits. Each value is computed by one sequence of float operations, in vector lanes or in the scalar replica
// (fs_exp1, fmaf): the same bits on every variant, generic included, wherever a value sits in its row.
#include <math.h>

#include "isa.h"
#include "parts.h"
#include "simd_exp.h"

// gelu(x) = x / 2 (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), as torch's gelu(approximate="tanh"), written
// x / (1 + e^(-2u)): no cancellation where tanh(u) nears -1. -2 sqrt(2 / pi) in one constant.
#define GELU_K1 0.044715f
#define GELU_M2K0 -1.5957691216057308f

static inline float gelu1(float x) {
    const float inner = x + GELU_K1 * (x * x * x);
    return x / (1.f + fs_exp1(inner * GELU_M2K0));
}

// tanh(x): Cephes' tanhf. |x| < 0.625: x + x z P(z), z = x^2 (degree 4); else 1 - 2 / (e^(2|x|) + 1), x's sign.
#define TANH_SMALL 0.625f
#define TANH_P0 -5.70498872745e-3f
#define TANH_P1 2.06390887954e-2f
#define TANH_P2 -5.37397155531e-2f
#define TANH_P3 1.33314422036e-1f
#define TANH_P4 -3.33332819422e-1f

static inline float tanh1(float x) {
    const float a = fabsf(x), z = x * x;
    float p = TANH_P0;
    p = fmaf(p, z, TANH_P1);
    p = fmaf(p, z, TANH_P2);
    p = fmaf(p, z, TANH_P3);
    p = fmaf(p, z, TANH_P4);
    const float small = fmaf(p * z, x, x);
    const float big = copysignf(1.f - 2.f / (fs_exp1(a + a) + 1.f), x);
    return a < TANH_SMALL ? small : big;
}

#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 gelu8(__m256 x) {
    const __m256 inner = _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(GELU_K1), _mm256_mul_ps(_mm256_mul_ps(x, x), x)));
    const __m256 e = fs_exp8(_mm256_mul_ps(inner, _mm256_set1_ps(GELU_M2K0)));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

static inline __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.f), one = _mm256_set1_ps(1.f);
    const __m256 a = _mm256_andnot_ps(sign, x), z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(TANH_P0);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P1));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P2));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P3));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P4));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    const __m256 t = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(fs_exp8(_mm256_add_ps(a, a)), one)));
    const __m256 big = _mm256_or_ps(t, _mm256_and_ps(x, sign));  // t >= 0: x's sign, as copysignf
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(TANH_SMALL), _CMP_LT_OQ));
}
#endif

#if defined(__AVX512F__)
static inline __m512 gelu16(__m512 x) {
    const __m512 inner = _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(GELU_K1), _mm512_mul_ps(_mm512_mul_ps(x, x), x)));
    const __m512 e = fs_exp16(_mm512_mul_ps(inner, _mm512_set1_ps(GELU_M2K0)));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.f), e));
}
#endif

void fs_gelu_mul(const float *gate, const float *up, int live, float *a) {
    int r = 0;
#if defined(__AVX512F__)
    for (; r + 16 <= live && r + 16 <= FS_QK; r += 16)
        _mm512_storeu_ps(a + r, _mm512_mul_ps(gelu16(_mm512_loadu_ps(gate + r)), _mm512_loadu_ps(up + r)));
#elif defined(__AVX2__) && defined(__FMA__)
    for (; r + 8 <= live && r + 8 <= FS_QK; r += 8)
        _mm256_storeu_ps(a + r, _mm256_mul_ps(gelu8(_mm256_loadu_ps(gate + r)), _mm256_loadu_ps(up + r)));
#endif
    for (; r < FS_QK; r++) a[r] = r < live ? gelu1(gate[r]) * up[r] : 0.f;
}

void fs_softcap(float *x, int n, float mul, float cap) {
    if (mul != 1.f)
        for (int i = 0; i < n; i++) x[i] = x[i] * mul;
    if (cap == 0.f) return;
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    const __m256 vcap = _mm256_set1_ps(cap);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(tanh8(_mm256_div_ps(_mm256_loadu_ps(x + i), vcap)), vcap));
#endif
    for (; i < n; i++) x[i] = tanh1(x[i] / cap) * cap;
}
