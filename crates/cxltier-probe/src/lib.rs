//! Measure each memory tier like Intel MLC does: idle latency, bandwidth per read:write mix (with
//! and without non-temporal stores) and loaded-latency curves, per NUMA node or for a buffer
//! interleaved over nodes; and write the results as a profile the planner reads.
//!
//! The flow is [`plan::plan`] (check everything the user asked for against the machine, before any
//! memory is allocated), then [`run`] (allocate, place and verify the buffers, measure). Method,
//! byte accounting and limits are documented in `docs/probe.md`.
//!
//! - [`chase`]: the dependent pointer chase over a random single cycle (idle and loaded latency);
//! - [`kernels`]: wide vector load and store kernels, chosen at run time, and how bytes are counted
//!   (requested bytes, and memory traffic including read-for-ownership);
//! - [`measure`]: pinned traffic threads, bandwidth windows, the loaded-latency sweep;
//! - [`loaded`]: the delay sweep and how a measured curve is made fit for a profile;
//! - [`buffer`]: huge pages, `mbind` before first touch, `move_pages` verification;
//! - [`profile`]: the profile writer; [`report`]: the JSON document.

// A library reports through its return values and sinks; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod buffer;
pub mod chase;
mod error;
pub mod host;
pub mod kernels;
pub mod loaded;
pub mod measure;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod report;
pub mod size;
pub mod weights;

pub use error::{Class, Classify, ProbeError};
pub use plan::{plan, Config, ProbePlan, Target, TargetPolicy};
pub use progress::ProgressSink;
pub use report::Report;

use buffer::Buffer;
use report::{IdleLatency, LoadedCurve, Settings, TargetReport};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// Seed of the chase permutation (fixed: the same layout on every run).
const SEED: u64 = 0x6378_6c74_6965_7201;

/// Bandwidth measurement windows per mix; the figure is their median.
const WINDOWS: usize = 5;

/// Loaded-latency points per mix.
const LOADED_POINTS: usize = 19;

/// How long each part of a probe takes, for the progress bar and for planning.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub warmup: Duration,
    pub window: Duration,
    pub latency_run: Duration,
    pub settle: Duration,
    pub point: Duration,
}

impl Timing {
    pub fn for_plan(plan: &ProbePlan) -> Timing {
        let d = plan.duration;
        Timing {
            warmup: (d / 4).clamp(Duration::from_millis(20), Duration::from_millis(500)),
            window: d / WINDOWS as u32,
            latency_run: d / plan.latency_runs as u32,
            settle: (d / 20).clamp(Duration::from_millis(5), Duration::from_millis(100)),
            point: (d / 4).max(Duration::from_millis(20)),
        }
    }

    /// Estimated seconds for each phase of one target: setup, idle latency, one bandwidth mix,
    /// one loaded-latency mix.
    pub fn phases(&self, plan: &ProbePlan) -> (f64, f64, f64, f64) {
        let lines = plan.buffer_bytes as f64 / 64.0;
        // Touching two buffers (~4 GB/s page faults) plus building the cycle (~20 ns per line).
        let setup = 2.0 * plan.buffer_bytes as f64 / 4e9 + lines * 20e-9;
        let latency = self.latency_run.as_secs_f64() * (plan.latency_runs + 1) as f64;
        let bw = self.warmup.as_secs_f64() + self.window.as_secs_f64() * WINDOWS as f64;
        let loaded = (self.settle + self.point).as_secs_f64() * LOADED_POINTS as f64;
        (setup, latency, bw, loaded)
    }

    /// Estimated seconds for the whole plan.
    pub fn total(&self, plan: &ProbePlan) -> f64 {
        let (setup, latency, bw, loaded) = self.phases(plan);
        let per_mix = bw + if plan.loaded_latency { loaded } else { 0.0 };
        plan.targets.len() as f64 * (setup + latency + per_mix * plan.mixes.len() as f64)
    }
}

