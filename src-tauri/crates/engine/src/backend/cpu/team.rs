//! A team of hot helper threads for the row-shared kernel
//! ([`super::row_shared`]): the calling thread works too, and the helpers
//! spin for a short while between jobs before they sleep.
//!
//! Why not rayon, which the kernel used first: a decode step runs about 210
//! matmuls, each a fraction of a millisecond, with MLX's own ops in
//! between. Rayon's workers sleep after a few dozen yields, so nearly every
//! matmul woke them through the OS and then slept the caller until they
//! were done: three cross-thread wake-ups per matmul (`strace -c` counted
//! 250,000 `sched_yield` and 137,000 `futex` calls for 64 tokens). On the
//! 2-core development VM the same build's plain decode swung between 8 and
//! 22 tok/s from run to run. Here the caller hands a job over with one
//! store, the helpers (spinning, not sleeping, while decoding goes on) pick
//! it up at once, and the caller waits for them by spinning on a counter.
//! Measured in docs/speculative.md ("Hot helpers").
// One lifetime erased (see `Team::run`), checked by construction.
#![allow(unsafe_code)]

use std::hint::spin_loop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle helper spins before it sleeps: longer than the gap
/// between two matmuls of a decode step (MLX's attention and norms run
/// there), short enough that a finished answer leaves no core busy.
const SPIN: Duration = Duration::from_micros(500);

/// A job as the helpers see it. The lifetime is erased; [`Team::run`] keeps
/// the reference valid for as long as any helper can reach it.
type Job = &'static (dyn Fn() + Sync);

struct State {
    /// The open job: `Some` from the moment a caller hands it over until it
    /// closes it.
    job: Option<Job>,
    /// Helpers waiting on [`Shared::wake`].
    sleeping: usize,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Counts the jobs handed over: written only under `state`'s lock, read
    /// without it by the spinning helpers.
    epoch: AtomicU64,
    /// Helpers inside the open job.
    active: AtomicUsize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held; a poisoned lock's state is
        // still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The process's team: one helper fewer than the cores (the caller is the
/// last one).
pub struct Team {
    shared: &'static Shared,
    helpers: usize,
}

/// The process's team, started on first use.
pub fn team() -> &'static Team {
    static TEAM: OnceLock<Team> = OnceLock::new();
    TEAM.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Team::start(cores.saturating_sub(1))
    })
}

impl Team {
    fn start(helpers: usize) -> Self {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            state: Mutex::new(State { job: None, sleeping: 0 }),
            wake: Condvar::new(),
            epoch: AtomicU64::new(0),
            active: AtomicUsize::new(0),
        }));
        let mut started = 0;
        for i in 0..helpers {
            let spawned = std::thread::Builder::new().name(format!("headroom-matmul-{i}")).spawn(move || help(shared));
            // A helper that cannot start leaves the work to the others.
            started += usize::from(spawned.is_ok());
        }
        Self { shared, helpers: started }
    }

    /// Threads that may run a job: the helpers and the caller.
    pub fn threads(&self) -> usize {
        self.helpers + 1
    }

    /// Runs `work` on the calling thread and on every helper that joins in
    /// time, and returns when all of them are done. `work` must split
    /// itself (claim pieces from a shared counter until none is left): how
    /// many threads run it is not known in advance, and a helper that joins
    /// late finds nothing left. While another caller's job is open (two
    /// engines in one process, as in the tests), `work` runs on the caller
    /// alone.
    pub fn run(&self, work: &(dyn Fn() + Sync)) {
        if self.helpers == 0 {
            work();
            return;
        }
        // A helper's panic is caught on its thread; the caller raises it
        // once the job is closed, so a piece never goes missing unnoticed.
        let helper_panicked = AtomicBool::new(false);
        let caller = std::thread::current().id();
        let guarded = || {
            if std::thread::current().id() == caller {
                work();
            } else if catch_unwind(AssertUnwindSafe(work)).is_err() {
                helper_panicked.store(true, Ordering::Relaxed);
            }
        };
        let guarded: &(dyn Fn() + Sync) = &guarded;
        // SAFETY: the erased reference is reached only by helpers that join
        // while the job is open, and this function neither returns nor
        // unwinds before the job is closed and every helper that joined has
        // left it (`Close::drop`).
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn() + Sync), Job>(guarded) };
        let sleeping = {
            let mut state = self.shared.lock();
            if state.job.is_some() {
                drop(state);
                work();
                return;
            }
            state.job = Some(job);
            self.shared.epoch.fetch_add(1, Ordering::Release);
            state.sleeping
        };
        if sleeping > 0 {
            self.shared.wake.notify_all();
        }
        let close = Close(self.shared);
        guarded();
        drop(close);
        // The helpers' stores are seen: `Close` waited for them with Acquire.
        assert!(!helper_panicked.load(Ordering::Relaxed), "a helper thread's piece of the job panicked");
    }
}

