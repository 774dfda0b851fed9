//! The whole `--tune`/`--sweep` run around a [`Session`]: the command line's settings checked
//! ([`TuneRun::check`]), the target found or started (a launched command under weighted
//! interleave over the two nodes, the kernel's table set to the starting split first), the
//! session or the sweep driven, and the table put back whatever the outcome; every step told to
//! a [`TuneRunSink`].

use serde::Serialize;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use cxltier_control::launch::spawn_with_policy;
use cxltier_control::weights::Restored;
use cxltier_control::ControlError;
use cxltier_sys::{get_mempolicy, kernel_supports, Mode, NodeMask, Policy};

use crate::daemon::{run_duration, Launched};
use crate::engine::Tiers;
use crate::procfs;
use crate::tune::ProgressSignal;
use crate::tuning::{AllocationWeights, LiveTarget, Session, TuneError, TuneOutcome, TuneSink};
use crate::TierdError;

/// A `--tune` or `--sweep` run, in the command line's units; [`TuneRun::check`] says what is
/// wrong with it before anything starts.
#[derive(Debug, Clone, Default)]
pub struct TuneRun {
    /// `--pid`: the target (one), or none to start `command`.
    pub pids: Vec<u32>,
    /// `-- CMD`: the program and its arguments.
    pub command: Vec<OsString>,
    /// Measure every split instead of climbing to the best.
    pub sweep: bool,
    /// With `sweep`: the splits to measure (percent on the fast tier, multiples of 10), in
    /// order; none: all eleven from 100 down.
    pub splits_percent: Vec<u32>,
    /// With `sweep`: how many times each split is measured (alternately; medians compared).
    pub rounds: u32,
    /// The progress signal as written (`file:PATH` or `cmd:COMMAND`).
    pub progress: String,
    /// Seconds of progress measured at each split.
    pub measure_s: f64,
    /// Keep watching after converging and re-tune when throughput moves.
    pub continuous: bool,
    /// The change in throughput (percent of the baseline) that, for `retune_windows` windows in
    /// a row, calls for a re-tune.
    pub retune_threshold_pct: f64,
    pub retune_windows: u32,
    /// Stop after this many seconds.
    pub duration_s: Option<f64>,
    /// Show the weighted-interleave change instead of writing it.
    pub dry_run: bool,
}

/// A checked run's settings in the session's units.
struct Checked {
    /// The target, or 0 to start the command.
    pid: u32,
    /// Tenths on the fast tier.
    splits: Vec<u32>,
    measure: Duration,
    duration: Option<Duration>,
}

/// Hears a run's steps beyond the session's own.
pub trait TuneRunSink: TuneSink {
    /// What the run does and why, in a sentence: how the target was started, what its memory
    /// policy lets tierd steer, what the session is about to do.
    fn note(&mut self, _text: &str) {}
    /// The original weights were written back (some perhaps not: see the report).
    fn weights_restored(&mut self, _restored: &Restored) {}
}

/// How a run ended.
#[derive(Debug)]
pub struct TuneEnd {
    pub outcome: TuneOutcome,
    pub pid: u32,
    /// The original weights are back (true when none were written).
    pub weights_restored: bool,
    /// The launched command's exit status, when it ended.
    pub status: Option<ExitStatus>,
}

/// The final line of a tune (the `stopped` JSON line of docs/tierd.md).
#[derive(Debug, Clone, Serialize)]
pub struct TuneStopped {
    pub event: &'static str,
    pub reason: &'static str,
    pub pid: u32,
    pub fast_percent: u32,
    pub retunes: u32,
    pub target_running: bool,
    pub weights_restored: bool,
}

impl TuneEnd {
    /// The final line, the target looked at now.
    pub fn stopped(&self) -> TuneStopped {
        TuneStopped {
            event: "stopped",
            reason: self.outcome.reason,
            pid: self.pid,
            fast_percent: self.outcome.split * 10,
            retunes: self.outcome.retunes,
            target_running: procfs::alive(Path::new("/proc"), self.pid),
            weights_restored: self.weights_restored,
        }
    }
}

