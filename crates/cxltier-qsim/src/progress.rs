//! How far a run has got, for a caller to show while it runs (the library never prints).
//!
//! A run advances the counters of the [`Progress`] given with [`crate::Options::progress`] as it
//! goes; another thread reads them with [`Progress::snapshot`]. Relaxed atomics: the figures are
//! for people, read a few times a second, and each only grows.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters a run advances.
#[derive(Debug, Default)]
pub struct Progress {
    gates_total: AtomicU64,
    gates_done: AtomicU64,
    sweeps_done: AtomicU64,
    blocks_total: AtomicU64,
    blocks_done: AtomicU64,
    passes_done: AtomicU64,
    streamed_bytes: AtomicU64,
    shots_total: AtomicU64,
    shots_done: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgressSnapshot {
    /// In memory: fused gates to apply so far known (each batch of gates adds its own), and
    /// applied.
    pub gates_total: u64,
    pub gates_done: u64,
    /// In memory: cache-blocked sweeps over the whole state done.
    pub sweeps_done: u64,
    /// Out of core: blocks (buffers of gathered chunks) to run through so far known, and run.
    pub blocks_total: u64,
    pub blocks_done: u64,
    /// Out of core: passes over the whole state done.
    pub passes_done: u64,
    /// Out of core: bytes of the state read, computed on and written back.
    pub streamed_bytes: u64,
    /// A dynamic circuit's shots, and those whose outcome is counted.
    pub shots_total: u64,
    pub shots_done: u64,
}

impl Progress {
    pub fn new() -> Progress {
        Progress::default()
    }

    /// The counters now.
    pub fn snapshot(&self) -> ProgressSnapshot {
        ProgressSnapshot {
            gates_total: self.gates_total.load(Relaxed),
            gates_done: self.gates_done.load(Relaxed),
            sweeps_done: self.sweeps_done.load(Relaxed),
            blocks_total: self.blocks_total.load(Relaxed),
            blocks_done: self.blocks_done.load(Relaxed),
            passes_done: self.passes_done.load(Relaxed),
            streamed_bytes: self.streamed_bytes.load(Relaxed),
            shots_total: self.shots_total.load(Relaxed),
            shots_done: self.shots_done.load(Relaxed),
        }
    }

    pub(crate) fn gates_planned(&self, gates: usize) {
        self.gates_total.fetch_add(gates as u64, Relaxed);
    }

    pub(crate) fn sweep_done(&self, gates: usize) {
        self.gates_done.fetch_add(gates as u64, Relaxed);
        self.sweeps_done.fetch_add(1, Relaxed);
    }

    pub(crate) fn blocks_planned(&self, blocks: usize) {
        self.blocks_total.fetch_add(blocks as u64, Relaxed);
    }

    pub(crate) fn block_done(&self, bytes: usize) {
        self.blocks_done.fetch_add(1, Relaxed);
        self.streamed_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub(crate) fn passes_finished(&self, passes: usize) {
        self.passes_done.fetch_add(passes as u64, Relaxed);
    }

    pub(crate) fn shots_planned(&self, shots: u64) {
        self.shots_total.fetch_add(shots, Relaxed);
    }

    pub(crate) fn shots_counted(&self, shots: u64) {
        self.shots_done.fetch_add(shots, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_and_are_read_together() {
        let p = Progress::new();
        p.gates_planned(10);
        p.sweep_done(4);
        p.sweep_done(6);
        p.blocks_planned(8);
        p.block_done(4096);
        p.passes_finished(1);
        p.shots_planned(100);
        p.shots_counted(40);
        assert_eq!(
            p.snapshot(),
            ProgressSnapshot {
                gates_total: 10,
                gates_done: 10,
                sweeps_done: 2,
                blocks_total: 8,
                blocks_done: 1,
                passes_done: 1,
                streamed_bytes: 4096,
                shots_total: 100,
                shots_done: 40,
            }
        );
    }
}
