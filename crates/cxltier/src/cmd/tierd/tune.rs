//! `cxltier tierd --tune` and `--sweep`: the DRAM:CXL split of a bandwidth-bound target, tuned
//! against a progress signal (see `cxltier_tierd::tune`).

use crate::cmd::apply::undo_command;
use crate::error::{Class, CliError, CliResult};
use crate::output::json_line;
use cxltier_control::launch::spawn_with_policy;
use cxltier_control::weights::{parse_tier_weights, WeightChange};
use cxltier_control::ControlError;
use cxltier_sys::{get_mempolicy, kernel_supports, Mode, NodeMask, Policy};
use cxltier_tierd::tune::ProgressSignal;
use cxltier_tierd::tuning::{
    AllocationWeights, LiveTarget, Session, TuneDone, TuneOutcome, TuneSink, TuneStep, WatchWindow,
    WeightsSet,
};
use cxltier_tierd::{procfs, TierdError, Tiers};
use serde::Serialize;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, ExitCode};
use std::sync::atomic::AtomicBool;
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
        Some(w) => parse_tier_weights(w).map_err(CliError::classified)?,
        None => {
            let mix = crate::cmd::plan::parse_mix(&args.mix)?;
            let (w, note) = cxltier_advice::tier_weights(mix).map_err(CliError::classified)?;
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

/// Renders a session: messages on stderr, a line per step on stdout (text, or JSON lines).
struct Render {
    json: bool,
    /// For the re-tune message: the threshold (0.10) and the windows in a row.
    retune_threshold: f64,
    retune_windows: u32,
}

impl TuneSink for Render {
    fn step(&mut self, s: &TuneStep) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", json_line("tierd", "tune_step", s)?)?;
        } else {
            writeln!(
                out,
                "{}{}: {:3}% on the fast tier ({} pages moved, {} failed): {:.0}/s",
                s.event,
                s.round
                    .map_or_else(String::new, |r| format!(" (round {})", r + 1)),
                s.fast_percent,
                s.split.moved_pages,
                s.split.failed_pages,
                s.throughput_per_s
            )?;
        }
        out.flush()
    }

    fn done(&mut self, done: &TuneDone) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", json_line("tierd", "tuned", done)?)?;
        } else {
            writeln!(
                out,
                "{}: {}% on the fast tier, {:.0}/s (measured {} splits)",
                done.event,
                done.fast_percent,
                done.throughput_per_s,
                done.measured.len()
            )?;
        }
        out.flush()
    }

    fn watch(&mut self, line: &WatchWindow) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", json_line("tierd", "watch", line)?)?;
        } else {
            writeln!(
                out,
                "watch: {:3}% on the fast tier: {:.0}/s (baseline {}, streak {}): {:?}",
                line.fast_percent,
                line.throughput_per_s,
                line.baseline_per_s
                    .map_or_else(|| "being set".to_string(), |b| format!("{b:.0}/s")),
                line.streak,
                line.verdict
            )?;
        }
        out.flush()
    }

    fn retuning(&mut self, fast_percent: u32) {
        eprintln!(
            "cxltier tierd: throughput at {fast_percent}% moved beyond {:.0}% of its baseline for {} \
             windows in a row: tuning again from there",
            self.retune_threshold * 100.0,
            self.retune_windows
        );
    }

    fn weights(&mut self, set: &WeightsSet) {
        say_weights(set);
    }

    fn stopped_early(&mut self, reason: &'static str) {
        eprintln!(
            "cxltier tierd: stopped ({reason}) before the search converged; the target is left at \
             the last split measured"
        );
    }
}

