//! A tuning session: the loops behind `cxltier tierd --tune` and `--sweep`. The search itself is
//! [`crate::tune`]'s ([`Continuous`]); here it is driven against a target ([`Measurer`]: move its
//! pages to a split, let it settle, read its progress), with the kernel's weighted-interleave
//! table held at the chosen split for the target's new allocations ([`AllocationWeights`], put
//! back by [`AllocationWeights::restore`]), and every step told to a [`TuneSink`].

use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cxltier_control::weights::{Applied, Restored, TemporaryWeights, WeightChange};
use cxltier_control::ControlError;

use crate::engine::Tiers;
use crate::procfs;
use crate::tune::{
    apply_split, median, split_weights, sweep_order, Continuous, Next, ProgressSignal,
    SplitOutcome, Verdict,
};
use crate::TierdError;

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Moving pages or reading progress failed.
    #[error(transparent)]
    Tierd(#[from] TierdError),
    /// The weighted-interleave table could not be read or written.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The sink could not write its report (its output is gone).
    #[error("{0}")]
    Output(io::Error),
}

impl crate::Classify for TuneError {
    fn class(&self) -> crate::Class {
        match self {
            TuneError::Tierd(e) => e.class(),
            TuneError::Control(e) => cxltier_control::Classify::class(e),
            TuneError::Output(_) => crate::Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            TuneError::Tierd(e) => e.hint(),
            TuneError::Control(e) => cxltier_control::Classify::hint(e),
            TuneError::Output(_) => None,
        }
    }
}

/// How the session reaches its target.
pub trait Measurer {
    /// Move the target to `tenths`/10 of its pages on the fast tier, let it settle, and measure
    /// its progress per second.
    fn measure_at(&mut self, tenths: u32) -> Result<(SplitOutcome, f64), TierdError>;
    /// Measure its progress per second where it is.
    fn measure(&mut self) -> Result<f64, TierdError>;
    /// Move the target to `tenths` without measuring.
    fn place(&mut self, tenths: u32) -> Result<(), TierdError>;
    /// Whether the target is gone.
    fn gone(&mut self) -> bool;
    /// Whether the session holds what it set until the target ends (a launched child) rather
    /// than stopping once it has converged.
    fn hold_until_gone(&self) -> bool;
}

/// Let the target settle after its pages moved, before measuring.
pub const SETTLE: Duration = Duration::from_millis(300);

/// A live process: its pages moved with `move_pages`, its progress read from `progress`.
pub struct LiveTarget {
    pub pid: u32,
    pub tiers: Tiers,
    pub progress: ProgressSignal,
    /// How long each measurement lasts.
    pub window: Duration,
    proc_root: PathBuf,
    /// The child tierd launched, if it did: reaped as soon as it exits.
    pub child: Option<Child>,
    /// The child's exit status, once it exited.
    pub child_status: Option<ExitStatus>,
}

impl LiveTarget {
    /// The process `pid` (a child tierd launched, when `child` is given).
    pub fn new(
        pid: u32,
        tiers: Tiers,
        progress: ProgressSignal,
        window: Duration,
        child: Option<Child>,
    ) -> LiveTarget {
        LiveTarget {
            pid,
            tiers,
            progress,
            window,
            proc_root: PathBuf::from("/proc"),
            child,
            child_status: None,
        }
    }
}

impl Measurer for LiveTarget {
    fn measure_at(&mut self, tenths: u32) -> Result<(SplitOutcome, f64), TierdError> {
        let split = apply_split(&self.proc_root, self.pid, &self.tiers, tenths)?;
        std::thread::sleep(SETTLE);
        let rate = self.progress.rate(self.window)?;
        Ok((split, rate))
    }
    fn measure(&mut self) -> Result<f64, TierdError> {
        self.progress.rate(self.window)
    }
    fn place(&mut self, tenths: u32) -> Result<(), TierdError> {
        apply_split(&self.proc_root, self.pid, &self.tiers, tenths).map(|_| ())
    }
    fn gone(&mut self) -> bool {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(s)) = c.try_wait() {
                self.child_status = Some(s);
                return true;
            }
        }
        self.child_status.is_some() || !procfs::alive(&self.proc_root, self.pid)
    }
    fn hold_until_gone(&self) -> bool {
        self.child.is_some()
    }
}

