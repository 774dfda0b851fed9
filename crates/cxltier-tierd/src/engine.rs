//! The control loop: each interval, for every target, read each page's access frequency from the
//! access source ([`crate::access`]: DAMON or idle-page tracking), find where each resident page
//! of the target's movable memory is (`move_pages` in query mode), decide what to move
//! ([`crate::plan`]), move it (`move_pages`), and report.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cxltier_sys::{errno_name, move_pages, query_pages, PageStatus};
use cxltier_topo::{Placement, Topology};

use crate::access::{PageAccess, SourceKind, Tracker};
use crate::placement::ProcessPages;
use crate::plan::{self, Heat, PageInfo, Reason, Thresholds};
use crate::policy::Policy;
use crate::procfs;
use crate::ratelimit::TokenBucket;
use crate::softdirty;
use crate::TierdError;

/// The fast tier and the slower nodes, from the topology's tier order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tiers {
    pub fast: Vec<u32>,
    pub slow: Vec<u32>,
}

impl Tiers {
    /// The first tier group with memory is fast; every later one is slow (nearest first).
    pub fn from_topology(topo: &Topology) -> Result<Tiers, TierdError> {
        let memory: Vec<u32> = topo.memory_nodes().map(|n| n.id).collect();
        let groups = topo.tier_groups(&memory);
        match groups.split_first() {
            Some((fast, rest)) if !rest.is_empty() => Ok(Tiers {
                fast: fast.clone(),
                slow: rest.iter().flatten().copied().collect(),
            }),
            _ => Err(TierdError::Topology(format!(
                "this machine has one memory tier (nodes {memory:?}): there is nowhere to promote \
                 or demote pages; tierd needs a slower memory node such as CXL memory (see `cxltier topo`)"
            ))),
        }
    }

    /// For memory mode, where NVMe is the tier below: like [`Tiers::from_topology`], but a machine
    /// with one memory tier is accepted (nothing is demoted then; cold pages go to NVMe only).
    pub fn for_memory_mode(topo: &Topology) -> Result<Tiers, TierdError> {
        Tiers::from_topology(topo).or_else(|e| {
            let memory: Vec<u32> = topo.memory_nodes().map(|n| n.id).collect();
            match topo.tier_groups(&memory).into_iter().next() {
                Some(fast) => Ok(Tiers {
                    fast,
                    slow: Vec::new(),
                }),
                None => Err(e),
            }
        })
    }

    /// Warnings when the kernel's own tiering (NUMA balancing, demotion) can move the pages tierd
    /// places on these nodes: the two would undo each other's moves.
    pub fn kernel_tiering_warnings(&self, topo: &Topology) -> Vec<String> {
        let nodes: Vec<u32> = self.fast.iter().chain(&self.slow).copied().collect();
        topo.kernel_tiering_warnings(&nodes, Placement::Moved)
    }

    fn tier_name(&self, node: u32) -> &'static str {
        if self.fast.contains(&node) {
            "fast"
        } else if self.slow.contains(&node) {
            "slow"
        } else {
            "other"
        }
    }
}

/// One node's share of a target.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeStats {
    pub tier: &'static str,
    pub resident_bytes: u64,
    pub hot_bytes: u64,
    pub warm_bytes: u64,
    pub cold_bytes: u64,
    /// Bytes written since the previous interval (soft-dirty; 0 when that tracking is off).
    pub written_bytes: u64,
    /// Bytes by access frequency: bucket i holds pages whose region was accessed in
    /// [10 i, 10 (i + 1)) percent of the samples (the last bucket includes 100%).
    pub access_histogram_bytes: [u64; 10],
    /// Pages moved onto this node so far.
    pub moved_in_pages: u64,
}

/// What happened in one interval.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IntervalStats {
    /// Moves decided (made, unless dry run).
    pub planned_promotions: u64,
    pub planned_demotions: u64,
    /// Moves the kernel made.
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub failed_pages: u64,
    pub held_by_rate: u64,
    pub held_by_room: u64,
    pub held_by_residency: u64,
}

/// Running totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub migrated_bytes: u64,
    pub failed_pages: u64,
    /// Failed moves by the kernel's per-page errno (`EBUSY`, `ENOMEM` ...).
    pub failures: BTreeMap<String, u64>,
}

/// A target's state as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Exited,
    /// No longer a target: it left the cgroup tierd follows (it still runs, untouched since).
    Left,
}

/// What [`Engine::set_targets`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetChange {
    /// Processes that became targets.
    pub joined: Vec<u32>,
    /// Targets that are no longer (reported once, `left` or `exited`).
    pub left: Vec<u32>,
}

impl TargetChange {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.joined.is_empty() && self.left.is_empty()
    }
}

/// One JSON line: a target after one interval.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalReport {
    pub t_s: f64,
    pub pid: u32,
    pub status: Status,
    pub source: &'static str,
    pub dry_run: bool,
    pub regions: usize,
    pub page_size: u64,
    pub dram_budget_bytes: Option<u64>,
    pub fast_bytes: u64,
    /// Huge pages among the resident pages, each planned and moved as one unit (the kernel
    /// moves them whole); `None` when the kernel cannot say which pages are huge (before Linux
    /// 6.7, no `PAGEMAP_SCAN`): every page is then planned alone.
    pub huge_pages: Option<u64>,
    pub nodes: BTreeMap<u32, NodeStats>,
    pub interval: IntervalStats,
    pub total: Totals,
    /// Pages whose last move failed; they are tried again in later intervals.
    pub retry_pending: usize,
    /// The rate limit in bytes per second, and what it allows over the run so far.
    pub rate_limit_bytes_per_s: f64,
    pub rate_limit_bound_bytes: f64,
    /// Memory mode (`--nvme`): bytes per tier including NVMe, pageouts, the SLA's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryReport>,
    /// A target above `tracking.sampled_above_mib`, seen in chunks from a sample of its pages
    /// (its figures are then estimates); `None`: every page was asked.
    pub sampled: Option<SampledReport>,
}

/// How a large target was seen this interval (`crate::chunks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SampledReport {
    /// The chunk size: the unit of placement.
    pub chunk_bytes: u64,
    pub chunks: u64,
    /// `move_pages` entries asked to place the chunks (moves ask about their own pages).
    pub sampled_pages: u64,
    /// Bytes the target's private anonymous mappings span.
    pub span_bytes: u64,
}

/// One target's interval as the planner sees it.
struct TargetView {
    /// Resident pages (page by page), or resident chunks (in chunks).
    pages: Vec<PageInfo>,
    /// Page by page with huge pages: the planner's units, each huge page merged into one.
    merged: Option<Vec<PageInfo>>,
    /// In chunks: each chunk's length in bytes, by its start.
    spans: Option<HashMap<usize, usize>>,
    /// Stretches not resident in hot regions, `(start, bytes)`: memory mode reads back what of
    /// them is in swap.
    absent_hot: Vec<(usize, usize)>,
    regions: usize,
    huge_pages: Option<u64>,
    sampled: Option<SampledReport>,
}

/// Memory mode's settings: what a target may keep in memory, and the swap area it pages out to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryMode {
    /// DRAM budget plus CXL budget: resident bytes beyond this are paged out.
    pub keep_bytes: u64,
    /// The swap area tierd turned on (`None` with `--dry-run`: nothing was set up).
    pub swap_path: Option<PathBuf>,
    /// The `--cgroup` directory whose memcg limits tierd set: its `memory.pressure` drives the
    /// SLA loop and its `memory.stat` gives the refaults (`None`: each target's own cgroup v2,
    /// else the system's figures).
    pub memcg: Option<PathBuf>,
    /// Pages go out through a DAMOS `pageout` scheme in each target's kdamond (its size quota
    /// set to the interval's choice each interval; the kernel picks the coldest regions) instead
    /// of `process_madvise(MADV_PAGEOUT)` on the pages tierd chose.
    pub damos_pageout: bool,
}

