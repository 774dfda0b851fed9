//! `cxltier tierd --tune` and `--sweep`: the DRAM:CXL split of a bandwidth-bound target, tuned
//! against a progress signal (see `cxltier_tierd::tune`).

use crate::cmd::tierd::tierd_error;
use crate::error::{CliError, CliResult, Kind};
use cxltier_control::weights::parse_tier_weights;
use cxltier_tierd::tune::{apply_split, Progress, SplitOutcome, Tuner};
use cxltier_tierd::{procfs, TierdError, Tiers};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, ExitCode};
use std::time::Duration;

/// What `tierd` passes on.
pub struct TuneArgs {
    /// The target, or 0 to start `command`.
    pub pid: u32,
    pub command: Vec<OsString>,
    pub sweep: bool,
    pub progress: String,
    pub mix: String,
    pub start: Option<String>,
    pub measure: Duration,
    pub json: bool,
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
    /// Throughput measured at each split (fast-tier percent → per second).
    measured: BTreeMap<u32, f64>,
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

pub fn run(args: &TuneArgs, tiers: &Tiers) -> CliResult {
    let progress = Progress::parse(&args.progress).map_err(tierd_error)?;
    let mut err = std::io::stderr();
    let start = if args.sweep {
        None
    } else {
        Some(start_tenths(args, &mut err)?)
    };
    let mut child: Option<Child> = None;
    let pid = if args.pid != 0 {
        if !procfs::alive(Path::new("/proc"), args.pid) {
            return Err(tierd_error(TierdError::NoSuchProcess { pid: args.pid }));
        }
        args.pid
    } else {
        let c = Command::new(&args.command[0])
            .args(&args.command[1..])
            .spawn()
            .map_err(|e| {
                CliError::new(
                    Kind::BadInput,
                    format!("cannot start {}: {e}", args.command[0].to_string_lossy()),
                )
            })?;
        let pid = c.id();
        child = Some(c);
        // Give CMD a moment to map its memory and start its counter.
        std::thread::sleep(Duration::from_secs(1));
        pid
    };
    let _ = writeln!(
        err,
        "cxltier tierd: {} pid {pid}'s split between fast node {} and slower node {} against {}; \
         pages move with move_pages, nothing system-wide changes; the weights for its new \
         allocations are left as they are",
        if args.sweep { "sweeping" } else { "tuning" },
        tiers.fast[0],
        tiers.slow[0],
        args.progress
    );
    let result = if args.sweep {
        sweep(args, pid, tiers, &progress)
    } else {
        tune(args, pid, tiers, &progress, start.expect("set when tuning"))
    };
    if let Some(mut c) = child {
        let status = c.wait()?;
        result?;
        return Ok(ExitCode::from(
            status.code().unwrap_or(1).clamp(0, 255) as u8
        ));
    }
    result.map(|()| ExitCode::SUCCESS)
}

fn print_step(
    args: &TuneArgs,
    event: &str,
    pid: u32,
    tenths: u32,
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
                split,
                throughput_per_s: rate,
            })?
        );
    } else {
        println!(
            "{event}: {:3}% on the fast tier ({} pages moved, {} failed): {rate:.0}/s",
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

fn tune(
    args: &TuneArgs,
    pid: u32,
    tiers: &Tiers,
    progress: &Progress,
    start: u32,
) -> Result<(), CliError> {
    let mut tuner = Tuner::new(start, MARGIN);
    while let Some(k) = tuner.next_split() {
        let (split, rate) =
            measure_at(pid, tiers, k, progress, args.measure).map_err(tierd_error)?;
        print_step(args, "tune_step", pid, k, split, rate)?;
        tuner.record(k, rate);
    }
    let (k, rate) = tuner.current();
    // Leave the target at the chosen split (the last split measured may be a rejected neighbour).
    apply_split(Path::new("/proc"), pid, tiers, k).map_err(tierd_error)?;
    print_done(
        args,
        &Done {
            event: "tuned",
            pid,
            start_fast_percent: Some(start * 10),
            fast_percent: k * 10,
            throughput_per_s: rate.unwrap_or(0.0),
            measured: tuner.measured().iter().map(|(k, v)| (k * 10, *v)).collect(),
        },
    )
}

fn sweep(args: &TuneArgs, pid: u32, tiers: &Tiers, progress: &Progress) -> Result<(), CliError> {
    let mut measured = BTreeMap::new();
    for k in (0..=10).rev() {
        let (split, rate) =
            measure_at(pid, tiers, k, progress, args.measure).map_err(tierd_error)?;
        print_step(args, "sweep_point", pid, k, split, rate)?;
        measured.insert(k, rate);
    }
    let (&best, &rate) = measured
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .expect("eleven points");
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
        },
    )
}
