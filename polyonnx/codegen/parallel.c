/* polyonnx's thread pool: what generated code calls to run a parallel loop.
 *
 *   void polyonnx_parallel_for(chunk_fn fn, void *ctx, long n, int threads);
 *
 * runs fn(ctx, begin, end) over [0, n) in contiguous chunks on up to `threads` threads, the
 * caller included. Each thread owns a contiguous share of the chunks and claims them from its
 * own atomic counter, then helps with the others' shares; the caller waits only for chunks that
 * were claimed: a worker the OS has not scheduled yet (a loaded machine, a VM with slow
 * wake-ups) never holds the caller up, which then simply runs the remaining chunks itself.
 * Idle workers spin for SPIN_NS after their last loop, then sleep on a condition variable:
 * in a VM, waking a sleeping worker took tens of microseconds, as long as a small kernel, so a
 * model's consecutive parallel loops (and its next run) find the workers awake.
 *
 * One loop runs in the pool at a time; a caller that finds it busy (another Python thread
 * running another model) runs its loop alone instead of queueing. The job is published with a
 * sequence lock: `generation` is odd while the caller rewrites the job, and a worker counts
 * itself `active` before re-checking that the generation it saw is still current, so it never
 * reads a job that is being rewritten.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

typedef void (*chunk_fn)(void *ctx, long begin, long end);

#define MAX_WORKERS 256
#define SPIN_NS 5000000L /* 5 ms */

static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER; /* one loop in the pool at a time */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* sleeping and start-up */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int workers; /* started so far */

static chunk_fn job_fn;
static void *job_ctx;
static long job_n, job_chunk, job_chunks;
static int job_threads; /* threads the current loop may use, the caller included */
static atomic_long finished, generation;
static atomic_int active;

/* Chunk c of a loop belongs to thread c * threads / chunks (the caller is thread 0): each thread
 * runs its own chunks first, in order, then takes what is left of the others'. Consecutive
 * loops over the same range thus give each thread the same part of the data, which stays in
 * its core's caches, unless one thread falls behind. */
typedef struct {
    _Alignas(64) atomic_long next;
    long end;
} share;
static share shares[MAX_WORKERS + 1];

static void run_chunks(int self) {
    for (int k = 0; k < job_threads; k++) {
        share *own = &shares[(self + k) % job_threads];
        for (;;) {
            long c = atomic_fetch_add(&own->next, 1);
            if (c >= own->end) break;
            long begin = c * job_chunk, end = begin + job_chunk < job_n ? begin + job_chunk : job_n;
            job_fn(job_ctx, begin, end);
            atomic_fetch_add(&finished, 1);
        }
    }
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void *worker(void *arg) {
    long index = (long)arg, seen = 0;
    for (;;) {
        long g, idle_since = now_ns();
        int spins = 0;
        while ((g = atomic_load(&generation)) == seen || (g & 1)) {
            if ((++spins & 63) != 0 || now_ns() - idle_since < SPIN_NS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&lock);
            while ((g = atomic_load(&generation)) == seen || (g & 1))
                pthread_cond_wait(&wake, &lock);
            pthread_mutex_unlock(&lock);
        }
        atomic_fetch_add(&active, 1);
        if (atomic_load(&generation) == g) {
            seen = g;
            if (index + 1 < job_threads) run_chunks((int)index + 1);
        }
        atomic_fetch_sub(&active, 1);
    }
    return 0;
}

static void start_workers(int count) {
    pthread_mutex_lock(&lock);
    while (workers < count && workers < MAX_WORKERS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&t, &attr, worker, (void *)(long)workers);
        pthread_attr_destroy(&attr);
        if (failed) break;
        workers++;
    }
    pthread_mutex_unlock(&lock);
}

void polyonnx_parallel_for(chunk_fn fn, void *ctx, long n, int threads) {
    if (n <= 0) return;
    if (threads <= 1 || n == 1 || pthread_mutex_trylock(&busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
    if (threads > MAX_WORKERS + 1) threads = MAX_WORKERS + 1;
    if (workers < threads - 1) start_workers(threads - 1);
    atomic_fetch_add(&generation, 1); /* odd: the job is being rewritten */
    while (atomic_load(&active) != 0) sched_yield();
    long chunks = n < 4L * threads ? n : 4L * threads;
    job_chunk = (n + chunks - 1) / chunks;
    job_chunks = (n + job_chunk - 1) / job_chunk;
    job_fn = fn;
    job_ctx = ctx;
    job_n = n;
    job_threads = threads;
    for (int t = 0; t < threads; t++) {
        atomic_store(&shares[t].next, job_chunks * t / threads);
        shares[t].end = job_chunks * (t + 1) / threads;
    }
    atomic_store(&finished, 0);
    pthread_mutex_lock(&lock);
    atomic_fetch_add(&generation, 1); /* even: published */
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    run_chunks(0);
    /* Every chunk is claimed; wait for the ones other threads are still running. */
    while (atomic_load(&finished) < job_chunks) sched_yield();
    pthread_mutex_unlock(&busy);
}