/// Closes the open job and waits for the helpers inside it, also when the
/// caller's own part unwinds.
struct Close(&'static Shared);

impl Drop for Close {
    fn drop(&mut self) {
        self.0.lock().job = None;
        let mut spins = 0u32;
        while self.0.active.load(Ordering::Acquire) != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                // A helper descheduled mid-piece: let it run.
                std::thread::yield_now();
            } else {
                spin_loop();
            }
        }
    }
}

/// A helper's life: wait for a new job (spin, then sleep), join it while it
/// is open, run it, leave.
fn help(shared: &'static Shared) {
    let mut seen = 0u64;
    loop {
        let idle = Instant::now();
        let mut spins = 0u32;
        while shared.epoch.load(Ordering::Acquire) == seen {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                if idle.elapsed() <= SPIN {
                    // Between matmuls MLX's stream thread may start OpenBLAS's
                    // workers (attention's products over the cache): a helper
                    // spinning without a yield held their core, and a 17-row
                    // pass spent about 10 ms more in MLX (`pass_cost`).
                    std::thread::yield_now();
                } else {
                    let mut state = shared.lock();
                    state.sleeping += 1;
                    while shared.epoch.load(Ordering::Acquire) == seen {
                        state = shared.wake.wait(state).unwrap_or_else(|e| e.into_inner());
                    }
                    state.sleeping -= 1;
                    break;
                }
            }
            spin_loop();
        }
        let job = {
            let state = shared.lock();
            seen = shared.epoch.load(Ordering::Acquire);
            if state.job.is_some() {
                shared.active.fetch_add(1, Ordering::AcqRel);
            }
            state.job
        };
        if let Some(job) = job {
            // The job catches its own panics (`Team::run`) and reports them
            // to the caller; this one keeps the helper alive whatever runs.
            let _ = catch_unwind(AssertUnwindSafe(job));
            shared.active.fetch_sub(1, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_piece_runs_once_whoever_runs_it() {
        let team = Team::start(3);
        for round in 0..200 {
            let pieces = 1 + round % 37;
            let next = AtomicUsize::new(0);
            let done: Vec<AtomicUsize> = (0..pieces).map(|_| AtomicUsize::new(0)).collect();
            team.run(&|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(d) = done.get(i) else { break };
                d.fetch_add(1, Ordering::Relaxed);
            });
            assert!(done.iter().all(|d| d.load(Ordering::Relaxed) == 1), "round {round}");
            if round % 50 == 0 {
                // Let the helpers fall asleep: the next job must wake them.
                std::thread::sleep(SPIN * 4);
            }
        }
    }

    #[test]
    fn two_callers_at_once_each_finish_their_own_work() {
        let team = &*Box::leak(Box::new(Team::start(1)));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..100 {
                        let next = AtomicUsize::new(0);
                        let sum = AtomicUsize::new(0);
                        team.run(&|| loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= 100 {
                                break;
                            }
                            sum.fetch_add(i, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 4950);
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_piece_neither_hangs_the_caller_nor_kills_a_helper() {
        let team = Team::start(1);
        let caller = std::thread::current().id();
        let result = catch_unwind(AssertUnwindSafe(|| {
            team.run(&|| {
                if std::thread::current().id() == caller {
                    panic!("the caller's piece");
                }
            })
        }));
        assert!(result.is_err());
        // The team still runs jobs, helper included.
        let ran = AtomicUsize::new(0);
        team.run(&|| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert!(ran.load(Ordering::Relaxed) >= 1);
    }

    #[test]
    fn a_helper_s_panic_is_raised_on_the_caller() {
        let team = Team::start(1);
        let caller = std::thread::current().id();
        let helper_in = AtomicBool::new(false);
        let result = catch_unwind(AssertUnwindSafe(|| {
            team.run(&|| {
                if std::thread::current().id() == caller {
                    // Keep the job open until the helper has joined it.
                    while !helper_in.load(Ordering::Acquire) {
                        spin_loop();
                    }
                } else {
                    helper_in.store(true, Ordering::Release);
                    panic!("the helper's piece");
                }
            })
        }));
        assert!(result.is_err(), "the helper's panic was lost");
        // The helper survived it.
        let ran = AtomicUsize::new(0);
        team.run(&|| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert!(ran.load(Ordering::Relaxed) >= 1);
    }
}