/// Memory mode's part of an interval report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MemoryReport {
    /// Bytes per tier: `dram` (the fast tier's nodes), `cxl` (the slower nodes), `nvme` (in
    /// swap: `VmSwap`).
    pub bytes: BTreeMap<&'static str, u64>,
    /// What the target may keep in memory (DRAM + CXL budgets).
    pub keep_bytes: u64,
    /// Pages chosen to page out this interval (sent unless dry run).
    pub planned_pageouts: u64,
    /// Pages advised out this interval (`process_madvise(MADV_PAGEOUT)`), and over the run.
    /// With DAMOS pageout: the growth of its scheme's `sz_applied` since the last interval, in
    /// pages (what DAMOS applied pageout to, which can include address space with nothing
    /// resident).
    pub pageout_pages: u64,
    pub pageout_pages_total: u64,
    /// Pages in swap read back ahead of their fault (`MADV_WILLNEED`: their DAMON region is hot
    /// again), this interval and over the run.
    pub prefetch_pages: u64,
    pub prefetch_pages_total: u64,
    /// Prefetch hits: pages read back last interval that are resident now and whose region is
    /// hot (they were wanted: accessed, not paged out again), this interval and over the run.
    pub prefetch_hits: u64,
    pub prefetch_hits_total: u64,
    /// Pages over the budget left resident: only pages moved too recently were left / the
    /// allowance was spent.
    pub held_by_residency: u64,
    pub held_by_allowance: u64,
    /// The most pages this interval could read back ahead of their fault: halved after an
    /// interval whose prefetches mostly missed, doubled after one whose prefetches mostly hit
    /// (0 when there was no room to prefetch into).
    pub prefetch_limit_pages: u64,
    /// The most pages this interval could page out (rate limit, or the SLA controller's figure).
    pub allowance_pages: u64,
    /// Free bytes in tierd's swap area (`None` in a dry run), and whether it is full: offloading
    /// stops then, the target keeps running.
    pub nvme_free_bytes: Option<u64>,
    pub nvme_full: bool,
    /// PSI stall over the last interval, percent of wall time (`some`, `full`), and the goal.
    pub stall_some_pct: Option<f64>,
    pub stall_full_pct: Option<f64>,
    pub max_stall_pct: Option<f64>,
    /// With a slowdown goal (`--max-slowdown-pct`): the workload's progress per second over the
    /// last interval (its own counter, `--progress`), how far that is below the best rate of the
    /// run (percent), and the goal.
    pub progress_rate: Option<f64>,
    pub slowdown_pct: Option<f64>,
    pub max_slowdown_pct: Option<f64>,
    /// Anonymous refaults over the last interval (`workingset_refault_anon` of the target's
    /// cgroup's `memory.stat`; system-wide, from /proc/vmstat, where it has no cgroup v2).
    pub refaults: Option<u64>,
    /// Swap readahead over the last interval and `vm.page-cluster` for the next (`None` with
    /// `--swap-readahead keep`).
    pub swap_readahead: Option<crate::readahead::ReadaheadReport>,
    /// zswap's pool and traffic over the last interval (`None` without `--zswap`).
    pub zswap: Option<crate::zswap::ZswapReport>,
}

struct Target {
    pid: u32,
    /// The target's slot in the access source (its kdamond, with DAMON).
    slot: usize,
    status: Status,
    /// Units moved recently: when, and which way (memory mode may page out a unit demoted
    /// recently, never one promoted recently).
    last_moved: HashMap<usize, (Instant, Reason)>,
    retry: HashSet<usize>,
    totals: Totals,
    moved_in: BTreeMap<u32, u64>,
    pageout_total: u64,
    /// The bytes its DAMOS pageout scheme had paged out at the last interval.
    damos_applied: u64,
    prefetch_total: u64,
    /// Pages read back ahead of their fault last interval, judged hit or miss this interval.
    prefetched: Vec<usize>,
    prefetch_hits_total: u64,
    /// The most pages read back ahead of their fault next interval (adapts to the hit rate).
    prefetch_limit: u64,
}

impl Target {
    /// A process just followed, in `slot` of the access source, with nothing known of it yet.
    fn new(pid: u32, slot: usize) -> Target {
        Target {
            pid,
            slot,
            status: Status::Running,
            last_moved: HashMap::new(),
            retry: HashSet::new(),
            totals: Totals::default(),
            moved_in: BTreeMap::new(),
            pageout_total: 0,
            damos_applied: 0,
            prefetch_total: 0,
            prefetched: Vec::new(),
            prefetch_hits_total: 0,
            prefetch_limit: crate::pageout::PREFETCH_START_PAGES,
        }
    }
}

/// Memory mode's running state.
struct MemoryState {
    mode: MemoryMode,
    pidfds: HashMap<u32, std::os::fd::OwnedFd>,
    allowance_pages: u64,
}

/// The loop's state.
pub struct Engine {
    policy: Policy,
    tiers: Tiers,
    dry_run: bool,
    sys_root: PathBuf,
    proc_root: PathBuf,
    tracker: Tracker,
    targets: Vec<Target>,
    bucket: TokenBucket,
    page_size: u64,
    budget: Option<u64>,
    started: Instant,
    soft_dirty: bool,
    memory: Option<MemoryState>,
    /// The kernel's huge page size: each huge page is planned as one unit of this many bytes.
    huge_bytes: usize,
    /// Varies the chunks' sample from one interval to the next.
    seed: u64,
}

/// How many pages one `move_pages` call queries or moves.
const CHUNK: usize = 1 << 16;

impl Engine {
    /// Validate, then start the access source (`source`, from [`crate::choose_source`]) on every
    /// target. Nothing is written before every input checks out.
    pub fn start(
        policy: Policy,
        tiers: Tiers,
        pids: &[u32],
        source: SourceKind,
        dry_run: bool,
        sys_root: &Path,
        proc_root: &Path,
    ) -> Result<Engine, TierdError> {
        policy.validate()?;
        let budget = policy.dram_budget_bytes();
        let mut seen = HashSet::new();
        for &pid in pids {
            if !procfs::alive(proc_root, pid) {
                return Err(TierdError::NoSuchProcess { pid });
            }
            if !seen.insert(pid) {
                return Err(TierdError::Setting {
                    setting: "--pid",
                    message: format!("process {pid} is named twice"),
                });
            }
        }
        let soft_dirty = policy.tracking.soft_dirty && softdirty::supported();
        if soft_dirty {
            // Start counting writes now: every page is soft-dirty from its first write.
            for &pid in pids {
                softdirty::clear(proc_root, pid)?;
            }
        }
        let tracker = Tracker::start(source, sys_root, proc_root, pids, &policy.tracking)?;
        let now = Instant::now();
        let rate = policy.limits.max_migrate_mbps * 1e6;
        let page_size = cxltier_sys::page_size() as u64;
        // A burst may move one interval's worth or 2 s worth of pages, whichever is more (and at
        // least one page): when a round takes longer than the interval (a busy machine, a large
        // target), a bucket of one interval would throw away the tokens of the extra time.
        let burst_s = policy.interval().as_secs_f64().max(2.0);
        // At least one huge page, so that a huge page can always move in time.
        let huge_bytes = crate::hugepage::huge_bytes(sys_root);
        let capacity = (rate * burst_s).max(huge_bytes as f64);
        Ok(Engine {
            bucket: TokenBucket::new(rate, capacity, now),
            targets: pids
                .iter()
                .enumerate()
                .map(|(slot, &pid)| Target::new(pid, slot))
                .collect(),
            policy,
            tiers,
            dry_run,
            sys_root: sys_root.to_path_buf(),
            proc_root: proc_root.to_path_buf(),
            tracker,
            page_size,
            budget,
            started: now,
            soft_dirty,
            memory: None,
            huge_bytes,
            seed: 0x5eed,
        })
    }

    /// Turn memory mode on: resident pages beyond `mode.keep_bytes` are paged out, coldest first,
    /// up to the allowance ([`Engine::set_pageout_allowance`]; at first the rate limit's
    /// interval's worth).
    pub fn set_memory_mode(&mut self, mode: MemoryMode) -> Result<(), TierdError> {
        if mode.damos_pageout && !self.dry_run {
            let scheme = crate::damon::PageoutScheme {
                reset_ms: self.policy.interval().as_millis().max(1) as u64,
            };
            if !self
                .tracker
                .enable_damos_pageout(&self.sys_root, &self.policy.tracking, scheme)?
            {
                return Err(TierdError::Setting {
                    setting: "--pageout-with damos",
                    message: "DAMOS needs DAMON as the access source (idle-page tracking is in \
                              use): use --access-source damon, or --pageout-with madvise"
                        .into(),
                });
            }
        }
        let allowance_pages = self.rate_limit_pages_per_interval();
        self.memory = Some(MemoryState {
            mode,
            pidfds: HashMap::new(),
            allowance_pages,
        });
        Ok(())
    }

    /// The most pages the rate limit lets move in one interval.
    pub fn rate_limit_pages_per_interval(&self) -> u64 {
        let bytes =
            self.policy.limits.max_migrate_mbps * 1e6 * self.policy.interval().as_secs_f64();
        ((bytes / self.page_size as f64) as u64).max(1)
    }

