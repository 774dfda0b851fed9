//! Memory mode's system-wide changes as one session: the swap area, the cgroup's memcg limits,
//! `vm.page-cluster` and zswap, made in that order, each recorded as it is made, and undone in
//! reverse order by [`MemoryModeSession::undo`] (which reports each step to a
//! [`MemoryModeSink`] and returns the first failure) or, quietly, when the session is dropped.

use crate::daemon::{Daemon, DaemonSink, Outcome};
use crate::engine::{MemoryMode, Tiers};
use crate::memcg::{LimitsReport, MemcgLimits, MemcgPlan, Restored};
use crate::policy::Policy;
use crate::psi::SlaGoal;
use crate::readahead::{ReadaheadPlan, ReadaheadTuner, SwapReadahead};
use crate::setting::HeldSettings;
use crate::swap::{NvmeSpec, SwapArea, SwapPlan, Teardown};
use crate::tune::ProgressSignal;
use crate::zswap::ZswapPlan;
use crate::TierdError;
use cxltier_topo::size::Size;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// Memory mode's settings, checked against the machine; nothing written yet.
#[derive(Debug)]
pub struct MemoryModePlan {
    /// Bytes each target keeps in DRAM.
    pub dram: u64,
    /// Bytes each target keeps on slower memory (CXL) beyond the DRAM budget.
    pub cxl: u64,
    pub swap: SwapPlan,
    /// The `--cgroup`'s memcg limits (memory.high, memory.swap.max).
    pub memcg: Option<MemcgPlan>,
    /// vm.page-cluster (`None`: --swap-readahead keep).
    pub readahead: Option<ReadaheadPlan>,
    /// zswap (`None`: no --zswap).
    pub zswap: Option<ZswapPlan>,
    /// The SLA loop's goal (`None`: the rate limit alone).
    pub goal: Option<SlaGoal>,
    /// Pages go out through a DAMOS pageout scheme instead of `process_madvise`.
    pub damos_pageout: bool,
}

/// Memory mode as asked for on the command line (`--nvme` and the flags beside it), checked
/// against the machine by [`MemoryModePlan::check`].
#[derive(Debug, Clone, Default)]
pub struct MemoryModeRequest {
    /// `--nvme PATH[:SIZE]`: the block device or new swap file.
    pub nvme: String,
    /// `--cxl-budget`: bytes each target keeps on slower memory (none: 0).
    pub cxl_budget: Option<Size>,
    /// `--max-stall-pct`: the SLA loop's goal in memory pressure.
    pub max_stall_pct: Option<f64>,
    /// `--max-slowdown-pct`: the SLA loop's goal in the workload's own progress.
    pub max_slowdown_pct: Option<f64>,
    /// `--progress`: the workload's counter, read by a slowdown goal.
    pub progress: Option<String>,
    /// `--swap-readahead`: auto, keep or a page-cluster value.
    pub swap_readahead: String,
    /// `--zswap`: the pool's most percent of RAM (none: zswap left alone).
    pub zswap_percent: Option<u32>,
    /// `--pageout-with damos`.
    pub damos_pageout: bool,
    /// `--dry-run`: nothing is written, so root is not needed.
    pub dry_run: bool,
    /// The process runs as root (swapon needs it).
    pub as_root: bool,
}

/// A percentage goal above 0 and below 100.
fn percent_goal(p: f64) -> bool {
    p.is_finite() && p > 0.0 && p < 100.0
}