/// The starting split (tenths on the fast tier) from tier weights, fastest first.
pub fn start_tenths(weights: &[u32]) -> Result<u32, TierdError> {
    let total: u32 = weights.iter().sum();
    if weights.len() < 2 || total == 0 {
        return Err(TierdError::invalid(format!(
            "--tune-start {weights:?}: give one weight per tier, fastest first, e.g. 3:1"
        )));
    }
    Ok(((weights[0] as f64 / total as f64) * 10.0).round() as u32)
}

impl TuneRun {
    /// Check every setting before anything starts; the message names the flag.
    pub fn check(&self) -> Result<(), TierdError> {
        self.checked().map(drop)
    }

    fn checked(&self) -> Result<Checked, TierdError> {
        let pid = match (self.pids.as_slice(), self.command.is_empty()) {
            ([pid], true) => *pid,
            ([], false) => 0,
            _ => {
                return Err(TierdError::invalid(
                    "--tune and --sweep manage one target: give one --pid, or -- CMD",
                ))
            }
        };
        if !(self.measure_s.is_finite() && self.measure_s >= 0.1) {
            return Err(TierdError::invalid(format!(
                "--measure {}: expected at least 0.1 seconds",
                self.measure_s
            )));
        }
        if !(self.retune_threshold_pct.is_finite() && self.retune_threshold_pct > 0.0) {
            return Err(TierdError::invalid(format!(
                "--retune-threshold {}: expected a percentage above 0, e.g. 10",
                self.retune_threshold_pct
            )));
        }
        if self.retune_windows == 0 {
            return Err(TierdError::invalid(
                "--retune-windows 0: expected at least 1 window",
            ));
        }
        let duration = run_duration(self.duration_s)?;
        if self.sweep && self.dry_run {
            return Err(TierdError::invalid(
                "--sweep --dry-run: the sweep moves the target's pages to measure them; it has nothing to dry-run",
            ));
        }
        if self.rounds == 0 {
            return Err(TierdError::invalid("--rounds 0: expected at least 1 round"));
        }
        let mut splits = Vec::new();
        for &p in &self.splits_percent {
            if p > 100 || p % 10 != 0 {
                return Err(TierdError::invalid(format!(
                    "--splits {p}: expected a percentage of pages on the fast tier in tenths: 0, 10, ... 100"
                )));
            }
            if splits.contains(&(p / 10)) {
                return Err(TierdError::invalid(format!("--splits: {p} is named twice")));
            }
            splits.push(p / 10);
        }
        if splits.is_empty() {
            splits = (0..=10).rev().collect();
        }
        Ok(Checked {
            pid,
            splits,
            measure: Duration::from_secs_f64(self.measure_s),
            duration,
        })
    }

    /// The program's name, for messages.
    fn program(&self) -> String {
        self.command[0].to_string_lossy().into_owned()
    }