    /// How many pages each target may page out in the next interval.
    pub fn set_pageout_allowance(&mut self, pages: u64) {
        if let Some(m) = self.memory.as_mut() {
            m.allowance_pages = pages;
        }
    }

    /// Whether written pages are tracked page by page (the policy asks for it and the kernel has
    /// soft-dirty bits).
    pub fn soft_dirty(&self) -> bool {
        self.soft_dirty
    }

    /// The pids of the targets still running.
    pub fn running_pids(&self) -> Vec<u32> {
        self.targets
            .iter()
            .filter(|t| t.status == Status::Running)
            .map(|t| t.pid)
            .collect()
    }

    /// Targets still running.
    pub fn running(&self) -> usize {
        self.targets
            .iter()
            .filter(|t| t.status == Status::Running)
            .count()
    }

    /// Make `pids` the running targets (a cgroup's processes as they are now): processes not yet
    /// targets join, targets not in `pids` leave (reported once now, as `left` or, when gone,
    /// `exited`). DAMON is restarted with one kdamond per target when the set changes (its
    /// kdamonds cannot be added to while they run), so the region history starts over (idle-page
    /// tracking keeps the history of the targets that stay); what
    /// tierd keeps per target (moves, retries, residency) carries on. Processes that are not alive
    /// are skipped.
    pub fn set_targets(
        &mut self,
        pids: &[u32],
    ) -> Result<(TargetChange, Vec<IntervalReport>), TierdError> {
        let running: Vec<u32> = self
            .targets
            .iter()
            .filter(|t| t.status == Status::Running)
            .map(|t| t.pid)
            .collect();
        let mut change = TargetChange::default();
        for &pid in pids {
            if !running.contains(&pid)
                && !change.joined.contains(&pid)
                && procfs::alive(&self.proc_root, pid)
            {
                change.joined.push(pid);
            }
        }
        change.left = running
            .iter()
            .copied()
            .filter(|p| !pids.contains(p))
            .collect();
        if change.is_empty() {
            return Ok((change, Vec::new()));
        }
        let mut reports = Vec::new();
        for i in 0..self.targets.len() {
            let pid = self.targets[i].pid;
            if self.targets[i].status == Status::Running && change.left.contains(&pid) {
                self.targets[i].status = if procfs::alive(&self.proc_root, pid) {
                    Status::Left
                } else {
                    Status::Exited
                };
                reports.push(self.base_report(i));
            }
        }
        if self.soft_dirty {
            for &pid in &change.joined {
                softdirty::clear(&self.proc_root, pid)?;
            }
        }
        for &pid in &change.joined {
            match self.targets.iter_mut().find(|t| t.pid == pid) {
                // A process that left and came back keeps what tierd knew of it.
                Some(t) => t.status = Status::Running,
                None => self.targets.push(Target::new(pid, 0)),
            }
        }
        let mut watched = Vec::new();
        for t in self
            .targets
            .iter_mut()
            .filter(|t| t.status == Status::Running)
        {
            t.slot = watched.len();
            watched.push(t.pid);
        }
        self.close_pidfds();
        self.tracker
            .restart(&self.sys_root, &watched, &self.policy.tracking)?;
        Ok((change, reports))
    }

    /// Stop the access source (DAMON: turn it off and remove its kdamonds). The targets keep
    /// running, their memory where it is.
    pub fn stop(&mut self) -> Result<(), TierdError> {
        self.tracker.stop()
    }

    /// The access source in use.
    pub fn source(&self) -> SourceKind {
        self.tracker.kind()
    }

    /// One interval over every running target. Returns one report per target that was running at
    /// the start of the interval (a target found gone is reported once as `exited`).
    pub fn step(&mut self) -> Result<Vec<IntervalReport>, TierdError> {
        let mut reports = Vec::new();
        for i in 0..self.targets.len() {
            if self.targets[i].status != Status::Running {
                continue;
            }
            match self.step_target(i) {
                Ok(r) => reports.push(r),
                Err(TierdError::NoSuchProcess { .. }) => {
                    self.targets[i].status = Status::Exited;
                    reports.push(self.exited_report(i));
                }
                Err(TierdError::Sys(e)) if e.kind == cxltier_sys::ErrorKind::NoSuchProcess => {
                    self.targets[i].status = Status::Exited;
                    reports.push(self.exited_report(i));
                }
                Err(e) => {
                    // A target that exits mid-interval makes any of the reads fail: say exited.
                    if !procfs::alive(&self.proc_root, self.targets[i].pid) {
                        self.targets[i].status = Status::Exited;
                        reports.push(self.exited_report(i));
                    } else {
                        return Err(e);
                    }
                }
            }
        }
        self.close_pidfds();
        Ok(reports)
    }

    /// Memory mode holds a pidfd per target: close those of targets that are gone or left, so
    /// that a cgroup's churn does not pile up descriptors.
    fn close_pidfds(&mut self) {
        if let Some(m) = self.memory.as_mut() {
            let running: HashSet<u32> = self
                .targets
                .iter()
                .filter(|t| t.status == Status::Running)
                .map(|t| t.pid)
                .collect();
            keep_only_running(&mut m.pidfds, &running);
        }
    }

    /// Memory mode's open pidfds (one per running target it has advised).
    pub fn open_pidfds(&self) -> usize {
        self.memory.as_ref().map_or(0, |m| m.pidfds.len())
    }

    fn base_report(&self, i: usize) -> IntervalReport {
        let t = &self.targets[i];
        let elapsed = self.started.elapsed();
        IntervalReport {
            t_s: elapsed.as_secs_f64(),
            pid: t.pid,
            status: t.status,
            source: self.tracker.kind().name(),
            dry_run: self.dry_run,
            regions: 0,
            page_size: self.page_size,
            dram_budget_bytes: self.budget,
            fast_bytes: 0,
            huge_pages: None,
            nodes: BTreeMap::new(),
            interval: IntervalStats::default(),
            total: t.totals.clone(),
            retry_pending: t.retry.len(),
            rate_limit_bytes_per_s: self.policy.limits.max_migrate_mbps * 1e6,
            rate_limit_bound_bytes: self.bucket.bound(elapsed),
            memory: None,
            sampled: None,
        }
    }

    fn exited_report(&self, i: usize) -> IntervalReport {
        self.base_report(i)
    }

