// Attention's pieces shared by attention.c (portable parts, merge, paged decode) and attention_x86.c. Internal.
#ifndef FS_ATTENTION_H
#define FS_ATTENTION_H
#include <stdint.h>

#include "parts.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define PD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PD_AVX2 1
#endif

// fs_attend_part's portable form: any head dim, one key at a time.
void fs_attend_portable(const float *qb, const void *kc, const void *vc, const int64_t *sl, int t0, int t1, int KVH,
                        int kh, int D, int G, float scale, int kv_type, float *scores, float *o, float *m, float *s);
#endif