/// Checks that need the kernel but allocate nothing: can memory be bound to every target (EPERM
/// from a seccomp filter, a node outside the cpuset, a kernel without weighted interleave), and
/// may the weighted-interleave table be written when an interleaved target needs other weights.
pub fn preflight(plan: &ProbePlan, root: &Path) -> Result<(), ProbeError> {
    for t in &plan.targets {
        buffer::preflight(&t.placement)?;
        if let TargetPolicy::Weighted { nodes, .. } = &t.placement {
            weights::check_writable(root, nodes, t.placement.weights().unwrap_or_default())?;
        }
    }
    Ok(())
}

/// Run a checked plan. `root` is `/` on a live machine (where the weighted-interleave table lives).
pub fn run(
    plan: &ProbePlan,
    root: &Path,
    progress: &dyn ProgressSink,
) -> Result<Report, ProbeError> {
    preflight(plan, root)?;
    let started = Instant::now();
    let started_wall = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let timing = Timing::for_plan(plan);
    let (setup_s, latency_s, bw_s, loaded_s) = timing.phases(plan);
    progress.start(timing.total(plan));
    let mut warnings = plan.warnings.clone();
    let mut weight_changes = Vec::new();
    let mut targets = Vec::new();

    for (index, t) in plan.targets.iter().enumerate() {
        progress.phase(&format!(
            "{}: placing buffers and building the chase",
            t.name
        ));
        // Interleaved buffers take the kernel's global weights at first touch: set them just for the
        // allocation, then put them back.
        let mut guard = match &t.placement {
            TargetPolicy::Weighted { nodes, weights } => {
                Some(weights::WeightGuard::set(root, nodes, weights)?)
            }
            TargetPolicy::Node(_) => None,
        };
        let alloc = (|| -> Result<_, ProbeError> {
            let mut chase_buf =
                Buffer::allocate(plan.buffer_bytes, &t.placement, plan.huge_pages, "chase")?;
            let traffic_buf =
                Buffer::allocate(plan.buffer_bytes, &t.placement, plan.huge_pages, "traffic")?;
            let chase_check = chase_buf.check(&t.placement, "chase")?;
            let traffic_check = traffic_buf.check(&t.placement, "traffic")?;
            let start = chase::build(chase_buf.words_mut(), SEED ^ index as u64)?;
            Ok((chase_buf, traffic_buf, chase_check, traffic_check, start))
        })();
        if let Some(g) = guard.as_mut() {
            warnings.extend(g.restore());
            weight_changes.extend(g.changes.iter().cloned());
        }
        drop(guard);
        let (chase_buf, mut traffic_buf, chase_check, traffic_check, mut pos) = alloc?;
        if plan.huge_pages && !chase_check.huge_pages && plan.host.thp_possible() {
            warnings.push(format!(
                "{}: the kernel gave few huge pages ({} of {} bytes): latency includes TLB misses",
                t.name,
                chase_check.huge_page_bytes,
                chase_buf.len()
            ));
        }
        progress.advance(setup_s);

        progress.phase(&format!("{}: idle latency", t.name));
        let idle = idle_latency(
            chase_buf.words(),
            &mut pos,
            t.cpus[0],
            timing.latency_run,
            plan.latency_runs,
        )?;
        if idle.on_cpu_pct < 90.0 {
            warnings.push(format!(
                "{}: the machine is busy (the chasing thread ran on its CPU for only {:.0}% of a \
                 run): latency is timed on the thread's own CPU time, but other programs load the \
                 memory too, so bandwidth and latency may be off",
                t.name, idle.on_cpu_pct
            ));
        }
        progress.advance(latency_s);

        let mut bandwidth = Vec::new();
        for &mix in &plan.mixes {
            progress.phase(&format!(
                "{}: bandwidth {mix}, {} threads",
                t.name, t.threads
            ));
            let b = measure::bandwidth(
                traffic_buf.words_mut(),
                &t.cpus,
                t.threads,
                mix,
                timing.warmup,
                WINDOWS,
                timing.window,
            )?;
            if b.unpinned_threads > 0 {
                warnings.push(format!(
                    "{} {mix}: {} thread(s) could not be pinned to their CPU",
                    t.name, b.unpinned_threads
                ));
            }
            bandwidth.push(b);
            progress.advance(bw_s);
        }

        let mut loaded_latency = Vec::new();
        if plan.loaded_latency {
            let peaks: Vec<_> = bandwidth.iter().map(|b| (b.mix, b.traffic_gbps)).collect();
            let delays = loaded::delays(LOADED_POINTS);
            for &mix in &plan.mixes {
                let label = format!("{}: loaded latency {mix}", t.name);
                progress.phase(&label);
                let per_point = loaded_s / delays.len() as f64;
                let points = measure::loaded_sweep(
                    chase_buf.words(),
                    &mut pos,
                    traffic_buf.words_mut(),
                    &t.cpus,
                    t.threads,
                    mix,
                    &delays,
                    timing.settle,
                    timing.point,
                    &|_| progress.advance(per_point),
                )?;
                let raw: Vec<(f64, f64)> = points
                    .iter()
                    .map(|p| (p.traffic_gbps, p.latency_ns))
                    .collect();
                let profile = loaded::clean(
                    &raw,
                    (idle.ns * 10.0).round() / 10.0,
                    profile::peak_for(&peaks, mix),
                );
                loaded_latency.push(LoadedCurve {
                    mix,
                    points,
                    profile,
                });
            }
        }

        targets.push(TargetReport {
            name: t.name.clone(),
            policy: t.placement.policy_name().to_string(),
            nodes: t.placement.nodes(),
            weights: t.placement.weights().map(|w| {
                t.placement
                    .nodes()
                    .into_iter()
                    .zip(w.iter().copied())
                    .collect()
            }),
            kind: t.kind,
            capacity_bytes: t.capacity_bytes,
            firmware_bandwidth_gbps: t.firmware_bandwidth_gbps,
            initiator_node: t.initiator_node,
            cpus: t.cpus.clone(),
            threads: t.threads,
            chase_placement: chase_check,
            traffic_placement: traffic_check,
            idle_latency: idle,
            bandwidth,
            loaded_latency,
        });
    }
    progress.finish();

    Ok(Report {
        version: env!("CARGO_PKG_VERSION").to_string(),
        started: report::utc_timestamp(started_wall),
        elapsed_s: started.elapsed().as_secs_f64(),
        host: plan.host.clone(),
        settings: Settings {
            buffer_bytes: plan.buffer_bytes,
            buffer_auto: plan.buffer_auto,
            duration_s: plan.duration.as_secs_f64(),
            mixes: plan.mixes.clone(),
            latency_runs: plan.latency_runs,
            loaded_latency: plan.loaded_latency,
            huge_pages_requested: plan.huge_pages,
        },
        targets,
        weight_changes,
        warnings,
    })
}

/// Chase on a thread pinned to `cpu`: one warm-up run, then `runs` timed runs; the median is the
/// figure.
fn idle_latency(
    buf: &[u64],
    pos: &mut usize,
    cpu: u32,
    run: Duration,
    runs: usize,
) -> Result<IdleLatency, ProbeError> {
    let start = *pos;
    let (result, end) = std::thread::scope(|s| {
        s.spawn(move || {
            host::pin_current_thread(cpu);
            let mut p = start;
            chase::timed(buf, &mut p, run);
            let results: Vec<chase::Run> =
                (0..runs).map(|_| chase::timed(buf, &mut p, run)).collect();
            (results, p)
        })
        .join()
        .map_err(|_| ProbeError::Thread("the pointer-chase thread panicked".into()))
    })?;
    *pos = end;
    let lines = (buf.len() / chase::WORDS_PER_LINE) as u64;
    Ok(IdleLatency::from_runs(&result, lines))
}
