/*
 * nnc_pool.h — a header-only pthread pool for PREFIXrun (see nnc.h).
 *
 *   nnc_pool *p = nnc_pool_create(4);          // the caller + 3 threads
 *   nnc_run_options o = {sizeof o, nnc_pool_get(p), 0, NULL, NULL};
 *   size_t bytes = model_workspace_size(&o);   // allocate that, aligned
 *   model_run(inputs, outputs, workspace, &o); // from any number of threads
 *   nnc_pool_destroy(p);
 *
 * parallel_for publishes a job; the calling thread runs its tasks as worker 0
 * and the pool's threads (workers 1 .. num_threads-1) take the other indices
 * from a shared counter. Several threads may call run at once on one pool
 * (each with its own workspace): their jobs are served side by side, and a
 * worker number is unique among the tasks of one job, which is all the
 * library's per-worker scratch needs. Idle workers spin for a moment (the next
 * node's job follows within microseconds), then sleep on a condition variable.
 *
 * Define NNC_POOL_SPIN_ITERATIONS before including to change the spin.
 * Link with -pthread. C11 (stdatomic) or C++ (included as C++, it uses the
 * same C atomics through <atomic> compatibility where available: compile this
 * file's functions in a C translation unit if your C++ compiler lacks
 * <stdatomic.h>).
 */
#ifndef NNC_POOL_H
#define NNC_POOL_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "nnc.h"