    /// One target's units for this interval, page by page: every resident page's node
    /// (`move_pages` in query mode) and access, huge pages merged into one unit each.
    fn view_pages(&mut self, i: usize, ranges: &[procfs::Range]) -> Result<TargetView, TierdError> {
        let pid = self.targets[i].pid;
        let page = self.page_size as usize;
        let sample = self
            .tracker
            .sample(self.targets[i].slot, pid, ranges, page)?;
        let addrs: Vec<usize> = ranges
            .iter()
            .flat_map(|r| (r.start..r.end).step_by(page))
            .collect();
        let mut status = Vec::with_capacity(addrs.len());
        for chunk in addrs.chunks(CHUNK) {
            status.extend(query_pages(Some(pid), chunk)?);
        }
        let written = if self.soft_dirty {
            let w = softdirty::written(&self.proc_root, pid, ranges, page)?;
            softdirty::clear(&self.proc_root, pid)?;
            w
        } else {
            Vec::new()
        };
        let pages = annotate(&addrs, &status, &written, &sample.pages);
        // The unit of placement: a page, or a huge page whole (see `hugepage`).
        // No pagemap (a process gone since its maps were read; a recorded /proc): which pages
        // are huge is unknown, and the report says so.
        let huge = match crate::hugepage::huge_ranges(&self.proc_root, pid, ranges) {
            Ok(h) => h,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(TierdError::io(
                    "cannot scan the page tables of",
                    self.proc_root.join(pid.to_string()).join("pagemap"),
                    e,
                ))
            }
        };
        let merged = match huge.as_deref() {
            Some(h) if !h.is_empty() => Some(crate::hugepage::merge(&pages, h, self.huge_bytes).0),
            _ => None,
        };
        let huge_pages = huge.as_ref().map(|h| {
            h.iter()
                .map(|(a, b)| ((b - a) / self.huge_bytes) as u64)
                .sum::<u64>()
        });
        // Not resident, in a region the access source sees hot: predicted to be touched again
        // (memory mode reads the ones in swap back ahead of the fault).
        let hot_min = self.thresholds().hot_min;
        let absent_hot = if self.memory.is_some() {
            crate::pageout::merge_runs(
                addrs
                    .iter()
                    .zip(&status)
                    .zip(&sample.pages)
                    .filter(|((_, s), a)| s.node().is_none() && a.accesses >= hot_min)
                    .map(|((&addr, _), _)| (addr, page)),
            )
        } else {
            Vec::new()
        };
        Ok(TargetView {
            pages,
            merged,
            spans: None,
            absent_hot,
            regions: sample.units,
            huge_pages,
            sampled: None,
        })
    }

    /// One target's units for this interval in chunks (`crate::chunks`): DAMON's regions and a
    /// fixed-size sample of pages, whatever the footprint.
    fn view_chunks(
        &mut self,
        i: usize,
        ranges: &[procfs::Range],
        regions: Vec<crate::damon::Region>,
    ) -> Result<TargetView, TierdError> {
        let pid = self.targets[i].pid;
        let th = self.thresholds();
        self.seed = self.seed.wrapping_add(1);
        let v = crate::chunks::view(
            ranges,
            &regions,
            crate::chunks::ChunkSettings {
                sample_pages: self.policy.tracking.sample_pages,
                min_chunk_pages: (self.huge_bytes as u64 / self.page_size).max(1),
                max_chunk_pages: (self.bucket.capacity() / self.page_size as f64) as u64,
                page: self.page_size as usize,
            },
            &th,
            self.seed,
            &mut ProcessPages { pid },
        )?;
        Ok(TargetView {
            sampled: Some(SampledReport {
                chunk_bytes: v.chunk_bytes as u64,
                chunks: v.chunks as u64,
                sampled_pages: v.sampled_pages,
                span_bytes: v.span_pages * self.page_size,
            }),
            pages: v.units,
            merged: None,
            spans: Some(v.spans),
            absent_hot: if self.memory.is_some() {
                v.absent_hot
            } else {
                Vec::new()
            },
            regions: regions.len(),
            // Chunks are aligned multiples of the huge page size: a huge page is never split
            // between two, and is not looked for.
            huge_pages: None,
        })
    }

    fn step_target(&mut self, i: usize) -> Result<IntervalReport, TierdError> {
        let pid = self.targets[i].pid;
        if !procfs::alive(&self.proc_root, pid) {
            return Err(TierdError::NoSuchProcess { pid });
        }
        let ranges = procfs::movable_ranges(&self.proc_root, pid)?;
        // The size that decides is what is resident, not what is mapped: allocators reserve far
        // more address space than they use (a small target may span gigabytes).
        let size = match procfs::rss_anon_bytes(&self.proc_root, pid)? {
            Some(bytes) => bytes,
            None => ranges
                .iter()
                .map(|r| r.end.saturating_sub(r.start) as u64)
                .sum(),
        };
        let above = self
            .policy
            .tracking
            .sampled_above_mib
            .saturating_mul(1 << 20);
        let in_chunks = size > above || above == 0;
        let view = match in_chunks
            .then(|| self.tracker.regions(self.targets[i].slot))
            .flatten()
        {
            Some(regions) => self.view_chunks(i, &ranges, regions?)?,
            None => self.view_pages(i, &ranges)?,
        };
        let page_size = self.page_size;
        let span_of = |u: &PageInfo| -> usize {
            match &view.spans {
                Some(s) => s.get(&u.addr).copied().unwrap_or(page_size as usize),
                None => u.pages as usize * page_size as usize,
            }
        };
        let units: &[PageInfo] = view.merged.as_deref().unwrap_or(&view.pages);

        let th = self.thresholds();
        let max_acc = self.tracker.max_accesses(&self.policy);
        let mut report = self.base_report(i);
        report.regions = view.regions;
        report.huge_pages = view.huge_pages;
        report.sampled = view.sampled.clone();
        for p in &view.pages {
            let bytes = p.pages as u64 * self.page_size;
            let n = report.nodes.entry(p.node).or_default();
            n.tier = self.tiers.tier_name(p.node);
            n.resident_bytes += bytes;
            if p.written {
                n.written_bytes += bytes;
            }
            match th.heat(p) {
                Heat::Hot => n.hot_bytes += bytes,
                Heat::Warm => n.warm_bytes += bytes,
                Heat::Cold => n.cold_bytes += bytes,
            }
            let bucket = ((p.accesses as u64 * 10) / max_acc as u64).min(9) as usize;
            n.access_histogram_bytes[bucket] += bytes;
        }

        let now = Instant::now();
        // Stamp the report with the time the rate limit's tokens are counted at, so that the
        // moved bytes between any two reports can be checked against the limit.
        report.t_s = now.saturating_duration_since(self.started).as_secs_f64();
        report.rate_limit_bound_bytes = self
            .bucket
            .bound(now.saturating_duration_since(self.started));
        let residency = Duration::from_millis(self.policy.placement.min_residency_ms);
        let target = &mut self.targets[i];
        target
            .last_moved
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < residency);
        // Units no longer resident need no retry.
        let resident: HashSet<usize> = units.iter().map(|p| p.addr).collect();
        target.retry.retain(|a| resident.contains(a));
        let recently: HashSet<usize> = target.last_moved.keys().copied().collect();

        // Memory mode: what goes to NVMe is chosen first (the coldest beyond the DRAM + CXL
        // budgets), and the moves between DRAM and CXL are planned among what stays: a page on
        // its way to NVMe does not stop on the CXL node first, and one demoted to CXL recently
        // may still go on down (only a recent promotion holds a page in memory).
        let pageout = match self.memory.as_mut() {
            Some(memory) => {
                let promoted_recently: HashSet<usize> = target
                    .last_moved
                    .iter()
                    .filter(|(_, (_, why))| *why == Reason::Promote)
                    .map(|(a, _)| *a)
                    .collect();
                Some(plan_pageout(
                    memory,
                    target,
                    &view.pages,
                    &span_of,
                    &th,
                    &self.tiers,
                    &promoted_recently,
                    self.page_size,
                    &self.proc_root,
                )?)
            }
            None => None,
        };
        let staying: Vec<PageInfo>;
        let plan_units: &[PageInfo] = match &pageout {
            Some(p) if !p.victims.is_empty() => {
                let going: HashSet<usize> = p.victims.iter().map(|v| v.addr).collect();
                staying = units
                    .iter()
                    .filter(|u| !going.contains(&u.addr))
                    .copied()
                    .collect();
                &staying
            }
            _ => units,
        };

        let mut room = BTreeMap::new();
        for &node in self.tiers.fast.iter().chain(&self.tiers.slow) {
            let (total, free) = procfs::node_memory(&self.sys_root, node)?;
            let reserve = (total as f64 * self.policy.placement.min_free_percent / 100.0) as u64;
            room.insert(node, free.saturating_sub(reserve) / self.page_size);
        }
        let tokens = self.bucket.available(now) / self.page_size;
        let decision = plan::plan(&plan::Input {
            pages: plan_units,
            fast: &self.tiers.fast,
            slow: &self.tiers.slow,
            room,
            budget_pages: self.budget.map(|b| b / self.page_size),
            tokens,
            thresholds: th,
            recently_moved: &recently,
            retry: &target.retry,
            demote_idle: self.memory.is_none(),
        });
        let iv = &mut report.interval;
        iv.held_by_rate = decision.held_by_rate;
        iv.held_by_room = decision.held_by_room;
        iv.held_by_residency = decision.held_by_residency;
        for m in &decision.moves {
            match m.reason {
                Reason::Promote => iv.planned_promotions += m.pages as u64,
                Reason::Demote => iv.planned_demotions += m.pages as u64,
            }
        }

        if !self.dry_run && !decision.moves.is_empty() {
            let moving: u64 = decision.moves.iter().map(|m| m.pages as u64).sum();
            self.bucket.take(moving * self.page_size, now);
            // What each move sends: a page or huge page as planned, or a chunk's pages that are
            // on another node (asked now: the sample only estimated them).
            let mut items: Vec<(usize, usize, u64)> = Vec::new();
            for (k, m) in decision.moves.iter().enumerate() {
                match &view.spans {
                    None => items.push((k, m.addr, m.pages as u64)),
                    Some(spans) => {
                        let len = spans.get(&m.addr).copied().unwrap_or(page_size as usize);
                        let addrs = crate::chunks::pages_to_move(
                            m.addr,
                            len,
                            m.to,
                            self.page_size as usize,
                            &mut ProcessPages { pid },
                        )?;
                        items.extend(addrs.into_iter().map(|a| (k, a, 1)));
                    }
                }
            }
            let mut moved_any = vec![false; decision.moves.len()];
            let mut failed_any = vec![false; decision.moves.len()];
            for chunk in items.chunks(CHUNK) {
                let a: Vec<usize> = chunk.iter().map(|c| c.1).collect();
                let n: Vec<u32> = chunk.iter().map(|c| decision.moves[c.0].to).collect();
                let moved = move_pages(Some(pid), &a, &n, false)?;
                for (&(k, _, n), s) in chunk.iter().zip(&moved.status) {
                    let m = &decision.moves[k];
                    if *s == PageStatus::Node(m.to) {
                        match m.reason {
                            Reason::Promote => {
                                iv.promoted_pages += n;
                                target.totals.promoted_pages += n;
                            }
                            Reason::Demote => {
                                iv.demoted_pages += n;
                                target.totals.demoted_pages += n;
                            }
                        }
                        target.totals.migrated_bytes += n * self.page_size;
                        *target.moved_in.entry(m.to).or_insert(0) += n;
                        moved_any[k] = true;
                    } else {
                        // Still where it was (or gone): nothing is lost; try again later.
                        let why = match s {
                            PageStatus::Error(e) => errno_name(*e),
                            PageStatus::Node(n) => format!("stayed_on_node{n}"),
                        };
                        iv.failed_pages += n;
                        target.totals.failed_pages += n;
                        *target.totals.failures.entry(why).or_insert(0) += 1;
                        failed_any[k] = true;
                    }
                }
            }
            for (k, m) in decision.moves.iter().enumerate() {
                if moved_any[k] {
                    target.last_moved.insert(m.addr, (now, m.reason));
                }
                if failed_any[k] {
                    target.retry.insert(m.addr);
                } else if moved_any[k] {
                    target.retry.remove(&m.addr);
                }
            }
        }
        let fast_pages = units
            .iter()
            .filter(|p| self.tiers.fast.contains(&p.node))
            .map(|p| p.pages as i64)
            .sum::<i64>()
            + iv.promoted_pages as i64
            - iv.demoted_pages as i64;
        report.fast_bytes = fast_pages.max(0) as u64 * self.page_size;
        if let (Some(memory), Some(pageout)) = (self.memory.as_mut(), pageout) {
            // Memory mode pages out base pages (a huge page partly cold is split by the
            // kernel), or whole chunks.
            let resident_pages: u64 = view.pages.iter().map(|p| p.pages as u64).sum();
            let damos = memory
                .mode
                .damos_pageout
                .then_some((&mut self.tracker, target.slot));
            let mut m = page_out(
                memory,
                target,
                damos,
                pageout,
                &view.pages,
                &span_of,
                &self.tiers,
                &view.absent_hot,
                self.page_size,
                self.dry_run,
                &self.proc_root,
            )?;
            // Where each page is now: the interval's moves applied, the pageouts taken off.
            let slow_pages = resident_pages as i64 - fast_pages - (m.1 - m.2) as i64;
            let dram = (fast_pages - m.2 as i64).max(0) as u64;
            m.0.bytes.insert("dram", dram * self.page_size);
            m.0.bytes
                .insert("cxl", slow_pages.max(0) as u64 * self.page_size);
            report.memory = Some(m.0);
        }
        report.total = target.totals.clone();
        report.retry_pending = target.retry.len();
        for (node, n) in &target.moved_in {
            let entry = report.nodes.entry(*node).or_default();
            entry.tier = self.tiers.tier_name(*node);
            entry.moved_in_pages = *n;
        }
        Ok(report)
    }

    fn thresholds(&self) -> Thresholds {
        let max = self.tracker.max_accesses(&self.policy) as f64;
        let p = &self.policy.placement;
        Thresholds {
            hot_min: ((p.hot_percent / 100.0 * max).ceil() as u32).max(1),
            cold_max: (p.cold_percent / 100.0 * max).floor() as u32,
            cold_min_age: p.cold_min_age,
        }
    }
}