/// Say what setting the allocation weights did.
fn say_weights(set: &WeightsSet) {
    let diff = |change: &WeightChange| {
        change
            .nodes
            .iter()
            .map(|n| format!("node{} {} -> {}", n.node, n.old, n.new))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match set {
        WeightsSet::WouldSet {
            dir,
            tenths,
            fast,
            change,
        } => eprintln!(
            "cxltier tierd: --dry-run: would set the kernel's weighted-interleave table ({}, \
             system-wide) for the target's new allocations ({}% on node{fast}): {}; not written",
            dir.display(),
            tenths * 10,
            diff(change)
        ),
        WeightsSet::Written {
            tenths,
            fast,
            applied,
        } => eprintln!(
            "cxltier tierd: changed a system-wide setting: the kernel's weighted-interleave table \
             ({}), used by every process with weighted interleave, now gives the target's new \
             allocations {}% on node{fast}: {}; put back when tierd stops (by hand: {})",
            applied.dir.display(),
            tenths * 10,
            diff(&applied.change),
            undo_command(&applied.against_original, None)
        ),
        WeightsSet::Unchanged => {}
    }
}

/// Put the original weights back, saying so. Whether they are back (true when nothing was
/// written).
fn restore(weights: &mut AllocationWeights) -> bool {
    let Some(restored) = weights.restore() else {
        return true;
    };
    let r = &restored.report;
    for (node, w) in &r.left_alone {
        eprintln!(
            "cxltier tierd: warning: node{node}'s weight is now {w}, not what tierd wrote: \
             someone else changed it, so it is left as found"
        );
    }
    for (path, e) in &r.failed {
        eprintln!(
            "cxltier tierd: could NOT restore {}: {e}; put it back with: {}",
            path.display(),
            undo_command(&restored.change, None)
        );
    }
    if !r.restored.is_empty() {
        let back: Vec<String> = r
            .restored
            .iter()
            .map(|n| format!("node{}={}", n.node, n.old))
            .collect();
        eprintln!(
            "cxltier tierd: weighted-interleave table restored: {}",
            back.join(", ")
        );
    }
    restored.complete()
}

/// The policy of the target's anonymous memory (see
/// [`cxltier_control::placement::anonymous_policy`]).
fn target_policy(pid: u32) -> Result<String, CliError> {
    let placement = cxltier_control::placement::show(pid).map_err(CliError::classified)?;
    Ok(cxltier_control::placement::anonymous_policy(
        &placement.mappings,
    ))
}

/// Start CMD under weighted interleave over the fast and slower node (when the kernel has it).
fn launch(args: &TuneArgs, tiers: &Tiers, err: &mut impl Write) -> Result<(Child, bool), CliError> {
    let weighted = kernel_supports(Mode::WeightedInterleave).unwrap_or(false);
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    let policy = if weighted {
        let nodes = NodeMask::from_nodes([tiers.fast[0], tiers.slow[0]])
            .map_err(|e| CliError::classified(cxltier_control::ControlError::from(e)))?;
        Policy::new(Mode::WeightedInterleave, nodes)
    } else {
        let _ = writeln!(
            err,
            "cxltier tierd: this kernel has no weighted interleave (Linux 6.9+): {} starts under \
             its default policy, and its new allocations will not follow the tuned split",
            args.command[0].to_string_lossy()
        );
        // Its own policy, as a plain spawn would give it.
        get_mempolicy().map_err(|e| CliError::classified(cxltier_control::ControlError::from(e)))?
    };
    let child = spawn_with_policy(&policy, &mut cmd).map_err(|e| match e {
        ControlError::Spawn { source, .. } => CliError::new(
            if source.kind() == std::io::ErrorKind::NotFound {
                Class::BadInput
            } else {
                Class::Runtime
            },
            format!(
                "cannot start {}: {source}",
                args.command[0].to_string_lossy()
            ),
        ),
        e => CliError::classified(e),
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
    let progress = ProgressSignal::parse(&args.progress).map_err(CliError::classified)?;
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
    let root = Path::new("/");
    let mut child: Option<Child> = None;
    // Whether the target allocates by weighted interleave, so the table steers its new pages.
    let mut follows_weights = false;
    let mut weights = None;
    let pid = if args.pid != 0 {
        if !procfs::alive(Path::new("/proc"), args.pid) {
            return Err(CliError::classified(TierdError::NoSuchProcess {
                pid: args.pid,
            }));
        }
        args.pid
    } else {
        if !args.sweep {
            // The table first, so that CMD's first allocations already follow the starting split.
            let mut w =
                AllocationWeights::new(root, tiers, args.dry_run).map_err(CliError::classified)?;
            if kernel_supports(Mode::WeightedInterleave).unwrap_or(false) {
                let (_, set) = w
                    .set(start.expect("set when tuning"))
                    .map_err(CliError::classified)?;
                say_weights(&set);
            }
            weights = Some(w);
        }
        let (c, weighted) = if args.sweep {
            let c = Command::new(&args.command[0])
                .args(&args.command[1..])
                .spawn()
                .map_err(|e| {
                    CliError::new(
                        Class::BadInput,
                        format!("cannot start {}: {e}", args.command[0].to_string_lossy()),
                    )
                })?;
            (c, false)
        } else {
            match launch(args, tiers, &mut err) {
                Ok(c) => c,
                Err(e) => {
                    if let Some(w) = weights.as_mut() {
                        restore(w);
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
                weights = Some(
                    AllocationWeights::new(root, tiers, args.dry_run)
                        .map_err(CliError::classified)?,
                );
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
    let session = Session {
        pid,
        continuous: args.continuous,
        retune_threshold: args.retune_threshold,
        retune_windows: args.retune_windows,
        duration: args.duration,
    };
    let mut render = Render {
        json: args.json,
        retune_threshold: args.retune_threshold,
        retune_windows: args.retune_windows,
    };
    // The sweep waits for CMD itself once done; the tuner watches it as a target.
    let (sweep_child, tune_child) = if args.sweep {
        (child, None)
    } else {
        (None, child)
    };
    let mut target = LiveTarget::new(pid, tiers.clone(), progress, args.measure, tune_child);
    let result = if args.sweep {
        session
            .sweep(&args.splits, args.rounds, &mut target, &mut render)
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
        session.tune(
            start.expect("set when tuning"),
            &mut target,
            w,
            &mut render,
            &stop,
        )
    };
    let restored = weights.as_mut().is_none_or(restore);
    let outcome = result.map_err(CliError::classified)?;
    if args.json && !args.sweep {
        println!(
            "{}",
            json_line(
                "tierd",
                "stopped",
                &Stopped {
                    event: "stopped",
                    reason: outcome.reason,
                    pid,
                    fast_percent: outcome.split * 10,
                    retunes: outcome.retunes,
                    target_running: procfs::alive(Path::new("/proc"), pid),
                    weights_restored: restored,
                }
            )?
        );
    }
    let status = match sweep_child {
        Some(mut c) => Some(c.wait()?),
        None => target.child_status,
    };
    // CMD's own status when it ended; when tierd was stopped (signal, --duration) CMD keeps
    // running and tierd exits 0.
    Ok(status.map_or(ExitCode::SUCCESS, |s| {
        ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8)
    }))
}

#[cfg(test)]
mod json_tests {
    use super::*;

    #[test]
    fn the_stopped_line_conforms_to_the_tierd_schema() {
        let line = json_line(
            "tierd",
            "stopped",
            &Stopped {
                event: "stopped",
                reason: "duration",
                pid: 42,
                fast_percent: 70,
                retunes: 0,
                target_running: true,
                weights_restored: true,
            },
        )
        .unwrap();
        crate::output::assert_conforms("tierd.schema.json", &line);
    }
}