#ifdef __cplusplus
#include <atomic>
#define NNC_POOL_ATOMIC(T) std::atomic<T>
#define NNC_POOL_LOAD(p) (p)->load(std::memory_order_acquire)
#define NNC_POOL_FETCH_ADD(p, v) (p)->fetch_add((v), std::memory_order_acq_rel)
#define NNC_POOL_INIT(p, v) (p)->store((v), std::memory_order_relaxed)
extern "C" {
#else
#include <stdatomic.h>
#define NNC_POOL_ATOMIC(T) _Atomic(T)
#define NNC_POOL_LOAD(p) atomic_load_explicit((p), memory_order_acquire)
#define NNC_POOL_FETCH_ADD(p, v) atomic_fetch_add_explicit((p), (v), memory_order_acq_rel)
#define NNC_POOL_INIT(p, v) atomic_init((p), (v))
#endif

/* How long idle threads (and a caller waiting for its job's last tasks) poll
 * before sleeping: a model forks once per node, tens to hundreds of
 * microseconds apart, and waking a sleeping thread costs about as much. */
#ifndef NNC_POOL_SPIN_ITERATIONS
#define NNC_POOL_SPIN_ITERATIONS 200000
#endif

#if defined(__x86_64__) || defined(__i386__)
#define NNC_POOL_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define NNC_POOL_PAUSE() __asm__ __volatile__("yield")
#else
#define NNC_POOL_PAUSE() ((void)0)
#endif

/* Indices are dealt in one contiguous chunk per thread (at most this many). */
#define NNC_POOL_MAX_CHUNKS 64

typedef struct nnc_pool_job {
    nnc_task_fn task;
    void *task_ctx;
    uint32_t n;
    uint32_t chunks;
    /* Chunk c holds indices [next[c], end[c]); its owner (worker c) takes them
     * first, then the others take what is left. Tasks of one index range then
     * run on the same thread from node to node, where their data is in cache. */
    NNC_POOL_ATOMIC(uint32_t) next[NNC_POOL_MAX_CHUNKS];
    uint32_t end[NNC_POOL_MAX_CHUNKS];
    NNC_POOL_ATOMIC(uint32_t) done; /* tasks finished */
    NNC_POOL_ATOMIC(uint32_t) users; /* pool threads holding it */
    pthread_mutex_t lock;
    pthread_cond_t finished;
    struct nnc_pool_job *prev, *queued; /* the open jobs, a doubly linked list */
} nnc_pool_job;

typedef struct nnc_pool {
    nnc_thread_pool abi; /* what nnc_pool_get returns */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    nnc_pool_job *jobs; /* open jobs, newest first */
    NNC_POOL_ATOMIC(uint32_t) published;
    int shutdown;
    uint32_t started;
    pthread_t *threads;
} nnc_pool;

typedef struct nnc_pool_worker_arg {
    nnc_pool *pool;
    uint32_t worker;
} nnc_pool_worker_arg;

/* Runs tasks of `job` until none are left to claim: its own chunk first. */
static inline void nnc_pool_work(nnc_pool_job *job, uint32_t worker) {
    uint32_t own = worker % job->chunks;
    for (uint32_t k = 0; k < job->chunks; k++) {
        uint32_t c = (own + k) % job->chunks;
        for (;;) {
            if (NNC_POOL_LOAD(&job->next[c]) >= job->end[c]) break;
            uint32_t i = NNC_POOL_FETCH_ADD(&job->next[c], 1u);
            if (i >= job->end[c]) break;
            job->task(job->task_ctx, i, worker);
            NNC_POOL_FETCH_ADD(&job->done, 1u);
        }
    }
}

/* Whether some index of `job` is still unclaimed. */
static inline int nnc_pool_job_open(nnc_pool_job *job) {
    for (uint32_t c = 0; c < job->chunks; c++)
        if (NNC_POOL_LOAD(&job->next[c]) < job->end[c]) return 1;
    return 0;
}

/* An open job with indices left, or NULL; call with pool->lock held. A job
 * found here counts the caller among its users (the job lives on its
 * submitter's stack, which waits for its users to leave). */
static inline nnc_pool_job *nnc_pool_open_job(nnc_pool *pool) {
    for (nnc_pool_job *j = pool->jobs; j; j = j->queued)
        if (nnc_pool_job_open(j)) {
            NNC_POOL_FETCH_ADD(&j->users, 1u);
            return j;
        }
    return NULL;
}

/* Leaves a job taken with nnc_pool_open_job. The submitter may free the job
 * once `users` is 0 and it has taken `lock` once: so this unlock is the last
 * access. */
static inline void nnc_pool_leave(nnc_pool_job *job) {
    pthread_mutex_lock(&job->lock);
    NNC_POOL_FETCH_ADD(&job->users, (uint32_t)-1);
    pthread_cond_broadcast(&job->finished);
    pthread_mutex_unlock(&job->lock);
}

static inline void *nnc_pool_worker_main(void *p) {
    nnc_pool_worker_arg arg = *(nnc_pool_worker_arg *)p;
    free(p);
    nnc_pool *pool = arg.pool;
    uint32_t seen = NNC_POOL_LOAD(&pool->published);
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        nnc_pool_job *job = nnc_pool_open_job(pool);
        while (!job && !pool->shutdown) {
            /* Spin (unlocked) for a moment before sleeping. */
            pthread_mutex_unlock(&pool->lock);
            int fresh = 0;
            for (long s = 0; s < NNC_POOL_SPIN_ITERATIONS; s++) {
                uint32_t now = NNC_POOL_LOAD(&pool->published);
                if (now != seen) {
                    seen = now;
                    fresh = 1;
                    break;
                }
                NNC_POOL_PAUSE();
            }
            pthread_mutex_lock(&pool->lock);
            job = nnc_pool_open_job(pool);
            if (!job && !fresh && !pool->shutdown) {
                pthread_cond_wait(&pool->wake, &pool->lock);
                seen = NNC_POOL_LOAD(&pool->published);
                job = nnc_pool_open_job(pool);
            }
        }
        if (!job) { /* shutdown */
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        pthread_mutex_unlock(&pool->lock);
        nnc_pool_work(job, arg.worker);
        nnc_pool_leave(job);
    }
}

static inline void nnc_pool_parallel_for(void *ctx, uint32_t n, nnc_task_fn task,
                                         void *task_ctx) {
    nnc_pool *pool = (nnc_pool *)ctx;
    if (n == 0) return;
    nnc_pool_job job;
    job.task = task;
    job.task_ctx = task_ctx;
    job.n = n;
    uint32_t chunks = pool->abi.num_threads < n ? pool->abi.num_threads : n;
    if (chunks > NNC_POOL_MAX_CHUNKS) chunks = NNC_POOL_MAX_CHUNKS;
    job.chunks = chunks;
    for (uint32_t c = 0; c < chunks; c++) {
        NNC_POOL_INIT(&job.next[c], (uint32_t)((uint64_t)n * c / chunks));
        job.end[c] = (uint32_t)((uint64_t)n * (c + 1) / chunks);
    }
    NNC_POOL_INIT(&job.done, 0u);
    NNC_POOL_INIT(&job.users, 0u);
    pthread_mutex_init(&job.lock, NULL);
    pthread_cond_init(&job.finished, NULL);
    int shared = n > 1 && pool->started > 0;
    if (shared) {
        pthread_mutex_lock(&pool->lock);
        job.prev = NULL;
        job.queued = pool->jobs;
        if (pool->jobs) pool->jobs->prev = &job;
        pool->jobs = &job;
        NNC_POOL_FETCH_ADD(&pool->published, 1u);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->lock);
    }
    nnc_pool_work(&job, 0);
    if (shared) {
        /* Every index is claimed: unlink the job before it leaves this frame. */
        pthread_mutex_lock(&pool->lock);
        if (job.prev) job.prev->queued = job.queued; else pool->jobs = job.queued;
        if (job.queued) job.queued->prev = job.prev;
        pthread_mutex_unlock(&pool->lock);
    }
    /* Unlinked, it gains no users; wait for its tasks and for the users to leave,
     * polling first (the other threads' last tasks end within microseconds). */
    for (long s = 0; s < NNC_POOL_SPIN_ITERATIONS; s++) {
        if (NNC_POOL_LOAD(&job.done) == n && NNC_POOL_LOAD(&job.users) == 0) break;
        NNC_POOL_PAUSE();
    }
    pthread_mutex_lock(&job.lock);
    while (NNC_POOL_LOAD(&job.done) < n || NNC_POOL_LOAD(&job.users) > 0)
        pthread_cond_wait(&job.finished, &job.lock);
    pthread_mutex_unlock(&job.lock);
    pthread_cond_destroy(&job.finished);
    pthread_mutex_destroy(&job.lock);
}

