//! `cxltier tierd --tune` and `--sweep`: the DRAM:CXL split of a bandwidth-bound target, tuned
//! against a progress signal (see `cxltier_tierd::tune`).

use crate::cmd::apply::{control_error, undo_command};
use crate::cmd::tierd::tierd_error;
use crate::error::{CliError, CliResult, Kind};
use cxltier_control::placement::MappingKind;
use cxltier_control::weights::{parse_tier_weights, WeightChange, WeightTable};
use cxltier_sys::{get_mempolicy, kernel_supports, set_mempolicy, Mode, NodeMask, Policy};
use cxltier_tierd::tune::{
    apply_split, median, split_weights, sweep_order, Continuous, Next, Progress, SplitOutcome,
    Verdict,
};
use cxltier_tierd::{procfs, TierdError, Tiers};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `tierd` passes on.
pub struct TuneArgs {
    /// The target, or 0 to start `command`.
    pub pid: u32,
    pub command: Vec<OsString>,
    pub sweep: bool,
    /// With `sweep`: the splits to measure (tenths on the fast tier), in order.
    pub splits: Vec<u32>,
    /// With `sweep`: how many times each split is measured (alternately; medians compared).
    pub rounds: u32,
    pub progress: String,
    pub mix: String,
    pub start: Option<String>,
    pub measure: Duration,
    pub json: bool,
    /// Keep watching after converging and re-tune when throughput moves.
    pub continuous: bool,
    /// Relative change (0.10) that, for `retune_windows` windows in a row, calls for a re-tune.
    pub retune_threshold: f64,
    pub retune_windows: u32,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Show the weighted-interleave change instead of writing it.
    pub dry_run: bool,
}

/// Let the target settle after its pages moved, before measuring.
const SETTLE: Duration = Duration::from_millis(300);
/// A neighbouring split must beat the current one by this much to be taken.
const MARGIN: f64 = 0.02;

#[derive(Serialize)]
struct Step<'a> {
    event: &'a str,
    pid: u32,
    fast_percent: u32,
    /// The sweep's round (with --rounds above 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    round: Option<u32>,
    #[serde(flatten)]
    split: SplitOutcome,
    throughput_per_s: f64,
}

#[derive(Serialize)]
struct Done<'a> {
    event: &'a str,
    pid: u32,
    start_fast_percent: Option<u32>,
    fast_percent: u32,
    throughput_per_s: f64,
    /// Throughput measured at each split (fast-tier percent → per second; with rounds, the
    /// median).
    measured: BTreeMap<u32, f64>,
    /// With rounds: every window measured at each split, in the order measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    rounds: Option<BTreeMap<u32, Vec<f64>>>,
    /// The weighted-interleave weights set for the target's new allocations (fast node, slower
    /// node), or null when they are left alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    weights: Option<[u32; 2]>,
    /// Climbs after the first (continuous tuning).
    #[serde(skip_serializing_if = "Option::is_none")]
    retunes: Option<u32>,
}

/// One window of continuous tuning's watch.
#[derive(Serialize)]
struct WatchLine {
    event: &'static str,
    pid: u32,
    fast_percent: u32,
    throughput_per_s: f64,
    baseline_per_s: Option<f64>,
    streak: i32,
    verdict: Verdict,
}

/// The final line.
#[derive(Serialize)]
struct Stopped {
    event: &'static str,
    reason: &'static str,
    pid: u32,
    fast_percent: u32,
    retunes: u32,
    target_running: bool,
    weights_restored: bool,
}

fn start_tenths(args: &TuneArgs, err: &mut impl Write) -> Result<u32, CliError> {
    let weights: Vec<u32> = match &args.start {
        Some(w) => parse_tier_weights(w).map_err(crate::cmd::apply::control_error)?,
        None => {
            let (w, note) = crate::cmd::plan::planned_tier_weights(&args.mix)?;
            let _ = writeln!(
                err,
                "cxltier tierd: starting split: the planner's weights for mix {} on the {note}",
                args.mix
            );
            w
        }
    };
    let total: u32 = weights.iter().sum();
    if weights.len() < 2 || total == 0 {
        return Err(CliError::bad_input(format!(
            "--tune-start {weights:?}: give one weight per tier, fastest first, e.g. 3:1"
        )));
    }
    Ok(((weights[0] as f64 / total as f64) * 10.0).round() as u32)
}

fn measure_at(
    pid: u32,
    tiers: &Tiers,
    tenths: u32,
    progress: &Progress,
    window: Duration,
) -> Result<(SplitOutcome, f64), TierdError> {
    let split = apply_split(Path::new("/proc"), pid, tiers, tenths)?;
    std::thread::sleep(SETTLE);
    let rate = progress.rate(window)?;
    Ok((split, rate))
}

