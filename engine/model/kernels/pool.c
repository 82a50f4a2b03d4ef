// The thread pool: the library's only thread runtime. Workers spin (bounded) for the next generation of tasks, then
// park on a condition variable: an idle engine costs no CPU, back-to-back phases no wake-up. Tasks are claimed one at a
// time from a ticket, so a thread the OS slows down does fewer. One caller at a time; a second runs its tasks alone.
#define _GNU_SOURCE 1  // sched_getcpu, sched_setaffinity, CPU_SET
#include <sched.h>
#include <time.h>

#include "pool.h"

#define FS_SPIN_POLLS 20000  // idle polls before parking

typedef struct {
    int tid;
} worker_arg_t;

pool_t g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
pthread_mutex_t g_pool_owner = PTHREAD_MUTEX_INITIALIZER;
helper_t g_help[FS_MAX_THREADS];
static pthread_mutex_t g_pool_grow = PTHREAD_MUTEX_INITIALIZER;
static worker_arg_t g_args[FS_MAX_THREADS];

double fs_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// claims and runs tasks of `gen` until none is left; tid -1: the caller
static void run_tasks(pool_t *p, uint32_t gen, int tid) {
    if (tid >= 0) atomic_store(&g_help[tid].busy, 1);
    uint64_t t = atomic_load(&p->ticket);
    for (;;) {
        if ((uint32_t)(t >> 32) != gen) break;
        if ((uint32_t)t >= (uint32_t)atomic_load(&p->ntasks)) break;
        if (atomic_compare_exchange_weak(&p->ticket, &t, t + 1)) {
            // A plain generation cannot end before its tasks are done, so fn, ctx, ntasks are its own: the caller
            // closes the ticket before it writes the next generation's fields, and a close after the ntasks read fails
            // the exchange. A lent generation can end under a claim: lfn checks the ticket before it reads the phase.
            task_fn fn = atomic_load(&p->fn);
            lent_fn lfn = atomic_load(&p->lfn);
            void *ctx = atomic_load(&p->ctx);
            if (atomic_load(&p->lend)) {
                if (tid < 0 || !lfn(ctx, (int)(uint32_t)t, tid, gen)) break;
            } else {
                // an ended lent generation's claim may have read a later plain one's fields: the ticket says so
                atomic_thread_fence(memory_order_acquire);
                const uint64_t now = atomic_load(&p->ticket);
                if ((uint32_t)(now >> 32) != gen || (uint32_t)now == FS_CLOSED) break;
                fn(ctx, (int)(uint32_t)t);
                atomic_fetch_add(&p->done, 1);
            }
            t = atomic_load(&p->ticket);
        }
    }
    if (tid >= 0) atomic_store(&g_help[tid].busy, 0);
}

// Workers keep off the caller's CPU (noted per entry point): with another process busy on one of two cores, the OS
// otherwise put the caller, which drives every phase, on the busy core half the time.
static _Atomic int g_caller_cpu = -1;

void fs_note_caller_cpu(void) { atomic_store_explicit(&g_caller_cpu, sched_getcpu(), memory_order_relaxed); }

// `allowed` less the caller's CPU; avoid: the CPU kept off now
static void keep_off_caller(const cpu_set_t *allowed, int *avoid) {
    const int cpu = atomic_load_explicit(&g_caller_cpu, memory_order_relaxed);
    if (cpu == *avoid) return;
    cpu_set_t cs = *allowed;
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_CLR(cpu, &cs);
    if (CPU_COUNT(&cs) == 0) cs = *allowed;  // one CPU allowed: nothing to keep off
    sched_setaffinity(0, sizeof cs, &cs);
    *avoid = cpu;
}