/// Drop (and so close) the per-target handles of processes not in `running`: targets that
/// exited or left are not advised again, and a pid reused by another process later gets a new
/// pidfd, never the old one's.
fn keep_only_running<H>(handles: &mut HashMap<u32, H>, running: &HashSet<u32>) {
    handles.retain(|pid, _| running.contains(pid));
}

/// The most pages of a target's absent hot stretches whose swap bits are read per interval: the
/// prefetch's cost stays bounded whatever the footprint (1 GiB of address space, 2 MiB of
/// pagemap).
const PREFETCH_WALK_PAGES: usize = 1 << 18;

/// Memory mode's choice for one target, made before the interval's moves: the units (pages,
/// or a large target's chunks) beyond its budget to page out, and the report so far (last
/// interval's prefetches judged, the NVMe tier's room, the allowance).
struct PageoutPlan {
    report: MemoryReport,
    victims: Vec<PageInfo>,
}

/// Choose what goes to NVMe this interval (see [`PageoutPlan`]); `leave` are units that must
/// stay in memory (promoted too recently).
#[allow(clippy::too_many_arguments)]
fn plan_pageout(
    memory: &mut MemoryState,
    target: &mut Target,
    units: &[PageInfo],
    span_of: &dyn Fn(&PageInfo) -> usize,
    th: &Thresholds,
    tiers: &Tiers,
    leave: &HashSet<usize>,
    page_size: u64,
    proc_root: &Path,
) -> Result<PageoutPlan, TierdError> {
    let mut report = MemoryReport {
        keep_bytes: memory.mode.keep_bytes,
        ..MemoryReport::default()
    };
    let mut allowance = memory.allowance_pages;
    if let Some(path) = &memory.mode.swap_path {
        let area = crate::swap::active_swaps(proc_root)?
            .into_iter()
            .find(|s| &s.path == path);
        let free = area.map_or(0, |a| a.size_bytes.saturating_sub(a.used_bytes));
        report.nvme_free_bytes = Some(free);
        // Full (or turned off by someone else): stop offloading; the target keeps running.
        let free_pages = (free / page_size).saturating_sub(1);
        report.nvme_full = free_pages == 0;
        allowance = allowance.min(free_pages);
    }
    report.allowance_pages = allowance;
    // Last interval's prefetches, judged before anything moves this interval; the next
    // prefetch follows how well they did.
    report.prefetch_hits = crate::pageout::prefetch_hits(&target.prefetched, units, th, span_of);
    target.prefetch_hits_total += report.prefetch_hits;
    report.prefetch_hits_total = target.prefetch_hits_total;
    target.prefetch_limit = crate::pageout::next_prefetch_limit(
        target.prefetch_limit,
        target.prefetched.len() as u64,
        report.prefetch_hits,
    );
    target.prefetched.clear();
    let (victims, held) = crate::pageout::select(
        units,
        th,
        &tiers.fast,
        memory.mode.keep_bytes / page_size,
        allowance,
        leave,
    );
    report.planned_pageouts = victims.iter().map(|v| v.pages as u64).sum();
    report.held_by_residency = held.by_residency;
    report.held_by_allowance = held.by_allowance;
    Ok(PageoutPlan { report, victims })
}