/// The kernel's global weighted-interleave table, set to the tuned split while tierd runs and put
/// back when it stops.
struct NewAllocationWeights {
    /// The table as it was before tierd changed it.
    original: WeightTable,
    fast: u32,
    slow: u32,
    dry_run: bool,
    /// What is written now, against the original values (for restoring).
    written: Option<WeightChange>,
}

impl NewAllocationWeights {
    fn new(tiers: &Tiers, dry_run: bool) -> Result<Self, CliError> {
        let original = WeightTable::read(Path::new("/")).map_err(control_error)?;
        Ok(NewAllocationWeights {
            original,
            fast: tiers.fast[0],
            slow: tiers.slow[0],
            dry_run,
            written: None,
        })
    }

    /// Set the weights of the fast and slower node to the ratio of `tenths`, saying so.
    fn set(&mut self, tenths: u32, err: &mut impl Write) -> Result<[u32; 2], CliError> {
        let (wf, ws) = split_weights(tenths);
        let current = WeightTable::read(Path::new("/")).map_err(control_error)?;
        let change = current
            .plan(&[(self.fast, wf), (self.slow, ws)])
            .map_err(control_error)?;
        let dir = current.dir().display().to_string();
        let diff: Vec<String> = change
            .nodes
            .iter()
            .map(|n| format!("node{} {} -> {}", n.node, n.old, n.new))
            .collect();
        if self.dry_run {
            let _ = writeln!(
                err,
                "cxltier tierd: --dry-run: would set the kernel's weighted-interleave table ({dir}, \
                 system-wide) for the target's new allocations ({}% on node{}): {}; not written",
                tenths * 10,
                self.fast,
                diff.join(", ")
            );
            return Ok([wf, ws]);
        }
        if change.is_noop() && self.written.is_some() {
            // Already in place (a re-tune that kept the split): nothing to write or say.
            return Ok([wf, ws]);
        }
        if !change.is_noop() {
            current.apply(&change).map_err(control_error)?;
        }
        // Against the values from before tierd: what restoring puts back.
        let against_original = self
            .original
            .plan(&[(self.fast, wf), (self.slow, ws)])
            .map_err(control_error)?;
        let _ = writeln!(
            err,
            "cxltier tierd: changed a system-wide setting: the kernel's weighted-interleave table \
             ({dir}), used by every process with weighted interleave, now gives the target's new \
             allocations {}% on node{}: {}; put back when tierd stops (by hand: {})",
            tenths * 10,
            self.fast,
            diff.join(", "),
            undo_command(&against_original, None)
        );
        self.written = Some(against_original);
        Ok([wf, ws])
    }

    /// Put the original weights back. Whether they are back (true when nothing was written).
    fn restore(&mut self, err: &mut impl Write) -> bool {
        let Some(change) = self.written.take() else {
            return true;
        };
        let r = self.original.restore(&change);
        for (node, w) in &r.left_alone {
            let _ = writeln!(
                err,
                "cxltier tierd: warning: node{node}'s weight is now {w}, not what tierd wrote: \
                 someone else changed it, so it is left as found"
            );
        }
        for (path, e) in &r.failed {
            let _ = writeln!(
                err,
                "cxltier tierd: could NOT restore {}: {e}; put it back with: {}",
                path.display(),
                undo_command(&change, None)
            );
        }
        if !r.restored.is_empty() {
            let back: Vec<String> = r
                .restored
                .iter()
                .map(|n| format!("node{}={}", n.node, n.old))
                .collect();
            let _ = writeln!(
                err,
                "cxltier tierd: weighted-interleave table restored: {}",
                back.join(", ")
            );
        }
        r.failed.is_empty() && r.left_alone.is_empty()
    }
}

/// The policy of the target's anonymous memory from `numa_maps`, e.g. `default` or
/// `weighted-interleave`: the most common among its private anonymous mappings.
fn target_policy(pid: u32) -> Result<String, CliError> {
    let placement = cxltier_control::placement::show(pid).map_err(control_error)?;
    let mut count: BTreeMap<String, u64> = BTreeMap::new();
    for m in &placement.mappings {
        if matches!(
            m.kind,
            MappingKind::Anon | MappingKind::Heap | MappingKind::Stack
        ) {
            *count.entry(m.policy.clone()).or_default() += m.bytes.max(1);
        }
    }
    Ok(count
        .into_iter()
        .max_by_key(|(_, b)| *b)
        .map_or_else(|| "default".to_string(), |(p, _)| p))
}