static void *worker_main(void *arg) {
    const worker_arg_t *a = (const worker_arg_t *)arg;
    pool_t *p = &g_pool;
    cpu_set_t allowed;
    int avoid = -1;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_ZERO(&allowed);
    uint32_t seen = (uint32_t)(atomic_load(&p->ticket) >> 32);
    for (;;) {
        uint64_t t;
        int polls = 0;
        for (;;) {
            if (atomic_load(&p->stop)) return NULL;
            t = atomic_load(&p->ticket);
            if ((uint32_t)(t >> 32) != seen) break;
            if (polls++ < FS_SPIN_POLLS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((uint32_t)(atomic_load(&p->ticket) >> 32) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            polls = 0;
        }
        seen = (uint32_t)(t >> 32);
        if (CPU_COUNT(&allowed) > 1) keep_off_caller(&allowed, &avoid);
        if (a->tid < atomic_load(&p->active)) run_tasks(p, seen, a->tid);
    }
}

int fs_pool_ensure(int workers) {
    pool_t *p = &g_pool;
    if (workers > FS_MAX_THREADS) workers = FS_MAX_THREADS;
    if (p->nworkers >= workers) return p->nworkers;
    pthread_mutex_lock(&g_pool_grow);
    while (p->nworkers < workers) {
        worker_arg_t *a = &g_args[p->nworkers];
        a->tid = p->nworkers;
        if (pthread_create(&p->th[p->nworkers], NULL, worker_main, a) != 0) break;
        p->nworkers++;
    }
    pthread_mutex_unlock(&g_pool_grow);
    return p->nworkers;
}

uint32_t fs_open_generation(void) {
    pool_t *p = &g_pool;
    const uint32_t gen = ++p->gen;
    atomic_store(&p->ticket, (uint64_t)gen << 32);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return gen;
}

void fs_parallel_for(int nthreads, task_fn fn, void *ctx, int ntasks) {
    pool_t *p = &g_pool;
    const int want = nthreads > 1 && ntasks > 1;
    if (!want || pthread_mutex_trylock(&g_pool_owner) != 0) {
        for (int i = 0; i < ntasks; i++) fn(ctx, i);
        return;
    }
    const int workers = fs_pool_ensure(nthreads - 1);
    if (workers == 0) {
        pthread_mutex_unlock(&g_pool_owner);
        for (int i = 0; i < ntasks; i++) fn(ctx, i);
        return;
    }
    atomic_store(&p->ticket, (uint64_t)p->gen << 32 | FS_CLOSED);  // close the last generation
    atomic_store(&p->lend, 0);
    atomic_store(&p->active, workers);
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->ntasks, ntasks);
    atomic_store(&p->done, 0);
    const uint32_t gen = fs_open_generation();
    run_tasks(p, gen, -1);
    for (int polls = 0; atomic_load(&p->done) < ntasks; polls++) {
        if (polls < 4096) CPU_RELAX();
        else sched_yield();  // a descheduled worker holds a task: yield
    }
    pthread_mutex_unlock(&g_pool_owner);
}

// Light rows in runs of consecutive rows: a claim per row cost as much as the row and split neighbours' cache lines.
typedef struct {
    task_fn fn;
    void *ctx;
    int n, per, last_first;
} rows_t;

static void task_rows(void *c, int task) {
    const rows_t *r = (const rows_t *)c;
    int i0, i1;
    task_span(task, r->per, r->n, r->last_first, &i0, &i1);
    for (int i = i0; i < i1; i++) r->fn(r->ctx, i);
}

void fs_parallel_rows_by(int nthreads, task_fn fn, void *ctx, int n, int claims, int last_first) {
    const int per = n / (nthreads * claims);
    if (per <= 1) {
        fs_parallel_for(nthreads, fn, ctx, n);
        return;
    }
    rows_t r = {.fn = fn, .ctx = ctx, .n = n, .per = per, .last_first = last_first};
    fs_parallel_for(nthreads, task_rows, &r, (n + per - 1) / per);
}

void fs_parallel_rows(int nthreads, task_fn fn, void *ctx, int n) {
    if (n < 4 * nthreads) {
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    fs_parallel_rows_by(nthreads, fn, ctx, n, FS_CLAIMS, 0);
}