/// What setting the allocation weights did.
#[derive(Debug, Clone)]
pub enum WeightsSet {
    /// A dry run: what would be written (`change`, against the table now), not written.
    WouldSet {
        dir: PathBuf,
        tenths: u32,
        fast: u32,
        change: WeightChange,
    },
    /// Written (`applied` displays the change; restoring puts back
    /// `applied.against_original`).
    Written {
        tenths: u32,
        fast: u32,
        applied: Applied,
    },
    /// Already in place: nothing written.
    Unchanged,
}

/// The kernel's global weighted-interleave table, set to the tuned split while the session runs
/// and put back by [`restore`](AllocationWeights::restore) (or when dropped): a
/// [`TemporaryWeights`] over the fast and the first slower node.
#[derive(Debug)]
pub struct AllocationWeights {
    weights: TemporaryWeights,
    fast: u32,
    slow: u32,
    dry_run: bool,
}

impl AllocationWeights {
    /// The table below `root` (`/` live), for the fast and the first slower node of `tiers`.
    pub fn new(root: &Path, tiers: &Tiers, dry_run: bool) -> Result<Self, ControlError> {
        Ok(AllocationWeights {
            weights: TemporaryWeights::read(root)?,
            fast: tiers.fast[0],
            slow: tiers.slow[0],
            dry_run,
        })
    }

    /// Set the weights of the fast and slower node to the ratio of `tenths` (not with a dry run).
    pub fn set(&mut self, tenths: u32) -> Result<([u32; 2], WeightsSet), ControlError> {
        let (wf, ws) = split_weights(tenths);
        let requested = [(self.fast, wf), (self.slow, ws)];
        if self.dry_run {
            let change = self.weights.plan(&requested)?;
            let set = WeightsSet::WouldSet {
                dir: self.weights.original().dir().to_path_buf(),
                tenths,
                fast: self.fast,
                change,
            };
            return Ok(([wf, ws], set));
        }
        if self.weights.holds() && self.weights.plan(&requested)?.is_noop() {
            // Already in place (a re-tune that kept the split): nothing to write or say.
            return Ok(([wf, ws], WeightsSet::Unchanged));
        }
        let applied = self.weights.set(&requested)?;
        let set = WeightsSet::Written {
            tenths,
            fast: self.fast,
            applied,
        };
        Ok(([wf, ws], set))
    }