/// Memory mode's step for one target after the interval's moves: send `plan`'s units to swap,
/// then read back what of its hot stretches is in swap. Returns the report (without
/// `dram`/`cxl` bytes), the pages advised out and how many of them were on the fast tier.
#[allow(clippy::too_many_arguments)]
fn page_out(
    memory: &mut MemoryState,
    target: &mut Target,
    damos: Option<(&mut Tracker, usize)>,
    plan: PageoutPlan,
    units: &[PageInfo],
    span_of: &dyn Fn(&PageInfo) -> usize,
    tiers: &Tiers,
    absent_hot: &[(usize, usize)],
    page_size: u64,
    dry_run: bool,
    proc_root: &Path,
) -> Result<(MemoryReport, u64, u64), TierdError> {
    let PageoutPlan {
        mut report,
        victims,
    } = plan;
    let mut advised_fast = 0;
    let mut advised = 0;
    if let (Some((tracker, slot)), false) = (damos, dry_run) {
        // DAMOS pages out in the kernel, over the next interval, as many bytes as tierd chose
        // (the coldest regions first): what it paged out since the last interval is counted now.
        let bytes: u64 = victims.iter().map(|v| span_of(v) as u64).sum();
        if let Some(applied) = tracker.set_pageout_bytes(slot, bytes)? {
            advised = applied.saturating_sub(target.damos_applied) / page_size;
            target.damos_applied = applied;
            target.pageout_total += advised;
        }
    } else if !dry_run && !victims.is_empty() {
        let pidfd = match memory.pidfds.entry(target.pid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(cxltier_sys::swap::pidfd_open(target.pid)?)
            }
        };
        let runs = crate::pageout::merge_runs(victims.iter().map(|v| (v.addr, span_of(v))));
        let bytes = cxltier_sys::swap::process_madvise(
            pidfd,
            &runs,
            cxltier_sys::swap::RemoteAdvice::Pageout,
        )?;
        // The kernel advises the runs in order: the units advised are the first ones whose
        // whole span the bytes cover.
        let mut covered = 0u64;
        for v in &victims {
            covered += span_of(v) as u64;
            if covered > bytes as u64 {
                break;
            }
            advised += v.pages as u64;
            if tiers.fast.contains(&v.node) {
                advised_fast += v.pages as u64;
            }
        }
        target.pageout_total += advised;
    }
    // Prefetch: swapped pages of hot regions come back ahead of their fault, into the room left
    // under the budget (more would only be paged out again).
    let resident: u64 = units.iter().map(|u| u.pages as u64).sum();
    let mut room = (memory.mode.keep_bytes / page_size).saturating_sub(resident - advised);
    // Under tierd's memcg limits the whole cgroup's charge counts (page cache, page tables,
    // other members): at memory.high the kernel reclaims what is read back at once, so the
    // room is also what the cgroup has left below memory.high.
    if let Some(dir) = &memory.mode.memcg {
        if let Some(headroom) = crate::memcg::headroom_bytes(dir) {
            room = room.min(headroom / page_size);
        }
    }
    if !dry_run && room > 0 && !absent_hot.is_empty() {
        // Read the swap bits of at most PREFETCH_WALK_PAGES pages' worth of stretches.
        let mut walk = Vec::new();
        let mut walked = 0usize;
        for &(start, len) in absent_hot {
            if walked >= PREFETCH_WALK_PAGES {
                break;
            }
            let len = len.min((PREFETCH_WALK_PAGES - walked) * page_size as usize);
            walk.push((start, len));
            walked += len / page_size as usize;
        }
        report.prefetch_limit_pages = target.prefetch_limit;
        let limit = usize::try_from(room.min(target.prefetch_limit)).unwrap_or(usize::MAX);
        let mut wanted =
            crate::pageout::swapped_in(proc_root, target.pid, &walk, page_size, limit)?;
        if !wanted.is_empty() {
            let pidfd = match memory.pidfds.entry(target.pid) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(cxltier_sys::swap::pidfd_open(target.pid)?)
                }
            };
            let runs = crate::pageout::ranges(&wanted, page_size as usize);
            let bytes = cxltier_sys::swap::process_madvise(
                pidfd,
                &runs,
                cxltier_sys::swap::RemoteAdvice::WillNeed,
            )?;
            report.prefetch_pages = (bytes / page_size).min(wanted.len() as u64);
            target.prefetch_total += report.prefetch_pages;
            // The kernel advises the runs in order: the pages advised are the first ones.
            wanted.truncate(report.prefetch_pages as usize);
            target.prefetched = wanted;
        }
    }
    report.prefetch_pages_total = target.prefetch_total;
    report.pageout_pages = advised;
    report.pageout_pages_total = target.pageout_total;
    report.bytes.insert(
        "nvme",
        crate::pageout::swapped_bytes(proc_root, target.pid)?,
    );
    Ok((report, advised, advised_fast))
}