/* A pool running `num_threads` tasks at once (at least 1): the calling thread
 * and num_threads - 1 new threads. NULL if memory or threads run out. */
static inline nnc_pool *nnc_pool_create(uint32_t num_threads) {
    if (num_threads == 0) num_threads = 1;
    nnc_pool *pool = (nnc_pool *)calloc(1, sizeof(nnc_pool));
    if (!pool) return NULL;
    pool->threads = (pthread_t *)calloc(num_threads, sizeof(pthread_t));
    if (!pool->threads) {
        free(pool);
        return NULL;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    NNC_POOL_INIT(&pool->published, 0u);
    pool->abi.ctx = pool;
    pool->abi.num_threads = num_threads;
    pool->abi.parallel_for = nnc_pool_parallel_for;
    for (uint32_t w = 1; w < num_threads; w++) {
        nnc_pool_worker_arg *arg = (nnc_pool_worker_arg *)malloc(sizeof *arg);
        if (!arg) break;
        arg->pool = pool;
        arg->worker = w;
        if (pthread_create(&pool->threads[pool->started], NULL, nnc_pool_worker_main, arg)) {
            free(arg);
            break;
        }
        pool->started++;
    }
    /* Threads that did not start shrink the pool: worker numbers stay below it. */
    pool->abi.num_threads = pool->started + 1;
    return pool;
}

/* The nnc_thread_pool to put in nnc_run_options; valid until destroy. */
static inline const nnc_thread_pool *nnc_pool_get(const nnc_pool *pool) { return &pool->abi; }

/* Stops and joins the threads; no run may be using the pool. */
static inline void nnc_pool_destroy(nnc_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->shutdown = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (uint32_t i = 0; i < pool->started; i++) pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool->threads);
    free(pool);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NNC_POOL_H */
