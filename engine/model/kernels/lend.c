// Lent phases: a helper the caller never waits for when the OS has taken its core. In a plain phase the caller waits
// for every claimed task, so a helper descheduled inside one (one core busy with another process) holds the step for
// the rest of the OS slice. In a lent phase a helper computes into its own buffer (helper_t.res) and marks the task
// finished; the caller commits finished tasks itself and recomputes a task whose helper made no progress for
// FS_STALL_S. A phase costs the caller's work plus at most one task.
//
// A helper may still be in a task after its phase ended, so it reads only what stays put: the description, copied from
// static memory and checked against the ticket (a seqlock: the caller closes the ticket before writing the next), and
// the model's memory, not freed or moved while a helper is inside (fs_lend_quiesce_locked). It writes its own buffer
// only. Same function, same inputs: the same bits whoever computes a task.
#define _GNU_SOURCE 1
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool.h"

#define FS_STALL_S 30e-6  // no progress this long: descheduled

// static: a helper late by a step still reads mapped memory
typedef struct {
    lent_run_fn run;
    size_t size;
    _Alignas(64) unsigned char desc[FS_LEND_DESC_MAX];
} lend_desc_t;

static lend_desc_t g_lend;

// ticket closed, then wait until no worker is in run_tasks
static void lend_quiesce(pool_t *p) {
    const uint64_t t = atomic_load(&p->ticket);
    atomic_store(&p->ticket, (t & 0xFFFFFFFF00000000ull) | FS_CLOSED);
    for (int i = 0; i < p->nworkers; i++)
        for (int polls = 0; atomic_load(&g_help[i].busy); polls++) {
            if (polls < 4096) CPU_RELAX();
            else sched_yield();
        }
}

void fs_lend_quiesce_locked(void) {
    pthread_mutex_lock(&g_pool_owner);
    lend_quiesce(&g_pool);
    pthread_mutex_unlock(&g_pool_owner);
}

// copy, check the ticket, run into the helper's buffer, mark finished
static int lent_run(void *d, int task, int tid, uint32_t gen) {
    const lend_desc_t *ld = (const lend_desc_t *)d;
    helper_t *h = &g_help[tid];
    _Alignas(64) unsigned char copy[FS_LEND_DESC_MAX];
    const lent_run_fn run = ld->run;
    const size_t size = ld->size < FS_LEND_DESC_MAX ? ld->size : FS_LEND_DESC_MAX;
    memcpy(copy, ld->desc, size);
    atomic_thread_fence(memory_order_acquire);
    const uint64_t now = atomic_load(&g_pool.ticket);
    if ((uint32_t)(now >> 32) != gen || (uint32_t)now == FS_CLOSED || task >= FS_LEND_MAX_TASKS) return 0;
    atomic_store_explicit(&h->cur, (uint64_t)gen << 32 | (uint32_t)task, memory_order_relaxed);
#if defined(FS_TEST_HOOKS)
    const int stall = atomic_load_explicit(&g_lend_stall, memory_order_relaxed);
    if (stall > 0 && ++h->lent % (unsigned)stall == 0) {  // as if the OS took its core
        const struct timespec nap = {0, 300000};
        nanosleep(&nap, NULL);
    }
#endif
    run(copy, task, h->res, &h->beat);
    atomic_store_explicit(&h->fin[task], gen, memory_order_release);
    return 1;
}

int fs_lend_reserve(int helpers, size_t floats) {
    if (fs_pool_ensure(helpers) < helpers) return 0;
    int short_ = 0;
    for (int i = 0; i < helpers; i++) short_ |= g_help[i].res_floats < floats;
    if (!short_) return 1;
    if (pthread_mutex_trylock(&g_pool_owner) != 0) return 0;  // another engine's call is on the pool
    lend_quiesce(&g_pool);
    int ok = 1;
    for (int i = 0; i < helpers && ok; i++) {
        if (g_help[i].res_floats >= floats) continue;
        free(g_help[i].res);
        g_help[i].res = (float *)malloc(sizeof(float) * floats);
        g_help[i].res_floats = g_help[i].res ? floats : 0;
        ok = g_help[i].res != NULL;
    }
    pthread_mutex_unlock(&g_pool_owner);
    return ok;
}

// The caller claims and runs tasks like any thread, then per helper-claimed task: commit once finished, or compute it
// here after FS_STALL_S without progress.
void fs_lend_for(int nthreads, const void *desc, size_t size, lent_run_fn run, task_fn fn, void *ctx, commit_fn commit,
                 int ntasks) {
    pool_t *p = &g_pool;
    const int helpers = nthreads - 1 < p->nworkers ? nthreads - 1 : p->nworkers;
    if (ntasks < 2 || ntasks > FS_LEND_MAX_TASKS || helpers < 1 || size > FS_LEND_DESC_MAX ||
        pthread_mutex_trylock(&g_pool_owner) != 0) {
        for (int i = 0; i < ntasks; i++) fn(ctx, i);
        return;
    }
    atomic_store(&p->ticket, (uint64_t)p->gen << 32 | FS_CLOSED);
    atomic_thread_fence(memory_order_seq_cst);  // the close before the writes (seqlock)
    g_lend.run = run;
    g_lend.size = size;
    memcpy(g_lend.desc, desc, size);
    atomic_store(&p->lend, 1);
    atomic_store(&p->lfn, lent_run);
    atomic_store(&p->ctx, (void *)&g_lend);
    atomic_store(&p->ntasks, ntasks);
    atomic_store(&p->active, helpers);
    const uint32_t gen = fs_open_generation();
    unsigned char mine[FS_LEND_MAX_TASKS];
    memset(mine, 0, (size_t)ntasks);
    for (uint64_t t = atomic_load(&p->ticket); (uint32_t)t < (uint32_t)ntasks;) {  // only this thread moves the gen
        if (atomic_compare_exchange_weak(&p->ticket, &t, t + 1)) {
            mine[(uint32_t)t] = 1;
            FS_HOOK(g_lend_counts[0]++);
            fn(ctx, (int)(uint32_t)t);
            t = atomic_load(&p->ticket);
        }
    }
    for (int task = 0; task < ntasks; task++) {
        if (mine[task]) continue;
        const uint64_t want = (uint64_t)gen << 32 | (uint32_t)task;
        double since = fs_now_s();
        uint64_t last = 0;
        int watched = -1;
        for (;;) {
            int got = -1, holder = -1;
            for (int i = 0; i < helpers && got < 0; i++)
                if (atomic_load_explicit(&g_help[i].fin[task], memory_order_acquire) == gen) got = i;
            if (got >= 0) {
                commit(ctx, g_help[got].res, task);
                FS_HOOK(g_lend_counts[1]++);
                break;
            }
            for (int i = 0; i < helpers && holder < 0; i++)
                if (atomic_load_explicit(&g_help[i].cur, memory_order_relaxed) == want) holder = i;
            const uint64_t beat = holder >= 0 ? atomic_load_explicit(&g_help[holder].beat, memory_order_relaxed) : 0;
            const double now = fs_now_s();
            if (holder != watched || beat != last) {
                since = now, last = beat, watched = holder;
            } else if (now - since > FS_STALL_S) {  // descheduled or never started
                FS_HOOK(g_lend_counts[2]++);
                fn(ctx, task);
                break;
            }
            CPU_RELAX();
        }
    }
    atomic_store(&p->ticket, (uint64_t)gen << 32 | FS_CLOSED);  // a late helper's claim and check fail
    atomic_thread_fence(memory_order_seq_cst);
    pthread_mutex_unlock(&g_pool_owner);
}