    /// Put the original weights back: None when nothing was written.
    pub fn restore(&mut self) -> Option<Restored> {
        self.weights.restore()
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct TuneStep {
    /// `tune_step` or `sweep_point`.
    pub event: &'static str,
    pub pid: u32,
    pub fast_percent: u32,
    /// The sweep's round (with more than one round).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    #[serde(flatten)]
    pub split: SplitOutcome,
    pub throughput_per_s: f64,
}

/// The search converged (`tuned`) or the sweep ended (`swept`).
#[derive(Debug, Clone, Serialize)]
pub struct TuneDone {
    pub event: &'static str,
    pub pid: u32,
    pub start_fast_percent: Option<u32>,
    pub fast_percent: u32,
    pub throughput_per_s: f64,
    /// Throughput measured at each split (fast-tier percent → per second; with rounds, the
    /// median).
    pub measured: BTreeMap<u32, f64>,
    /// With rounds: every window measured at each split, in the order measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<BTreeMap<u32, Vec<f64>>>,
    /// The weighted-interleave weights set for the target's new allocations (fast node, slower
    /// node), or null when they are left alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<[u32; 2]>,
    /// Climbs after the first (continuous tuning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retunes: Option<u32>,
}

/// One window of continuous tuning's watch.
#[derive(Debug, Clone, Serialize)]
pub struct WatchWindow {
    pub event: &'static str,
    pub pid: u32,
    pub fast_percent: u32,
    pub throughput_per_s: f64,
    pub baseline_per_s: Option<f64>,
    pub streak: i32,
    pub verdict: Verdict,
}

/// What a session tells as it runs, one method per event.
pub trait TuneSink {
    /// A split measured.
    fn step(&mut self, step: &TuneStep) -> io::Result<()>;
    /// Converged, or swept.
    fn done(&mut self, done: &TuneDone) -> io::Result<()>;
    /// A window of the continuous watch.
    fn watch(&mut self, _window: &WatchWindow) -> io::Result<()> {
        Ok(())
    }
    /// The throughput moved for long enough: the search starts again from `fast_percent`.
    fn retuning(&mut self, _fast_percent: u32) {}
    /// The allocation weights were set (or would be, with a dry run).
    fn weights(&mut self, _set: &WeightsSet) {}
    /// Stopped (`reason`) before the search converged.
    fn stopped_early(&mut self, _reason: &'static str) {}
}

/// How a tuning session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TuneOutcome {
    /// `signal`, `duration`, `target_exited` or `tuned`.
    pub reason: &'static str,
    /// The split the target is left at (tenths on the fast tier).
    pub split: u32,
    pub retunes: u32,
}

/// A tuning session's settings.
#[derive(Debug, Clone)]
pub struct Session {
    pub pid: u32,
    /// Keep watching after converging, and tune again when the throughput moves.
    pub continuous: bool,
    /// Relative change (0.10) that, for `retune_windows` windows in a row, calls for a re-tune.
    pub retune_threshold: f64,
    pub retune_windows: u32,
    /// Stop after this long.
    pub duration: Option<Duration>,
}

/// A neighbouring split must beat the current one by this much to be taken.
pub const MARGIN: f64 = 0.02;

impl Session {
    /// Climb from `start` (tenths) to the best split, leave the target there and, with
    /// `weights`, set the table to it; with `continuous`, watch and climb again as the
    /// throughput moves. Ends on the stop flag, the deadline, the target's exit, or (one-shot,
    /// target not launched) once converged. The weights are not restored here: the caller does,
    /// whatever the outcome.
    pub fn tune(
        &self,
        start: u32,
        target: &mut dyn Measurer,
        mut weights: Option<&mut AllocationWeights>,
        sink: &mut dyn TuneSink,
        stop: &AtomicBool,
    ) -> Result<TuneOutcome, TuneError> {
        let deadline = self.duration.map(|d| Instant::now() + d);
        let mut ctl = Continuous::new(start, MARGIN, self.retune_threshold, self.retune_windows);
        let mut converged = false;
        let out = TuneError::Output;
        let reason = loop {
            if stop.load(Ordering::Relaxed) {
                break "signal";
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break "duration";
            }
            if target.gone() {
                break "target_exited";
            }
            let step = match ctl.next_step() {
                Next::Measure(k) => target.measure_at(k).map(|(split, rate)| {
                    ctl.record(k, rate);
                    sink.step(&TuneStep {
                        event: "tune_step",
                        pid: self.pid,
                        fast_percent: k * 10,
                        round: None,
                        split,
                        throughput_per_s: rate,
                    })
                }),
                Next::Converged {
                    split,
                    throughput,
                    measured,
                } => {
                    // Leave the target at the chosen split (the last split measured may be a
                    // rejected neighbour).
                    target.place(split)?;
                    let set = match weights.as_deref_mut() {
                        Some(w) => {
                            let (set, what) = w.set(split)?;
                            if !matches!(what, WeightsSet::Unchanged) {
                                sink.weights(&what);
                            }
                            Some(set)
                        }
                        None => None,
                    };
                    sink.done(&TuneDone {
                        event: "tuned",
                        pid: self.pid,
                        start_fast_percent: Some(ctl.climb_start() * 10),
                        fast_percent: split * 10,
                        throughput_per_s: throughput.unwrap_or(0.0),
                        measured: measured.iter().map(|(k, v)| (k * 10, *v)).collect(),
                        rounds: None,
                        weights: set,
                        retunes: self.continuous.then_some(ctl.retunes()),
                    })
                    .map_err(out)?;
                    converged = true;
                    if !self.continuous {
                        if !target.hold_until_gone() {
                            break "tuned";
                        }
                        // With CMD, hold the weights until it ends (or tierd is stopped).
                        while !stop.load(Ordering::Relaxed)
                            && deadline.is_none_or(|d| Instant::now() < d)
                            && !target.gone()
                        {
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        continue;
                    }
                    Ok(Ok(()))
                }
                Next::Watch(k) => target.measure().map(|rate| {
                    let verdict = ctl.record(k, rate).unwrap_or(Verdict::Hold);
                    let (baseline, streak) = ctl.watch().unwrap_or((None, 0));
                    if verdict == Verdict::Retune {
                        sink.retuning(k * 10);
                    }
                    sink.watch(&WatchWindow {
                        event: "watch",
                        pid: self.pid,
                        fast_percent: k * 10,
                        throughput_per_s: rate,
                        baseline_per_s: baseline,
                        streak,
                        verdict,
                    })
                }),
            };
            match step {
                Ok(reported) => reported.map_err(out)?,
                // A target that ended mid-measurement ends the run; other failures are errors.
                Err(_) if target.gone() => break "target_exited",
                Err(e) => return Err(e.into()),
            }
        };
        if !converged && reason != "target_exited" {
            sink.stopped_early(reason);
        }
        Ok(TuneOutcome {
            reason,
            split: ctl.split(),
            retunes: ctl.retunes(),
        })
    }

    /// Measure every split of `splits` `rounds` times (alternately), then leave the target at the
    /// best median.
    pub fn sweep(
        &self,
        splits: &[u32],
        rounds: u32,
        target: &mut dyn Measurer,
        sink: &mut dyn TuneSink,
    ) -> Result<(), TuneError> {
        let mut samples: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        let many = rounds > 1;
        for (round, k) in sweep_order(splits, rounds) {
            let (split, rate) = target.measure_at(k)?;
            sink.step(&TuneStep {
                event: "sweep_point",
                pid: self.pid,
                fast_percent: k * 10,
                round: many.then_some(round),
                split,
                throughput_per_s: rate,
            })
            .map_err(TuneError::Output)?;
            samples.entry(k).or_default().push(rate);
        }
        let measured: BTreeMap<u32, f64> = samples
            .iter()
            .filter_map(|(k, v)| Some((*k, median(v)?)))
            .collect();
        let Some((&best, &rate)) = measured.iter().max_by(|a, b| a.1.total_cmp(b.1)) else {
            return Ok(());
        };
        target.place(best)?;
        sink.done(&TuneDone {
            event: "swept",
            pid: self.pid,
            start_fast_percent: None,
            fast_percent: best * 10,
            throughput_per_s: rate,
            measured: measured.iter().map(|(k, v)| (k * 10, *v)).collect(),
            rounds: many.then(|| samples.iter().map(|(k, v)| (k * 10, v.clone())).collect()),
            weights: None,
            retunes: None,
        })
        .map_err(TuneError::Output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxltier_control::weights::WI_DIR;
    use std::fs;

    /// A target whose throughput at split k in measurement round i is `f(i, k)`; the stop flag is
    /// raised after `rounds` measurements (none, when `rounds` is 0). It "exits" after
    /// `gone_after` checks, when set.
    struct Sim<'a> {
        f: Box<dyn Fn(usize, u32) -> f64 + 'a>,
        round: usize,
        rounds: usize,
        at: u32,
        stop: &'a AtomicBool,
        hold: bool,
        gone_after: Option<usize>,
        checks: usize,
    }

    impl<'a> Sim<'a> {
        fn new(rounds: usize, stop: &'a AtomicBool, f: impl Fn(usize, u32) -> f64 + 'a) -> Self {
            Sim {
                f: Box::new(f),
                round: 0,
                rounds,
                at: 0,
                stop,
                hold: false,
                gone_after: None,
                checks: 0,
            }
        }
        fn tick(&mut self) -> f64 {
            let rate = (self.f)(self.round, self.at);
            self.round += 1;
            if self.round == self.rounds {
                self.stop.store(true, Ordering::Relaxed);
            }
            rate
        }
    }

    impl Measurer for Sim<'_> {
        fn measure_at(&mut self, tenths: u32) -> Result<(SplitOutcome, f64), TierdError> {
            self.at = tenths;
            Ok((SplitOutcome::default(), self.tick()))
        }
        fn measure(&mut self) -> Result<f64, TierdError> {
            Ok(self.tick())
        }
        fn place(&mut self, tenths: u32) -> Result<(), TierdError> {
            self.at = tenths;
            Ok(())
        }
        fn gone(&mut self) -> bool {
            self.checks += 1;
            self.gone_after.is_some_and(|n| self.checks > n)
        }
        fn hold_until_gone(&self) -> bool {
            self.hold
        }
    }

    /// Records what the session says, and checks that no climb measures a split twice.
    #[derive(Default)]
    struct Recorder {
        /// (measurement round, split) of each watch window.
        watched: Vec<(usize, u32)>,
        steps: usize,
        climb: Vec<u32>,
        done: Vec<TuneDone>,
        weights: Vec<String>,
        retunes: usize,
        early: Vec<&'static str>,
    }

    impl TuneSink for Recorder {
        fn step(&mut self, s: &TuneStep) -> io::Result<()> {
            self.steps += 1;
            let k = s.fast_percent / 10;
            assert!(!self.climb.contains(&k), "{k} measured twice in one climb");
            self.climb.push(k);
            Ok(())
        }
        fn done(&mut self, d: &TuneDone) -> io::Result<()> {
            self.climb.clear();
            self.done.push(d.clone());
            Ok(())
        }
        fn watch(&mut self, w: &WatchWindow) -> io::Result<()> {
            self.watched
                .push((self.steps + self.watched.len(), w.fast_percent / 10));
            Ok(())
        }
        fn retuning(&mut self, _: u32) {
            self.retunes += 1;
            self.climb.clear();
        }
        fn weights(&mut self, set: &WeightsSet) {
            self.weights.push(match set {
                WeightsSet::WouldSet { tenths, .. } => format!("would {tenths}"),
                WeightsSet::Written { tenths, .. } => format!("wrote {tenths}"),
                WeightsSet::Unchanged => "unchanged".into(),
            });
        }
        fn stopped_early(&mut self, reason: &'static str) {
            self.early.push(reason);
        }
    }

    fn session(continuous: bool) -> Session {
        Session {
            pid: 7,
            continuous,
            retune_threshold: 0.10,
            retune_windows: 3,
            duration: None,
        }
    }

    /// Run continuous tuning from 7 tenths for `rounds` measurements against `f`.
    fn run_continuous(rounds: usize, f: impl Fn(usize, u32) -> f64) -> (Recorder, TuneOutcome) {
        let stop = AtomicBool::new(false);
        let mut sim = Sim::new(rounds, &stop, f);
        let mut sink = Recorder::default();
        let out = session(true)
            .tune(7, &mut sim, None, &mut sink, &stop)
            .unwrap();
        assert_eq!(out.reason, "signal");
        assert_eq!(out.retunes as usize, sink.retunes);
        (sink, out)
    }

    /// The splits watched from measurement round `from` on.
    fn watched_from(sink: &Recorder, from: usize) -> Vec<u32> {
        sink.watched
            .iter()
            .filter(|(i, _)| *i >= from)
            .map(|w| w.1)
            .collect()
    }

    /// A deterministic noise source in [-1, 1].
    fn noise(i: usize) -> f64 {
        let x = (i as u64 + 1)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    }

    #[test]
    fn continuous_follows_an_optimum_that_moves() {
        // The optimum is at 7 tenths for 200 rounds, then at 3 (the load changed): throughput at
        // 7 drops by far more than the threshold.
        let f = |round: usize, k: u32| {
            let peak = if round < 200 { 7.0 } else { 3.0 };
            100.0 - 4.0 * (k as f64 - peak).powi(2)
        };
        let (sink, out) = run_continuous(400, f);
        assert!(watched_from(&sink, 150)[..20].iter().all(|&s| s == 7));
        assert_eq!(out.split, 3);
        assert_eq!(out.retunes, 1, "one change, one re-tune");
        // It got there within a bounded number of rounds after the change (3 windows to notice,
        // one climb of at most 11 points) and stayed.
        let late = watched_from(&sink, 200 + 3 + 11);
        assert!(!late.is_empty() && late.iter().all(|&s| s == 3), "{late:?}");
        assert_eq!(sink.done.len(), 2);
        assert_eq!(sink.done[1].retunes, Some(1));
    }

    #[test]
    fn a_noisy_flat_curve_never_retunes() {
        // +-4.5% noise around a flat level, under half the 10% threshold: no re-tune, ever.
        let (sink, out) = run_continuous(2000, |round, _| 100.0 * (1.0 + 0.045 * noise(round)));
        assert_eq!(out.retunes, 0);
        let settled = watched_from(&sink, 20);
        assert!(settled.iter().all(|&s| s == settled[0]));
    }

    #[test]
    fn a_level_change_without_a_new_optimum_retunes_once() {
        // Everything 30% slower after round 100 (a neighbour took bandwidth); the best split is
        // still 7: one re-tune finds it again, and the new level becomes the baseline.
        let f = |round: usize, k: u32| {
            let level = if round < 100 { 100.0 } else { 70.0 };
            level - 3.0 * (k as f64 - 7.0).powi(2) + 0.5 * noise(round)
        };
        let (sink, out) = run_continuous(600, f);
        assert_eq!(out.retunes, 1);
        let late = watched_from(&sink, 150);
        assert!(!late.is_empty() && late.iter().all(|&s| s == 7));
    }

    /// A weighted-interleave table with nodes 0 and 1 at weight 1.
    fn table() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(WI_DIR);
        fs::create_dir_all(&dir).unwrap();
        for n in [0, 1] {
            fs::write(dir.join(format!("node{n}")), "1\n").unwrap();
        }
        root
    }

    fn weight(root: &Path, node: u32) -> String {
        fs::read_to_string(root.join(WI_DIR).join(format!("node{node}")))
            .unwrap()
            .trim()
            .to_string()
    }

    fn tiers() -> Tiers {
        Tiers {
            fast: vec![0],
            slow: vec![1],
        }
    }

    /// A one-shot tuning from 50% of a target whose throughput peaks at `peak` tenths, with
    /// weights (written, or with `dry_run` only said) in a fresh table: the table, the outcome,
    /// the split the target was left at, the weights and what was reported.
    fn tune_weights(
        peak: f64,
        dry_run: bool,
    ) -> (
        tempfile::TempDir,
        TuneOutcome,
        u32,
        AllocationWeights,
        Recorder,
    ) {
        let root = table();
        let stop = AtomicBool::new(false);
        let mut sim = Sim::new(0, &stop, |_, k| 100.0 - 4.0 * (k as f64 - peak).powi(2));
        let mut w = AllocationWeights::new(root.path(), &tiers(), dry_run).unwrap();
        let mut sink = Recorder::default();
        let out = session(false)
            .tune(5, &mut sim, Some(&mut w), &mut sink, &stop)
            .unwrap();
        let at = sim.at;
        (root, out, at, w, sink)
    }

    #[test]
    fn the_tuner_converges_on_the_measured_split_and_the_weights_go_back() {
        let (root, out, at, mut w, sink) = tune_weights(7.0, false);
        assert_eq!((out.reason, out.split), ("tuned", 7));
        assert_eq!(at, 7, "the target is left at the chosen split");
        assert_eq!(sink.done.len(), 1);
        let done = &sink.done[0];
        assert_eq!((done.start_fast_percent, done.fast_percent), (Some(50), 70));
        assert_eq!(done.weights, Some([7, 3]));
        assert_eq!(sink.weights, ["wrote 7"]);
        assert_eq!(
            (weight(root.path(), 0), weight(root.path(), 1)),
            ("7".into(), "3".into())
        );

        let restored = w.restore().expect("written, so restored");
        assert!(restored.complete());
        assert_eq!(restored.to_string(), "node0 7 -> 1, node1 3 -> 1");
        assert_eq!(
            (weight(root.path(), 0), weight(root.path(), 1)),
            ("1".into(), "1".into())
        );
        assert!(w.restore().is_none(), "restored once");
    }

    #[test]
    fn a_dry_run_says_what_it_would_write_and_writes_nothing() {
        let (root, out, _, mut w, sink) = tune_weights(3.0, true);
        assert_eq!(out.split, 3);
        assert_eq!(sink.weights, ["would 3"]);
        assert_eq!(
            (weight(root.path(), 0), weight(root.path(), 1)),
            ("1".into(), "1".into())
        );
        assert!(w.restore().is_none());
    }

    #[test]
    fn a_launched_target_is_held_until_it_exits_and_an_early_stop_is_said() {
        let stop = AtomicBool::new(false);
        let mut sim = Sim::new(0, &stop, |_, k| 100.0 - (k as f64 - 6.0).powi(2));
        sim.hold = true;
        sim.gone_after = Some(15);
        let mut sink = Recorder::default();
        let out = session(false)
            .tune(6, &mut sim, None, &mut sink, &stop)
            .unwrap();
        assert_eq!((out.reason, out.split), ("target_exited", 6));
        assert!(sink.early.is_empty(), "it converged before");

        // Stopped after two measurements: said, and the target stays where it was measured last.
        let stop = AtomicBool::new(false);
        let mut sim = Sim::new(2, &stop, |_, k| k as f64);
        let mut sink = Recorder::default();
        let out = session(false)
            .tune(5, &mut sim, None, &mut sink, &stop)
            .unwrap();
        assert_eq!(out.reason, "signal");
        assert_eq!(sink.early, ["signal"]);
        assert!(sink.done.is_empty());
    }

    #[test]
    fn a_sweep_measures_every_split_per_round_and_keeps_the_best_median() {
        let stop = AtomicBool::new(false);
        // Round 1 of split 10 is an outlier: the median of three ignores it.
        let mut sim = Sim::new(0, &stop, |i, k| {
            if k == 10 && i == 1 {
                1000.0
            } else {
                100.0 - (k as f64 - 8.0).powi(2)
            }
        });
        let mut sink = Recorder::default();
        // Each climb may not repeat a split; a sweep does by design: count only.
        let mut count = 0;
        struct Counting<'a>(&'a mut usize, &'a mut Recorder);
        impl TuneSink for Counting<'_> {
            fn step(&mut self, _: &TuneStep) -> io::Result<()> {
                *self.0 += 1;
                Ok(())
            }
            fn done(&mut self, d: &TuneDone) -> io::Result<()> {
                self.1.done(d)
            }
        }
        session(false)
            .sweep(
                &[10, 8, 5],
                3,
                &mut sim,
                &mut Counting(&mut count, &mut sink),
            )
            .unwrap();
        assert_eq!(count, 9);
        let done = &sink.done[0];
        assert_eq!((done.event, done.fast_percent), ("swept", 80));
        assert_eq!(done.rounds.as_ref().map(|r| r[&100].len()), Some(3));
        assert_eq!(sim.at, 8, "left at the best split");
    }
}
