// The fused decode step: every layer of a Llama-family model for a batch of decode tokens (one new
// token per sequence) in one native call, with no Python or torch dispatch between the ops.
//
// Why: a batch-1 decode step of SmolLM2-135M is ~900 small ops through torch (norms, RoPE, KV writes,
// attention, activations, 120 quantized matmuls), and their dispatch cost more than the matmuls. Here
// a step is 7 parallel phases per layer over one thread pool owned by this library:
//   norm     per token: RMSNorm, activations quantized per block of 32 (as qgemm_f32 does)
//   qkv      per weight group: the fused QKV projection (+ bias)
//   attend   per (token, KV head): RoPE of the query heads and the key, the K/V write into the paged
//            pool (fp32, bf16 or fp16), attention over the token's cached keys
//   quant    per token: attention output quantized
//   o        per weight group: output projection added into the residual
//   norm     per token (post-attention norm)
//   mlp      per run of 32-channel FFN blocks: their gate groups, then their up groups, silu(gate) * up,
//            quantized in place
//   down     per weight group: down projection added into the residual
// then the final norm and the LM head. The matmul pieces are qgemm.c's (same integer dots, same float
// order), attention is paged_decode.c's; the torch model (engine/model/llama.py) stays the reference
// the tests compare against.
//
// Threads: a pool of pthreads that spin briefly (bounded) for the next phase and then park on a
// condition variable, so an idle engine costs no CPU and a step's back-to-back phases do not pay a
// wake-up each. Tasks are claimed one at a time from a shared counter (dynamic), so a thread that
// the OS slows down does fewer tasks instead of holding the others at the phase's end. How many threads
// a step uses is the caller's choice per call (engine/model/native_step.py measures which is faster).
// A decode call of up to FS_LEND_MAX_B tokens lends its heavy phases instead ("Lent phases" below): the caller
// never waits for a helper the OS has descheduled.
#define _GNU_SOURCE 1  // sched_getcpu, sched_setaffinity, CPU_SET
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif
#include "half.h"
#include "simd_exp.h"
#include "step_parts.h"

enum { KV_F32 = 0, KV_BF16 = 1, KV_F16 = 2 };

// ---------------------------------------------------------------------------------------------
// Thread pool

#define FS_MAX_THREADS 64
#define FS_MAX_PARTS 64  // attention parts per token: 64 x 512 = 32,768 keys

typedef void (*task_fn)(void *ctx, int task);
typedef int (*lent_fn)(void *desc, int task, int tid, uint32_t gen);  // a lent task (lend_for); 0: its phase ended

// The two counters every task touches, each on its own cache line, apart from the fields a call writes once and the
// workers only read: a claim or a finished task moves one line between cores, not the line the others poll.
typedef struct {
    _Alignas(64) _Atomic uint64_t ticket;  // generation << 32 | next task index
    _Alignas(64) _Atomic int done;         // tasks finished in this generation
    _Alignas(64) pthread_t th[FS_MAX_THREADS];
    int nworkers;                 // started workers (the caller's thread is not one of them)
    _Atomic(task_fn) fn;
    _Atomic(lent_fn) lfn;         // a lent generation's task (fn unused)
    _Atomic(void *) ctx;
    _Atomic int ntasks;
    _Atomic int active;           // workers 0..active-1 take part in this generation
    _Atomic int sleepers;
    _Atomic int stop;
    _Atomic int spin;             // idle polls before a worker parks
    _Atomic int lend;             // this generation's tasks are lent (lend_for below): a claim can outlive it
    uint32_t gen;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} pool_t;

typedef struct {
    pool_t *pool;
    int tid;
} worker_arg_t;

static pool_t g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .spin = 20000};
static pthread_mutex_t g_pool_grow = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_pool_owner = PTHREAD_MUTEX_INITIALIZER;  // one caller's job at a time
static worker_arg_t g_args[FS_MAX_THREADS];

#define FS_CLOSED 0xFFFFFFFFu  // a ticket's task index once its generation is over: no task left to claim

// ---------------------------------------------------------------------------------------------
// Lent phases: a helper the caller never waits for when the OS has taken its core away.
//
// With one core busy (another process), a second thread shares that core: the OS runs it for a slice of a few ms,
// then the other process for one. In a plain phase the caller waits at the phase's end for every claimed task, so a
// helper descheduled in the middle of one holds the whole step for the rest of the other process's slice (two
// threads beside a busy loop: half the steps ~3.2 ms, a tenth 10-11 ms). A lent phase (lend_for) runs the same tasks,
// but a helper computes into its own buffer (helper_t.res) and marks the task finished; the caller copies finished
// tasks' outputs into place itself, and a task whose helper has made no progress for FS_STALL_S it computes again on
// its own thread. The helper, when it runs again, finishes into its own buffer, which nobody reads for that task any
// more. So a lent phase takes the caller's own work plus at most one task, and a helper that runs helps.
//
// What that asks: a helper may still be inside a task after its phase (and step) ended, so it reads only what stays
// put: the phase's description is copied from static memory under a check of the ticket (a seqlock: the caller
// closes the ticket before it writes the next phase's description), and its pointers are the model's weights and
// scratch, which are not freed or moved while a helper is inside a task (lend_quiesce). Its writes go to its own
// buffer only. Outputs are bit for bit the same whoever computes a task: the same function on the same inputs.
#define FS_LEND_MAX_TASKS 256
#define FS_LEND_MAX_B 8       // decode batches up to this many tokens are lent (helper buffers sized for it)
#define FS_STALL_S 30e-6      // a helper whose progress counter has not moved for this long is taken as descheduled

typedef struct {
    _Alignas(64) _Atomic uint64_t beat;  // bumped by the helper per weight group: it is running
    _Atomic uint64_t cur;                // gen << 32 | task it is computing
    _Atomic int busy;                    // inside run_tasks: may be reading the model's memory
    _Atomic uint32_t fin[FS_LEND_MAX_TASKS];  // per task: the generation in which this helper finished it
    float *res;                          // its outputs of lent tasks; written by it only, read by the caller
    size_t res_floats;
    unsigned lent;                       // lent tasks it has begun (for fs_set_lend_stall)
} helper_t;

static helper_t g_help[FS_MAX_THREADS];

// Waits until no worker is inside run_tasks, after closing the ticket so that none enters it for this generation:
// the caller may then free or move what a lent task reads. Called where memory changes (scratch grows, a model is
// freed, helper buffers grow): rarely.
static void lend_quiesce(pool_t *p) {
    const uint64_t t = atomic_load(&p->ticket);
    atomic_store(&p->ticket, (t & 0xFFFFFFFF00000000ull) | FS_CLOSED);
    for (int i = 0; i < p->nworkers; i++)
        for (int polls = 0; atomic_load(&g_help[i].busy); polls++) {
            if (polls < 4096) CPU_RELAX();
            else sched_yield();
        }
}

