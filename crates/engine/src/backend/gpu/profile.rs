//! The device time of the resident step's dispatches, op by op (`OXIBONSAI_GPU_PROFILE=1`,
//! `GpuBackend::with_profile`): each pass recorded with device timestamps after every dispatch
//! (`Gpu::timed_recorder`), summed by (pass kind, shader). Where a real model's token goes on a
//! device — the products, the attention, the norms, each dispatch's fixed cost — measured in the
//! engine's own step rather than op by op in `op_cost`.
//!
//! A profiled pass is one submission (a timed recorder does not flush between layers) and its
//! read-back a second wait, so its wall time is not the unprofiled pass's; the device intervals
//! are each dispatch's own (with the barrier wgpu puts before it).

use std::collections::BTreeMap;
use std::sync::Mutex;

use oxibonsai_gpu::{GpuError, Recorder, Tensor};

/// One line of a profile: a shader (with its pieces) in passes of one kind.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileLine {
    /// `decode` (a chunk of one token a sequence: matrix-vector products) or `batch` (a chunk
    /// run as matrix-matrix products).
    pub pass: &'static str,
    /// The shader, with the pieces joined to it.
    pub op: &'static str,
    /// Dispatches of it.
    pub dispatches: u64,
    /// Their device time in all, in seconds.
    pub seconds: f64,
}

/// Passes profiled by kind, and each (pass kind, op)'s dispatches and device seconds.
#[derive(Default)]
struct Sums {
    passes: BTreeMap<&'static str, u64>,
    ops: BTreeMap<(&'static str, &'static str), (u64, f64)>,
}

/// The profile a backend keeps.
#[derive(Default)]
pub(super) struct Profile {
    sums: Mutex<Sums>,
}

/// Dispatches a profiled pass may hold: wgpu's most queries a set (4096), less the timestamp
/// before the first dispatch. A 36-layer model's batched chunk records ~500.
const MOST_DISPATCHES: usize = 4095;

impl Profile {
    /// Adds one pass of kind `pass`: each dispatch's shader and device seconds.
    fn add(&self, pass: &'static str, times: &[(&'static str, f64)]) {
        let mut g = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        *g.passes.entry(pass).or_default() += 1;
        for &(op, s) in times {
            let e = g.ops.entry((pass, op)).or_default();
            e.0 += 1;
            e.1 += s;
        }
    }

    /// The passes profiled by kind, and the lines, the most device time first.
    pub(super) fn report(&self) -> (Vec<(&'static str, u64)>, Vec<ProfileLine>) {
        let g = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        let passes = g.passes.iter().map(|(&k, &n)| (k, n)).collect();
        let mut lines: Vec<ProfileLine> = g
            .ops
            .iter()
            .map(|(&(pass, op), &(dispatches, seconds))| ProfileLine {
                pass,
                op,
                dispatches,
                seconds,
            })
            .collect();
        lines.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        (passes, lines)
    }

    pub(super) fn clear(&self) {
        let mut g = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        g.passes.clear();
        g.ops.clear();
    }
}

/// The recorder a pass records into: a timed one where the backend profiles.
pub(super) fn recorder<'g>(
    gpu: &'g oxibonsai_gpu::Gpu,
    profile: Option<&Profile>,
) -> Result<Recorder<'g>, GpuError> {
    match profile {
        Some(_) => gpu.timed_recorder(MOST_DISPATCHES),
        None => Ok(gpu.recorder()),
    }
}

/// Submits a pass and reads `parts` back into `out` ([`Recorder::submit_read`]); a profiled pass
/// (made by [`recorder`]) adds its dispatches' device times to `profile` as a `pass` one.
pub(super) fn submit_read(
    gpu: &oxibonsai_gpu::Gpu,
    rec: Recorder<'_>,
    profile: Option<&Profile>,
    pass: &'static str,
    parts: &[(&Tensor, usize, usize)],
    out: &mut [f32],
) -> Result<(), GpuError> {
    match profile {
        Some(p) => {
            let times = rec.submit_timed()?;
            gpu.read_into_at(parts, out)?;
            p.add(pass, &times);
            Ok(())
        }
        None => rec.submit_read(parts, out),
    }
}
