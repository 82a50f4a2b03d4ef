// Which variant this library is, and which the CPU runs (asked of the generic library before another is loaded).
#define _DEFAULT_SOURCE 1  // syscall() under -std=c11
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include "fs.h"
#include "isa.h"

int fs_kernel_isa(void) {
#if defined(FS_AMX)
    return 3;
#elif defined(FS_AVX512)
    return 2;
#elif defined(FS_AVX2)
    return 1;
#else
    return 0;
#endif
}

// bit 0 AVX2+FMA+F16C; bit 1 AVX-512 F/BW/VL/VNNI; bit 2 AMX-TILE/INT8 (CPUID 7 EDX 24, 25) and Linux's permission for
// the tile data (arch_prctl, once per process).
int fs_cpu_features(void) {
    int f = 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= 1;
    if ((f & 1) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        f |= 2;
#if defined(__linux__) && defined(__x86_64__)
    unsigned a, b, c, d;
    if ((f & 2) && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&
        syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0)
        f |= 4;
#endif
#endif
    return f;
}