/// Start CMD under weighted interleave over the fast and slower node (when the kernel has it).
fn launch(args: &TuneArgs, tiers: &Tiers, err: &mut impl Write) -> Result<(Child, bool), CliError> {
    let weighted = kernel_supports(Mode::WeightedInterleave).unwrap_or(false);
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    let spawned = if weighted {
        let nodes = NodeMask::from_nodes([tiers.fast[0], tiers.slow[0]])
            .map_err(|e| control_error(e.into()))?;
        let policy = Policy::new(Mode::WeightedInterleave, nodes);
        // The policy is inherited by the child: set it on this thread for the spawn only.
        let previous = get_mempolicy().map_err(|e| control_error(e.into()))?;
        set_mempolicy(&policy).map_err(|e| control_error(e.into()))?;
        let spawned = cmd.spawn();
        set_mempolicy(&previous).map_err(|e| control_error(e.into()))?;
        spawned
    } else {
        let _ = writeln!(
            err,
            "cxltier tierd: this kernel has no weighted interleave (Linux 6.9+): {} starts under \
             its default policy, and its new allocations will not follow the tuned split",
            args.command[0].to_string_lossy()
        );
        cmd.spawn()
    };
    let child = spawned.map_err(|e| {
        CliError::new(
            if e.kind() == std::io::ErrorKind::NotFound {
                Kind::BadInput
            } else {
                Kind::Runtime
            },
            format!("cannot start {}: {e}", args.command[0].to_string_lossy()),
        )
    })?;
    if weighted {
        let _ = writeln!(
            err,
            "cxltier tierd: started {} (pid {}) under weighted interleave over node{} and node{}: \
             its new allocations follow the kernel's weights",
            args.command[0].to_string_lossy(),
            child.id(),
            tiers.fast[0],
            tiers.slow[0]
        );
    }
    Ok((child, weighted))
}

pub fn run(args: &TuneArgs, tiers: &Tiers) -> CliResult {
    let progress = Progress::parse(&args.progress).map_err(tierd_error)?;
    let mut err = std::io::stderr();
    let start = if args.sweep {
        None
    } else {
        Some(start_tenths(args, &mut err)?)
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| CliError::runtime(format!("cannot install a signal handler: {e}")))?;
    }
    let mut child: Option<Child> = None;
    // Whether the target allocates by weighted interleave, so the table steers its new pages.
    let mut follows_weights = false;
    let mut weights = None;
    let pid = if args.pid != 0 {
        if !procfs::alive(Path::new("/proc"), args.pid) {
            return Err(tierd_error(TierdError::NoSuchProcess { pid: args.pid }));
        }
        args.pid
    } else {
        if !args.sweep {
            // The table first, so that CMD's first allocations already follow the starting split.
            let mut w = NewAllocationWeights::new(tiers, args.dry_run)?;
            if kernel_supports(Mode::WeightedInterleave).unwrap_or(false) {
                w.set(start.expect("set when tuning"), &mut err)?;
            }
            weights = Some(w);
        }
        let (c, weighted) = if args.sweep {
            let c = Command::new(&args.command[0])
                .args(&args.command[1..])
                .spawn()
                .map_err(|e| {
                    CliError::new(
                        Kind::BadInput,
                        format!("cannot start {}: {e}", args.command[0].to_string_lossy()),
                    )
                })?;
            (c, false)
        } else {
            match launch(args, tiers, &mut err) {
                Ok(c) => c,
                Err(e) => {
                    if let Some(w) = weights.as_mut() {
                        w.restore(&mut err);
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
    if args.pid != 0 && !args.sweep {
        let policy = target_policy(pid)?;
        if policy == "weighted-interleave" {
            if args.continuous {
                follows_weights = true;
                weights = Some(NewAllocationWeights::new(tiers, args.dry_run)?);
            } else {
                let _ = writeln!(
                    err,
                    "cxltier tierd: pid {pid} allocates by weighted interleave, but a one-shot \
                     --tune ends when it has converged and tierd only holds the kernel's weights \
                     while it runs: the weights are left as they are (add --continuous to set them \
                     for as long as tierd runs)"
                );
            }
        } else {
            let _ = writeln!(
                err,
                "cxltier tierd: pid {pid}'s memory policy is {policy}: its new allocations keep \
                 that policy. Linux lets only a process set its own memory policy \
                 (set_mempolicy), so tierd can move its pages but cannot steer where its future \
                 pages go; start it under tierd (tierd --tune ... -- CMD) or under \
                 `cxltier run --weights` to have them follow the tuned split"
            );
        }
    }
    let _ = writeln!(
        err,
        "cxltier tierd: {} pid {pid}'s split between fast node {} and slower node {} against {}; \
         its pages move with move_pages{}",
        if args.sweep { "sweeping" } else { "tuning" },
        tiers.fast[0],
        tiers.slow[0],
        args.progress,
        if follows_weights {
            ", and the weights for its new allocations follow the chosen split"
        } else {
            ""
        }
    );
    let deadline = args.duration.map(|d| Instant::now() + d);
    let result = if args.sweep {
        sweep(args, pid, tiers, &progress).map(|()| Outcome {
            reason: "swept",
            split: 0,
            retunes: 0,
            child_status: None,
        })
    } else {
        let w = if follows_weights {
            weights.as_mut()
        } else {
            None
        };
        tune(
            args,
            pid,
            tiers,
            &progress,
            start.expect("set when tuning"),
            w,
            &stop,
            deadline,
            child.as_mut(),
        )
    };
    let restored = weights.as_mut().is_none_or(|w| w.restore(&mut err));
    let outcome = result?;
    if args.json && !args.sweep {
        println!(
            "{}",
            serde_json::to_string(&Stopped {
                event: "stopped",
                reason: outcome.reason,
                pid,
                fast_percent: outcome.split * 10,
                retunes: outcome.retunes,
                target_running: procfs::alive(Path::new("/proc"), pid),
                weights_restored: restored,
            })?
        );
    }
    let status = match (child, outcome.child_status) {
        (Some(mut c), None) if args.sweep => Some(c.wait()?),
        (_, status) => status,
    };
    // CMD's own status when it ended; when tierd was stopped (signal, --duration) CMD keeps
    // running and tierd exits 0.
    Ok(status.map_or(ExitCode::SUCCESS, |s| {
        ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8)
    }))
}

fn print_step(
    args: &TuneArgs,
    event: &str,
    pid: u32,
    tenths: u32,
    round: Option<u32>,
    split: SplitOutcome,
    rate: f64,
) -> Result<(), CliError> {
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&Step {
                event,
                pid,
                fast_percent: tenths * 10,
                round,
                split,
                throughput_per_s: rate,
            })?
        );
    } else {
        println!(
            "{event}{}: {:3}% on the fast tier ({} pages moved, {} failed): {rate:.0}/s",
            round.map_or_else(String::new, |r| format!(" (round {})", r + 1)),
            tenths * 10,
            split.moved_pages,
            split.failed_pages
        );
    }
    std::io::stdout().flush()?;
    Ok(())
}

