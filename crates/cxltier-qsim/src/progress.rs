//! How far a run has got, for a caller to show while it runs (the library never prints).
//!
//! A run advances the counters of the [`Progress`] given with [`crate::Options::progress`] as it
//! goes; another thread reads them with [`Progress::snapshot`]. Relaxed atomics: the figures are
//! for people, read a few times a second, and each only grows. A [`ProgressWatcher`] does the
//! reading from a thread of its own and tells a [`ProgressSink`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// The rate a run streams its state at (out of core), over each interval between two looks at
/// its [`Progress`]: from what had streamed at the last look to what has now.
#[derive(Debug, Clone, Copy)]
pub struct StreamRate {
    since: Instant,
    streamed_bytes: u64,
}

impl StreamRate {
    /// Start measuring from `now`.
    pub fn new(now: &ProgressSnapshot) -> StreamRate {
        StreamRate {
            since: Instant::now(),
            streamed_bytes: now.streamed_bytes,
        }
    }

    /// Bytes per second since the last look (0 if no time has passed), and start the next
    /// interval.
    pub fn update(&mut self, now: &ProgressSnapshot) -> f64 {
        let seconds = self.since.elapsed().as_secs_f64();
        let bytes = now.streamed_bytes.saturating_sub(self.streamed_bytes);
        *self = StreamRate::new(now);
        if seconds > 0.0 {
            bytes as f64 / seconds
        } else {
            0.0
        }
    }
}

/// Told a run's progress while it runs, from a [`ProgressWatcher`]'s thread.
pub trait ProgressSink: Send + 'static {
    /// The counters now, and the state's streaming rate since the last call ([`StreamRate`]).
    fn show(&mut self, now: &ProgressSnapshot, streamed_per_second: f64);
    /// The run is over (told only if [`ProgressSink::show`] was).
    fn finish(&mut self);
}

/// Watches a run's [`Progress`] from a thread of its own: a run shorter than
/// [`ProgressWatcher::QUIET`] tells its sink nothing; a longer one is shown every
/// [`ProgressWatcher::EVERY`] until the watcher is dropped, which finishes the sink (so that
/// what it draws is gone before results are printed).
pub struct ProgressWatcher {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressWatcher {
    /// A run shorter than this shows nothing.
    pub const QUIET: Duration = Duration::from_secs(2);
    pub const EVERY: Duration = Duration::from_millis(200);

    /// Start watching `progress` for `sink`.
    pub fn start(progress: Arc<Progress>, mut sink: impl ProgressSink) -> ProgressWatcher {
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            while started.elapsed() < Self::QUIET {
                if stop.load(Relaxed) {
                    return;
                }
                std::thread::sleep(Self::EVERY);
            }
            // The rate is over each interval, from what had streamed when it began.
            let mut rate = StreamRate::new(&progress.snapshot());
            while !stop.load(Relaxed) {
                let now = progress.snapshot();
                sink.show(&now, rate.update(&now));
                std::thread::sleep(Self::EVERY);
            }
            sink.finish();
        });
        ProgressWatcher {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for ProgressWatcher {
    fn drop(&mut self) {
        self.done.store(true, Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
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

    #[test]
    fn the_stream_rate_counts_what_streamed_since_the_last_look() {
        let mut now = ProgressSnapshot {
            streamed_bytes: 1 << 20,
            ..ProgressSnapshot::default()
        };
        let mut rate = StreamRate::new(&now);
        std::thread::sleep(std::time::Duration::from_millis(10));
        now.streamed_bytes += 1 << 20;
        let first = rate.update(&now);
        assert!(
            first > 0.0 && first <= (1u64 << 20) as f64 / 0.01,
            "{first}"
        );
        // Nothing streamed since: the next interval's rate is 0.
        assert_eq!(rate.update(&now), 0.0);
    }

    struct Shown(std::sync::mpsc::Sender<&'static str>);

    impl ProgressSink for Shown {
        fn show(&mut self, _now: &ProgressSnapshot, _streamed_per_second: f64) {
            let _ = self.0.send("show");
        }
        fn finish(&mut self) {
            let _ = self.0.send("finish");
        }
    }

    #[test]
    fn a_short_run_shows_nothing() {
        let (tx, rx) = std::sync::mpsc::channel();
        drop(ProgressWatcher::start(Arc::new(Progress::new()), Shown(tx)));
        assert_eq!(rx.try_iter().count(), 0);
    }
}