/// Pair each resident page with its access (from the access source; same order as `addrs`).
/// `written` is empty when soft-dirty tracking is off.
fn annotate(
    addrs: &[usize],
    status: &[PageStatus],
    written: &[bool],
    access: &[PageAccess],
) -> Vec<PageInfo> {
    let mut out = Vec::with_capacity(addrs.len());
    for (i, (&addr, s)) in addrs.iter().zip(status).enumerate() {
        let Some(node) = s.node() else { continue };
        let a = access.get(i).copied().unwrap_or_default();
        out.push(PageInfo {
            addr,
            node,
            accesses: a.accesses,
            age: a.age,
            written: written.get(i).copied().unwrap_or(false),
            pages: 1,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    /// node0 (CPUs) in memory tier 4, node1 (CPU-less) in tier 22, with the given settings.
    fn tiered_topology(numa_balancing: &str, demotion: &str) -> (tempfile::TempDir, Topology) {
        let tmp = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = tmp.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        for (id, cpus, tier) in [(0, "0-1", 4), (1, "", 22)] {
            let node = format!("sys/devices/system/node/node{id}");
            write(&format!("{node}/cpulist"), &format!("{cpus}\n"));
            write(
                &format!("{node}/meminfo"),
                &format!("Node {id} MemTotal: 1048576 kB\nNode {id} MemFree: 524288 kB\n"),
            );
            write(
                &format!("sys/devices/virtual/memory_tiering/memory_tier{tier}/nodelist"),
                &format!("{id}\n"),
            );
        }
        write("proc/sys/kernel/numa_balancing", numa_balancing);
        write("sys/kernel/mm/numa/demotion_enabled", demotion);
        let topo = Topology::discover(tmp.path()).unwrap();
        (tmp, topo)
    }

    #[test]
    fn warns_when_the_kernel_moves_the_same_pages() {
        let (_t, topo) = tiered_topology("0\n", "false\n");
        let tiers = Tiers::from_topology(&topo).unwrap();
        assert!(tiers.kernel_tiering_warnings(&topo).is_empty());

        let (_t, topo) = tiered_topology("2\n", "true\n");
        let tiers = Tiers::from_topology(&topo).unwrap();
        let w = tiers.kernel_tiering_warnings(&topo);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("promotes hot pages on node(s) 1"), "{}", w[0]);
        assert!(w[0].contains("`sysctl kernel.numa_balancing=0`"));
        assert!(w[1].contains("demotes cold pages on node(s) 0"), "{}", w[1]);
        assert!(w[1].contains("`echo false > /sys/kernel/mm/numa/demotion_enabled`"));

        // Normal NUMA balancing pulls pages toward the CPU's node: it undoes tierd's moves too.
        let (_t, topo) = tiered_topology("1\n", "false\n");
        let tiers = Tiers::from_topology(&topo).unwrap();
        let w = tiers.kernel_tiering_warnings(&topo);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("toward the node of the CPU"), "{}", w[0]);
    }

    #[test]
    fn handles_of_targets_no_longer_running_are_dropped_and_only_those() {
        use std::rc::Rc;
        // A handle that counts its drops, standing in for a pidfd (dropping an OwnedFd closes it).
        struct Handle(Rc<std::cell::Cell<u32>>);
        impl Drop for Handle {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
            }
        }
        let closed = Rc::new(std::cell::Cell::new(0));
        let mut handles: HashMap<u32, Handle> = [10, 11, 12]
            .into_iter()
            .map(|pid| (pid, Handle(Rc::clone(&closed))))
            .collect();
        // 11 exited or left; 13 runs but was never advised (no handle to keep or make).
        keep_only_running(&mut handles, &[10, 12, 13].into());
        assert_eq!(closed.get(), 1);
        let mut kept: Vec<u32> = handles.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, vec![10, 12]);
        // Nothing runs any more: every handle is closed.
        keep_only_running(&mut handles, &HashSet::new());
        assert_eq!(closed.get(), 3);
        assert!(handles.is_empty());
    }

    #[test]
    fn resident_pages_take_their_access() {
        let addrs = [0x0, 0x1000, 0x2000, 0x3000];
        let status = [
            PageStatus::Node(0),
            PageStatus::Node(1),
            PageStatus::Error(2),
            PageStatus::Node(0),
        ];
        let written = [false, true, false, false];
        let access = [
            PageAccess::default(),
            PageAccess {
                accesses: 7,
                age: 1,
            },
            PageAccess {
                accesses: 3,
                age: 3,
            },
            PageAccess {
                accesses: 0,
                age: 9,
            },
        ];
        let p = annotate(&addrs, &status, &written, &access);
        let got: Vec<(usize, u32, u32, u32)> = p
            .iter()
            .map(|p| (p.addr, p.node, p.accesses, p.age))
            .collect();
        assert_eq!(
            got,
            vec![(0x0, 0, 0, 0), (0x1000, 1, 7, 1), (0x3000, 0, 0, 9)]
        );
        assert!(p[1].written && !p[0].written);
    }

    /// A made-up host around this process's own buffer `m`: one mapping, a DAMON that sees its
    /// first half hot and its second half cold, nodes 0 and 1 with room, and an engine in a dry
    /// run with an 8 MiB budget that tracks in chunks above `sampled_above_mib`.
    fn engine_over(m: &cxltier_sys::Mapping, sampled_above_mib: u64) -> (TempDir, Engine) {
        let pid = std::process::id();
        let dir = TempDir::new(&format!("engine-chunks-{sampled_above_mib}-{}", m.len()));
        let admin = "sys/kernel/mm/damon/admin";
        dir.write(&format!("{admin}/kdamonds/nr_kdamonds"), "0\n");
        for (file, _) in crate::damon::setup_writes(&[pid], &Default::default())
            .into_iter()
            .skip(1)
        {
            dir.write(&format!("{admin}/{file}"), "");
        }
        let (start, end) = (m.addr(), m.addr() + m.len());
        let mid = start + m.len() / 2;
        let tried = format!("{admin}/kdamonds/0/contexts/0/schemes/0/tried_regions");
        for (k, (a, b, acc, age)) in [(start, mid, 20, 3), (mid, end, 0, 10)].iter().enumerate() {
            for (f, v) in [("start", a), ("end", b), ("nr_accesses", acc), ("age", age)] {
                dir.write(&format!("{tried}/{k}/{f}"), &v.to_string());
            }
        }
        dir.write(&format!("proc/{pid}/stat"), &format!("{pid} (test) R 1"));
        dir.write(
            &format!("proc/{pid}/status"),
            &format!("Name:\ttest\nRssAnon:\t{} kB\n", m.len() / 1024),
        );
        dir.write(
            &format!("proc/{pid}/maps"),
            &format!("{start:x}-{end:x} rw-p 00000000 00:00 0 \n"),
        );
        for n in 0..2 {
            dir.write(
                &format!("sys/devices/system/node/node{n}/meminfo"),
                &format!("Node {n} MemTotal: 67108864 kB\nNode {n} MemFree: 67108864 kB\n"),
            );
        }
        let mut policy = Policy::default();
        policy.tracking.soft_dirty = false;
        policy.tracking.sampled_above_mib = sampled_above_mib;
        policy.limits.dram_budget = Some("8M".parse().unwrap());
        let e = Engine::start(
            policy,
            Tiers {
                fast: vec![0],
                slow: vec![1],
            },
            &[pid],
            SourceKind::Damon,
            true,
            dir.path(),
            &dir.path().join("proc"),
        )
        .unwrap();
        (dir, e)
    }

    fn dry_run_over_a_buffer(sampled_above_mib: u64) -> IntervalReport {
        let page = cxltier_sys::page_size();
        let mut m = cxltier_sys::Mapping::anonymous(32 << 20).unwrap();
        m.write_each(page, 1);
        let (_dir, mut e) = engine_over(&m, sampled_above_mib);
        let mut r = e.step().unwrap();
        e.stop().unwrap();
        assert_eq!(r.len(), 1);
        r.remove(0)
    }

    /// tierd's own cost per interval against the target's footprint, page by page and in
    /// chunks: CPU time of one interval (this thread's, user + system: the `move_pages` calls
    /// count) and the memory the interval needs on top of the target (peak RSS growth: the
    /// peak is reset first through `/proc/self/clear_refs`). DAMON is made up here (its regions
    /// are read from files); its own kernel thread is not counted. Run by hand:
    /// `CXLTIER_ENGINE_COST_GIB=1,4,16 cargo test -p cxltier-tierd --release --lib engine_cost -- --ignored --nocapture --test-threads=1`.
    #[test]
    #[ignore]
    #[allow(clippy::print_stderr)]
    fn engine_cost_by_footprint() {
        let status_kb = |field: &str| -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap()
        };
        let thread_cpu = || {
            let t = cxltier_sys::cpu_times(cxltier_sys::Whose::Thread).unwrap();
            t.user + t.system
        };
        let sizes = std::env::var("CXLTIER_ENGINE_COST_GIB").unwrap_or_else(|_| "1,4".into());
        eprintln!("footprint_gib mode cpu_ms_per_interval core_pct_at_1s extra_rss_mib units sampled_pages");
        for gib in sizes.split(',').map(|g| g.trim().parse::<usize>().unwrap()) {
            let page = cxltier_sys::page_size();
            let mut m = cxltier_sys::Mapping::anonymous(gib << 30).unwrap();
            m.write_each(page, 1);
            for (mode, above) in [("chunks", 0), ("pages", 1 << 40)] {
                let (_dir, mut e) = engine_over(&m, above);
                e.step().unwrap();
                std::fs::write("/proc/self/clear_refs", "5").unwrap();
                let rss = status_kb("VmRSS:");
                let steps = 3;
                let t = thread_cpu();
                let mut last = None;
                for _ in 0..steps {
                    last = e.step().unwrap().pop();
                }
                let cpu_ms = (thread_cpu() - t).as_secs_f64() * 1e3 / steps as f64;
                let extra_mib = status_kb("VmHWM:").saturating_sub(rss) as f64 / 1024.0;
                let r = last.unwrap();
                let (units, sampled) = match &r.sampled {
                    Some(s) => (s.chunks, s.sampled_pages),
                    None => (
                        r.nodes.values().map(|n| n.resident_bytes).sum::<u64>() / page as u64,
                        0,
                    ),
                };
                eprintln!(
                    "{gib} {mode} {cpu_ms:.1} {:.2} {extra_mib:.1} {units} {sampled}",
                    cpu_ms / 10.0
                );
                e.stop().unwrap();
            }
        }
    }

    #[test]
    fn a_large_target_is_planned_in_chunks_as_it_is_page_by_page() {
        let page = cxltier_sys::page_size() as u64;
        let half = (16 << 20) / page;
        let exact = dry_run_over_a_buffer(1 << 20);
        assert!(exact.sampled.is_none());
        assert_eq!(exact.nodes[&0].resident_bytes, 32 << 20);
        assert_eq!(exact.nodes[&0].hot_bytes, 16 << 20);
        assert_eq!(exact.interval.planned_demotions, half);
        assert_eq!(exact.interval.planned_promotions, 0);

        let chunked = dry_run_over_a_buffer(0);
        let s = chunked.sampled.clone().expect("in chunks");
        assert!(s.sampled_pages <= 4096 + 1, "{s:?}");
        assert!(s.chunk_bytes >= 2 << 20, "{s:?}");
        assert_eq!(s.span_bytes, 32 << 20);
        // Every sampled page is resident on node 0: the chunks' estimate is exact here; the
        // chunk that straddles the two regions (the buffer need not be chunk-aligned) takes
        // their weighted heat, so the halves agree within one chunk.
        let chunk_pages = s.chunk_bytes / page;
        assert_eq!(chunked.nodes[&0].resident_bytes, 32 << 20);
        let hot = chunked.nodes[&0].hot_bytes;
        assert!(hot.abs_diff(16 << 20) <= s.chunk_bytes, "hot {hot}");
        let d = chunked.interval.planned_demotions;
        assert!(d.abs_diff(half) <= chunk_pages, "demotions {d} vs {half}");
        assert_eq!(chunked.interval.planned_promotions, 0);
    }

    #[test]
    fn tiers_come_from_the_recorded_lab_topologies() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cxltier-topo/tests/fixtures");
        for lab in ["lab-hmat", "lab-cxl"] {
            let topo = Topology::discover(&fixtures.join(lab)).unwrap();
            let t = Tiers::from_topology(&topo).unwrap();
            assert_eq!(
                t,
                Tiers {
                    fast: vec![0],
                    slow: vec![1]
                },
                "{lab}"
            );
        }
    }

    #[test]
    fn targets_join_and_leave_and_damon_follows() {
        let dir = TempDir::new("engine-targets");
        let admin = "sys/kernel/mm/damon/admin";
        dir.write(&format!("{admin}/kdamonds/nr_kdamonds"), "0\n");
        for k in 0..2 {
            for (file, _) in crate::damon::setup_writes(&[1], &Default::default())
                .into_iter()
                .skip(1)
            {
                let file = file.replace("kdamonds/0/", &format!("kdamonds/{k}/"));
                dir.write(&format!("{admin}/{file}"), "");
            }
        }
        for pid in [41, 42] {
            dir.write(&format!("proc/{pid}/stat"), &format!("{pid} (touch) S 1"));
        }
        let mut policy = Policy::default();
        policy.tracking.soft_dirty = false;
        let tiers = Tiers {
            fast: vec![0],
            slow: vec![1],
        };
        let proc_root = dir.path().join("proc");
        let mut e = Engine::start(
            policy,
            tiers,
            &[41],
            SourceKind::Damon,
            false,
            dir.path(),
            &proc_root,
        )
        .unwrap();
        let pid_of = |k: usize| {
            dir.read(&format!(
                "{admin}/kdamonds/{k}/contexts/0/targets/0/pid_target"
            ))
        };

        // Nothing changes: DAMON is left alone.
        let (c, r) = e.set_targets(&[41]).unwrap();
        assert!(c.is_empty() && r.is_empty());
        // 42 joins (a pid not alive is skipped).
        let (c, r) = e.set_targets(&[41, 42, 77]).unwrap();
        assert_eq!(c.joined, vec![42]);
        assert!(r.is_empty());
        assert_eq!(dir.read(&format!("{admin}/kdamonds/nr_kdamonds")), "2");
        assert_eq!((pid_of(0), pid_of(1)), ("41".into(), "42".into()));
        assert_eq!(e.running(), 2);
        // 41 leaves while alive: reported once as left, no longer watched.
        let (c, r) = e.set_targets(&[42]).unwrap();
        assert_eq!(c.left, vec![41]);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].pid, r[0].status), (41, Status::Left));
        assert_eq!(dir.read(&format!("{admin}/kdamonds/nr_kdamonds")), "1");
        assert_eq!(pid_of(0), "42");
        // 42 is gone from the cgroup because it exited.
        std::fs::remove_file(proc_root.join("42/stat")).unwrap();
        let (_, r) = e.set_targets(&[]).unwrap();
        assert_eq!((r[0].pid, r[0].status), (42, Status::Exited));
        assert_eq!(e.running(), 0);
        assert_eq!(dir.read(&format!("{admin}/kdamonds/nr_kdamonds")), "0");
        e.stop().unwrap();
    }

    #[test]
    fn idle_page_heat_feeds_the_planner() {
        // Simulated bitmap and pagemap: 16 pages, 0..8 on the slow node, 8..16 on the fast one.
        // Pages 2 and 3 (slow) and 9 (fast) are accessed every interval.
        let k = crate::idle::tests::SimKernel::new("engine-idle-plan", 1024);
        k.pagemap(16, |i| cxltier_sys::pagemap::PRESENT | (100 + i as u64));
        let ranges = [procfs::Range {
            start: 0,
            end: 16 * 4096,
        }];
        let mut policy = Policy::default();
        policy.placement.cold_min_age = 2;
        policy.tracking.idle_history = 4;
        let mut t = Tracker::start(
            SourceKind::IdlePage,
            k.dir.path(),
            &k.proc_root(),
            &[k.pid],
            &policy.tracking,
        )
        .unwrap();
        let mut sample = t.sample(0, k.pid, &ranges, 4096).unwrap();
        for _ in 0..3 {
            for f in [102, 103, 109] {
                k.access(f);
            }
            sample = t.sample(0, k.pid, &ranges, 4096).unwrap();
        }
        assert_eq!(sample.units, 16);
        let addrs: Vec<usize> = (0..16).map(|i| i * 4096).collect();
        let status: Vec<PageStatus> = (0..16)
            .map(|i| PageStatus::Node(if i < 8 { 1 } else { 0 }))
            .collect();
        let pages = annotate(&addrs, &status, &[], &sample.pages);
        let max = t.max_accesses(&policy) as f64;
        assert_eq!(max, 4.0);
        let th = Thresholds {
            hot_min: ((policy.placement.hot_percent / 100.0 * max).ceil() as u32).max(1),
            cold_max: (policy.placement.cold_percent / 100.0 * max).floor() as u32,
            cold_min_age: policy.placement.cold_min_age,
        };
        let none = HashSet::new();
        let decision = plan::plan(&plan::Input {
            pages: &pages,
            fast: &[0],
            slow: &[1],
            room: BTreeMap::from([(0, 1000), (1, 1000)]),
            budget_pages: Some(4),
            tokens: 1000,
            thresholds: th,
            recently_moved: &none,
            retry: &none,
            demote_idle: true,
        });
        // The pages moved for `reason`, in order.
        let moved = |reason: Reason| {
            let mut pages: Vec<usize> = decision
                .moves
                .iter()
                .filter(|m| m.reason == reason)
                .map(|m| m.addr / 4096)
                .collect();
            pages.sort_unstable();
            pages
        };
        assert_eq!(
            moved(Reason::Promote),
            vec![2, 3],
            "the hot pages on the slow node go up"
        );
        assert_eq!(
            moved(Reason::Demote),
            vec![8, 10, 11, 12, 13, 14, 15],
            "every idle page on the fast node goes down; the hot one stays"
        );
        t.stop().unwrap();
    }

    #[test]
    fn the_engine_reports_idle_page_heat() {
        // The engine on this process's own pages (their nodes from move_pages), with the real
        // pagemap and a simulated bitmap; a dry run, so nothing moves.
        let page = cxltier_sys::page_size();
        let mut m = cxltier_sys::Mapping::anonymous(16 * page).unwrap();
        m.write_each(page, 1);
        let pid = std::process::id();
        let frames = crate::testutil::frames_of(&m, 16);
        if frames.iter().any(Option::is_none) {
            // Not root: the idle-page tests above cover the refusal.
            return;
        }
        let frames: Vec<u64> = frames.into_iter().flatten().collect();
        let node = query_pages(None, &[m.addr()]).unwrap()[0].node().unwrap();
        let dir = TempDir::new("engine-idle");
        let own = dir.path().join(format!("proc/{pid}"));
        std::fs::create_dir_all(&own).unwrap();
        std::os::unix::fs::symlink(format!("/proc/{pid}/pagemap"), own.join("pagemap")).unwrap();
        crate::idle::tests::lru_kpageflags(&dir.path().join("proc/kpageflags"), frames.iter());
        dir.write(&format!("proc/{pid}/stat"), &format!("{pid} (test) R 1"));
        dir.write(
            &format!("proc/{pid}/maps"),
            &format!(
                "{:x}-{:x} rw-p 00000000 00:00 0 \n",
                m.addr(),
                m.addr() + 16 * page
            ),
        );
        for n in [node, node + 1] {
            dir.write(
                &format!("sys/devices/system/node/node{n}/meminfo"),
                &format!("Node {n} MemTotal: 1048576 kB\nNode {n} MemFree: 524288 kB\n"),
            );
        }
        dir.write("sys/kernel/mm/page_idle/bitmap", "");
        let bitmap = crate::idle::bitmap_path(dir.path());
        std::fs::File::options()
            .write(true)
            .open(&bitmap)
            .unwrap()
            .set_len((frames.iter().max().unwrap() / 64 + 1) * 8)
            .unwrap();
        let access = |pfn: u64| {
            use std::os::unix::fs::FileExt;
            let f = std::fs::File::options()
                .read(true)
                .write(true)
                .open(&bitmap)
                .unwrap();
            let mut w = [0u8; 8];
            f.read_exact_at(&mut w, pfn / 64 * 8).unwrap();
            let v = u64::from_ne_bytes(w) & !(1 << (pfn % 64));
            f.write_all_at(&v.to_ne_bytes(), pfn / 64 * 8).unwrap();
        };
        let mut policy = Policy::default();
        policy.tracking.soft_dirty = false;
        policy.tracking.idle_history = 4;
        policy.placement.cold_min_age = 2;
        let tiers = Tiers {
            fast: vec![node],
            slow: vec![node + 1],
        };
        let proc_root = dir.path().join("proc");
        let mut e = Engine::start(
            policy,
            tiers,
            &[pid],
            SourceKind::IdlePage,
            true,
            dir.path(),
            &proc_root,
        )
        .unwrap();
        assert_eq!(e.source(), SourceKind::IdlePage);
        let mut r = e.step().unwrap();
        for _ in 0..3 {
            for f in &frames[..4] {
                access(*f);
            }
            std::hint::black_box(m.as_slice());
            r = e.step().unwrap();
        }
        let r = &r[0];
        assert_eq!(
            (r.source, r.status, r.dry_run),
            ("idle-page", Status::Running, true)
        );
        let n = &r.nodes[&node];
        let p = page as u64;
        assert_eq!(
            (n.resident_bytes, n.hot_bytes, n.cold_bytes),
            (16 * p, 4 * p, 12 * p)
        );
        // Hot pages were accessed in 3 of the last 4 intervals (3 observations so far): 75%.
        assert_eq!(n.access_histogram_bytes[7], 4 * p);
        assert_eq!(n.access_histogram_bytes[0], 12 * p);
        assert_eq!(r.interval.planned_demotions, 12);
        assert_eq!(r.interval.planned_promotions, 0);
        assert_eq!(r.total.migrated_bytes, 0);
        e.stop().unwrap();
    }
}
