//! The daemon: the loop behind `cxltier tierd` (without `--tune`). Each round it refreshes the
//! targets from their [`TargetSource`] (fixed pids, a cgroup's members, a launched child), runs
//! one [`Engine::step`], follows the quarantine file, updates the metrics text and waits for the
//! next interval; it stops on its deadline, on the stop flag, when every target has exited, or
//! when the cgroup it follows is removed. What happens is told to a [`DaemonSink`], one method
//! per event, so that the caller decides how it is shown (the CLI: text for people, JSON lines).

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::access::{Source, SourceKind};
use crate::engine::{Engine, IntervalReport, MemoryMode, TargetChange, Tiers};
use crate::metrics;
use crate::policy::Policy;
use crate::procfs;
use crate::psi::{PressureReader, ProgressSlowdown, SlaController, SlaGoal};
use crate::quarantine::{QuarantineMover, QuarantineReport};
use crate::TierdError;

/// The processes tierd manages, as they are now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// The set is fixed: targets only leave by exiting (pids, a launched child).
    Fixed,
    /// The set is exactly these processes now (a cgroup's members).
    Now(Vec<u32>),
    /// The set is gone (the cgroup was removed): the daemon stops.
    Gone,
}

/// Where the daemon's targets come from (memtierd's pid watchers are the model): the processes
/// at the start, and each round whether that set changed.
pub trait TargetSource {
    /// The processes to manage from the start (at least one).
    fn initial(&self) -> Vec<u32>;
    /// Called at the start of every round, before the engine's step.
    fn refresh(&mut self) -> Membership;
    /// Whether the daemon stops once no target runs (a cgroup can gain members again: it does not).
    fn ends_when_empty(&self) -> bool {
        true
    }
    /// The daemon could not start: undo what the source started (a launched child is killed).
    fn abandon(&mut self) {}
    /// The daemon stopped for `reason`: the launched child's exit status, when it is over.
    fn finish(&mut self, _reason: StopReason) -> Option<ExitStatus> {
        None
    }
}

/// Fixed process ids.
#[derive(Debug, Clone)]
pub struct Pids(pub Vec<u32>);

impl TargetSource for Pids {
    fn initial(&self) -> Vec<u32> {
        self.0.clone()
    }
    fn refresh(&mut self) -> Membership {
        Membership::Fixed
    }
}