    /// Run: find or start the target, tune it from `start` (tenths; `None` with `sweep`) or
    /// sweep it against `progress`, and put the weights back. Ends as the session does (signal
    /// on `stop`, deadline, the target's exit, convergence); a sweep then waits for its command.
    pub fn run<S: TuneRunSink>(
        &self,
        tiers: &Tiers,
        progress: ProgressSignal,
        start: Option<u32>,
        sink: &mut S,
        stop: &AtomicBool,
    ) -> Result<TuneEnd, TuneError> {
        let checked = self.checked()?;
        let root = Path::new("/");
        let mut child: Option<Child> = None;
        // Whether the target allocates by weighted interleave, so the table steers its new pages.
        let mut follows_weights = false;
        let mut weights = None;
        let pid = if checked.pid != 0 {
            if !procfs::alive(Path::new("/proc"), checked.pid) {
                return Err(TierdError::NoSuchProcess { pid: checked.pid }.into());
            }
            checked.pid
        } else {
            if !self.sweep {
                // The table first, so that CMD's first allocations already follow the starting
                // split.
                let mut w = AllocationWeights::new(root, tiers, self.dry_run)?;
                if kernel_supports(Mode::WeightedInterleave).unwrap_or(false) {
                    let (_, set) = w.set(start.expect("set when tuning"))?;
                    sink.weights(&set);
                }
                weights = Some(w);
            }
            let (c, weighted) = if self.sweep {
                let c = Launched::spawn(&self.command).map_err(|e| {
                    // Said as any start of CMD, and always as bad input.
                    TierdError::invalid(e.to_string())
                })?;
                (c.0, false)
            } else {
                match self.launch(tiers, sink) {
                    Ok(c) => c,
                    Err(e) => {
                        if let Some(w) = weights.as_mut() {
                            restore(w, sink);
                        }
                        return Err(e);
                    }
                }
            };
            follows_weights = weighted;
            let pid = c.id();
            child = Some(c);
            // Give CMD a moment to map its memory and start its counter: at least a second, and
            // until the progress signal can be read (10 s at most; then its error is the answer).
            std::thread::sleep(Duration::from_secs(1));
            let since = Instant::now();
            while progress.read().is_err() && since.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
            pid
        };
        if checked.pid != 0 && !self.sweep {
            let placement = cxltier_control::placement::show(pid)?;
            let policy = cxltier_control::placement::anonymous_policy(&placement.mappings);
            if policy == "weighted-interleave" {
                if self.continuous {
                    follows_weights = true;
                    weights = Some(AllocationWeights::new(root, tiers, self.dry_run)?);
                } else {
                    sink.note(&format!(
                        "pid {pid} allocates by weighted interleave, but a one-shot --tune ends \
                         when it has converged and tierd only holds the kernel's weights while it \
                         runs: the weights are left as they are (add --continuous to set them for \
                         as long as tierd runs)"
                    ));
                }
            } else {
                sink.note(&format!(
                    "pid {pid}'s memory policy is {policy}: its new allocations keep that policy. \
                     Linux lets only a process set its own memory policy (set_mempolicy), so \
                     tierd can move its pages but cannot steer where its future pages go; start \
                     it under tierd (tierd --tune ... -- CMD) or under `cxltier run --weights` to \
                     have them follow the tuned split"
                ));
            }
        }
        sink.note(&format!(
            "{} pid {pid}'s split between fast node {} and slower node {} against {}; its pages \
             move with move_pages{}",
            if self.sweep { "sweeping" } else { "tuning" },
            tiers.fast[0],
            tiers.slow[0],
            self.progress,
            if follows_weights {
                ", and the weights for its new allocations follow the chosen split"
            } else {
                ""
            }
        ));
        let session = Session {
            pid,
            continuous: self.continuous,
            retune_threshold: self.retune_threshold_pct / 100.0,
            retune_windows: self.retune_windows,
            duration: checked.duration,
        };
        // The sweep waits for CMD itself once done; the tuner watches it as a target.
        let (sweep_child, tune_child) = if self.sweep {
            (child, None)
        } else {
            (None, child)
        };
        let mut target = LiveTarget::new(pid, tiers.clone(), progress, checked.measure, tune_child);
        let result = if self.sweep {
            session
                .sweep(&checked.splits, self.rounds, &mut target, sink)
                .map(|()| TuneOutcome {
                    reason: "swept",
                    split: 0,
                    retunes: 0,
                })
        } else {
            let w = if follows_weights {
                weights.as_mut()
            } else {
                None
            };
            session.tune(start.expect("set when tuning"), &mut target, w, sink, stop)
        };
        let weights_restored = weights.as_mut().is_none_or(|w| restore(w, sink));
        let outcome = result?;
        let status = match sweep_child {
            Some(mut c) => Some(c.wait().map_err(TuneError::Output)?),
            None => target.child_status,
        };
        Ok(TuneEnd {
            outcome,
            pid,
            weights_restored,
            status,
        })
    }

