//! A thread pool for the `run` entry point of nnc libraries (`nnc_thread_pool`):
//! std threads, owned by the caller, shareable by several models and by several threads
//! calling `run` at once.
//!
//! `parallel_for(n, task)` publishes a job; the calling thread runs its tasks as worker
//! 0 and the pool's threads (workers 1 … num_threads − 1) take the rest, index by index
//! from a shared counter. Concurrent jobs (two models run from two threads) are served
//! side by side: a worker takes indices from whichever job has some left, and worker
//! numbers are unique within each job, which is all a library's per-worker scratch
//! needs (each run has its own workspace). Idle workers spin briefly for the next job
//! (a model forks once per node, microseconds apart) before they sleep.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::abi::{NncTaskFn, NncThreadPool};

/// How long an idle worker (or a caller waiting for its job's last tasks) polls before
/// it sleeps: a model forks once per node, tens to hundreds of microseconds apart, and
/// waking a sleeping thread costs about as much.
const SPIN: Duration = Duration::from_micros(500);

/// One `parallel_for` call. Its indices are dealt in one contiguous chunk per thread:
/// worker `w` takes chunk `w`'s indices first, then what is left of the others. The
/// same index range then runs on the same thread from node to node, where the data
/// it wrote for the previous node is still in its cache (taking indices from one
/// shared counter instead, a chain of pointwise convs ran no faster on 2 threads than
/// on 1, every node reading the other core's cache).
struct Job {
    task: NncTaskFn,
    task_ctx: *mut c_void,
    /// Per chunk, the next index to hand out and the end.
    next: Vec<AtomicU32>,
    end: Vec<u32>,
    n: u32,
    /// Tasks finished.
    done: AtomicU32,
    finished: Mutex<bool>,
    all_done: Condvar,
}

// The task context is the library's, valid for the whole parallel_for call, and the
// library's tasks are written to run on any thread.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

impl Job {
    fn new(task: NncTaskFn, task_ctx: *mut c_void, n: u32, threads: u32) -> Job {
        let chunks = threads.clamp(1, n.max(1)) as u64;
        let bound = |c: u64| (u64::from(n) * c / chunks) as u32;
        Job {
            task,
            task_ctx,
            next: (0..chunks).map(|c| AtomicU32::new(bound(c))).collect(),
            end: (1..=chunks).map(bound).collect(),
            n,
            done: AtomicU32::new(0),
            finished: Mutex::new(false),
            all_done: Condvar::new(),
        }
    }

    /// Runs tasks of this job until none are left to claim, its own chunk first.
    fn work(&self, worker: u32) {
        let chunks = self.next.len();
        let own = worker as usize % chunks;
        for k in 0..chunks {
            let c = (own + k) % chunks;
            while self.next[c].load(Ordering::Relaxed) < self.end[c] {
                let i = self.next[c].fetch_add(1, Ordering::Relaxed);
                if i >= self.end[c] {
                    break;
                }
                // SAFETY: the library's task function, with its context and an index
                // and worker number in range, as `nnc.h` specifies.
                unsafe { (self.task)(self.task_ctx, i, worker) };
                if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
                    *self.finished.lock().unwrap_or_else(|p| p.into_inner()) = true;
                    self.all_done.notify_all();
                }
            }
        }
    }

    fn exhausted(&self) -> bool {
        self.next
            .iter()
            .zip(&self.end)
            .all(|(n, &e)| n.load(Ordering::Relaxed) >= e)
    }
}

struct Shared {
    jobs: Mutex<VecDeque<Arc<Job>>>,
    wake: Condvar,
    /// Jobs published so far (idle workers spin on it).
    published: AtomicU32,
    shutdown: AtomicBool,
    threads: u32,
}

impl Shared {
    /// A job with tasks left to claim, if any.
    fn open_job(&self) -> Option<Arc<Job>> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.iter().find(|j| !j.exhausted()).cloned()
    }
}

/// A pool of `num_threads − 1` threads plus the caller's.
pub struct ThreadPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    num_threads: u32,
}

impl ThreadPool {
    /// A pool running `num_threads` tasks at once (at least 1): the calling thread
    /// and `num_threads − 1` spawned threads.
    pub fn new(num_threads: usize) -> std::io::Result<ThreadPool> {
        let num_threads = num_threads.clamp(1, u32::MAX as usize) as u32;
        let shared = Arc::new(Shared {
            jobs: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            published: AtomicU32::new(0),
            shutdown: AtomicBool::new(false),
            threads: num_threads,
        });
        let mut threads = Vec::new();
        for worker in 1..num_threads {
            let for_worker = Arc::clone(&shared);
            let t = std::thread::Builder::new()
                .name(format!("nnc-pool-{worker}"))
                .spawn(move || worker_loop(&for_worker, worker));
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    // Stop the ones already started.
                    drop(ThreadPool {
                        shared,
                        threads,
                        num_threads,
                    });
                    return Err(e);
                }
            }
        }
        Ok(ThreadPool {
            shared,
            threads,
            num_threads,
        })
    }

    /// A pool with one thread per CPU the process may use.
    pub fn with_available_parallelism() -> std::io::Result<ThreadPool> {
        ThreadPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    pub fn num_threads(&self) -> usize {
        self.num_threads as usize
    }

    /// The `nnc_thread_pool` to pass in `nnc_run_options`; valid while `self` lives.
    pub fn as_raw(&self) -> NncThreadPool {
        NncThreadPool {
            ctx: Arc::as_ptr(&self.shared) as *mut c_void,
            num_threads: self.num_threads,
            parallel_for: raw_parallel_for,
        }
    }

    /// Runs `task(task_ctx, i, worker)` for every i in [0, n), as `nnc.h` specifies.
    ///
    /// # Safety
    /// `task` must be safe to call with `task_ctx` from any thread, concurrently.
    pub unsafe fn parallel_for(&self, n: u32, task: NncTaskFn, task_ctx: *mut c_void) {
        // SAFETY: forwarded contract.
        unsafe { parallel_for(&self.shared, n, task, task_ctx) }
    }
}