/// The pids in a cgroup v2 directory's `cgroup.procs`.
pub fn read_cgroup_procs(dir: &Path) -> io::Result<Vec<u32>> {
    let text = fs::read_to_string(dir.join("cgroup.procs"))?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// A cgroup's processes, re-read every round: joiners become targets, leavers are dropped.
#[derive(Debug, Clone)]
pub struct Cgroup {
    dir: PathBuf,
    initial: Vec<u32>,
}

impl Cgroup {
    /// Follow the cgroup directory `dir`, whose members are `initial` now (the caller read them
    /// with [`read_cgroup_procs`], to say what is wrong when it cannot).
    pub fn new(dir: impl Into<PathBuf>, initial: Vec<u32>) -> Cgroup {
        Cgroup {
            dir: dir.into(),
            initial,
        }
    }

    /// The cgroup named on the command line (`--cgroup`): a path as given when it is absolute or
    /// exists, else one under /sys/fs/cgroup. Reading it changes nothing; it must have processes.
    pub fn resolve(path: &Path) -> Result<Cgroup, TierdError> {
        let dir = if path.is_absolute() || path.exists() {
            path.to_path_buf()
        } else {
            Path::new("/sys/fs/cgroup").join(path)
        };
        let procs = dir.join("cgroup.procs");
        let pids = read_cgroup_procs(&dir).map_err(|e| {
            TierdError::invalid_with_hint(
                format!(
                    "--cgroup {}: cannot read {}: {e}",
                    path.display(),
                    procs.display()
                ),
                "give a cgroup directory, e.g. /sys/fs/cgroup/system.slice/foo.service (cgroup v2) \
                 or /sys/fs/cgroup/memory/foo (a cgroup v1 memory cgroup)",
            )
        })?;
        if pids.is_empty() {
            return Err(TierdError::invalid(format!(
                "--cgroup {}: the cgroup has no processes",
                path.display()
            )));
        }
        Ok(Cgroup::new(dir, pids))
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl TargetSource for Cgroup {
    fn initial(&self) -> Vec<u32> {
        self.initial.clone()
    }
    fn refresh(&mut self) -> Membership {
        match read_cgroup_procs(&self.dir) {
            Ok(pids) => Membership::Now(pids),
            Err(_) => Membership::Gone,
        }
    }
    fn ends_when_empty(&self) -> bool {
        false
    }
}

/// A child the caller launched: reaped as soon as it exits (so that it is seen as gone rather than
/// a zombie); killed if the daemon cannot start; its exit status is the daemon's outcome when it
/// is what ended the run.
#[derive(Debug)]
pub struct Launched(pub Child);

impl Launched {
    /// Start `command` (the program, then its arguments) as the daemon's target.
    pub fn spawn(command: &[OsString]) -> Result<Launched, TierdError> {
        Command::new(&command[0])
            .args(&command[1..])
            .spawn()
            .map(Launched)
            .map_err(|source| TierdError::Spawn {
                program: command[0].to_string_lossy().into_owned(),
                source,
            })
    }
}

/// How long to run, from `--duration` in seconds (none: until stopped).
pub fn run_duration(seconds: Option<f64>) -> Result<Option<Duration>, TierdError> {
    match seconds {
        Some(s) if !(s.is_finite() && s > 0.0) => Err(TierdError::invalid(format!(
            "--duration {s}: expected a number of seconds above 0"
        ))),
        Some(s) => Ok(Some(Duration::from_secs_f64(s))),
        None => Ok(None),
    }
}

/// The warnings said before the run (the `warnings` JSON line of docs/tierd.md).
#[derive(Debug, Clone, Serialize)]
pub struct Warnings<'a> {
    pub warnings: &'a [String],
}

impl TargetSource for Launched {
    fn initial(&self) -> Vec<u32> {
        vec![self.0.id()]
    }
    fn refresh(&mut self) -> Membership {
        let _ = self.0.try_wait();
        Membership::Fixed
    }
    fn abandon(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
    fn finish(&mut self, reason: StopReason) -> Option<ExitStatus> {
        // Stopped by a signal or the deadline: the child keeps running, like any other target.
        (reason == StopReason::TargetsExited)
            .then(|| self.0.wait().ok())
            .flatten()
    }
}

/// Why the daemon stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The stop flag was raised (SIGINT, SIGTERM).
    Signal,
    /// The deadline passed.
    Duration,
    /// Every target exited.
    TargetsExited,
    /// The cgroup followed was removed.
    CgroupRemoved,
}

impl StopReason {
    /// The name in reports: `signal`, `duration`, `targets_exited`, `cgroup_removed`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Signal => "signal",
            StopReason::Duration => "duration",
            StopReason::TargetsExited => "targets_exited",
            StopReason::CgroupRemoved => "cgroup_removed",
        }
    }
}

/// What the daemon is about to do, before it writes anything.
#[derive(Debug)]
pub struct Starting<'a> {
    pub source: &'a Source,
    pub pids: &'a [u32],
    pub tiers: &'a Tiers,
    pub policy: &'a Policy,
    pub dry_run: bool,
    /// The quarantine file followed, if any.
    pub quarantine_file: Option<&'a Path>,
}

/// How written pages are tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrittenPages {
    /// Soft-dirty bits, page by page.
    SoftDirty,
    /// The policy asks for soft-dirty tracking; the kernel has no soft-dirty bits.
    Unsupported,
    /// The policy turned it off.
    Off,
}

impl WrittenPages {
    /// How written pages are tracked, in words.
    pub fn describe(self) -> &'static str {
        match self {
            WrittenPages::SoftDirty => {
                "soft-dirty bits, page by page (a page written in the last interval counts as hot)"
            }
            WrittenPages::Unsupported => {
                "not tracked: this kernel has no soft-dirty bits (CONFIG_MEM_SOFT_DIRTY); hot and \
                 cold come from the access source alone"
            }
            WrittenPages::Off => {
                "not tracked (soft_dirty = false in the policy); hot and cold come from the \
                 access source alone"
            }
        }
    }
}

/// The last report: the daemon stopped. Its JSON form is the `stopped` line of docs/tierd.md.
#[derive(Debug, Clone, Serialize)]
pub struct StopReport {
    pub event: &'static str,
    pub reason: StopReason,
    pub elapsed_s: f64,
    pub targets_left_running: Vec<u32>,
    /// `damon` or `idle-page`.
    pub access_source: &'static str,
    /// DAMON's kdamonds were removed (true with idle-page tracking: nothing to remove).
    pub damon_removed: bool,
    #[serde(skip)]
    pub source: SourceKind,
}