fn print_done(args: &TuneArgs, done: &Done) -> Result<(), CliError> {
    if args.json {
        println!("{}", serde_json::to_string(done)?);
    } else {
        println!(
            "{}: {}% on the fast tier, {:.0}/s (measured {} splits)",
            done.event,
            done.fast_percent,
            done.throughput_per_s,
            done.measured.len()
        );
    }
    Ok(())
}

/// How a tuning run ended.
struct Outcome {
    reason: &'static str,
    split: u32,
    retunes: u32,
    /// CMD's exit status when it ended while tierd ran.
    child_status: Option<std::process::ExitStatus>,
}

#[allow(clippy::too_many_arguments)]
fn tune(
    args: &TuneArgs,
    pid: u32,
    tiers: &Tiers,
    progress: &Progress,
    start: u32,
    mut weights: Option<&mut NewAllocationWeights>,
    stop: &AtomicBool,
    deadline: Option<Instant>,
    mut child: Option<&mut Child>,
) -> Result<Outcome, CliError> {
    let mut ctl = Continuous::new(start, MARGIN, args.retune_threshold, args.retune_windows);
    let mut err = std::io::stderr();
    let mut child_status = None;
    let mut converged = false;
    // Whether the target is gone (reaping CMD when it is ours).
    let gone = |child: &mut Option<&mut Child>, status: &mut Option<std::process::ExitStatus>| {
        if let Some(c) = child.as_mut() {
            if let Ok(Some(s)) = c.try_wait() {
                *status = Some(s);
                return true;
            }
        }
        status.is_some() || !procfs::alive(Path::new("/proc"), pid)
    };
    let reason = loop {
        if stop.load(Ordering::Relaxed) {
            break "signal";
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break "duration";
        }
        if gone(&mut child, &mut child_status) {
            break "target_exited";
        }
        let step = match ctl.next_step() {
            Next::Measure(k) => measure_at(pid, tiers, k, progress, args.measure).map(|(split, rate)| {
                ctl.record(k, rate);
                print_step(args, "tune_step", pid, k, None, split, rate)
            }),
            Next::Converged {
                split,
                throughput,
                measured,
            } => {
                // Leave the target at the chosen split (the last split measured may be a
                // rejected neighbour).
                apply_split(Path::new("/proc"), pid, tiers, split).map_err(tierd_error)?;
                let set = match weights.as_deref_mut() {
                    Some(w) => Some(w.set(split, &mut err)?),
                    None => None,
                };
                print_done(
                    args,
                    &Done {
                        event: "tuned",
                        pid,
                        start_fast_percent: Some(ctl.climb_start() * 10),
                        fast_percent: split * 10,
                        throughput_per_s: throughput.unwrap_or(0.0),
                        measured: measured.iter().map(|(k, v)| (k * 10, *v)).collect(),
                        rounds: None,
                        weights: set,
                        retunes: args.continuous.then_some(ctl.retunes()),
                    },
                )?;
                converged = true;
                if !args.continuous {
                    if child.is_none() {
                        break "tuned";
                    }
                    // With CMD, hold the weights until it ends (or tierd is stopped).
                    while !stop.load(Ordering::Relaxed)
                        && deadline.is_none_or(|d| Instant::now() < d)
                        && !gone(&mut child, &mut child_status)
                    {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    continue;
                }
                Ok(Ok(()))
            }
            Next::Watch(k) => progress.rate(args.measure).map(|rate| {
                let verdict = ctl.record(k, rate).unwrap_or(Verdict::Hold);
                let (baseline, streak) = ctl.watch().unwrap_or((None, 0));
                if verdict == Verdict::Retune {
                    let _ = writeln!(
                        err,
                        "cxltier tierd: throughput at {}% moved beyond {:.0}% of its baseline for {} \
                         windows in a row: tuning again from there",
                        k * 10,
                        args.retune_threshold * 100.0,
                        args.retune_windows
                    );
                }
                print_watch(
                    args,
                    &WatchLine {
                        event: "watch",
                        pid,
                        fast_percent: k * 10,
                        throughput_per_s: rate,
                        baseline_per_s: baseline,
                        streak,
                        verdict,
                    },
                )
            }),
        };
        match step {
            Ok(printed) => printed?,
            // A target that ended mid-measurement ends the run; other failures are errors.
            Err(_) if gone(&mut child, &mut child_status) => break "target_exited",
            Err(e) => return Err(tierd_error(e)),
        }
    };
    if !converged && reason != "target_exited" {
        let _ = writeln!(
            err,
            "cxltier tierd: stopped ({reason}) before the search converged; the target is left at \
             the last split measured"
        );
    }
    Ok(Outcome {
        reason,
        split: ctl.split(),
        retunes: ctl.retunes(),
        child_status,
    })
}

fn print_watch(args: &TuneArgs, line: &WatchLine) -> Result<(), CliError> {
    if args.json {
        println!("{}", serde_json::to_string(line)?);
    } else {
        println!(
            "watch: {:3}% on the fast tier: {:.0}/s (baseline {}, streak {}): {:?}",
            line.fast_percent,
            line.throughput_per_s,
            line.baseline_per_s
                .map_or_else(|| "being set".to_string(), |b| format!("{b:.0}/s")),
            line.streak,
            line.verdict
        );
    }
    std::io::stdout().flush()?;
    Ok(())
}

fn sweep(args: &TuneArgs, pid: u32, tiers: &Tiers, progress: &Progress) -> Result<(), CliError> {
    let mut samples: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let many = args.rounds > 1;
    for (round, k) in sweep_order(&args.splits, args.rounds) {
        let (split, rate) =
            measure_at(pid, tiers, k, progress, args.measure).map_err(tierd_error)?;
        print_step(
            args,
            "sweep_point",
            pid,
            k,
            many.then_some(round),
            split,
            rate,
        )?;
        samples.entry(k).or_default().push(rate);
    }
    let measured: BTreeMap<u32, f64> = samples
        .iter()
        .map(|(k, v)| (*k, median(v).expect("measured at least once")))
        .collect();
    let (&best, &rate) = measured
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .expect("at least one split");
    apply_split(Path::new("/proc"), pid, tiers, best).map_err(tierd_error)?;
    print_done(
        args,
        &Done {
            event: "swept",
            pid,
            start_fast_percent: None,
            fast_percent: best * 10,
            throughput_per_s: rate,
            measured: measured.iter().map(|(k, v)| (k * 10, *v)).collect(),
            rounds: many.then(|| samples.iter().map(|(k, v)| (k * 10, v.clone())).collect()),
            weights: None,
            retunes: None,
        },
    )
}
