// Test hooks, in the test library only (setup.py's `test` variant, -DFS_TEST_HOOKS).
#include "pool.h"

#if defined(FS_TEST_HOOKS)
int g_lend_on = 1;  // fs_set_lend
_Atomic int g_lend_stall = 0;  // fs_set_lend_stall
int64_t g_lend_counts[3];  // the caller's claims, helpers' committed, stalled ones redone

FS_API void fs_set_lend(int on) { g_lend_on = on != 0; }

// every n-th lent task (0: none) a helper sleeps 300 us after its claim, as if descheduled
FS_API void fs_set_lend_stall(int every) { atomic_store(&g_lend_stall, every < 0 ? 0 : every); }

// lent tasks since the last call, then zeroed: the caller's own, a helper's committed, a stalled one's redone
FS_API void fs_lend_counts(int64_t *out) {
    pthread_mutex_lock(&g_pool_owner);
    for (int i = 0; i < 3; i++) out[i] = g_lend_counts[i], g_lend_counts[i] = 0;
    pthread_mutex_unlock(&g_pool_owner);
}

// `generations` calls of 1..3 then 40 tasks, each counting its runs; returns the calls with a task not run exactly once
typedef struct {
    _Atomic int runs[64];
} pool_check_t;

static void task_pool_check(void *c, int task) {
    pool_check_t *pc = (pool_check_t *)c;
    atomic_fetch_add(&pc->runs[task], 1);
}

FS_API int fs_pool_check(int generations, int nthreads) {
    static pool_check_t pcs[2];
    int bad = 0;
    for (int g = 0; g < generations; g++) {
        pool_check_t *pc = &pcs[g & 1];
        const int n = (g & 1) ? 40 : 1 + g % 3;
        for (int i = 0; i < 64; i++) atomic_store(&pc->runs[i], 0);
        fs_parallel_for(nthreads, task_pool_check, pc, n);
        for (int i = 0; i < 64; i++) {
            if (atomic_load(&pc->runs[i]) != (i < n ? 1 : 0)) {
                bad++;
                break;
            }
        }
    }
    return bad;
}
#endif