impl MemoryModePlan {
    /// Check `request` against the machine before anything is written: the DRAM budget (from
    /// `policy`), the SLA goal, the swap area, the memcg limits of `cgroup`, swap readahead,
    /// zswap and the privilege. `warn` hears what is accepted but likely not what was meant.
    pub fn check(
        request: &MemoryModeRequest,
        policy: &Policy,
        tiers: &Tiers,
        cgroup: Option<&Path>,
        warn: &mut dyn FnMut(&str),
    ) -> Result<MemoryModePlan, TierdError> {
        let dram = policy.dram_budget_bytes().ok_or_else(|| {
            TierdError::invalid("--nvme needs --dram-budget: the bytes each target keeps in DRAM")
        })?;
        let cxl = request.cxl_budget.as_ref().map_or(0, Size::bytes);
        if let Some(p) = request.max_stall_pct {
            if !percent_goal(p) {
                return Err(TierdError::invalid(format!(
                    "--max-stall-pct {p}: expected a percentage of time stalled above 0 and below 100, e.g. 5"
                )));
            }
        }
        let goal = match (request.max_stall_pct, request.max_slowdown_pct) {
            (Some(p), _) => Some(SlaGoal::Stall { max_pct: p }),
            (None, Some(p)) => {
                if !percent_goal(p) {
                    return Err(TierdError::invalid(format!(
                        "--max-slowdown-pct {p}: expected a percentage of the workload's best rate \
                         above 0 and below 100, e.g. 10"
                    )));
                }
                let spec = request.progress.as_deref().unwrap_or_default();
                let progress = ProgressSignal::parse(spec)?;
                // Read once now: a signal that cannot be read is said before anything is set up.
                progress.read().map_err(|e| {
                    TierdError::invalid_with_hint(
                        format!("--progress {spec}: {e}"),
                        "the workload must keep a growing counter there before tierd starts",
                    )
                })?;
                Some(SlaGoal::Slowdown {
                    max_pct: p,
                    progress,
                })
            }
            (None, None) => None,
        };
        if tiers.slow.is_empty() && cxl > 0 {
            warn(&format!(
                "--cxl-budget {}: this machine has no slower memory tier; what is beyond the DRAM \
                 budget goes to NVMe",
                request
                    .cxl_budget
                    .as_ref()
                    .map(Size::to_string)
                    .unwrap_or_default()
            ));
        }
        let spec = NvmeSpec::parse(&request.nvme)?;
        let proc_root = Path::new("/proc");
        let swap = SwapPlan::prepare(&spec, proc_root)?;
        let memcg = match cgroup {
            Some(dir) => {
                let (plan, note) =
                    MemcgPlan::prepare(dir, dram.saturating_add(cxl), swap.size_bytes)?;
                if let Some(note) = note {
                    warn(&note);
                }
                Some(plan)
            }
            None => None,
        };
        let readahead =
            ReadaheadPlan::prepare(SwapReadahead::parse(&request.swap_readahead)?, proc_root)?;
        let zswap = match request.zswap_percent {
            Some(pct) => Some(ZswapPlan::prepare(pct, Path::new("/sys"), proc_root)?),
            None => None,
        };
        if !request.dry_run && !request.as_root {
            return Err(TierdError::NeedsRoot(format!(
                "--nvme {}: turning swap on needs root (CAP_SYS_ADMIN); run tierd with sudo",
                spec.path.display()
            )));
        }
        Ok(MemoryModePlan {
            dram,
            cxl,
            swap,
            memcg,
            readahead,
            zswap,
            goal,
            damos_pageout: request.damos_pageout,
        })
    }

    /// Every system-wide change the session makes, in the order it makes them, said before any.
    pub fn changes(&self) -> Vec<String> {
        let memcg = self.memcg.iter().flat_map(MemcgPlan::changes);
        let readahead = self.readahead.iter().flat_map(ReadaheadPlan::changes);
        let zswap = self.zswap.iter().flat_map(ZswapPlan::changes);
        self.swap
            .changes()
            .into_iter()
            .chain(memcg)
            .chain(readahead)
            .chain(zswap)
            .collect()
    }

    /// Make every change of the plan ([`MemoryModeSession::start`]), or with `dry_run` none
    /// (the sink still hears the memcg limits that would be set): the daemon's memory mode, and
    /// the session that undoes the changes.
    pub fn start(
        self,
        dry_run: bool,
        sink: &mut dyn MemoryModeSink,
    ) -> Result<(MemoryMode, Option<MemoryModeSession>), TierdError> {
        if dry_run {
            if let Some(m) = &self.memcg {
                sink.memcg_limits_set(&m.report());
            }
            return Ok((self.dry_run(), None));
        }
        let (mode, session) = MemoryModeSession::start(self, sink)?;
        Ok((mode, Some(session)))
    }