/// What the daemon tells as it runs, one method per event. The methods that report a round's
/// results can fail (the output is gone): the daemon then stops, undoes what it changed and
/// returns [`TierdError::Output`].
pub trait DaemonSink {
    /// Before the access source is started.
    fn starting(&mut self, _s: &Starting<'_>) {}
    /// The access source runs; how written pages are tracked.
    fn started(&mut self, _written: WrittenPages) {}
    /// The PSI file the SLA loop reads (memory mode with a stall goal).
    fn pressure_file(&mut self, _path: &Path) {}
    /// The followed cgroup's membership changed; `running` are the targets now.
    fn membership(&mut self, _change: &TargetChange, _source: SourceKind, _running: &[u32]) {}
    /// A target after one round (also once when it exits or leaves).
    fn target(&mut self, report: &IntervalReport) -> io::Result<()>;
    /// The quarantine file could not be checked this round.
    fn quarantine_unchecked(&mut self, _err: &TierdError) {}
    /// A line of the quarantine file that is not a range.
    fn quarantine_malformed(&mut self, _line: &str) {}
    /// Quarantined memory this round.
    fn quarantine(&mut self, _report: &QuarantineReport) -> io::Result<()> {
        Ok(())
    }
    /// A round is over (flush what was written).
    fn round_end(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// The daemon stopped (the access source is removed, or could not be: `damon_removed`).
    fn stopped(&mut self, _report: &StopReport) -> io::Result<()> {
        Ok(())
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    pub reason: StopReason,
    /// The launched child's exit status, when its exit ended the run.
    pub child_status: Option<ExitStatus>,
}

/// The auto-tiering daemon, configured builder-style and then [`run`](Daemon::run).
pub struct Daemon {
    policy: Policy,
    tiers: Tiers,
    source: Source,
    targets: Box<dyn TargetSource>,
    dry_run: bool,
    sys_root: PathBuf,
    proc_root: PathBuf,
    duration: Option<Duration>,
    quarantine_file: Option<PathBuf>,
    metrics: Option<cxltier_metrics::Published>,
    memory: Option<(MemoryMode, Option<SlaGoal>)>,
    held: crate::setting::HeldSettings,
}

impl Daemon {
    /// A daemon over `targets` with `policy` (already validated or not: [`Engine::start`] checks
    /// it), moving between `tiers`, tracking access with `source` (from
    /// [`crate::choose_source`]). It reads the live `/` and `/proc` unless told otherwise.
    pub fn new(
        policy: Policy,
        tiers: Tiers,
        source: Source,
        targets: Box<dyn TargetSource>,
    ) -> Daemon {
        Daemon {
            policy,
            tiers,
            source,
            targets,
            dry_run: false,
            sys_root: PathBuf::from("/"),
            proc_root: PathBuf::from("/proc"),
            duration: None,
            quarantine_file: None,
            metrics: None,
            memory: None,
            held: Default::default(),
        }
    }

    /// Track and plan, but move nothing.
    pub fn dry_run(mut self, dry_run: bool) -> Daemon {
        self.dry_run = dry_run;
        self
    }

    /// Read sysfs under `sys_root` and processes under `proc_root` (recorded or scratch trees).
    pub fn roots(mut self, sys_root: impl Into<PathBuf>, proc_root: impl Into<PathBuf>) -> Daemon {
        self.sys_root = sys_root.into();
        self.proc_root = proc_root.into();
        self
    }

    /// Stop this long after the run starts.
    pub fn duration(mut self, duration: Option<Duration>) -> Daemon {
        self.duration = duration;
        self
    }

    /// Follow this quarantine file and move the targets' pages off the ranges in it.
    pub fn quarantine_file(mut self, path: impl Into<PathBuf>) -> Daemon {
        self.quarantine_file = Some(path.into());
        self
    }

    /// Publish the Prometheus text of each round here (served by `cxltier_metrics::serve`).
    pub fn metrics(mut self, published: cxltier_metrics::Published) -> Daemon {
        self.metrics = Some(published);
        self
    }

    /// Memory mode's system-wide settings (swap readahead, zswap): stepped once per round, their
    /// reports in every target's memory section. The daemon holds them while it runs;
    /// [`Daemon::take_held_settings`] hands them back to restore and report.
    pub fn held_settings(mut self, held: crate::setting::HeldSettings) -> Daemon {
        self.held = held;
        self
    }

    pub fn take_held_settings(&mut self) -> crate::setting::HeldSettings {
        std::mem::take(&mut self.held)
    }

    /// Memory mode: page out what each target holds beyond `mode.keep_bytes`; with a `goal`,
    /// at a rate the SLA controller ([`crate::psi`]) sets from the memory pressure of the first
    /// target's cgroup (or the system's), or from the workload's own progress.
    pub fn memory_mode(mut self, mode: MemoryMode, goal: Option<SlaGoal>) -> Daemon {
        self.memory = Some((mode, goal));
        self
    }

    /// Run until the deadline, the stop flag, the targets' exit or the cgroup's removal. The
    /// access source is removed before it returns, also on error; the targets keep running and
    /// their memory stays where it is.
    pub fn run(
        &mut self,
        sink: &mut dyn DaemonSink,
        stop: &AtomicBool,
    ) -> Result<Outcome, TierdError> {
        let started = Instant::now();
        let deadline = self.duration.map(|d| started + d);
        let pids = self.targets.initial();
        if let Some(&pid) = pids
            .iter()
            .find(|&&pid| !procfs::alive(&self.proc_root, pid))
        {
            self.targets.abandon();
            return Err(TierdError::NoSuchProcess { pid });
        }
        sink.starting(&Starting {
            source: &self.source,
            pids: &pids,
            tiers: &self.tiers,
            policy: &self.policy,
            dry_run: self.dry_run,
            quarantine_file: self.quarantine_file.as_deref(),
        });
        let mut quarantine = self.quarantine_file.as_ref().map(QuarantineMover::new);
        let mut engine = match Engine::start(
            self.policy.clone(),
            self.tiers.clone(),
            &pids,
            self.source.kind,
            self.dry_run,
            &self.sys_root,
            &self.proc_root,
        ) {
            Ok(e) => e,
            Err(e) => {
                self.targets.abandon();
                return Err(e);
            }
        };
        let mut sla = match &self.memory {
            None => None,
            Some((mode, goal)) => {
                if let Err(e) = engine.set_memory_mode(mode.clone()) {
                    let _ = engine.stop();
                    self.targets.abandon();
                    return Err(e);
                }
                match goal {
                    None => None,
                    Some(goal) => {
                        let measure = match goal {
                            SlaGoal::Stall { .. } => match crate::psi::pressure_file(
                                &self.sys_root,
                                &self.proc_root,
                                pids[0],
                                mode.memcg.as_deref(),
                            ) {
                                Ok(f) => SlaMeasure::Pressure(PressureReader::new(f)),
                                Err(e) => {
                                    let _ = engine.stop();
                                    self.targets.abandon();
                                    return Err(e);
                                }
                            },
                            SlaGoal::Slowdown { progress, .. } => {
                                SlaMeasure::Progress(ProgressSlowdown::new(progress.clone()))
                            }
                        };
                        Some(Sla {
                            measure,
                            controller: SlaController::new(
                                goal.max_pct(),
                                engine.rate_limit_pages_per_interval(),
                            ),
                        })
                    }
                }
            }
        };
        if let Some(Sla {
            measure: SlaMeasure::Pressure(reader),
            ..
        }) = &sla
        {
            sink.pressure_file(reader.path());
        }
        sink.started(if engine.soft_dirty() {
            WrittenPages::SoftDirty
        } else if self.policy.tracking.soft_dirty {
            WrittenPages::Unsupported
        } else {
            WrittenPages::Off
        });

        let mut latest: BTreeMap<u32, IntervalReport> = BTreeMap::new();
        let result = self.rounds(
            &mut engine,
            &mut sla,
            &mut quarantine,
            &pids,
            &mut latest,
            sink,
            stop,
            deadline,
        );
        let removed = engine.stop();
        let reason = result?;
        let left: Vec<u32> = pids
            .iter()
            .chain(latest.keys())
            .copied()
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .filter(|p| procfs::alive(&self.proc_root, *p))
            .collect();
        sink.stopped(&StopReport {
            event: "stopped",
            reason,
            elapsed_s: started.elapsed().as_secs_f64(),
            targets_left_running: left,
            access_source: self.source.name,
            damon_removed: removed.is_ok(),
            source: self.source.kind,
        })
        .map_err(TierdError::Output)?;
        removed?;
        Ok(Outcome {
            reason,
            child_status: self.targets.finish(reason),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn rounds(
        &mut self,
        engine: &mut Engine,
        sla: &mut Option<Sla>,
        quarantine: &mut Option<QuarantineMover>,
        pids: &[u32],
        latest: &mut BTreeMap<u32, IntervalReport>,
        sink: &mut dyn DaemonSink,
        stop: &AtomicBool,
        deadline: Option<Instant>,
    ) -> Result<StopReason, TierdError> {
        let before_deadline = || deadline.is_none_or(|d| Instant::now() < d);
        let mut exposition = self.metrics.as_ref().map(|_| {
            metrics::TierdMetrics::new(metrics::ConfigInfo {
                access_source: self.source.name,
                dry_run: self.dry_run,
                policy: self.policy.clone(),
                tiers: self.tiers.clone(),
            })
        });
        let mut refault_counters = crate::psi::RefaultCounters::default();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(StopReason::Signal);
            }
            if !before_deadline() {
                return Ok(StopReason::Duration);
            }
            let round = Instant::now();
            let mut reports = match self.targets.refresh() {
                Membership::Fixed => Vec::new(),
                Membership::Gone => return Ok(StopReason::CgroupRemoved),
                Membership::Now(now) => {
                    let (change, left) = engine.set_targets(&now)?;
                    if !change.is_empty() {
                        sink.membership(&change, engine.source(), &engine.running_pids());
                    }
                    left
                }
            };
            let mut stall = None;
            let mut progress = None;
            if let Some(s) = sla.as_mut() {
                let max = engine.rate_limit_pages_per_interval();
                let allowance = match &mut s.measure {
                    SlaMeasure::Pressure(reader) => {
                        stall = reader.sample()?;
                        s.controller.update(stall, max)
                    }
                    SlaMeasure::Progress(meter) => {
                        progress = meter.sample()?;
                        s.controller
                            .update(progress.map(|(_, slow)| (slow, 0.0)), max)
                    }
                };
                engine.set_pageout_allowance(allowance);
            }
            reports.append(&mut engine.step()?);
            let readahead = match self.held.readahead.as_mut() {
                Some(t) => Some(t.step()?),
                None => None,
            };
            let zswap = match self.held.zswap.as_mut() {
                Some(z) => Some(z.step()?),
                None => None,
            };
            if let Some((mode, _)) = &self.memory {
                // Each target's refaults come from its cgroup's memory.stat (the --cgroup's
                // when tierd set limits on one), else from the system's /proc/vmstat.
                let files: Vec<PathBuf> = reports
                    .iter()
                    .map(|r| {
                        crate::psi::refault_file(
                            &self.sys_root,
                            &self.proc_root,
                            r.pid,
                            mode.memcg.as_deref(),
                        )
                    })
                    .collect();
                let growth = refault_counters.sample(&files);
                for (r, file) in reports.iter_mut().zip(&files) {
                    let Some(m) = r.memory.as_mut() else { continue };
                    m.refaults = growth.get(file).copied().flatten();
                    m.stall_some_pct = stall.map(|s| s.0);
                    m.stall_full_pct = stall.map(|s| s.1);
                    match self.memory.as_ref().and_then(|m| m.1.as_ref()) {
                        Some(SlaGoal::Stall { max_pct }) => m.max_stall_pct = Some(*max_pct),
                        Some(SlaGoal::Slowdown { max_pct, .. }) => {
                            m.max_slowdown_pct = Some(*max_pct);
                            m.progress_rate = progress.map(|p| p.0);
                            m.slowdown_pct = progress.map(|p| p.1);
                        }
                        None => {}
                    }
                    m.swap_readahead = readahead.clone();
                    m.zswap = zswap.clone();
                }
            }
            for r in &reports {
                sink.target(r).map_err(TierdError::Output)?;
                latest.insert(r.pid, r.clone());
            }
            let quarantined = match quarantine.as_mut() {
                None => None,
                Some(q) => match q.step(pids, &self.tiers, &self.proc_root, self.dry_run) {
                    Ok(q) => q,
                    Err(e) => {
                        sink.quarantine_unchecked(&e);
                        None
                    }
                },
            };
            if let Some(q) = &quarantined {
                for m in &q.malformed {
                    sink.quarantine_malformed(m);
                }
                sink.quarantine(q).map_err(TierdError::Output)?;
            }
            sink.round_end().map_err(TierdError::Output)?;
            if let (Some(published), Some(m)) = (&self.metrics, exposition.as_mut()) {
                for r in &reports {
                    m.observe(r);
                }
                m.observe_quarantine(quarantined.as_ref());
                published.publish(m.render());
            }
            if engine.running() == 0 && self.targets.ends_when_empty() {
                return Ok(StopReason::TargetsExited);
            }
            // Short naps, so that a signal or the deadline is acted on within 20 ms.
            let next = round + self.policy.interval();
            while Instant::now() < next && !stop.load(Ordering::Relaxed) && before_deadline() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The SLA loop's state: what is measured each interval and the controller it feeds.
struct Sla {
    measure: SlaMeasure,
    controller: SlaController,
}

/// The SLA loop's measure: the memory pressure (PSI), or the workload's own progress.
enum SlaMeasure {
    Pressure(PressureReader),
    Progress(ProgressSlowdown),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Status;
    use std::cell::Cell;

    /// A scratch `/` with DAMON's sysfs interface (room for `kdamonds` kdamonds), two memory
    /// nodes and live processes `pids` (no movable memory: the loop runs, nothing moves).
    fn scratch(kdamonds: usize, pids: &[u32]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, content: &str| {
            let p = dir.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
        };
        let admin = "sys/kernel/mm/damon/admin";
        write(&format!("{admin}/kdamonds/nr_kdamonds"), "0\n");
        for k in 0..kdamonds {
            for (file, _) in crate::damon::setup_writes(&[1], &Default::default())
                .into_iter()
                .skip(1)
            {
                let file = file.replace("kdamonds/0/", &format!("kdamonds/{k}/"));
                write(&format!("{admin}/{file}"), "");
            }
            write(&format!("{admin}/kdamonds/{k}/state"), "off\n");
            fs::create_dir_all(dir.path().join(format!(
                "{admin}/kdamonds/{k}/contexts/0/schemes/0/tried_regions"
            )))
            .unwrap();
        }
        for n in [0, 1] {
            write(
                &format!("sys/devices/system/node/node{n}/meminfo"),
                &format!("Node {n} MemTotal: 1048576 kB\nNode {n} MemFree: 524288 kB\n"),
            );
        }
        for &pid in pids {
            write(&format!("proc/{pid}/stat"), &format!("{pid} (touch) S 1"));
            write(&format!("proc/{pid}/maps"), "");
        }
        dir
    }

    fn nr_kdamonds(root: &Path) -> String {
        fs::read_to_string(root.join("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds"))
            .unwrap()
            .trim()
            .to_string()
    }

    fn daemon(root: &Path, targets: Box<dyn TargetSource>, interval_ms: u64) -> Daemon {
        let mut policy = Policy::default().with_interval_ms(interval_ms);
        policy.tracking.soft_dirty = false;
        let source = Source {
            name: "damon",
            kind: SourceKind::Damon,
            reason: "scratch tree".into(),
        };
        let tiers = Tiers {
            fast: vec![0],
            slow: vec![1],
        };
        Daemon::new(policy, tiers, source, targets).roots(root, root.join("proc"))
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Event {
        Starting(Vec<u32>),
        Started(WrittenPages),
        Membership(Vec<u32>, Vec<u32>, Vec<u32>),
        Target(u32, Status),
        Stopped(StopReason, Vec<u32>, bool),
    }

    /// Records every event; `on_round` runs after each round with the round's number (from 1).
    struct Recorder<'a> {
        events: Vec<Event>,
        rounds: usize,
        on_round: Box<dyn FnMut(usize) + 'a>,
    }

    impl<'a> Recorder<'a> {
        fn new(on_round: impl FnMut(usize) + 'a) -> Self {
            Recorder {
                events: Vec::new(),
                rounds: 0,
                on_round: Box::new(on_round),
            }
        }
        fn reports(&self, pid: u32, status: Status) -> usize {
            self.events
                .iter()
                .filter(|e| **e == Event::Target(pid, status))
                .count()
        }
    }

    impl DaemonSink for Recorder<'_> {
        fn starting(&mut self, s: &Starting<'_>) {
            self.events.push(Event::Starting(s.pids.to_vec()));
        }
        fn started(&mut self, written: WrittenPages) {
            self.events.push(Event::Started(written));
        }
        fn membership(&mut self, change: &TargetChange, _: SourceKind, running: &[u32]) {
            self.events.push(Event::Membership(
                change.joined.clone(),
                change.left.clone(),
                running.to_vec(),
            ));
        }
        fn target(&mut self, r: &IntervalReport) -> io::Result<()> {
            self.events.push(Event::Target(r.pid, r.status));
            Ok(())
        }
        fn round_end(&mut self) -> io::Result<()> {
            self.rounds += 1;
            (self.on_round)(self.rounds);
            Ok(())
        }
        fn stopped(&mut self, s: &StopReport) -> io::Result<()> {
            self.events.push(Event::Stopped(
                s.reason,
                s.targets_left_running.clone(),
                s.damon_removed,
            ));
            Ok(())
        }
    }

    #[test]
    fn the_deadline_ends_a_long_interval_and_damon_is_removed() {
        let root = scratch(1, &[41]);
        // An interval far longer than the deadline: the wait between rounds must end at the
        // deadline (a hang here is the failure).
        let mut d = daemon(root.path(), Box::new(Pids(vec![41])), 600_000)
            .duration(Some(Duration::from_millis(50)));
        let mut sink = Recorder::new(|_| ());
        let out = d.run(&mut sink, &AtomicBool::new(false)).unwrap();
        assert_eq!(out.reason, StopReason::Duration);
        assert!(out.child_status.is_none());
        assert_eq!(
            sink.events,
            vec![
                Event::Starting(vec![41]),
                Event::Started(WrittenPages::Off),
                Event::Target(41, Status::Running),
                Event::Stopped(StopReason::Duration, vec![41], true),
            ]
        );
        assert_eq!(nr_kdamonds(root.path()), "0");
    }

    #[test]
    fn the_stop_flag_ends_the_run_between_rounds() {
        let root = scratch(1, &[41]);
        let stop = AtomicBool::new(false);
        let mut d = daemon(root.path(), Box::new(Pids(vec![41])), 10);
        let mut sink = Recorder::new(|round| {
            if round == 3 {
                stop.store(true, Ordering::Relaxed);
            }
        });
        let out = d.run(&mut sink, &stop).unwrap();
        assert_eq!(out.reason, StopReason::Signal);
        assert_eq!(sink.rounds, 3);
        assert_eq!(sink.reports(41, Status::Running), 3);
        assert_eq!(
            sink.events.last(),
            Some(&Event::Stopped(StopReason::Signal, vec![41], true))
        );
        assert_eq!(nr_kdamonds(root.path()), "0");

        // Raised before the start: no round at all, and still nothing left behind.
        let mut sink = Recorder::new(|_| ());
        let out = d.run(&mut sink, &stop).unwrap();
        assert_eq!((out.reason, sink.rounds), (StopReason::Signal, 0));
        assert_eq!(nr_kdamonds(root.path()), "0");
    }

    #[test]
    fn targets_that_exit_are_reported_once_and_the_run_ends_with_the_last() {
        let root = scratch(2, &[41, 42]);
        let proc = root.path().join("proc");
        let mut d = daemon(root.path(), Box::new(Pids(vec![41, 42])), 10);
        let mut sink = Recorder::new(|round| match round {
            1 => fs::remove_file(proc.join("42/stat")).unwrap(),
            3 => fs::remove_file(proc.join("41/stat")).unwrap(),
            _ => {}
        });
        let out = d.run(&mut sink, &AtomicBool::new(false)).unwrap();
        assert_eq!(out.reason, StopReason::TargetsExited);
        assert_eq!(sink.rounds, 4);
        assert_eq!(sink.reports(42, Status::Running), 1);
        assert_eq!(sink.reports(42, Status::Exited), 1);
        assert_eq!(sink.reports(41, Status::Running), 3);
        assert_eq!(sink.reports(41, Status::Exited), 1);
        assert_eq!(
            sink.events.last(),
            Some(&Event::Stopped(StopReason::TargetsExited, vec![], true))
        );
        assert_eq!(nr_kdamonds(root.path()), "0");
    }

    /// A cgroup `cg` below `root` whose `cgroup.procs` lists `procs`, followed from what it
    /// lists now: the targets and the path of its `cgroup.procs`.
    fn cgroup_in(root: &Path, procs: &str) -> (Box<Cgroup>, PathBuf) {
        let cg = root.join("cg");
        fs::create_dir(&cg).unwrap();
        let file = cg.join("cgroup.procs");
        fs::write(&file, procs).unwrap();
        let members = read_cgroup_procs(&cg).unwrap();
        (Box::new(Cgroup::new(&cg, members)), file)
    }

    #[test]
    fn cgroup_members_that_join_and_leave_are_reported_once() {
        let root = scratch(2, &[41, 42]);
        let (cgroup, procs) = cgroup_in(root.path(), "41\n");
        let kdamonds_seen = Cell::new(Vec::new());
        let mut d = daemon(root.path(), cgroup, 10);
        let mut sink = Recorder::new(|round| {
            let mut seen = kdamonds_seen.take();
            seen.push(nr_kdamonds(root.path()));
            kdamonds_seen.set(seen);
            match round {
                1 => fs::write(&procs, "41\n42\n").unwrap(),
                2 => fs::write(&procs, "42\n").unwrap(),
                // Empty but still there: the cgroup is followed on, with no target.
                3 => fs::write(&procs, "").unwrap(),
                5 => fs::remove_file(&procs).unwrap(),
                _ => {}
            }
        });
        let out = d.run(&mut sink, &AtomicBool::new(false)).unwrap();
        assert_eq!(out.reason, StopReason::CgroupRemoved);
        assert_eq!(sink.rounds, 5);
        let membership: Vec<&Event> = sink
            .events
            .iter()
            .filter(|e| matches!(e, Event::Membership(..)))
            .collect();
        assert_eq!(
            membership,
            vec![
                &Event::Membership(vec![42], vec![], vec![41, 42]),
                &Event::Membership(vec![], vec![41], vec![42]),
                &Event::Membership(vec![], vec![42], vec![]),
            ]
        );
        assert_eq!(sink.reports(41, Status::Left), 1);
        assert_eq!(sink.reports(42, Status::Left), 1);
        assert_eq!(sink.reports(41, Status::Running), 2);
        assert_eq!(sink.reports(42, Status::Running), 2);
        // One kdamond per member while it runs; none left behind.
        assert_eq!(kdamonds_seen.take(), ["1", "2", "1", "0", "0"]);
        assert_eq!(nr_kdamonds(root.path()), "0");
        assert_eq!(
            sink.events.last(),
            Some(&Event::Stopped(
                StopReason::CgroupRemoved,
                vec![41, 42],
                true
            ))
        );
    }

    #[test]
    fn the_published_metrics_drop_a_target_once_it_left_the_cgroup() {
        let root = scratch(2, &[41, 42]);
        let (cgroup, procs) = cgroup_in(root.path(), "41\n42\n");
        let published = cxltier_metrics::Published::new();
        let mut d = daemon(root.path(), cgroup, 10).metrics(published.clone());
        let texts = Cell::new(Vec::new());
        let mut sink = Recorder::new(|round| {
            let mut seen = texts.take();
            seen.push(published.text().to_string());
            texts.set(seen);
            match round {
                1 => fs::write(&procs, "42\n").unwrap(),
                3 => fs::remove_file(&procs).unwrap(),
                _ => {}
            }
        });
        d.run(&mut sink, &AtomicBool::new(false)).unwrap();
        let texts = texts.take();
        assert_eq!(texts.len(), 3, "{texts:?}");
        // The sink's round_end comes before the round's publication: the text seen at round
        // n is round n - 1's.
        let after_leaving = published.text();
        assert!(texts[1].contains("pid=\"41\""), "{}", texts[1]);
        assert!(!after_leaving.contains("pid=\"41\""), "{after_leaving}");
        assert!(after_leaving.contains("pid=\"42\""), "{after_leaving}");
        assert!(
            after_leaving.contains("cxltier_tierd_targets 1\n"),
            "{after_leaving}"
        );
        assert!(
            after_leaving.contains("cxltier_tierd_targets_departed_total{reason=\"left\"} 1\n"),
            "{after_leaving}"
        );
        assert!(after_leaving.contains("cxltier_tierd_config_info{access_source=\"damon\""));
        cxltier_metrics::promtool::assert_clean("the daemon's exposition", &after_leaving);
    }

    #[test]
    fn a_target_that_does_not_exist_is_refused_before_anything_is_written() {
        let root = scratch(1, &[41]);
        let mut d = daemon(root.path(), Box::new(Pids(vec![41, 43])), 10);
        let mut sink = Recorder::new(|_| ());
        let err = d.run(&mut sink, &AtomicBool::new(false)).unwrap_err();
        assert!(
            matches!(err, TierdError::NoSuchProcess { pid: 43 }),
            "{err}"
        );
        assert!(sink.events.is_empty());
        assert!(fs::read_to_string(
            root.path()
                .join("sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/targets/0/pid_target")
        )
        .unwrap()
        .is_empty());
    }

    #[test]
    fn a_launched_child_is_killed_when_abandoned_and_waited_for_when_it_ended_the_run() {
        let mut c = Launched(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap(),
        );
        c.abandon();
        assert!(c.0.try_wait().unwrap().is_some(), "killed and reaped");

        let mut c = Launched(
            std::process::Command::new("sh")
                .args(["-c", "exit 7"])
                .spawn()
                .unwrap(),
        );
        assert_eq!(c.finish(StopReason::TargetsExited).unwrap().code(), Some(7));
        let mut c = Launched(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap(),
        );
        // Stopped by a signal: the child keeps running, and tierd does not wait for it.
        assert!(c.finish(StopReason::Signal).is_none());
        assert!(c.0.try_wait().unwrap().is_none());
        c.0.kill().unwrap();
        c.0.wait().unwrap();
    }
}
