//! `cxltier tierd --tune` and `--sweep`: the DRAM:CXL split of a bandwidth-bound target, tuned
//! against a progress signal (see `cxltier_tierd::tune` and, for the run, `cxltier_tierd::tune_run`).

use crate::error::{CliError, CliResult};
use crate::output::json_line;
use cxltier_control::weights::{parse_tier_weights, Restored, WeightChange};
use cxltier_tierd::tune::ProgressSignal;
use cxltier_tierd::tune_run::{TuneRun, TuneRunSink};
use cxltier_tierd::tuning::{TuneDone, TuneSink, TuneStep, WatchWindow, WeightsSet};
use cxltier_tierd::Tiers;
use serde::Serialize;
use std::io::Write;

/// What `tierd` passes on: the run (checked), and how to start and say it.
pub struct TuneArgs {
    pub run: TuneRun,
    pub mix: String,
    pub start: Option<String>,
    pub json: bool,
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
    cxltier_tierd::tune_run::start_tenths(&weights).map_err(CliError::classified)
}

/// Renders a run: messages on stderr, a line per step on stdout (text, or JSON lines).
struct Render<'a> {
    json: bool,
    /// For the messages: the progress signal, the re-tune threshold and windows.
    run: &'a TuneRun,
}

impl Render<'_> {
    /// One line on stdout: `value` as the JSON line of `event`, or `text` for people.
    fn line<T: Serialize>(
        &self,
        event: &str,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", json_line("tierd", event, value)?)?;
        } else {
            writeln!(out, "{}", text())?;
        }
        out.flush()
    }
}

impl TuneSink for Render<'_> {
    fn step(&mut self, s: &TuneStep) -> std::io::Result<()> {
        self.line("tune_step", s, || {
            format!(
                "{}{}: {:3}% on the fast tier ({} pages moved, {} failed): {:.0}/s",
                s.event,
                s.round
                    .map_or_else(String::new, |r| format!(" (round {})", r + 1)),
                s.fast_percent,
                s.split.moved_pages,
                s.split.failed_pages,
                s.throughput_per_s
            )
        })
    }

    fn done(&mut self, done: &TuneDone) -> std::io::Result<()> {
        self.line("tuned", done, || {
            format!(
                "{}: {}% on the fast tier, {:.0}/s (measured {} splits)",
                done.event,
                done.fast_percent,
                done.throughput_per_s,
                done.measured.len()
            )
        })
    }

    fn watch(&mut self, line: &WatchWindow) -> std::io::Result<()> {
        self.line("watch", line, || {
            format!(
                "watch: {:3}% on the fast tier: {:.0}/s (baseline {}, streak {}): {:?}",
                line.fast_percent,
                line.throughput_per_s,
                line.baseline_per_s
                    .map_or_else(|| "being set".to_string(), |b| format!("{b:.0}/s")),
                line.streak,
                line.verdict
            )
        })
    }

    fn retuning(&mut self, fast_percent: u32) {
        eprintln!(
            "cxltier tierd: throughput at {fast_percent}% moved beyond {:.0}% of its baseline for {} \
             windows in a row: tuning again from there",
            // The session's fraction, said in percent (rounded as it always was).
            self.run.retune_threshold_pct / 100.0 * 100.0,
            self.run.retune_windows
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

impl TuneRunSink for Render<'_> {
    fn note(&mut self, text: &str) {
        let _ = writeln!(std::io::stderr(), "cxltier tierd: {text}");
    }

    fn weights_restored(&mut self, restored: &Restored) {
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
                restored.change.undo_command(None)
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
            applied.against_original.undo_command(None)
        ),
        WeightsSet::Unchanged => {}
    }
}

pub fn run(args: &TuneArgs, tiers: &Tiers) -> CliResult {
    let progress = ProgressSignal::parse(&args.run.progress).map_err(CliError::classified)?;
    let start = if args.run.sweep {
        None
    } else {
        Some(start_tenths(args, &mut std::io::stderr())?)
    };
    let stop = crate::cmd::stop_flag()?;
    let mut render = Render {
        json: args.json,
        run: &args.run,
    };
    let end = args
        .run
        .run(tiers, progress, start, &mut render, &stop)
        .map_err(CliError::classified)?;
    if args.json && !args.run.sweep {
        println!("{}", json_line("tierd", "stopped", &end.stopped())?);
    }
    // CMD's own status when it ended; when tierd was stopped (signal, --duration) CMD keeps
    // running and tierd exits 0.
    Ok(super::exit_status(end.status))
}

#[cfg(test)]
mod json_tests {
    use super::*;

    #[test]
    fn the_stopped_line_conforms_to_the_tierd_schema() {
        let line = json_line(
            "tierd",
            "stopped",
            &cxltier_tierd::tune_run::TuneStopped {
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
