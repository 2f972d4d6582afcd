//! The CPU backend's thread-pool plumbing: a forward pass runs on the pool with its workers kept
//! awake, and element-wise work goes to the pool only when it is large enough to gain from it.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::CpuBackend;

/// Element-wise operations (norms, RoPE, SwiGLU, residual adds) on fewer values than this run on
/// the calling thread: a parallel pass costs more than it saves on one decode token's rows.
/// Every element is computed alike either way, so the results do not depend on it.
pub(super) const PARALLEL_ELEMENTS: usize = 8192;

/// Keeps `n` more workers (this one first) taking the pool's tasks until `done`. The pass's own
/// thread only ever runs this after the pass, when it returns at once.
fn stay_awake(done: &AtomicBool, n: usize) {
    if n == 0 {
        return;
    }
    rayon::join(
        || {
            while !done.load(Ordering::Acquire) {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::hint::spin_loop();
                }
            }
        },
        || stay_awake(done, n - 1),
    );
}

/// `f(i, row i)` over the rows of `dst` (`row` values each, the last maybe shorter): on the
/// calling thread below `PARALLEL_ELEMENTS` values, else across the current pool, several rows a
/// task. Each row is computed alike either way.
pub(super) fn rows_each<T: Send>(dst: &mut [T], row: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if dst.len() < PARALLEL_ELEMENTS {
        dst.chunks_mut(row).enumerate().for_each(|(i, d)| f(i, d));
    } else {
        dst.par_chunks_mut(row)
            .with_min_len(PARALLEL_ELEMENTS.div_ceil(row))
            .enumerate()
            .for_each(|(i, d)| f(i, d));
    }
}

/// Tokens per task of an activation pass (conversion to the partner format, preparation): one
/// task per thread — a token is quick, and a task costs about as much.
pub(super) fn tokens_per_task(n_tokens: usize) -> usize {
    n_tokens.div_ceil(rayon::current_num_threads())
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl CpuBackend {
    /// [`crate::Backend::run`]: the whole pass on the pool.
    pub(super) fn run_pass<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        // The other workers stay awake for the whole pass, taking each parallel operation's tasks
        // as they come (rayon's idle workers otherwise fall asleep between operations, and each
        // wake-up is a futex call and an inter-processor interrupt). `join` keeps the spinners'
        // jobs on the stack: nothing is allocated per pass.
        let done = AtomicBool::new(false);
        let (result, ()) = self.pool.install(|| {
            rayon::join(
                || {
                    // Set when the pass ends, also by unwinding: a panic must not leave the
                    // join waiting for spinners forever.
                    let _done = SetOnDrop(&done);
                    work()
                },
                || stay_awake(&done, rayon::current_num_threads() - 1),
            )
        });
        result
    }

    /// `f(dst row, src row)` over the rows of `dst` (`dst_row` values each) beside those of
    /// `src` (`src_row` each), through [`rows_each`] on the backend's pool.
    pub(super) fn element_wise<T: Sync>(
        &self,
        dst: &mut [f32],
        dst_row: usize,
        src: &[T],
        src_row: usize,
        f: impl Fn(&mut [f32], &[T]) + Sync,
    ) {
        self.pool.install(|| {
            rows_each(dst, dst_row, |i, d| {
                f(d, &src[i * src_row..((i + 1) * src_row).min(src.len())])
            })
        });
    }
}