    /// Start CMD under weighted interleave over the fast and slower node (when the kernel has
    /// it): the child, and whether it allocates by the kernel's weights.
    fn launch(
        &self,
        tiers: &Tiers,
        sink: &mut impl TuneRunSink,
    ) -> Result<(Child, bool), TuneError> {
        let weighted = kernel_supports(Mode::WeightedInterleave).unwrap_or(false);
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..]);
        let policy = if weighted {
            let nodes =
                NodeMask::from_nodes([tiers.fast[0], tiers.slow[0]]).map_err(ControlError::from)?;
            Policy::new(Mode::WeightedInterleave, nodes)
        } else {
            sink.note(&format!(
                "this kernel has no weighted interleave (Linux 6.9+): {} starts under its \
                 default policy, and its new allocations will not follow the tuned split",
                self.program()
            ));
            // Its own policy, as a plain spawn would give it.
            get_mempolicy().map_err(ControlError::from)?
        };
        let child = spawn_with_policy(&policy, &mut cmd).map_err(|e| match e {
            ControlError::Spawn { source, .. } => TuneError::Tierd(TierdError::Spawn {
                program: self.program(),
                source,
            }),
            e => TuneError::Control(e),
        })?;
        if weighted {
            sink.note(&format!(
                "started {} (pid {}) under weighted interleave over node{} and node{}: its new \
                 allocations follow the kernel's weights",
                self.program(),
                child.id(),
                tiers.fast[0],
                tiers.slow[0]
            ));
        }
        Ok((child, weighted))
    }
}

/// Put the original weights back, telling `sink`. Whether they are back (true when nothing was
/// written).
fn restore(weights: &mut AllocationWeights, sink: &mut impl TuneRunSink) -> bool {
    let Some(restored) = weights.restore() else {
        return true;
    };
    sink.weights_restored(&restored);
    restored.complete()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> TuneRun {
        TuneRun {
            pids: vec![42],
            rounds: 1,
            measure_s: 2.0,
            retune_threshold_pct: 10.0,
            retune_windows: 3,
            ..TuneRun::default()
        }
    }

    #[test]
    fn the_settings_are_checked_in_the_command_lines_terms() {
        assert!(run().check().is_ok());
        let checked = run().checked().unwrap();
        assert_eq!(checked.splits, (0..=10).rev().collect::<Vec<_>>());
        let with = |change: fn(&mut TuneRun)| {
            let mut r = run();
            change(&mut r);
            r
        };
        // Each refusal: the settings, and the error's whole text (or with `false`, a part).
        let refusals = [
            (with(|r| r.pids = vec![1, 2]), "manage one target", false),
            (
                with(|r| r.measure_s = 0.05),
                "--measure 0.05: expected at least 0.1 seconds",
                true,
            ),
            (
                with(|r| (r.sweep, r.splits_percent) = (true, vec![70, 100, 70])),
                "--splits: 70 is named twice",
                true,
            ),
            (
                with(|r| (r.sweep, r.splits_percent) = (true, vec![75])),
                "in tenths",
                false,
            ),
            (
                with(|r| (r.sweep, r.dry_run) = (true, true)),
                "nothing to dry-run",
                false,
            ),
        ];
        for (r, want, whole) in refusals {
            let e = r.check().expect_err(want).to_string();
            if whole {
                assert_eq!(e, want);
            } else {
                assert!(e.contains(want), "{e:?} does not say {want:?}");
            }
        }
        let chosen = TuneRun {
            sweep: true,
            splits_percent: vec![70, 100],
            ..run()
        };
        assert_eq!(chosen.checked().unwrap().splits, vec![7, 10]);
    }

    #[test]
    fn the_starting_split_is_the_fast_tiers_share_in_tenths() {
        assert_eq!(start_tenths(&[3, 1]).unwrap(), 8);
        assert_eq!(start_tenths(&[1, 1]).unwrap(), 5);
        assert!(start_tenths(&[3]).is_err());
        assert!(start_tenths(&[0, 0]).is_err());
    }
}
