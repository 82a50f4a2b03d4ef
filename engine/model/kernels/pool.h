// The library's one thread runtime: a pool of pthreads (pool.c) and lent phases on it (lend.c). Internal.
#ifndef FS_POOL_H
#define FS_POOL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fs.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define FS_MAX_THREADS 64
#define FS_CLOSED 0xFFFFFFFFu  // task index of a closed generation

typedef void (*task_fn)(void *ctx, int task);
typedef int (*lent_fn)(void *desc, int task, int tid, uint32_t gen);  // 0: its phase ended

// The claim and done counters on their own cache lines: a claim moves one line, not the one the others poll.
typedef struct {
    _Alignas(64) _Atomic uint64_t ticket;  // gen << 32 | next task
    _Alignas(64) _Atomic int done;  // tasks done in this generation
    _Alignas(64) pthread_t th[FS_MAX_THREADS];
    int nworkers;  // started workers (not the caller)
    _Atomic(task_fn) fn;
    _Atomic(lent_fn) lfn;  // a lent generation's task
    _Atomic(void *) ctx;
    _Atomic int ntasks;
    _Atomic int active;  // workers 0..active-1 take part
    _Atomic int sleepers;
    _Atomic int stop;
    _Atomic int lend;  // lent: a claim can outlive its generation
    uint32_t gen;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} pool_t;

#define FS_LEND_MAX_TASKS 256

// A helper's side of lent phases: written by it, read by the caller.
typedef struct {
    _Alignas(64) _Atomic uint64_t beat;  // bumped per unit of work
    _Atomic uint64_t cur;  // gen << 32 | task in hand
    _Atomic int busy;  // inside run_tasks: may read the model
    _Atomic uint32_t fin[FS_LEND_MAX_TASKS];  // per task: the generation it finished it in
    float *res;  // its lent tasks' outputs
    size_t res_floats;
    unsigned lent;  // lent tasks begun (test stalls)
} helper_t;

extern pool_t g_pool;
extern pthread_mutex_t g_pool_owner;  // one caller at a time
extern helper_t g_help[FS_MAX_THREADS];

int fs_pool_ensure(int workers);  // returns the workers running
uint32_t fs_open_generation(void);  // opens the next generation, wakes parked workers
void fs_note_caller_cpu(void);  // each entry point first: workers keep off this CPU
double fs_now_s(void);

// fn(ctx, 0..ntasks-1) on the caller and the workers (at least nthreads - 1); returns when all are done
void fs_parallel_for(int nthreads, task_fn fn, void *ctx, int ntasks);
// fn(ctx, row) over runs of rows, `claims` runs per thread; last_first: the last run first
void fs_parallel_rows_by(int nthreads, task_fn fn, void *ctx, int n, int claims, int last_first);
// light rows: on the caller alone when n < 4 nthreads, else FS_CLAIMS runs per thread
void fs_parallel_rows(int nthreads, task_fn fn, void *ctx, int n);

// Claims per thread: enough to balance a slowed thread, few enough to amortise a claim.
#define FS_CLAIMS 8
#define FS_ATT_CLAIMS 24  // attention runs, longest tokens first
// short decode matmul phases: 2 claims per thread (bench.native_phases)
static inline int fs_mm_claims(int B) { return B < 32 ? 2 : FS_CLAIMS; }

// items [*i0, *i1) of `task`, n items in runs of `per`; last_first: task 0 takes the last run
static inline void task_span(int task, int per, int n, int last_first, int *i0, int *i1) {
    if (last_first) task = (n + per - 1) / per - 1 - task;
    *i0 = task * per;
    *i1 = *i0 + per < n ? *i0 + per : n;
}

// Lent phases (lend.c): a helper runs `run` on its copy of desc (size bytes), outputs in res; the caller runs fn(ctx,
// task) for its claims and a stalled helper's, commit(ctx, res, task) for a finished one. Same bits either way.
#define FS_LEND_DESC_MAX 1024
typedef void (*lent_run_fn)(void *desc, int task, float *res, _Atomic uint64_t *beat);
typedef void (*commit_fn)(void *ctx, const float *res, int task);
void fs_lend_for(int nthreads, const void *desc, size_t size, lent_run_fn run, task_fn fn, void *ctx, commit_fn commit,
                 int ntasks);
int fs_lend_reserve(int helpers, size_t floats);  // helper buffers >= floats each; 0: no lending now
void fs_lend_quiesce_locked(void);  // no helper in a lent task after it: memory may move

static inline void fs_bump(_Atomic uint64_t *beat) {  // the helper's own line: no locked add
    if (beat) atomic_store_explicit(beat, atomic_load_explicit(beat, memory_order_relaxed) + 1, memory_order_relaxed);
}

// Test hooks (hooks.c, -DFS_TEST_HOOKS): the test library only.
#if defined(FS_TEST_HOOKS)
extern int g_lend_on;
extern _Atomic int g_lend_stall;
extern int64_t g_lend_counts[3];
#define FS_LEND_ON g_lend_on
#define FS_HOOK(stmt) stmt
#else
#define FS_LEND_ON 1
#define FS_HOOK(stmt) ((void)0)
#endif
#endif