unsafe extern "C" fn raw_parallel_for(
    ctx: *mut c_void,
    n: u32,
    task: NncTaskFn,
    task_ctx: *mut c_void,
) {
    // SAFETY: `ctx` is the `Shared` of a live ThreadPool (see `as_raw`).
    let shared = unsafe { &*(ctx as *const Shared) };
    // SAFETY: the library's task and context, per the nnc.h contract.
    unsafe { parallel_for(shared, n, task, task_ctx) }
}

unsafe fn parallel_for(shared: &Shared, n: u32, task: NncTaskFn, task_ctx: *mut c_void) {
    if n == 0 {
        return;
    }
    let job = Arc::new(Job::new(task, task_ctx, n, shared.threads));
    let helped = n > 1 && shared.threads > 1 && shared.wake_workers_for(&job);
    job.work(0);
    if helped {
        shared.retire(&job);
    }
    let start = Instant::now();
    while job.done.load(Ordering::Acquire) < n && start.elapsed() < SPIN {
        std::hint::spin_loop();
    }
    let mut finished = job.finished.lock().unwrap_or_else(|p| p.into_inner());
    while !*finished {
        finished = job
            .all_done
            .wait(finished)
            .unwrap_or_else(|p| p.into_inner());
    }
}

impl Shared {
    /// Publishes `job` to the workers; false when there are none.
    fn wake_workers_for(&self, job: &Arc<Job>) -> bool {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.push_back(Arc::clone(job));
        self.published.fetch_add(1, Ordering::Release);
        drop(jobs);
        self.wake.notify_all();
        true
    }

    /// Takes a job whose indices are all claimed off the queue.
    fn retire(&self, job: &Arc<Job>) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.retain(|j| !Arc::ptr_eq(j, job));
    }
}

fn worker_loop(shared: &Shared, worker: u32) {
    let mut seen = shared.published.load(Ordering::Acquire);
    loop {
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        if let Some(job) = shared.open_job() {
            job.work(worker);
            continue;
        }
        // Spin for a moment: the next node's job usually follows within microseconds.
        let start = Instant::now();
        let mut found = false;
        while start.elapsed() < SPIN {
            let now = shared.published.load(Ordering::Acquire);
            if now != seen {
                seen = now;
                found = true;
                break;
            }
            std::hint::spin_loop();
        }
        if found {
            continue;
        }
        let jobs = shared.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        if jobs.iter().all(|j| j.exhausted()) {
            let _unused = shared.wake.wait(jobs).unwrap_or_else(|p| p.into_inner());
        }
        seen = shared.published.load(Ordering::Acquire);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let _jobs = self.shared.jobs.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.shutdown.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Per index: how often it ran; per worker: whether one ran beyond num_threads.
    struct Tally {
        runs: Vec<AtomicU32>,
        bad_worker: AtomicBool,
        threads: u32,
        work: AtomicU64,
    }

    unsafe extern "C" fn count(ctx: *mut c_void, i: u32, worker: u32) {
        // SAFETY: the tests pass a live Tally.
        let t = unsafe { &*(ctx as *const Tally) };
        t.runs[i as usize].fetch_add(1, Ordering::Relaxed);
        if worker >= t.threads {
            t.bad_worker.store(true, Ordering::Relaxed);
        }
        // A little work so that tasks overlap.
        let mut x = u64::from(i);
        for _ in 0..2000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        t.work.fetch_add(x & 1, Ordering::Relaxed);
    }

    fn tally(n: usize, threads: u32) -> Tally {
        Tally {
            runs: (0..n).map(|_| AtomicU32::new(0)).collect(),
            bad_worker: AtomicBool::new(false),
            threads,
            work: AtomicU64::new(0),
        }
    }

    #[test]
    fn every_index_runs_once_on_a_valid_worker() {
        for threads in [1, 2, 3, 8] {
            let pool = ThreadPool::new(threads).unwrap();
            let raw = pool.as_raw();
            for n in [0usize, 1, 2, 7, 100] {
                let t = tally(n, raw.num_threads);
                // SAFETY: `count` only reads the Tally, which outlives the call.
                unsafe {
                    (raw.parallel_for)(raw.ctx, n as u32, count, &t as *const Tally as *mut c_void)
                };
                assert!(t.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
                assert!(!t.bad_worker.load(Ordering::Relaxed));
            }
        }
    }

    #[test]
    fn concurrent_callers_share_one_pool() {
        let pool = ThreadPool::new(3).unwrap();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let t = tally(37, pool.num_threads() as u32);
                        // SAFETY: as above.
                        unsafe { pool.parallel_for(37, count, &t as *const Tally as *mut c_void) };
                        assert!(t.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
                        assert!(!t.bad_worker.load(Ordering::Relaxed));
                    }
                });
            }
        });
    }
}