static void run_tasks(pool_t *p, uint32_t gen, int tid) {
    if (tid >= 0) atomic_store(&g_help[tid].busy, 1);
    uint64_t t = atomic_load(&p->ticket);
    for (;;) {
        if ((uint32_t)(t >> 32) != gen) break;
        if ((uint32_t)t >= (uint32_t)atomic_load(&p->ntasks)) break;
        if (atomic_compare_exchange_weak(&p->ticket, &t, t + 1)) {
            // Claimed task (uint32_t)t of `gen`. A plain generation cannot end before it is done, so fn and ctx
            // are still this generation's, and so was the ntasks read above: the caller closes the ticket before
            // it writes the next one's fields, and a close between that read and this exchange makes the exchange
            // fail. (Without the close, a worker that read the next call's larger ntasks while the ticket was
            // still this one's claimed a task past the end, ran the next call's fn on it and counted it done
            // there: that call returned with one of its tasks still running.) A lent generation can end while a
            // helper holds a claim: lent_run checks that it has not before it reads the phase.
            task_fn fn = atomic_load(&p->fn);
            lent_fn lfn = atomic_load(&p->lfn);
            void *ctx = atomic_load(&p->ctx);
            if (atomic_load(&p->lend)) {  // lfn copies the phase's description and checks the ticket itself
                if (tid < 0 || !lfn(ctx, (int)(uint32_t)t, tid, gen)) break;
            } else {
                // a claim of a lent generation that ended may have read a later plain one's fields: the caller
                // closed the ticket before writing them, so the ticket read after them says so
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

// Workers keep off the CPU the caller runs on (g_caller_cpu, noted at each native call's start): with another
// process busy on one core of two, the OS otherwise put the caller and that process on one core about half the
// time (three runnable threads on two cores), and the caller drives every phase. A worker re-pins itself (within the
// CPUs it was allowed at its start) when the caller's CPU changes; fs_set_avoid(0) turns it off.
static _Atomic int g_caller_cpu = -1;
static _Atomic int g_avoid_on = 1;

static void note_caller_cpu(void) {
    if (atomic_load_explicit(&g_avoid_on, memory_order_relaxed))
        atomic_store_explicit(&g_caller_cpu, sched_getcpu(), memory_order_relaxed);
}

void fs_set_avoid(int on) {
    atomic_store(&g_avoid_on, on != 0);
    atomic_store(&g_caller_cpu, -1);
}

// The worker's CPU mask: `allowed` less the caller's CPU while avoiding (`avoid`: the CPU it keeps off now, -1 none).
static void keep_off_caller(const cpu_set_t *allowed, int *avoid) {
    const int cpu = atomic_load_explicit(&g_avoid_on, memory_order_relaxed)
                        ? atomic_load_explicit(&g_caller_cpu, memory_order_relaxed) : -1;
    if (cpu == *avoid) return;
    cpu_set_t cs = *allowed;
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_CLR(cpu, &cs);
    if (CPU_COUNT(&cs) == 0) cs = *allowed;  // allowed one CPU only: nothing to keep off
    sched_setaffinity(0, sizeof cs, &cs);
    *avoid = cpu;
}

static void *worker_main(void *arg) {
    worker_arg_t *a = (worker_arg_t *)arg;
    pool_t *p = a->pool;
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
            if (polls++ < atomic_load_explicit(&p->spin, memory_order_relaxed)) {
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

static int pool_ensure(pool_t *p, int workers) {
    if (workers > FS_MAX_THREADS) workers = FS_MAX_THREADS;
    if (p->nworkers >= workers) return p->nworkers;
    pthread_mutex_lock(&g_pool_grow);
    while (p->nworkers < workers) {
        worker_arg_t *a = &g_args[p->nworkers];
        a->pool = p;
        a->tid = p->nworkers;
        if (pthread_create(&p->th[p->nworkers], NULL, worker_main, a) != 0) break;
        p->nworkers++;
    }
    pthread_mutex_unlock(&g_pool_grow);
    return p->nworkers;
}

// Opens the next generation for claims (its fields written) and wakes parked workers; returns its number.
static uint32_t open_generation(pool_t *p) {
    const uint32_t gen = ++p->gen;
    atomic_store(&p->ticket, (uint64_t)gen << 32);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return gen;
}

// Runs fn(ctx, 0..ntasks-1) on the caller's thread and up to nthreads-1 pool workers; returns when
// every task is done. The pool serves one caller at a time: a second thread calling meanwhile (two
// engines in one process) runs its tasks on its own thread instead of waiting.
static void parallel_for(int nthreads, task_fn fn, void *ctx, int ntasks) {
    pool_t *p = &g_pool;
    const int want = nthreads > 1 && ntasks > 1;
    if (!want || pthread_mutex_trylock(&g_pool_owner) != 0) {
        for (int i = 0; i < ntasks; i++) fn(ctx, i);
        return;
    }
    const int workers = pool_ensure(p, nthreads - 1);
    if (workers == 0) {
        pthread_mutex_unlock(&g_pool_owner);
        for (int i = 0; i < ntasks; i++) fn(ctx, i);
        return;
    }
    atomic_store(&p->ticket, (uint64_t)p->gen << 32 | FS_CLOSED);  // the last generation: nothing to claim
    atomic_store(&p->lend, 0);
    atomic_store(&p->active, workers);
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->ntasks, ntasks);
    atomic_store(&p->done, 0);
    const uint32_t gen = open_generation(p);
    run_tasks(p, gen, -1);
    for (int polls = 0; atomic_load(&p->done) < ntasks; polls++) {
        if (polls < 4096) CPU_RELAX();
        else sched_yield();  // a worker holding a task was descheduled: give its core back
    }
    pthread_mutex_unlock(&g_pool_owner);
}

// A phase of many light row tasks (norms, RoPE + K/V writes, the attention merge, quantization: ~1 us each in a
// prefill step) run as ~8 claims per thread of consecutive rows each: one claim per row cost about as much as the row
// (a 256-token prefill's four light phases 22 -> 8 ms, the Xeon) and split neighbouring rows' scale and sum entries,
// which share cache lines, between the threads. A row's task is the same call either way: the same bits.
// Claims per thread of a phase: ~8 balance a slowed thread and amortise a claim (matmul groups, FFN blocks, row runs);
// attention parts take 24 runs, handed out longest tokens first (a prefill chunk's token t reads t + 1 keys), so that
// the last runs, the ones that decide when the phase ends, are the short ones (21.3-22.7 vs 23.1-23.7 ms a 256-token
// prefill, the Xeon).
#define FS_CLAIMS 8
// A decode step's matmul phases are short (a batch-1 QKV projection ~12 us on one thread): there each claim moved the
// counters' cache lines between cores for a task of ~0.6 us, and 2 claims per thread made the whole batch-1 step ~10%
// faster on two threads than 8 (the Xeon, bench.native_phases alternating); prefill chunks keep 8.
static int mm_claims(int B) { return B < 32 ? 2 : FS_CLAIMS; }
#define FS_ATT_CLAIMS 24
typedef struct {
    task_fn fn;
    void *ctx;
    int n, per, last_first;
} rows_t;

// Items [*i0, *i1) of task `task` when n items are cut into runs of `per` (the last run shorter); last_first: the
// runs handed out in reverse order (task 0 takes the last run).
static inline void task_span(int task, int per, int n, int last_first, int *i0, int *i1) {
    if (last_first) task = (n + per - 1) / per - 1 - task;
    *i0 = task * per;
    *i1 = *i0 + per < n ? *i0 + per : n;
}

static void task_rows(void *c, int task) {
    const rows_t *r = (const rows_t *)c;
    int i0, i1;
    task_span(task, r->per, r->n, r->last_first, &i0, &i1);
    for (int i = i0; i < i1; i++) r->fn(r->ctx, i);
}

static void parallel_rows_by(int nthreads, task_fn fn, void *ctx, int n, int claims, int last_first) {
    const int per = n / (nthreads * claims);
    if (per <= 1) {
        parallel_for(nthreads, fn, ctx, n);
        return;
    }
    rows_t r = {.fn = fn, .ctx = ctx, .n = n, .per = per, .last_first = last_first};
    parallel_for(nthreads, task_rows, &r, (n + per - 1) / per);
}

static void parallel_rows(int nthreads, task_fn fn, void *ctx, int n) {
    if (n < 4 * nthreads) {  // a decode step's few light rows (RoPE of 3 KV heads: ~1 us in all) cost less than a handoff
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    parallel_rows_by(nthreads, fn, ctx, n, FS_CLAIMS, 0);
}

// A check of the pool itself (tests/engine/test_thread_pool.py): `generations` parallel_for calls of
// alternating sizes (1..3 tasks, then 40), each task counting its own runs; returns how many calls came back
// with a task not run exactly once (run twice, or still running: the caller returned early).
typedef struct {
    _Atomic int runs[64];
} pool_check_t;

static void task_pool_check(void *c, int task) {
    pool_check_t *pc = (pool_check_t *)c;
    atomic_fetch_add(&pc->runs[task], 1);
}

int fs_pool_check(int generations, int nthreads) {
    static pool_check_t pcs[2];
    int bad = 0;
    for (int g = 0; g < generations; g++) {
        pool_check_t *pc = &pcs[g & 1];
        const int n = (g & 1) ? 40 : 1 + g % 3;
        for (int i = 0; i < 64; i++) atomic_store(&pc->runs[i], 0);
        parallel_for(nthreads, task_pool_check, pc, n);
        for (int i = 0; i < 64; i++) {
            if (atomic_load(&pc->runs[i]) != (i < n ? 1 : 0)) {
                bad++;
                break;
            }
        }
    }
    return bad;
}

void fs_set_spin(int polls) { atomic_store(&g_pool.spin, polls < 0 ? 0 : polls); }

// Optional phase timers (fs_profile(1) on, then fs_profile_read): wall time of each kind of phase of the
// step, summed over calls, for finding where a step's time goes (bench/decode_split.py). Off by default.
enum { PH_NORM, PH_QKV, PH_ROPE, PH_ATTEND, PH_COMBINE, PH_QUANT, PH_O, PH_MLP, PH_DOWN, PH_HEAD, PH_COUNT };
static int g_profile = 0;
static double g_phase_s[PH_COUNT];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void fs_profile(int on) {
    g_profile = on;
    for (int i = 0; i < PH_COUNT; i++) g_phase_s[i] = 0.0;
}

int fs_profile_read(double *out, int n) {
    for (int i = 0; i < n && i < PH_COUNT; i++) out[i] = g_phase_s[i];
    return PH_COUNT;
}

#define TIMED(ph, stmt)                                   \
    do {                                                  \
        const double t_ = g_profile ? now_s() : 0.0;      \
        stmt;                                             \
        if (g_profile) g_phase_s[ph] += now_s() - t_;     \
    } while (0)

int fs_pool_threads(void) { return g_pool.nworkers + 1; }

int fs_max_batch(void) { return FS_MAX_BATCH; }

// ---------------------------------------------------------------------------------------------
// The model

typedef struct {
    const uint8_t *w;
    const uint16_t *wd, *wm;  // wm: 4-bit weights only
    const float *bias;        // may be NULL
    int n, k, q4;
} qmat_t;

typedef struct {
    const float *in_norm, *post_norm;
    qmat_t qkv, o, gu, down;
} layer_t;

typedef struct {
    int L, hidden, H, KVH, D, I, V, act16;
    float eps, scale;
    layer_t *layers;
    const float *norm;
    qmat_t head;
    const float *cos, *sin;  // [max_pos, D]; sin carries rotate-half's signs (llama.py's RotaryEmbedding)
    int cap;                 // tokens the scratch below holds
    int64_t *lend_slots;     // a lent step's copy of its tokens' key slots (lend_tables); only ever valid slots
    size_t lend_slots_cap;
    float *x, *h, *qkv, *attn, *act;
    uint8_t *xq, *aq;        // quantized activations: K <= max(hidden, H*D) and K = I
    float *xd, *ad;
    int32_t *xs, *as;
} model_t;

static qmat_t make_mat(const int64_t *p, int n, int k, int q4) {
    qmat_t m = {(const uint8_t *)(intptr_t)p[0], (const uint16_t *)(intptr_t)p[1], (const uint16_t *)(intptr_t)p[2],
                (const float *)(intptr_t)p[3], n, k, q4};
    return m;
}

static int kb_of(int k) { return (k + FS_QK - 1) / FS_QK; }

// dims: L, hidden, H, KVH, D, I, V, q4 (layer matrices), q4_head, act16.
// ptrs: per layer [in_norm, post_norm, then (w, wd, wm, bias) for qkv, o, gate_up, down] (18 each),
//       then final norm, head (w, wd, wm), cos, sin.
void *fs_model_new(const int32_t *dims, float eps, const int64_t *ptrs) {
    model_t *m = (model_t *)calloc(1, sizeof(model_t));
    if (!m) return NULL;
    m->L = dims[0], m->hidden = dims[1], m->H = dims[2], m->KVH = dims[3], m->D = dims[4], m->I = dims[5];
    m->V = dims[6], m->act16 = dims[9];
    const int q4 = dims[7], q4_head = dims[8];
    m->eps = eps;
    m->scale = 1.f / sqrtf((float)m->D);
    m->layers = (layer_t *)calloc((size_t)m->L, sizeof(layer_t));
    if (!m->layers) {
        free(m);
        return NULL;
    }
    const int qkv_n = (m->H + 2 * m->KVH) * m->D;
    for (int l = 0; l < m->L; l++) {
        const int64_t *p = ptrs + (int64_t)l * 18;
        layer_t *ly = &m->layers[l];
        ly->in_norm = (const float *)(intptr_t)p[0];
        ly->post_norm = (const float *)(intptr_t)p[1];
        ly->qkv = make_mat(p + 2, qkv_n, m->hidden, q4);
        ly->o = make_mat(p + 6, m->hidden, m->H * m->D, q4);
        ly->gu = make_mat(p + 10, 2 * m->I, m->hidden, q4);
        ly->down = make_mat(p + 14, m->hidden, m->I, q4);
    }
    const int64_t *t = ptrs + (int64_t)m->L * 18;
    m->norm = (const float *)(intptr_t)t[0];
    const int64_t head[4] = {t[1], t[2], t[3], 0};
    m->head = make_mat(head, m->V, m->hidden, q4_head);
    m->cos = (const float *)(intptr_t)t[4];
    m->sin = (const float *)(intptr_t)t[5];
    return m;
}

static void free_scratch(model_t *m) {
    free(m->x), free(m->h), free(m->qkv), free(m->attn), free(m->act);
    free(m->xq), free(m->aq), free(m->xd), free(m->ad), free(m->xs), free(m->as);
    m->x = m->h = m->qkv = m->attn = m->act = NULL;
    m->xq = m->aq = NULL;
    m->xd = m->ad = NULL;
    m->xs = m->as = NULL;
    m->cap = 0;
}

// A helper late in a lent task may still read this model's weights and scratch: none is inside one once this returns.
static void lend_quiesce_locked(void) {
    pthread_mutex_lock(&g_pool_owner);
    lend_quiesce(&g_pool);
    pthread_mutex_unlock(&g_pool_owner);
}

void fs_quiesce(void) { lend_quiesce_locked(); }  // the caller frees or moves memory a late helper may read (its K/V pool)

void fs_model_free(void *handle) {
    model_t *m = (model_t *)handle;
    if (!m) return;
    lend_quiesce_locked();
    free_scratch(m);
    free(m->lend_slots);
    free(m->layers);
    free(m);
}

static int ensure_scratch(model_t *m, int B) {
    if (m->cap >= B) return 1;
    lend_quiesce_locked();
    free_scratch(m);
    const int kx = m->hidden > m->H * m->D ? m->hidden : m->H * m->D;
    const size_t kbx = (size_t)kb_of(kx), kbi = (size_t)kb_of(m->I), b = (size_t)B;
    m->x = (float *)malloc(sizeof(float) * b * (size_t)m->hidden);
    m->h = (float *)malloc(sizeof(float) * b * (size_t)kx);
    m->qkv = (float *)malloc(sizeof(float) * b * (size_t)((m->H + 2 * m->KVH) * m->D));
    m->attn = (float *)malloc(sizeof(float) * b * (size_t)(m->H * m->D));
    m->act = (float *)malloc(sizeof(float) * b * kbi * FS_QK);
    m->xq = (uint8_t *)malloc(2 * b * kbx * FS_QK);
    m->aq = (uint8_t *)malloc(2 * b * kbi * FS_QK);
    m->xd = (float *)malloc(sizeof(float) * b * kbx);
    m->ad = (float *)malloc(sizeof(float) * b * kbi);
    m->xs = (int32_t *)malloc(sizeof(int32_t) * b * kbx);
    m->as = (int32_t *)malloc(sizeof(int32_t) * b * kbi);
    if (!m->x || !m->h || !m->qkv || !m->attn || !m->act || !m->xq || !m->aq || !m->xd || !m->ad || !m->xs || !m->as) {
        free_scratch(m);
        return 0;
    }
    m->cap = B;
    return 1;
}

// One step's arguments, shared by the phase tasks.
typedef struct {
    model_t *m;
    int B, Lmax, kv_type, nthreads, l;
    const int64_t *pos, *slot, *slots, *ctx, *slot_row;  // slot_row: the slots row of each token (NULL: its own)
    int att_parts;     // attention parts per (token, KV head): the most any token of the call has
    float *att;        // [B, KVH, att_parts, G * (D + 2)] the parts' outputs, maxima and sums
    uint8_t *kv;       // [L, 2, S, KVH, D] of kv_type
    int64_t S;
    // current matmul phase
    const qmat_t *mat;
    const uint8_t *xq;
    const float *xd;
    const int32_t *xs;
    float *y;          // [B, ldy]
    int ldy, accumulate, groups_per_task, ngroups;
    int mlp_blocks;    // FFN channel blocks (of 32) per task of the mlp phase
    const float *norm_w;
    // where the mlp phase writes (the model's buffers; a helper's own in a lent task)
    float *act, *ad;
    uint8_t *aq;
    int32_t *as;
    int lend;                 // the matmul and mlp phases are lent (lend_for), the light ones run on the caller
    int raw;                  // a helper's copy: outputs stored as computed, no bias or accumulation (the caller's copy adds them)
    _Atomic uint64_t *beat;   // a helper's copy: its progress counter
    task_fn lent_task;        // the lent phase's task
    size_t res_act, res_aq, res_ad, res_as;  // where in a helper's buffer the mlp outputs go (floats from its start)
    size_t res_att;           // ... and the attention parts' outputs
    int att_per;              // attention parts per task of a lent attention phase
    int64_t lctx[FS_LEND_MAX_B];  // a lent step's key counts, inside the description: a late helper's copy keeps them
} step_t;

static size_t kv_elem(int kv_type) { return kv_type == KV_F32 ? 4 : 2; }

// x . x as 8 interleaved partial sums (value i into sum i % 8, in order), added pairwise in a fixed order: the same
// bits from the generic build's scalar loop and the 8-lane vector loop, with a dependency chain an eighth as long as
// one running sum's (which made the norms ~4% of a prefill step).
static float sum_squares(const float *x, int K) {
    float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int i = 0;
#if defined(__AVX2__)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= K; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    _mm256_storeu_ps(p, acc);
#endif
    for (; i < K; i++) p[i % 8] += x[i] * x[i];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

static void task_norm(void *c, int b) {  // h = rmsnorm(x[b]) * w, quantized into xq
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int K = m->hidden, KB = kb_of(K);
    const float *x = m->x + (int64_t)b * K;
    float *h = m->h + (int64_t)b * K;
    const float ss = sum_squares(x, K);
    const float r = 1.f / sqrtf(ss / (float)K + m->eps);
    for (int i = 0; i < K; i++) h[i] = x[i] * r * s->norm_w[i];
    const size_t esz = m->act16 ? 2 : 1;
    fs_quantize_act(m->act16, h, 1, K, K, KB, m->xq + (size_t)b * KB * FS_QK * esz, m->xd + (int64_t)b * KB,
                    m->xs + (int64_t)b * KB);
}

static void task_quant_attn(void *c, int b) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int K = m->H * m->D, KB = kb_of(K);
    const size_t esz = m->act16 ? 2 : 1;
    fs_quantize_act(m->act16, m->attn + (int64_t)b * K, 1, K, K, KB, m->xq + (size_t)b * KB * FS_QK * esz,
                    m->xd + (int64_t)b * KB, m->xs + (int64_t)b * KB);
}

static void store_group(step_t *s, const qmat_t *w, int g, const float *out) {  // out [B][16] into y (+ bias)
    const int rows = w->n - g * FS_QR < FS_QR ? w->n - g * FS_QR : FS_QR;
    const float *bias = w->bias ? w->bias + g * FS_QR : NULL;
    for (int t = 0; t < s->B; t++) {  // each case its own branch-free loop, which the compiler vectorizes (same bits)
        float *yr = s->y + (int64_t)t * s->ldy + g * FS_QR;
        const float *o = out + t * FS_QR;
        if (s->raw)
            memcpy(yr, o, sizeof(float) * (size_t)rows);
        else if (bias && s->accumulate)
            for (int r = 0; r < rows; r++) yr[r] = yr[r] + (o[r] + bias[r]);
        else if (bias)
            for (int r = 0; r < rows; r++) yr[r] = o[r] + bias[r];
        else if (s->accumulate)
            for (int r = 0; r < rows; r++) yr[r] = yr[r] + o[r];
        else if (rows == FS_QR)  // a constant size: one vector move, not a call to memcpy per row
            memcpy(yr, o, sizeof(float) * FS_QR);
        else
            memcpy(yr, o, sizeof(float) * (size_t)rows);
    }
}

static inline void bump(_Atomic uint64_t *beat) {  // the helper's own line: a plain load and store, no locked add
    if (beat) atomic_store_explicit(beat, atomic_load_explicit(beat, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void task_matmul(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const qmat_t *w = s->mat;
    const int KB = kb_of(w->k);
    float out[2][FS_MAX_BATCH * FS_QR];  // up to FS_MAX_BATCH tokens per call (the Python side splits larger batches)
    int g0, g1;
    task_span(task, s->groups_per_task, s->ngroups, 0, &g0, &g1);
    for (int g = g0; g < g1; g += 2) {
        if (g + 1 < g1) {  // two groups at once: prefill tiles share each activation load between them
            fs_qgemm_group2(w->q4, m->act16, w->w, w->wd, w->wm, KB, g, s->xq, s->xd, s->xs, s->B, out[0], out[1]);
            store_group(s, w, g, out[0]);
            store_group(s, w, g + 1, out[1]);
        } else {
            fs_qgemm_group(w->q4, m->act16, w->w, w->wd, w->wm, KB, g, s->xq, s->xd, s->xs, s->B, out[0]);
            store_group(s, w, g, out[0]);
        }
        bump(s->beat);
    }
}

static void rope(float *v, const float *cs, const float *sn, int D) {  // v*cos + roll(v, D/2)*sin
    float tmp[512];
    const int half = D / 2;
#if defined(__AVX2__)
    if (half % 8 == 0) {  // 8 lanes of each half at a time: the same products and sum per value (no FMA), same bits
        for (int i = 0; i < half; i += 8) {
            const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
            _mm256_storeu_ps(tmp + i, _mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(cs + i)),
                                                    _mm256_mul_ps(b, _mm256_loadu_ps(sn + i))));
            _mm256_storeu_ps(tmp + half + i, _mm256_add_ps(_mm256_mul_ps(b, _mm256_loadu_ps(cs + half + i)),
                                                           _mm256_mul_ps(a, _mm256_loadu_ps(sn + half + i))));
        }
        memcpy(v, tmp, sizeof(float) * (size_t)D);
        return;
    }
#endif
    for (int i = 0; i < D; i++) tmp[i] = v[i] * cs[i] + v[(i + half) % D] * sn[i];
    memcpy(v, tmp, sizeof(float) * (size_t)D);
}

static void store_row(uint8_t *dst, int kv_type, const float *src, int D) {
    if (kv_type == KV_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)D);
    } else {
        uint16_t *d16 = (uint16_t *)dst;
        int i = 0;
#if defined(__F16C__) && defined(__AVX__)
        if (kv_type == KV_F16)  // float_to_half's own instruction (round to nearest even), 8 values at a time
            for (; i + 8 <= D; i += 8)
                _mm_storeu_si128((__m128i *)(d16 + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < D; i++) d16[i] = kv_type == KV_BF16 ? float_to_bf16(src[i]) : float_to_half(src[i]);
    }
}

// Per (token, KV head): RoPE of the query heads and the key, then the K/V write into the paged pool.
// A phase of its own, before any attention: a prefill chunk's tokens attend to each other's keys.
static void task_rope_store(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int b = task / m->KVH, kh = task % m->KVH, D = m->D, G = m->H / m->KVH;
    float *row = m->qkv + (int64_t)b * (m->H + 2 * m->KVH) * D;
    float *q = row + (int64_t)kh * G * D, *k = row + (int64_t)(m->H + kh) * D, *v = row + (int64_t)(m->H + m->KVH + kh) * D;
    const float *cs = m->cos + s->pos[b] * D, *sn = m->sin + s->pos[b] * D;
    for (int g = 0; g < G; g++) rope(q + g * D, cs, sn, D);
    rope(k, cs, sn, D);
    const size_t esz = kv_elem(s->kv_type), plane = (size_t)s->S * m->KVH * D * esz;
    uint8_t *kc = s->kv + (size_t)s->l * 2 * plane, *vc = kc + plane;
    const size_t at = ((size_t)s->slot[b] * m->KVH + kh) * D * esz;
    store_row(kc + at, s->kv_type, k, D);
    store_row(vc + at, s->kv_type, v, D);
}

// Per (token, KV head, part): attention over one part of the token's ctx[b] keys (FS_ATT_PART keys, cut
// from key 0), read from the pool in position order; then per (token, KV head) the parts merged in order.
// What a token computes depends on its own query, its keys and their number only, never on the other
// rows of the call or on which thread took which part: the same token gives the same bits alone, in
// any batch, in any chunk of its prompt, or decoded.
static void task_attend_part(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int P = s->att_parts, p = task % P, bk = task / P, b = bk / m->KVH, kh = bk % m->KVH, D = m->D;
    const int G = m->H / m->KVH, L = (int)s->ctx[b];
    if (p >= fs_attend_parts(L)) return;
    const float *q = m->qkv + (int64_t)b * (m->H + 2 * m->KVH) * D + (int64_t)kh * G * D;
    const size_t esz = kv_elem(s->kv_type), plane = (size_t)s->S * m->KVH * D * esz;
    const uint8_t *kc = s->kv + (size_t)s->l * 2 * plane, *vc = kc + plane;
    const int64_t srow = s->slot_row ? s->slot_row[b] : b;
    const int t0 = p * FS_ATT_PART, t1 = t0 + FS_ATT_PART < L ? t0 + FS_ATT_PART : L;
    float stack_scores[8 * FS_ATT_PART];
    float *scores = G <= 8 ? stack_scores : (float *)malloc(sizeof(float) * (size_t)G * FS_ATT_PART);
    if (!scores) return;  // cannot happen in practice
    float *part = s->att + ((size_t)bk * P + p) * (size_t)G * (D + 2);
    // a chunk's tokens after its first read the keys that token read (in position order, the same row of slots)
    const int follows = s->slot_row && b > 0 && s->slot_row[b - 1] == srow;
    fs_attend_part(q, kc, vc, s->slots + srow * s->Lmax, t0, t1, m->KVH, kh, D, G, m->scale, s->kv_type, scores, part,
                   part + G * D, part + G * D + G, !follows);
    if (scores != stack_scores) free(scores);
}

static void task_attend_combine(void *c, int bk) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int P = s->att_parts, b = bk / m->KVH, kh = bk % m->KVH, D = m->D, G = m->H / m->KVH;
    fs_attend_combine(fs_attend_parts((int)s->ctx[b]), G, D, s->att + (size_t)bk * P * G * (D + 2),
                      m->attn + (int64_t)b * m->H * D + (int64_t)kh * G * D);
}

// a[r] = silu(gate[r]) * up[r] = gate / (1 + e^-gate) * up for the r < live of 32 channels, else 0. The FFN
// width is a multiple of 16 (NativeDecoder.eligible), so 8-lane chunks are all live or all not.
static inline void silu_mul(const float *gate, const float *up, int live, float *a) {
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.f), sign = _mm512_set1_ps(-0.f);
    for (int r = 0; r < FS_QK; r += 16) {  // 16-lane chunks are all live or all not either (live: a multiple of 16)
        if (r + 16 > live) {
            _mm512_storeu_ps(a + r, _mm512_setzero_ps());
            continue;
        }
        const __m512 g = _mm512_loadu_ps(gate + r);
        const __m512i neg = _mm512_xor_si512(_mm512_castps_si512(g), _mm512_castps_si512(sign));  // -g, as fs_exp8's
        const __m512 e = fs_exp16(_mm512_castsi512_ps(neg));
        _mm512_storeu_ps(a + r, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + r)));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
    for (int r = 0; r < FS_QK; r += 8) {
        if (r + 8 > live) {
            _mm256_storeu_ps(a + r, _mm256_setzero_ps());
            continue;
        }
        const __m256 g = _mm256_loadu_ps(gate + r);
        const __m256 e = fs_exp8(_mm256_xor_ps(g, sign));
        _mm256_storeu_ps(a + r, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + r)));
    }
#else
    for (int r = 0; r < FS_QK; r++) a[r] = r < live ? gate[r] / (1.f + expf(-gate[r])) * up[r] : 0.f;
#endif
}

// FFN channels 16g..16g+31 of the gate (base 0) or up (base I/16) half of gate_up: out_g, out_g1 [B][16], zeros for
// channels at or past I.
static void ffn_groups(step_t *s, int base, int g, float *out_g, float *out_g1) {
    const qmat_t *w = s->mat;
    model_t *m = s->m;
    const int KB = kb_of(w->k), I = m->I;
    if ((g + 1) * FS_QR < I) {
        fs_qgemm_group2(w->q4, m->act16, w->w, w->wd, w->wm, KB, base + g, s->xq, s->xd, s->xs, s->B, out_g, out_g1);
        return;
    }
    if (g * FS_QR < I)
        fs_qgemm_group(w->q4, m->act16, w->w, w->wd, w->wm, KB, base + g, s->xq, s->xd, s->xs, s->B, out_g);
    else
        memset(out_g, 0, sizeof(float) * FS_QR * (size_t)s->B);
    memset(out_g1, 0, sizeof(float) * FS_QR * (size_t)s->B);
}

// FFN channel blocks j0..j1-1 (32 channels each; `mlp_blocks` per task): first every gate group of the range
// (groups 2j0..2j1-1, contiguous in the fused gate_up matrix, which keeps gate rows first) into act, then per
// block its two up groups (I/16 + 2j, I/16 + 2j + 1), silu(gate) * up in place, quantized as block j of the down
// input: each half of the range is read as one run of weights.
static void task_mlp(void *c, int task) {
    step_t *s = (step_t *)c;
    model_t *m = s->m;
    const int I = m->I, KBI = kb_of(I), up0 = I / FS_QR;
    int j0, j1;
    task_span(task, s->mlp_blocks, KBI, 0, &j0, &j1);
    float out[2][FS_MAX_BATCH * FS_QR];
    for (int j = j0; j < j1; j++) {  // gate groups 2j, 2j + 1 into act
        ffn_groups(s, 0, 2 * j, out[0], out[1]);
        for (int t = 0; t < s->B; t++)
            for (int h = 0; h < 2; h++)
                memcpy(s->act + (int64_t)t * KBI * FS_QK + j * FS_QK + h * FS_QR, out[h] + t * FS_QR, sizeof(float) * FS_QR);
        bump(s->beat);
    }
    const size_t esz = m->act16 ? 2 : 1;
    for (int j = j0; j < j1; j++) {
        ffn_groups(s, up0, 2 * j, out[0], out[1]);
        for (int t = 0; t < s->B; t++) {
            float up[FS_QK];
            memcpy(up, out[0] + t * FS_QR, sizeof(float) * FS_QR);
            memcpy(up + FS_QR, out[1] + t * FS_QR, sizeof(float) * FS_QR);
            float *a = s->act + (int64_t)t * KBI * FS_QK + j * FS_QK;  // holds gate: overwritten lane by lane
            silu_mul(a, up, I - j * FS_QK, a);
            const int64_t blk = (int64_t)t * KBI + j;
            fs_quantize_act(m->act16, a, 1, FS_QK, FS_QK, 1, s->aq + (size_t)blk * FS_QK * esz, s->ad + blk, s->as + blk);
        }
        bump(s->beat);
    }
}

// ---------------------------------------------------------------------------------------------
// Lending a step's matmul and mlp phases (see "Lent phases" at the pool)

static int g_lend_on = 1;       // fs_set_lend: whether decode steps of up to FS_LEND_MAX_B tokens on 2+ threads lend
static _Atomic int g_lend_stall = 0;  // fs_set_lend_stall: every n-th lent task a helper sleeps first (tests)
static step_t g_lend_desc;      // the lent phase's description: static, so a helper late by a whole step reads mapped memory

static int64_t g_lend_counts[3];  // lent tasks: run by the caller as its own claims, taken from a helper, computed again

void fs_set_lend(int on) { g_lend_on = on != 0; }

// How lent tasks went since the last call (then zeroed): out[0] the caller's own, out[1] a helper's copied into
// place, out[2] a stalled helper's computed again by the caller.
void fs_lend_counts(int64_t *out) {
    pthread_mutex_lock(&g_pool_owner);
    for (int i = 0; i < 3; i++) out[i] = g_lend_counts[i], g_lend_counts[i] = 0;
    pthread_mutex_unlock(&g_pool_owner);
}

// For tests: every n-th lent task (0: none), a helper sleeps 300 us after claiming it, as if the OS had taken its
// core: the caller computes the task itself, and the helper finishes it later, into nothing anybody reads, possibly
// in a later phase or step.
void fs_set_lend_stall(int every) { atomic_store(&g_lend_stall, every < 0 ? 0 : every); }

// A helper's lent task: the phase's description copied and checked against the ticket (closed before the caller
// writes another), outputs redirected into the helper's buffer, then marked finished in this generation.
static int lent_run(void *desc, int task, int tid, uint32_t gen) {
    helper_t *h = &g_help[tid];
    step_t c;
    memcpy(&c, desc, sizeof c);
    atomic_thread_fence(memory_order_acquire);
    const uint64_t now = atomic_load(&g_pool.ticket);
    if ((uint32_t)(now >> 32) != gen || (uint32_t)now == FS_CLOSED || task >= FS_LEND_MAX_TASKS) return 0;
    atomic_store_explicit(&h->cur, (uint64_t)gen << 32 | (uint32_t)task, memory_order_relaxed);
    const int stall = atomic_load_explicit(&g_lend_stall, memory_order_relaxed);
    if (stall > 0 && ++h->lent % (unsigned)stall == 0) {
        const struct timespec nap = {0, 300000};
        nanosleep(&nap, NULL);
    }
    c.raw = 1, c.beat = &h->beat, c.y = h->res;
    c.act = h->res + c.res_act, c.aq = (uint8_t *)(h->res + c.res_aq), c.ad = h->res + c.res_ad;
    c.as = (int32_t *)(h->res + c.res_as), c.att = h->res + c.res_att;
    c.ctx = c.lctx;  // its own copy of the key counts, which agree with its copy of Lmax
    c.lent_task(&c, task);
    atomic_store_explicit(&h->fin[task], gen, memory_order_release);
    return 1;
}

typedef void (*commit_fn)(step_t *s, const float *res, int task);

// A helper's finished matmul task into place: its groups' rows, bias and accumulation as store_group does them.
static void commit_matmul(step_t *s, const float *res, int task) {
    const qmat_t *w = s->mat;
    int g0, g1;
    task_span(task, s->groups_per_task, s->ngroups, 0, &g0, &g1);
    if (!w->bias && !s->accumulate) {
        const int r0 = g0 * FS_QR, r1 = g1 * FS_QR < w->n ? g1 * FS_QR : w->n;
        for (int t = 0; t < s->B; t++)
            memcpy(s->y + (int64_t)t * s->ldy + r0, res + (int64_t)t * s->ldy + r0, sizeof(float) * (size_t)(r1 - r0));
        return;
    }
    float out[FS_LEND_MAX_B * FS_QR];
    for (int g = g0; g < g1; g++) {
        const int rows = w->n - g * FS_QR < FS_QR ? w->n - g * FS_QR : FS_QR;
        for (int t = 0; t < s->B; t++)
            memcpy(out + t * FS_QR, res + (int64_t)t * s->ldy + g * FS_QR, sizeof(float) * (size_t)rows);
        store_group(s, w, g, out);
    }
}

// A helper's finished mlp task into place: its FFN blocks' quantized activations, scales and sums.
static void commit_mlp(step_t *s, const float *res, int task) {
    const model_t *m = s->m;
    const int KBI = kb_of(m->I);
    int j0, j1;
    task_span(task, s->mlp_blocks, KBI, 0, &j0, &j1);
    const size_t esz = m->act16 ? 2 : 1, n = (size_t)(j1 - j0);
    const uint8_t *aq = (const uint8_t *)(res + s->res_aq);
    const float *ad = res + s->res_ad;
    const int32_t *as = (const int32_t *)(res + s->res_as);
    for (int t = 0; t < s->B; t++) {
        const size_t blk = (size_t)t * KBI + j0;
        memcpy(s->aq + blk * FS_QK * esz, aq + blk * FS_QK * esz, n * FS_QK * esz);
        memcpy(s->ad + blk, ad + blk, n * sizeof(float));
        memcpy(s->as + blk, as + blk, n * sizeof(int32_t));
    }
}

// Helper buffers for lent phases of this model (decode batches up to FS_LEND_MAX_B tokens, `helpers` helpers), the
// mlp outputs' places in them set in s; grows them (after lend_quiesce) when short. 0: no lending this call.
static int lend_reserve(step_t *s, int helpers) {
    const model_t *m = s->m;
    const size_t B = FS_LEND_MAX_B, KBI = (size_t)kb_of(m->I);
    size_t ld = (size_t)((m->H + 2 * m->KVH) * m->D);
    ld = ld > (size_t)m->hidden ? ld : (size_t)m->hidden;
    ld = ld > (size_t)m->V ? ld : (size_t)m->V;
    s->res_act = B * ld, s->res_aq = s->res_act + B * KBI * FS_QK, s->res_ad = s->res_aq + B * KBI * FS_QK / 2;
    s->res_as = s->res_ad + B * KBI;
    s->res_att = s->res_as + B * KBI;
    const size_t need = s->res_att + B * (size_t)m->KVH * FS_MAX_PARTS * (size_t)(m->H / m->KVH) * (size_t)(m->D + 2);
    pool_t *p = &g_pool;
    if (pool_ensure(p, helpers) < helpers) return 0;
    int short_ = 0;
    for (int i = 0; i < helpers; i++) short_ |= g_help[i].res_floats < need;
    if (!short_) return 1;
    if (pthread_mutex_trylock(&g_pool_owner) != 0) return 0;  // another engine's call is on the pool
    lend_quiesce(p);
    int ok = 1;
    for (int i = 0; i < helpers && ok; i++) {
        if (g_help[i].res_floats >= need) continue;
        free(g_help[i].res);
        g_help[i].res = (float *)malloc(sizeof(float) * need);
        g_help[i].res_floats = g_help[i].res ? need : 0;
        ok = g_help[i].res != NULL;
    }
    pthread_mutex_unlock(&g_pool_owner);
    return ok;
}

// parallel_for for a lent phase: the caller claims and runs tasks like any thread, then takes each task a helper
// claimed: its outputs copied into place once the helper marks it finished, or the task computed here when the helper
// has not moved for FS_STALL_S (descheduled). The same outputs either way.
static void lend_for(step_t *s, task_fn fn, commit_fn commit, int ntasks) {
    pool_t *p = &g_pool;
    const int helpers = s->nthreads - 1 < p->nworkers ? s->nthreads - 1 : p->nworkers;
    if (ntasks < 2 || ntasks > FS_LEND_MAX_TASKS || helpers < 1 || pthread_mutex_trylock(&g_pool_owner) != 0) {
        for (int i = 0; i < ntasks; i++) fn(s, i);
        return;
    }
    atomic_store(&p->ticket, (uint64_t)p->gen << 32 | FS_CLOSED);
    atomic_thread_fence(memory_order_seq_cst);  // the close before the description's writes (the seqlock's odd count)
    g_lend_desc = *s;
    g_lend_desc.lent_task = fn;
    atomic_store(&p->lend, 1);
    atomic_store(&p->lfn, lent_run);
    atomic_store(&p->ctx, (void *)&g_lend_desc);
    atomic_store(&p->ntasks, ntasks);
    atomic_store(&p->active, helpers);
    const uint32_t gen = open_generation(p);
    unsigned char mine[FS_LEND_MAX_TASKS];
    memset(mine, 0, (size_t)ntasks);
    for (uint64_t t = atomic_load(&p->ticket); (uint32_t)t < (uint32_t)ntasks;) {  // only this thread moves the gen
        if (atomic_compare_exchange_weak(&p->ticket, &t, t + 1)) {
            mine[(uint32_t)t] = 1;
            g_lend_counts[0]++;
            fn(s, (int)(uint32_t)t);
            t = atomic_load(&p->ticket);
        }
    }
    for (int task = 0; task < ntasks; task++) {
        if (mine[task]) continue;
        const uint64_t want = (uint64_t)gen << 32 | (uint32_t)task;
        double since = now_s();
        uint64_t last = 0;
        int watched = -1;
        for (;;) {
            int got = -1, holder = -1;
            for (int i = 0; i < helpers && got < 0; i++)
                if (atomic_load_explicit(&g_help[i].fin[task], memory_order_acquire) == gen) got = i;
            if (got >= 0) {
                commit(s, g_help[got].res, task);
                g_lend_counts[1]++;
                break;
            }
            for (int i = 0; i < helpers && holder < 0; i++)
                if (atomic_load_explicit(&g_help[i].cur, memory_order_relaxed) == want) holder = i;
            const uint64_t beat = holder >= 0 ? atomic_load_explicit(&g_help[holder].beat, memory_order_relaxed) : 0;
            const double now = now_s();
            if (holder != watched || beat != last) {
                since = now, last = beat, watched = holder;
            } else if (now - since > FS_STALL_S) {  // descheduled (or never started): computed here
                g_lend_counts[2]++;
                fn(s, task);
                break;
            }
            CPU_RELAX();
        }
    }
    atomic_store(&p->ticket, (uint64_t)gen << 32 | FS_CLOSED);  // a late helper's claim and description check fail
    atomic_thread_fence(memory_order_seq_cst);
    pthread_mutex_unlock(&g_pool_owner);
}

// A lent attention phase's task: a run of att_per parts, the last runs first (as parallel_rows_by's last_first).
static void task_attend_run(void *c, int task) {
    step_t *s = (step_t *)c;
    int i0, i1;
    task_span(task, s->att_per, s->B * s->m->KVH * s->att_parts, 1, &i0, &i1);
    for (int i = i0; i < i1; i++) {
        task_attend_part(s, i);
        bump(s->beat);
    }
}

static void commit_attend(step_t *s, const float *res, int task) {
    const model_t *m = s->m;
    int i0, i1;
    task_span(task, s->att_per, s->B * m->KVH * s->att_parts, 1, &i0, &i1);
    const size_t part = (size_t)(m->H / m->KVH) * (size_t)(m->D + 2);
    memcpy(s->att + (size_t)i0 * part, res + s->res_att + (size_t)i0 * part, sizeof(float) * (size_t)(i1 - i0) * part);
}

// A lent step's attention reads its tokens' key slots from a copy the model owns (the caller's table may be gone when a
// late helper reads it) and its key counts from the description (lctx): row b holds token b's first ctx[b] slots. The
// copy is zeroed when made and only ever holds valid slots, so a helper late by a step or more, reading rows a later
// step rewrote, reads slots inside the pool: garbage it computes into its own buffer, never out of bounds. 0: no memory.
static int lend_tables(model_t *m, step_t *s) {
    int64_t L = 1;
    for (int b = 0; b < s->B; b++) L = s->ctx[b] > L ? s->ctx[b] : L;
    const size_t need = (size_t)s->B * (size_t)L;
    if (m->lend_slots_cap < need) {  // grown by half again: not at every new key
        const size_t cap = need + need / 2;
        lend_quiesce_locked();
        free(m->lend_slots);
        m->lend_slots = (int64_t *)calloc(cap, sizeof(int64_t));
        m->lend_slots_cap = m->lend_slots ? cap : 0;
        if (!m->lend_slots) return 0;
    }
    for (int b = 0; b < s->B; b++) {
        const int64_t srow = s->slot_row ? s->slot_row[b] : b;
        memcpy(m->lend_slots + (size_t)b * L, s->slots + srow * s->Lmax, sizeof(int64_t) * (size_t)s->ctx[b]);
        s->lctx[b] = s->ctx[b];
    }
    s->slots = m->lend_slots, s->ctx = s->lctx, s->slot_row = NULL, s->Lmax = (int)L;
    return 1;
}

static void matmul_phase(step_t *s, const qmat_t *w, const uint8_t *xq, const float *xd, const int32_t *xs, float *y,
                         int ldy, int accumulate) {
    s->mat = w, s->xq = xq, s->xd = xd, s->xs = xs, s->y = y, s->ldy = ldy, s->accumulate = accumulate;
    s->ngroups = (w->n + FS_QR - 1) / FS_QR;
    int per = s->ngroups / (s->nthreads * mm_claims(s->B));
    s->groups_per_task = per < 1 ? 1 : per;
    const int ntasks = (s->ngroups + s->groups_per_task - 1) / s->groups_per_task;
    if (s->lend)
        lend_for(s, task_matmul, commit_matmul, ntasks);
    else
        parallel_for(s->nthreads, task_matmul, s, ntasks);
}

// x_in [B, hidden] (embeddings) -> logits [N, V] of rows out_rows[0..N-1] (increasing; NULL with N = B: all rows).
// pos, slot, ctx [B]; slots [R, Lmax], token b reading row slot_row[b] (NULL: row b); kv the whole pool.
// Rows may be decode tokens or a prefill chunk's tokens (ctx = position + 1); a chunk's tokens are in
// position order, and a sequence split over several calls has its earlier tokens in the earlier call.
// Returns 0 on success, -1 when B is out of range or scratch memory could not be had.
int fs_forward(void *handle, int B, const float *x_in, const int64_t *pos, const int64_t *slot, const int64_t *slots,
               const int64_t *slot_row, const int64_t *ctx, int Lmax, void *kv, int64_t S, int kv_type, int nthreads,
               int N, const int64_t *out_rows, float *logits) {
    model_t *m = (model_t *)handle;
    if (!m || B < 1 || B > FS_MAX_BATCH || m->D > 512 || !ensure_scratch(m, B)) return -1;
    if (N < 0 || N > B || (out_rows == NULL && N != 0 && N != B)) return -1;
    step_t s = {.m = m, .B = B, .Lmax = Lmax, .kv_type = kv_type, .nthreads = nthreads < 1 ? 1 : nthreads,
                .pos = pos, .slot = slot, .slots = slots, .ctx = ctx, .slot_row = slot_row, .kv = (uint8_t *)kv, .S = S,
                .act = m->act, .ad = m->ad, .aq = m->aq, .as = m->as};
    // a decode batch on 2+ threads lends its matmul, mlp and attention phases; its light ones (norms, RoPE and the K/V
    // write, the parts' merge: a few us each at this size) run on the caller, which a lent phase never leaves waiting
    // for a descheduled helper
    note_caller_cpu();
    s.lend = g_lend_on && s.nthreads > 1 && B <= FS_LEND_MAX_B && lend_reserve(&s, s.nthreads - 1);
    int parts = 1;
    for (int b = 0; b < B; b++) {
        const int p = fs_attend_parts((int)ctx[b]);
        parts = p > parts ? p : parts;
    }
    if (parts > FS_MAX_PARTS || m->H / m->KVH > 8) return -1;
    s.att_parts = parts;
    const int mlp_per = kb_of(m->I) / (s.nthreads * mm_claims(B));
    s.mlp_blocks = mlp_per < 1 ? 1 : mlp_per;
    s.att = (float *)malloc(sizeof(float) * (size_t)B * m->KVH * parts * (size_t)(m->H / m->KVH) * (m->D + 2));
    if (!s.att) return -1;
    if (s.lend && !lend_tables(m, &s)) s.lend = 0;
    const int light = s.lend ? 1 : s.nthreads;
    const int att_n = B * m->KVH * parts, att_per = att_n / (s.nthreads * FS_ATT_CLAIMS);
    s.att_per = att_per < 1 ? 1 : att_per;
    memcpy(m->x, x_in, sizeof(float) * (size_t)B * (size_t)m->hidden);
    const int qkv_n = (m->H + 2 * m->KVH) * m->D;
    for (int l = 0; l < m->L; l++) {
        const layer_t *ly = &m->layers[l];
        s.l = l;
        s.norm_w = ly->in_norm;
        TIMED(PH_NORM, parallel_rows(light, task_norm, &s, B));
        TIMED(PH_QKV, matmul_phase(&s, &ly->qkv, m->xq, m->xd, m->xs, m->qkv, qkv_n, 0));
        TIMED(PH_ROPE, parallel_rows(light, task_rope_store, &s, B * m->KVH));
        if (s.lend)
            TIMED(PH_ATTEND, lend_for(&s, task_attend_run, commit_attend, (att_n + s.att_per - 1) / s.att_per));
        else
            TIMED(PH_ATTEND, parallel_rows_by(s.nthreads, task_attend_part, &s, att_n, FS_ATT_CLAIMS, 1));
        TIMED(PH_COMBINE, parallel_rows(light, task_attend_combine, &s, B * m->KVH));
        TIMED(PH_QUANT, parallel_rows(light, task_quant_attn, &s, B));
        TIMED(PH_O, matmul_phase(&s, &ly->o, m->xq, m->xd, m->xs, m->x, m->hidden, 1));
        s.norm_w = ly->post_norm;
        TIMED(PH_NORM, parallel_rows(light, task_norm, &s, B));
        s.mat = &ly->gu, s.xq = m->xq, s.xd = m->xd, s.xs = m->xs;
        const int mlp_tasks = (kb_of(m->I) + s.mlp_blocks - 1) / s.mlp_blocks;
        if (s.lend)
            TIMED(PH_MLP, lend_for(&s, task_mlp, commit_mlp, mlp_tasks));
        else
            TIMED(PH_MLP, parallel_for(s.nthreads, task_mlp, &s, mlp_tasks));
        TIMED(PH_DOWN, matmul_phase(&s, &ly->down, m->aq, m->ad, m->as, m->x, m->hidden, 1));
    }
    free(s.att);
    if (N == 0) return 0;
    if (out_rows != NULL && N < B) {  // the rows whose logits are wanted, moved to the front (increasing: in place)
        for (int i = 0; i < N; i++) {
            const int64_t r = out_rows[i];
            if (r < i || r >= B || (i > 0 && r <= out_rows[i - 1])) return -1;
            if (r != i) memcpy(m->x + (int64_t)i * m->hidden, m->x + r * m->hidden, sizeof(float) * (size_t)m->hidden);
        }
    }
    s.B = N;
    s.norm_w = m->norm;
    TIMED(PH_NORM, parallel_rows(light, task_norm, &s, N));
    TIMED(PH_HEAD, matmul_phase(&s, &m->head, m->xq, m->xd, m->xs, logits, m->V, 0));
    return 0;
}


// ---------------------------------------------------------------------------------------------
// A whole quantized matmul on the pool (prefill chunks and mixed batches through the torch model):
// y[M, N] (row stride ldy) = x[M, K] @ W^T (+ bias), the same sums as qgemm_f32, rows of x quantized in
// parallel, then weight groups claimed dynamically.

typedef struct {
    int q4, act16, M, K, ldx, N, ldy, KB, groups_per_task, ngroups;
    const float *x, *bias;
    const uint8_t *w;
    const uint16_t *wd, *wm;
    uint8_t *xq;
    float *xd, *y;
    int32_t *xs;
} gemm_t;

static void task_gemm_quant(void *c, int m) {
    gemm_t *g = (gemm_t *)c;
    const size_t esz = g->act16 ? 2 : 1;
    fs_quantize_act(g->act16, g->x + (int64_t)m * g->ldx, 1, g->K, g->ldx, g->KB,
                    g->xq + (size_t)m * g->KB * FS_QK * esz, g->xd + (int64_t)m * g->KB, g->xs + (int64_t)m * g->KB);
}

static void task_gemm_groups(void *c, int task) {
    gemm_t *g = (gemm_t *)c;
    const size_t esz = g->act16 ? 2 : 1;
    float out[2][64 * FS_QR];
    int g0, g1;
    task_span(task, g->groups_per_task, g->ngroups, 0, &g0, &g1);
    for (int m0 = 0; m0 < g->M; m0 += 64) {  // 64 rows at a time: the group's weights stay in L1/L2
        const int mt = g->M - m0 < 64 ? g->M - m0 : 64;
        const uint8_t *xq = g->xq + (size_t)m0 * g->KB * FS_QK * esz;
        const float *xd = g->xd + (int64_t)m0 * g->KB;
        const int32_t *xs = g->xs + (int64_t)m0 * g->KB;
        for (int gi = g0; gi < g1; gi += 2) {
            const int pair = gi + 1 < g1;
            if (pair)
                fs_qgemm_group2(g->q4, g->act16, g->w, g->wd, g->wm, g->KB, gi, xq, xd, xs, mt, out[0], out[1]);
            else
                fs_qgemm_group(g->q4, g->act16, g->w, g->wd, g->wm, g->KB, gi, xq, xd, xs, mt, out[0]);
            for (int h = 0; h <= pair; h++) {
                const int gg = gi + h, rows = g->N - gg * FS_QR < FS_QR ? g->N - gg * FS_QR : FS_QR;
                for (int t = 0; t < mt; t++) {
                    float *yr = g->y + (int64_t)(m0 + t) * g->ldy + gg * FS_QR;
                    const float *o = out[h] + t * FS_QR;
                    for (int r = 0; r < rows; r++) yr[r] = g->bias ? o[r] + g->bias[gg * FS_QR + r] : o[r];
                }
            }
        }
    }
}

// Returns 0, or -1 when the activation buffers could not be allocated.
int fs_qgemm(int q4, int act16, const float *x, int M, int K, int ldx, const uint8_t *w, const uint16_t *wd,
             const uint16_t *wm, int N, const float *bias, float *y, int ldy, int nthreads) {
    gemm_t g = {.q4 = q4, .act16 = act16, .M = M, .K = K, .ldx = ldx, .N = N, .ldy = ldy, .KB = kb_of(K),
                .x = x, .bias = bias, .w = w, .wd = wd, .wm = wm, .y = y};
    g.xq = (uint8_t *)malloc((size_t)M * g.KB * FS_QK * (act16 ? 2 : 1));
    g.xd = (float *)malloc(sizeof(float) * (size_t)M * g.KB);
    g.xs = (int32_t *)malloc(sizeof(int32_t) * (size_t)M * g.KB);
    if (!g.xq || !g.xd || !g.xs) {
        free(g.xq), free(g.xd), free(g.xs);
        return -1;
    }
    nthreads = nthreads < 1 ? 1 : nthreads;
    note_caller_cpu();
    parallel_for(nthreads, task_gemm_quant, &g, M);
    g.ngroups = (N + FS_QR - 1) / FS_QR;
    const int per = g.ngroups / (nthreads * FS_CLAIMS);
    g.groups_per_task = per < 1 ? 1 : per;
    parallel_for(nthreads, task_gemm_groups, &g, (g.ngroups + g.groups_per_task - 1) / g.groups_per_task);
    free(g.xq), free(g.xd), free(g.xs);
    return 0;
}

// The stored weights as dense fp32, out [N, K], on the pool: groups of 16 rows claimed dynamically, so a thread the
// OS slows down does fewer of them instead of holding the others (OpenMP's static split waited for it). All 120
// matrices of SmolLM2 with other work on the machine: 21-42 ms against 65 ms for the OpenMP loop it replaces.
typedef struct {
    int q4, N, K, per, ngroups;
    const uint8_t *w;
    const uint16_t *wd, *wm;
    float *out;
} dequant_t;

static void task_dequant(void *c, int task) {
    dequant_t *d = (dequant_t *)c;
    int g0, g1;
    task_span(task, d->per, d->ngroups, 0, &g0, &g1);
    for (int g = g0; g < g1; g++) fs_dequant_group(d->q4, d->w, d->wd, d->wm, d->N, d->K, g, d->out);
}

void fs_dequant(int q4, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, int N, int K, float *out,
                int nthreads) {
    dequant_t d = {.q4 = q4, .N = N, .K = K, .w = w, .wd = wd, .wm = wm, .out = out, .ngroups = (N + FS_QR - 1) / FS_QR};
    nthreads = nthreads < 1 ? 1 : nthreads;
    note_caller_cpu();
    const int per = d.ngroups / (nthreads * FS_CLAIMS);
    d.per = per < 1 ? 1 : per;
    parallel_for(nthreads, task_dequant, &d, (d.ngroups + d.per - 1) / d.per);
}
