// What this variant was compiled for (setup.py: one library per variant). Internal.
#ifndef FS_ISA_H
#define FS_ISA_H
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define FS_AVX512 1  // VNNI matmul tiles
#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define FS_AMX 1  // AMX prefill tiles (tiles_amx.c)
#endif
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define FS_AVX2 1  // AVX2 tiles
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#endif