    /// What memory mode does to each target, in a sentence: the budgets, how pages go out and
    /// the SLA loop's goal.
    pub fn describe(&self) -> String {
        let (dram, cxl, keep) = (self.dram, self.cxl, self.keep_bytes());
        format!(
            "each target keeps {dram} bytes in DRAM and {cxl} on slower memory; the coldest pages \
             beyond {keep} bytes are paged out ({}){}",
            if self.damos_pageout {
                "a DAMOS pageout scheme in each target's kdamond, its size quota set each interval"
            } else {
                "process_madvise MADV_PAGEOUT"
            },
            match &self.goal {
                Some(SlaGoal::Stall { max_pct }) =>
                    format!(", as fast as memory pressure stays under {max_pct}% stalled"),
                Some(SlaGoal::Slowdown { max_pct, progress }) => format!(
                    ", as fast as the workload's progress ({progress}) stays within {max_pct}% of \
                     its best rate"
                ),
                None => String::new(),
            }
        )
    }

    /// Resident bytes kept per target (DRAM plus CXL budgets): the rest is paged out.
    pub fn keep_bytes(&self) -> u64 {
        self.dram.saturating_add(self.cxl)
    }

    /// The daemon's memory mode with nothing set up (`--dry-run`).
    pub fn dry_run(&self) -> MemoryMode {
        MemoryMode {
            keep_bytes: self.keep_bytes(),
            swap_path: None,
            memcg: self.memcg.as_ref().map(|m| m.dir.clone()),
            damos_pageout: self.damos_pageout,
        }
    }
}

/// Hears each step of a session's setup and undo, to say it (the CLI writes stderr and JSON).
/// Every method does nothing by default: a dropped session undoes quietly.
pub trait MemoryModeSink {
    /// The cgroup's limits were written (with `--dry-run`: would be).
    fn memcg_limits_set(&mut self, _limits: &LimitsReport<'_>) {}
    /// The cgroup's previous limits were written back, or not: `pending` holds the
    /// `(file, previous value)` pairs that were to be restored, for the by-hand fix.
    fn memcg_restored(
        &mut self,
        _dir: &Path,
        _pending: &[(String, String)],
        _outcome: &Result<Restored, TierdError>,
    ) {
    }
    /// `vm.page-cluster` was written back (the value), or not.
    fn readahead_restored(&mut self, _tuner: &ReadaheadTuner, _outcome: &Result<u32, TierdError>) {}
    /// zswap's settings were written back (each file and its value), or not.
    fn zswap_restored(&mut self, _outcome: &Result<Vec<(PathBuf, String)>, TierdError>) {}
    /// The swap area was turned off (and its file removed), or not.
    fn swap_torn_down(&mut self, _area: &SwapArea, _outcome: &Result<Teardown, TierdError>) {}
}

/// The sink of a dropped session: nobody to tell.
struct Quiet;

impl MemoryModeSink for Quiet {}

/// One change in force, in the order made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Swap,
    Memcg,
    Readahead,
    Zswap,
}

/// Memory mode's system-wide changes in force. The held settings (readahead, zswap) are lent
/// to the daemon for the run ([`MemoryModeSession::lend_held`]) and handed back before undo
/// ([`MemoryModeSession::take_back_held`]).
#[derive(Debug)]
pub struct MemoryModeSession {
    made: Vec<Change>,
    swap: Option<SwapArea>,
    memcg: Option<MemcgLimits>,
    held: HeldSettings,
}

impl MemoryModeSession {
    /// Make every change of `plan`, recording each: the swap area first (the cgroup's swap limit
    /// is about it), then the cgroup's limits, `vm.page-cluster` and zswap. A failure undoes
    /// what was made (the session is dropped) and is returned.
    pub fn start(
        plan: MemoryModePlan,
        sink: &mut dyn MemoryModeSink,
    ) -> Result<(MemoryMode, MemoryModeSession), TierdError> {
        let mut mode = plan.dry_run();
        let mut session = MemoryModeSession {
            made: Vec::new(),
            swap: None,
            memcg: None,
            held: HeldSettings::default(),
        };
        let area = plan.swap.apply()?;
        mode.swap_path = Some(area.path().to_path_buf());
        session.swap = Some(area);
        session.made.push(Change::Swap);
        if let Some(m) = plan.memcg {
            let set = m.apply()?;
            sink.memcg_limits_set(&set.report());
            session.memcg = Some(set);
            session.made.push(Change::Memcg);
        }
        if let Some(r) = plan.readahead {
            session.held.readahead = Some(r.apply()?);
            session.made.push(Change::Readahead);
        }
        if let Some(z) = plan.zswap {
            session.held.zswap = Some(z.apply()?);
            session.made.push(Change::Zswap);
        }
        Ok((mode, session))
    }

    /// Run `daemon` with the held settings lent to it, then undo every change whatever the
    /// run's outcome (in reverse order: zswap, swap readahead, the cgroup's limits, then the swap
    /// area), telling `undo` each step. A failed undo is the error returned, else the run's.
    pub fn run(
        &mut self,
        daemon: Daemon,
        sink: &mut dyn DaemonSink,
        undo: &mut dyn MemoryModeSink,
        stop: &AtomicBool,
    ) -> Result<Outcome, TierdError> {
        let mut daemon = daemon.held_settings(self.lend_held());
        let outcome = daemon.run(sink, stop);
        self.take_back_held(daemon.take_held_settings());
        self.undo(undo)?;
        outcome
    }

    /// The held settings, for the daemon to step during the run.
    pub fn lend_held(&mut self) -> HeldSettings {
        std::mem::take(&mut self.held)
    }

    /// The held settings back from the daemon, to be restored with the rest.
    pub fn take_back_held(&mut self, held: HeldSettings) {
        self.held = held;
    }

    /// Undo every change in reverse order, telling `sink` each step. Every change is tried; the
    /// first failure is returned. Runs once: later calls find nothing to undo.
    pub fn undo(&mut self, sink: &mut dyn MemoryModeSink) -> Result<(), TierdError> {
        let mut first_error = None;
        while let Some(change) = self.made.pop() {
            let done = match change {
                Change::Zswap => self.held.zswap.take().map_or(Ok(()), |mut z| {
                    let outcome = z.restore();
                    sink.zswap_restored(&outcome);
                    outcome.map(drop)
                }),
                Change::Readahead => self.held.readahead.take().map_or(Ok(()), |mut tuner| {
                    let outcome = tuner.restore();
                    sink.readahead_restored(&tuner, &outcome);
                    outcome.map(drop)
                }),
                // Before swapoff: swapoff charges every page it reads back to the cgroup,
                // which must not be held under memory.high then.
                Change::Memcg => self.memcg.as_mut().map_or(Ok(()), |set| {
                    let pending: Vec<(String, String)> = set
                        .limits()
                        .iter()
                        .map(|l| (l.file.to_string(), l.previous.clone()))
                        .collect();
                    let outcome = set.restore();
                    sink.memcg_restored(set.dir(), &pending, &outcome);
                    outcome.map(drop)
                }),
                Change::Swap => self.swap.as_mut().map_or(Ok(()), |area| {
                    let outcome = area.teardown();
                    sink.swap_torn_down(area, &outcome);
                    outcome.map(drop)
                }),
            };
            if let Err(e) = done {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for MemoryModeSession {
    /// An error path: undo quietly (each part would also restore itself when dropped, but in
    /// field order; this keeps the reverse order of setup).
    fn drop(&mut self) {
        let _ = self.undo(&mut Quiet);
    }
}
