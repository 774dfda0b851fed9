//! `cxltier tierd`: auto-tiering for unmodified processes.

mod tune;

use crate::error::{CliError, CliResult};
use crate::output::json_line;
use cxltier_tierd::daemon::{
    run_duration, Cgroup, Launched, Pids, Starting, StopReport, TargetSource, Warnings,
    WrittenPages,
};
use cxltier_tierd::engine::{IntervalReport, Status, TargetChange};
use cxltier_tierd::memcg::{LimitsReport, Restored};
use cxltier_tierd::policy::PolicyOverrides;
use cxltier_tierd::quarantine::QuarantineReport;
use cxltier_tierd::readahead::ReadaheadTuner;
use cxltier_tierd::swap::{BackingKind, SwapArea, Teardown};
use cxltier_tierd::tune_run::TuneRun;
use cxltier_tierd::{
    choose_source, Daemon, DaemonSink, MemoryMode, MemoryModePlan, MemoryModeRequest,
    MemoryModeSession, MemoryModeSink, Policy, SourceKind, TierdError, Tiers,
};
use cxltier_topo::size::Size;
use cxltier_topo::Topology;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The long help: what the command does, exactly.
const LONG_HELP: &str = "\
Watches which pages of the target processes are accessed, with DAMON (the kernel's data access
monitor, through /sys/kernel/mm/damon/admin: one kdamond per target, virtual-address monitoring,
a `stat` scheme that only counts) or, on a kernel without DAMON, with idle-page tracking
(/sys/kernel/mm/page_idle/bitmap and /proc/PID/pagemap: each interval every resident page's
frame is marked idle and checked at the next; --access-source or the policy's access_source
picks one), and each interval moves pages of the targets' private anonymous
memory with move_pages(2): hot pages to the fastest memory tier while the target's DRAM budget and
the node's watermark leave room, cold pages to the next slower tier. A DRAM budget smaller than
the hot set keeps the hottest pages in DRAM and swaps colder ones out. Moves are limited to
--max-migrate-rate; a page that moved stays put for min_residency_ms, and a page must stay cold
for cold_min_age intervals before it goes down, so pages do not ping-pong. A move the kernel
refuses (busy page, full node) leaves the page where it was; it is counted and tried again later.

Writing DAMON's sysfs interface is a system-wide action: tierd says so on stderr, refuses to run
while another tool's kdamonds exist, and removes its own when it stops (marking pages idle in the
page-idle bitmap is one too, and is said the same way). --dry-run still tracks access (it is the
only way to know what is hot) but moves nothing: it reports what it would move.

Stopping tierd (SIGINT, SIGTERM, --duration) leaves the targets running and their memory where
it is. A target that exits is reported once with status `exited`; tierd stops when none is left.
With `-- CMD`, tierd starts CMD and tracks it; tierd ends when CMD does. With --cgroup, the
cgroup's processes are re-read each interval: joiners become targets, leavers are reported once
as `left` and dropped (DAMON is restarted for the new set).

Output: a line per target per interval; with --json, one JSON object per line (fields in
docs/tierd.md). --metrics-addr serves the same figures as Prometheus text on HTTP (loopback unless
you name another address).

With --tune, tierd instead tunes one bandwidth-bound target's split of pages between the fast
tier and the next slower one against --progress (file:PATH holding a growing counter, or
cmd:COMMAND printing one): from the planner's weights for --mix (or --tune-start), it moves the
target's pages to a share in tenths, measures, and climbs to the best neighbouring share until
none is better by more than 2% (looking at both ends too before it stops), then leaves the
target there. --sweep measures every share from 100% to 0% instead and keeps the best (--splits
measures only the shares named; --rounds N measures each N times, alternately, and keeps the best
median). Neither
uses DAMON. With -- CMD, --tune starts CMD under weighted interleave over the two nodes and sets
the kernel's weighted-interleave table (system-wide: said on stderr, shown but not written with
--dry-run) to the starting and then the tuned ratio, so that CMD's new allocations follow it; the
old weights are put back when tierd ends (CMD exits, SIGINT, SIGTERM, --duration). A --pid target
gets the same only if it already uses weighted interleave and with --continuous; otherwise its
new allocations keep its own policy (only a process can set its own), and tierd says so.
--continuous keeps measuring the chosen share after converging and tunes again from it when the
throughput stays more than --retune-threshold percent away from its baseline for
--retune-windows windows in a row.

Memory mode (--nvme PATH[:SIZE]): each target keeps at most --dram-budget in DRAM and
--cxl-budget (default 0) on slower memory; its coldest resident pages beyond the sum are paged out
with process_madvise(MADV_PAGEOUT) to a swap area tierd sets up on PATH: a block device (a swap
header is written at its start) or a new file of SIZE bytes on ext2/3/4, xfs or f2fs (created,
written in full, removed when tierd stops), turned on with swapon(2) at a priority above every
other swap area (system-wide: said on stderr; --dry-run says it and does nothing). With
--cgroup (cgroup v2), the cgroup's memory.high is set to the DRAM + CXL budget and its
memory.swap.max to the area's size (memory.max is left alone: at it the kernel would kill the
target); on a cgroup v1 memory cgroup, memory.limit_in_bytes with the cgroup's OOM killer
disabled (memory.oom_control) and memory.memsw.limit_in_bytes to the budget plus the area; the
previous values are said and written back when tierd stops. --max-stall-pct P makes
the pageout rate follow memory pressure (PSI `some` of the --cgroup, else of the target's cgroup
v2, else the system's): it grows while the stall stays under P percent and shrinks above it. A
full swap area stops offloading and is reported; the target is never killed. --swap-readahead
(default auto) tunes the system's swap readahead, vm.page-cluster (2^N pages read per swap-in),
once per interval by how many read-ahead pages were used (/proc/vmstat swap_ra_hit / swap_ra):
down while under a quarter, up while over three quarters, between 0 and 5; N sets it for the run,
keep leaves it alone (system-wide: said on stderr, restored when tierd stops). --zswap[=PERCENT]
turns the kernel's zswap on for the run (system-wide: said, restored): pages on their way to swap
are compressed into a pool of at most PERCENT of RAM (default 20) first, and written to the swap
area when it is full. --pageout-with damos sends pages out through a DAMOS pageout scheme in each
target's kdamond instead of process_madvise: each interval its size quota is set to the bytes
tierd chose, and the kernel pages out the coldest regions up to it over the next interval. When
tierd stops, the cgroup's limits, vm.page-cluster and zswap's settings
are restored, then the area is turned off (the pages come back into memory) and the file it
created removed.

Needs root (DAMON's sysfs interface, the idle-page bitmap and page frame numbers, moving another
process's pages, swapon). Exit status: 0 when stopped or when every target exited; 2 bad input (no such
process, malformed policy); 3 without root; 4 when the kernel has neither DAMON nor idle-page
tracking (or not the one --access-source names) or the machine has a single memory tier.";

/// Move hot pages of running processes to DRAM and cold ones to slower memory (DAMON + move_pages).
#[derive(clap::Args)]
#[command(
    after_long_help = LONG_HELP,
    group(clap::ArgGroup::new("target").required(true).args(["pid", "cgroup", "command"])),
)]
pub struct Args {
    /// Processes to manage (repeat or comma-separate)
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pid: Vec<u32>,
    /// Manage the processes of this cgroup directory, v2 or a v1 memory cgroup (re-read each interval: joiners are added, leavers dropped)
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// Where access information comes from: auto (DAMON when the kernel has it, else idle-page
    /// tracking), damon, or idle-page [default: the policy's access_source, auto]
    #[arg(long, value_name = "SOURCE")]
    access_source: Option<String>,
    /// Placement policy (TOML; see docs/tierd.md)
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Most bytes of each target in the fastest tier: 64M, 2G ...
    #[arg(long, value_name = "SIZE", value_parser = dram_budget_arg)]
    dram_budget: Option<Size>,
    /// Memory mode: page what each target holds beyond --dram-budget + --cxl-budget out to a
    /// swap area on this block device, or a new swap file of SIZE bytes (created, and removed
    /// when tierd stops)
    #[arg(long, value_name = "PATH[:SIZE]", conflicts_with_all = ["tune", "sweep"])]
    nvme: Option<String>,
    /// With --nvme: most bytes of each target on the slower memory tiers (CXL) [default: 0]
    #[arg(long, value_name = "SIZE", requires = "nvme", value_parser = cxl_budget_arg)]
    cxl_budget: Option<Size>,
    /// With --nvme: page out only as fast as the memory pressure (PSI `some` stall, percent of
    /// wall time) stays under this goal
    #[arg(long, value_name = "P", requires = "nvme")]
    max_stall_pct: Option<f64>,
    /// With --nvme and --progress: page out only as fast as the workload's own progress stays
    /// within P percent of the best rate it has shown
    #[arg(long, value_name = "P", requires_all = ["nvme", "progress"], conflicts_with = "max_stall_pct")]
    max_slowdown_pct: Option<f64>,
    /// With --nvme: swap readahead (vm.page-cluster, system-wide): auto (tuned by its hit rate),
    /// keep, or a value from 0 to 5 for the run
    #[arg(
        long,
        value_name = "auto|keep|N",
        default_value = "auto",
        requires = "nvme"
    )]
    swap_readahead: String,
    /// With --nvme: turn zswap on for the run (system-wide), a compressed pool in RAM of at most
    /// PERCENT of it [default: 20] between memory and the swap area
    #[arg(long, value_name = "PERCENT", num_args = 0..=1, default_missing_value = "20", requires = "nvme")]
    zswap: Option<u32>,
    /// With --nvme: how pages go out: madvise (process_madvise(MADV_PAGEOUT) on the pages tierd
    /// chose) or damos (a DAMOS pageout scheme in each target's kdamond, its size quota set to
    /// tierd's figure each interval)
    #[arg(long, value_name = "madvise|damos", default_value = "madvise", value_parser = ["madvise", "damos"], requires = "nvme")]
    pageout_with: String,
    /// Most MB/s (10^6 bytes) moved, over all targets
    #[arg(long, value_name = "MB/s")]
    max_migrate_rate: Option<f64>,
    /// Milliseconds between placement rounds
    #[arg(long, value_name = "MS")]
    interval: Option<u64>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464)
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_addr: Option<String>,
    /// Stop after this many seconds
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Report what would move without moving anything
    #[arg(long)]
    dry_run: bool,
    /// Poisoned physical ranges to keep the targets off (written by `cxltier ras --watch
    /// --quarantine`; missing: none), read every interval
    #[arg(long, value_name = "PATH", default_value = cxltier_quarantine::DEFAULT_PATH)]
    quarantine_file: PathBuf,
    /// One JSON object per line
    #[arg(long)]
    json: bool,
    /// Tune the target's DRAM:CXL page split against --progress instead of hot/cold placement
    #[arg(long, requires = "progress", conflicts_with_all = ["sweep", "cgroup"])]
    tune: bool,
    /// With --tune: after converging, keep measuring and tune again when throughput moves
    #[arg(long, requires = "tune")]
    continuous: bool,
    /// With --continuous: the change in throughput (percent of the baseline) that calls for a re-tune
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 10.0,
        requires = "continuous"
    )]
    retune_threshold: f64,
    /// With --continuous: how many windows in a row the change must last
    #[arg(long, value_name = "N", default_value_t = 3, requires = "continuous")]
    retune_windows: u32,
    /// Measure --progress at every split from all-DRAM to all-slower-tier, and keep the best
    #[arg(long, requires = "progress", conflicts_with_all = ["cgroup"])]
    sweep: bool,
    /// With --sweep: measure only these splits (percent of pages on the fast tier, multiples of
    /// 10, e.g. 70,100) instead of all eleven
    #[arg(
        long,
        value_name = "PERCENT,...",
        value_delimiter = ',',
        requires = "sweep"
    )]
    splits: Vec<u32>,
    /// With --sweep: measure every split this many times, alternately (A B, B A, ...), and
    /// compare medians
    #[arg(long, value_name = "N", default_value_t = 1, requires = "sweep")]
    rounds: u32,
    /// The progress signal: file:PATH (a growing counter) or cmd:COMMAND (prints one)
    #[arg(long, value_name = "SPEC")]
    progress: Option<String>,
    /// With --tune: the read:write mix whose planned weights are the starting split
    #[arg(long, value_name = "MIX", default_value = "R")]
    mix: String,
    /// With --tune: start from these tier weights (fastest first, e.g. 3:1) instead of the plan
    #[arg(long, value_name = "W:W")]
    tune_start: Option<String>,
    /// With --tune/--sweep: seconds of progress measured at each split
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    measure: f64,
    /// Start this command and manage it
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn args_for_tune(args: &Args) -> Result<tune::TuneArgs, CliError> {
    let run = TuneRun {
        pids: args.pid.clone(),
        command: args.command.clone(),
        sweep: args.sweep,
        splits_percent: args.splits.clone(),
        rounds: args.rounds,
        progress: args.progress.clone().expect("clap requires it"),
        measure_s: args.measure,
        continuous: args.continuous,
        retune_threshold_pct: args.retune_threshold,
        retune_windows: args.retune_windows,
        duration_s: args.duration,
        dry_run: args.dry_run,
    };
    run.check().map_err(CliError::classified)?;
    Ok(tune::TuneArgs {
        run,
        mix: args.mix.clone(),
        start: args.tune_start.clone(),
        json: args.json,
    })
}

/// tierd's exit status: a launched CMD's own when its end ended the run, else 0.
fn exit_status(cmd: Option<std::process::ExitStatus>) -> ExitCode {
    cmd.map_or(ExitCode::SUCCESS, |s| {
        ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8)
    })
}

/// `--dram-budget`, parsed when the arguments are; the error names the policy setting it sets.
fn dram_budget_arg(text: &str) -> Result<Size, String> {
    Size::parse(text).map_err(|e| format!("dram_budget: {e}"))
}

/// `--cxl-budget`, parsed when the arguments are.
fn cxl_budget_arg(text: &str) -> Result<Size, String> {
    Size::parse(text).map_err(|e| format!("--cxl-budget {text:?}: {e}"))
}

/// The policy file (or the defaults) with the flags that override it.
fn policy(args: &Args) -> Result<Policy, CliError> {
    let overrides = PolicyOverrides {
        dram_budget: args.dram_budget.clone(),
        max_migrate_mbps: args.max_migrate_rate,
        interval_ms: args.interval,
        access_source: args.access_source.clone(),
    };
    Policy::resolve(args.policy.as_deref(), overrides).map_err(CliError::classified)
}

fn human(r: &IntervalReport) -> String {
    let mib = |b: u64| format!("{:.2}", b as f64 / (1u64 << 20) as f64);
    if r.status == Status::Left {
        return format!(
            "{:7.1}s pid {}: left the cgroup, no longer a target (promoted {}, demoted {} pages in all)",
            r.t_s, r.pid, r.total.promoted_pages, r.total.demoted_pages
        );
    }
    if r.status == Status::Exited {
        return format!(
            "{:7.1}s pid {}: exited (promoted {}, demoted {}, failed {} pages in all)",
            r.t_s, r.pid, r.total.promoted_pages, r.total.demoted_pages, r.total.failed_pages
        );
    }
    let nodes: Vec<String> = r
        .nodes
        .iter()
        .map(|(n, s)| {
            format!(
                "node{n} {} MiB (hot {})",
                mib(s.resident_bytes),
                mib(s.hot_bytes)
            )
        })
        .collect();
    let memory = r
        .memory
        .as_ref()
        .map(|m| {
            let b = |k: &str| mib(m.bytes.get(k).copied().unwrap_or(0));
            format!(
                " | dram {} cxl {} nvme {} MiB, {} {} pages{}{}{}{}{}",
                b("dram"),
                b("cxl"),
                b("nvme"),
                if r.dry_run {
                    "would page out"
                } else {
                    "paged out"
                },
                if r.dry_run {
                    m.planned_pageouts
                } else {
                    m.pageout_pages
                },
                if m.prefetch_pages > 0 || m.prefetch_hits > 0 {
                    format!(
                        ", prefetched {} pages, {} prefetch hits",
                        m.prefetch_pages, m.prefetch_hits
                    )
                } else {
                    String::new()
                },
                m.stall_some_pct
                    .map(|s| format!(", stall {s:.2}% (goal {}%)", m.max_stall_pct.unwrap_or(0.0)))
                    .or_else(|| m.slowdown_pct.map(|s| format!(
                        ", slowdown {s:.1}% (goal {}%)",
                        m.max_slowdown_pct.unwrap_or(0.0)
                    )))
                    .unwrap_or_default(),
                m.swap_readahead
                    .as_ref()
                    .map(|ra| format!(", readahead {} pages", 1u32 << ra.page_cluster))
                    .unwrap_or_default(),
                m.zswap
                    .as_ref()
                    .and_then(|z| z.pool_bytes.zip(z.stored_bytes))
                    .map(|(pool, stored)| format!(
                        ", zswap {} MiB in {} MiB",
                        mib(stored),
                        mib(pool)
                    ))
                    .unwrap_or_default(),
                if m.nvme_full {
                    ", NVMe FULL: offloading stopped"
                } else {
                    ""
                }
            )
        })
        .unwrap_or_default();
    let iv = &r.interval;
    let moves = if r.dry_run {
        format!(
            "would promote {} demote {}",
            iv.planned_promotions, iv.planned_demotions
        )
    } else {
        format!(
            "+{} -{} failed {}",
            iv.promoted_pages, iv.demoted_pages, iv.failed_pages
        )
    };
    format!(
        "{:7.1}s pid {}: {} | {moves} | waiting: rate {} room {} | {} regions{memory}",
        r.t_s,
        r.pid,
        nodes.join(", "),
        iv.held_by_rate,
        iv.held_by_room,
        r.regions
    )
}

/// Renders the daemon's events: messages on stderr, a line per report on stdout (text for people,
/// or one JSON object per line).
struct Render {
    json: bool,
    err: std::io::Stderr,
    out: std::io::Stdout,
    /// The cgroup followed, for the membership message.
    cgroup: Option<PathBuf>,
}

impl DaemonSink for Render {
    fn starting(&mut self, s: &Starting<'_>) {
        let err = &mut self.err;
        let _ = writeln!(
            err,
            "cxltier tierd: access source: {} ({})",
            s.source.name, s.source.reason
        );
        let _ = writeln!(err, "cxltier tierd: {}", s.source.system_wide_write(s.pids));
        let _ = writeln!(
            err,
            "cxltier tierd: fast tier node(s) {:?}, slower node(s) {:?}; budget {}, rate limit {} MB/s{}",
            s.tiers.fast,
            s.tiers.slow,
            s.policy
                .limits
                .dram_budget
                .as_ref()
                .map_or_else(|| "none".to_string(), Size::to_string),
            s.policy.limits.max_migrate_mbps,
            if s.dry_run { "; --dry-run: nothing is moved" } else { "" }
        );
        if let Some(path) = s.quarantine_file {
            let _ = writeln!(
                err,
                "cxltier tierd: following the quarantine file {} (poisoned ranges; missing: none): target pages on them are moved to another node",
                path.display()
            );
        }
    }

    fn pressure_file(&mut self, path: &Path) {
        let _ = writeln!(
            self.err,
            "cxltier tierd: SLA: memory pressure read from {} each interval; the pageout rate \
             follows it",
            path.display()
        );
    }

    fn started(&mut self, written: WrittenPages) {
        let _ = writeln!(
            self.err,
            "cxltier tierd: written pages: {}",
            written.describe()
        );
    }

    fn membership(&mut self, change: &TargetChange, source: SourceKind, running: &[u32]) {
        let _ = writeln!(
            self.err,
            "cxltier tierd: cgroup {}: joined [{}], left [{}]; {}: pid {}",
            self.cgroup.as_deref().unwrap_or(Path::new("?")).display(),
            list(&change.joined),
            list(&change.left),
            match source {
                SourceKind::Damon => "DAMON restarted (system-wide) with one kdamond per target",
                SourceKind::IdlePage => "idle-page tracking now follows",
            },
            list(running)
        );
    }

    fn target(&mut self, r: &IntervalReport) -> std::io::Result<()> {
        if self.json {
            writeln!(self.out, "{}", json_line("tierd", "interval", r)?)
        } else {
            writeln!(self.out, "{}", human(r))
        }
    }

    fn quarantine_unchecked(&mut self, e: &TierdError) {
        let _ = writeln!(
            self.err,
            "cxltier tierd: warning: quarantined memory not checked this round: {e}"
        );
    }

    fn quarantine_malformed(&mut self, line: &str) {
        let _ = writeln!(self.err, "cxltier tierd: quarantine file: {line}");
    }

    fn quarantine(&mut self, q: &QuarantineReport) -> std::io::Result<()> {
        if self.json {
            return writeln!(self.out, "{}", json_line("tierd", "quarantine", q)?);
        }
        writeln!(
            self.out,
            "quarantine: {} ranges ({}); target pages on them {}, moved off {} (total {}){}",
            q.ranges,
            q.nodes
                .iter()
                .map(|(n, r)| format!("node{n}: {} ranges, {} B", r.ranges, r.bytes))
                .collect::<Vec<_>>()
                .join(", "),
            q.pages_on_quarantined_frames,
            q.moved_off_pages,
            q.moved_off_pages_total,
            q.note
                .as_ref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default()
        )
    }

    fn round_end(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn stopped(&mut self, s: &StopReport) -> std::io::Result<()> {
        if self.json {
            writeln!(self.out, "{}", json_line("tierd", "stopped", s)?)?;
        }
        let _ = writeln!(
            self.err,
            "cxltier tierd: stopped ({}); {}; targets still running, memory left where it is: {:?}",
            s.reason.as_str().replace('_', " "),
            match (s.source, s.damon_removed) {
                (SourceKind::Damon, true) => "DAMON kdamonds removed",
                (SourceKind::Damon, false) => "DAMON kdamonds could NOT be removed",
                (SourceKind::IdlePage, _) => "idle-page tracking: nothing to remove",
            },
            s.targets_left_running
        );
        Ok(())
    }
}

/// Check memory mode's settings against the machine before anything is written.
fn check_memory_mode(
    args: &Args,
    nvme: &str,
    policy: &Policy,
    tiers: &Tiers,
    cgroup_dir: Option<&Path>,
) -> Result<MemoryModePlan, CliError> {
    let request = MemoryModeRequest {
        nvme: nvme.to_string(),
        cxl_budget: args.cxl_budget.clone(),
        max_stall_pct: args.max_stall_pct,
        max_slowdown_pct: args.max_slowdown_pct,
        progress: args.progress.clone(),
        swap_readahead: args.swap_readahead.clone(),
        zswap_percent: args.zswap,
        damos_pageout: args.pageout_with == "damos",
        dry_run: args.dry_run,
        as_root: crate::cmd::running_as_root(),
    };
    let mut warn = |w: &str| eprintln!("cxltier tierd: warning: {w}");
    MemoryModePlan::check(&request, policy, tiers, cgroup_dir, &mut warn)
        .map_err(CliError::classified)
}

/// Say every system-wide change of memory mode, and (unless --dry-run) make them.
fn start_memory_mode(
    args: &Args,
    plan: MemoryModePlan,
) -> Result<(MemoryMode, Option<MemoryModeSession>), CliError> {
    for c in plan.changes() {
        if args.dry_run {
            eprintln!("cxltier tierd: would {c} (a system-wide change; not made: --dry-run)");
        } else {
            eprintln!(
                "cxltier tierd: memory mode: {c} (a system-wide change, undone when tierd stops)"
            );
        }
    }
    eprintln!("cxltier tierd: memory mode: {}", plan.describe());
    // A failure part way undoes what was made (the session is dropped).
    plan.start(args.dry_run, &mut UndoReport { json: args.json })
        .map_err(CliError::classified)
}

/// Says memory mode's steps: stderr, and with --json the `memcg_limits`, `memcg_restore` and
/// `swap_teardown` lines.
struct UndoReport {
    json: bool,
}

impl UndoReport {
    /// With --json, `value` as the line of `event`.
    fn json_line(&self, event: &str, value: &impl serde::Serialize) {
        if self.json {
            if let Ok(line) = json_line("tierd", event, value) {
                println!("{line}");
            }
        }
    }
}

impl MemoryModeSink for UndoReport {
    fn memcg_limits_set(&mut self, set: &LimitsReport<'_>) {
        self.json_line("memcg_limits", set);
    }

    fn memcg_restored(
        &mut self,
        dir: &Path,
        pending: &[(String, String)],
        outcome: &Result<Restored, TierdError>,
    ) {
        match outcome {
            Ok(r) => {
                if r.cgroup_gone {
                    eprintln!(
                        "cxltier tierd: memory mode: cgroup {} was removed: no limits to restore",
                        dir.display()
                    );
                } else {
                    let what: Vec<String> =
                        r.restored.iter().map(|(f, v)| format!("{f}={v}")).collect();
                    eprintln!(
                        "cxltier tierd: memory mode undone: cgroup {} limits restored ({})",
                        dir.display(),
                        what.join(", ")
                    );
                }
                self.json_line("memcg_restore", &r.report(dir));
            }
            Err(e) => {
                let by_hand: Vec<String> = pending
                    .iter()
                    .map(|(f, v)| format!("echo {v} > {}", dir.join(f).display()))
                    .collect();
                eprintln!(
                    "cxltier tierd: error: cgroup {} limits could NOT all be restored: {e}; run `{}`",
                    dir.display(),
                    by_hand.join("; ")
                );
            }
        }
    }

    fn readahead_restored(&mut self, tuner: &ReadaheadTuner, outcome: &Result<u32, TierdError>) {
        let setting = tuner.setting().display();
        match outcome {
            Ok(v) => eprintln!("cxltier tierd: memory mode undone: {setting} restored to {v}"),
            Err(e) => eprintln!(
                "cxltier tierd: error: {setting} could NOT be restored: {e}; run `echo {} > {setting}`",
                tuner.previous()
            ),
        }
    }

    fn zswap_restored(&mut self, outcome: &Result<Vec<(PathBuf, String)>, TierdError>) {
        match outcome {
            Ok(back) => {
                let what: Vec<String> = back
                    .iter()
                    .map(|(f, v)| format!("{} restored to {v}", f.display()))
                    .collect();
                eprintln!(
                    "cxltier tierd: memory mode undone: zswap: {}",
                    what.join(", ")
                );
            }
            Err(e) => eprintln!(
                "cxltier tierd: error: zswap's settings could NOT all be restored: {e}; check \
                 /sys/module/zswap/parameters/enabled and max_pool_percent"
            ),
        }
    }

    fn swap_torn_down(&mut self, area: &SwapArea, outcome: &Result<Teardown, TierdError>) {
        let path = area.path().display();
        match outcome {
            Ok(t) => {
                eprintln!(
                    "cxltier tierd: memory mode undone: swapoff {path}{}",
                    if t.removed_file { "; swap file removed" } else { "" }
                );
                self.json_line("swap_teardown", &t.report(area.path()));
            }
            Err(e) => eprintln!(
                "cxltier tierd: error: swap area {path} could NOT be turned off: {e}; run `swapoff {path}`{}",
                if area.kind() == BackingKind::NewFile { format!(" and remove {path}") } else { String::new() }
            ),
        }
    }
}

fn list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The `--json` line carrying the warnings (none when there are none).
fn warnings_event(warnings: &[String]) -> Result<Option<String>, serde_json::Error> {
    (!warnings.is_empty())
        .then(|| json_line("tierd", "warnings", &Warnings { warnings }))
        .transpose()
}

pub fn run(args: Args) -> CliResult {
    let policy = policy(&args)?;
    crate::cmd::check_quarantine_file(&args.quarantine_file)?;
    let duration = run_duration(args.duration).map_err(CliError::classified)?;
    // Listening before anything starts: a port in use is refused before a command is launched
    // or DAMON is touched.
    let metrics = crate::cmd::serve_metrics("tierd", args.metrics_addr.as_deref())?;
    let root = Path::new("/");
    let topo =
        Topology::live().map_err(|e| CliError::classified(cxltier_tierd::TierdError::from(e)))?;
    let tiers = if args.nvme.is_some() {
        Tiers::for_memory_mode(&topo)
    } else {
        Tiers::from_topology(&topo)
    }
    .map_err(CliError::classified)?;
    let warnings = tiers.kernel_tiering_warnings(&topo);
    for w in &warnings {
        eprintln!("cxltier tierd: warning: {w}");
    }
    if args.json {
        if let Some(line) = warnings_event(&warnings)? {
            println!("{line}");
        }
    }
    if args.tune || args.sweep {
        return tune::run(&args_for_tune(&args)?, &tiers);
    }
    // The cgroup is resolved first: memory mode sets its limits. Reading it changes nothing.
    let cgroup = match &args.cgroup {
        Some(cg) => Some(Cgroup::resolve(cg).map_err(CliError::classified)?),
        None => None,
    };
    let memory_plan = match &args.nvme {
        Some(spec) => Some(check_memory_mode(
            &args,
            spec,
            &policy,
            &tiers,
            cgroup.as_ref().map(Cgroup::dir),
        )?),
        None => None,
    };
    let source =
        choose_source(root, policy.tracking.access_source).map_err(CliError::classified)?;
    if source.kind == SourceKind::Damon {
        cxltier_tierd::damon::Monitor::check(root).map_err(CliError::classified)?;
    }

    // Memory mode's swap area is set up before CMD starts; dropping it (any error below) turns it
    // off again.
    let goal = memory_plan.as_ref().and_then(|p| p.goal.clone());
    let (memory, mut session) = match memory_plan {
        Some(plan) => {
            let (mode, session) = start_memory_mode(&args, plan)?;
            (Some(mode), session)
        }
        None => (None, None),
    };

    let cgroup_dir = cgroup.as_ref().map(|c| c.dir().to_path_buf());
    let targets: Box<dyn TargetSource> = if !args.pid.is_empty() {
        Box::new(Pids(args.pid.clone()))
    } else if let Some(cgroup) = cgroup {
        Box::new(cgroup)
    } else {
        Box::new(Launched::spawn(&args.command).map_err(CliError::classified)?)
    };

    let mut daemon = Daemon::new(policy, tiers, source, targets)
        .dry_run(args.dry_run)
        .duration(duration)
        .quarantine_file(&args.quarantine_file);
    if let Some(published) = metrics {
        daemon = daemon.metrics(published);
    }
    if let Some(mode) = memory {
        daemon = daemon.memory_mode(mode, goal);
    }

    let stop = crate::cmd::stop_flag()?;
    let mut render = Render {
        json: args.json,
        err: std::io::stderr(),
        out: std::io::stdout(),
        cgroup: cgroup_dir,
    };
    // Memory mode's system-wide changes are undone whatever the run's outcome.
    let outcome = match session.as_mut() {
        Some(session) => session.run(
            daemon,
            &mut render,
            &mut UndoReport { json: args.json },
            &stop,
        ),
        None => daemon.run(&mut render, &stop),
    }
    .map_err(CliError::classified)?;
    // CMD ended and so did tierd: CMD's own status is tierd's.
    Ok(exit_status(outcome.child_status))
}

#[cfg(test)]
mod warnings_tests {
    use super::*;

    #[test]
    fn the_warnings_line_is_there_only_with_warnings() {
        assert_eq!(warnings_event(&[]).unwrap(), None);
        let w = ["one".to_string(), "two".to_string()];
        let line: serde_json::Value =
            serde_json::from_str(&warnings_event(&w).unwrap().unwrap()).unwrap();
        assert_eq!(line["event"], "warnings");
        assert_eq!(line["command"], "tierd");
        assert_eq!(line["schema_version"], crate::output::SCHEMA_VERSION);
        assert_eq!(line["warnings"].as_array().unwrap().len(), 2);
    }
}

#[cfg(test)]
mod json_lines_tests {
    use super::*;
    use crate::output::assert_conforms;
    use cxltier_tierd::daemon::StopReason;
    use cxltier_tierd::engine::{IntervalStats, NodeStats, Totals};
    use cxltier_tierd::quarantine::QuarantinedNode;
    use cxltier_tierd::tune::{SplitOutcome, Verdict};
    use cxltier_tierd::tuning::{TuneDone, TuneStep, WatchWindow};
    use std::collections::BTreeMap;

    /// Every line tierd prints, built from the structures the daemon and the tuning session
    /// report, conforms to docs/json/tierd.schema.json (a tiered machine is needed to run them).
    #[test]
    fn every_tierd_line_conforms_to_its_schema() {
        let schema = "tierd.schema.json";
        let interval = IntervalReport {
            t_s: 1.5,
            pid: 42,
            status: Status::Running,
            source: "damon",
            dry_run: false,
            regions: 12,
            page_size: 4096,
            dram_budget_bytes: Some(1 << 20),
            fast_bytes: 1 << 19,
            huge_pages: Some(0),
            nodes: BTreeMap::from([
                (
                    0,
                    NodeStats {
                        tier: "fast",
                        resident_bytes: 1 << 19,
                        ..NodeStats::default()
                    },
                ),
                (1, NodeStats::default()),
            ]),
            interval: IntervalStats::default(),
            total: Totals {
                failures: BTreeMap::from([("EBUSY".to_string(), 2)]),
                ..Totals::default()
            },
            retry_pending: 0,
            rate_limit_bytes_per_s: 1e6,
            rate_limit_bound_bytes: 1.5e6,
            memory: None,
            sampled: None,
        };
        let line = json_line("tierd", "interval", &interval).unwrap();
        assert_conforms(schema, &line);
        let mut in_chunks = interval.clone();
        in_chunks.sampled = Some(cxltier_tierd::engine::SampledReport {
            chunk_bytes: 2 << 20,
            chunks: 512,
            sampled_pages: 4096,
            span_bytes: 1 << 30,
        });
        assert_conforms(schema, &json_line("tierd", "interval", &in_chunks).unwrap());
        // Per-node figures are keyed by node.
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["nodes"]["0"]["resident_bytes"], 1 << 19);
        // Without memory mode the line has no `memory`; with it, bytes per tier including NVMe.
        assert!(v.get("memory").is_none());
        let mut with_memory = interval.clone();
        with_memory.memory = Some(cxltier_tierd::MemoryReport {
            bytes: BTreeMap::from([("dram", 4096), ("cxl", 0), ("nvme", 8192)]),
            keep_bytes: 4096,
            pageout_pages: 2,
            nvme_free_bytes: Some(1 << 20),
            stall_some_pct: Some(1.5),
            max_stall_pct: Some(5.0),
            refaults: Some(3),
            prefetch_pages: 5,
            prefetch_hits: 4,
            prefetch_hits_total: 4,
            swap_readahead: Some(cxltier_tierd::readahead::ReadaheadReport {
                page_cluster: 2,
                readahead_pages: Some(100),
                readahead_hits: Some(10),
                auto: true,
            }),
            zswap: Some(cxltier_tierd::zswap::ZswapReport {
                pool_bytes: Some(1 << 20),
                stored_bytes: Some(3 << 20),
                stored_pages: Some(768),
                loaded_pages: None,
                written_back_pages: Some(0),
            }),
            ..Default::default()
        });
        let line = json_line("tierd", "interval", &with_memory).unwrap();
        assert_conforms(schema, &line);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["memory"]["bytes"]["nvme"], 8192);
        assert_eq!(v["memory"]["prefetch_hits_total"], 4);
        assert_eq!(v["memory"]["swap_readahead"]["page_cluster"], 2);
        // The table line says this interval's prefetches and hits, and the readahead.
        let table = human(&with_memory);
        assert!(
            table.contains("prefetched 5 pages, 4 prefetch hits"),
            "{table}"
        );
        assert!(table.contains("readahead 4 pages"), "{table}");
        assert!(table.contains("zswap 3.00 MiB in 1.00 MiB"), "{table}");
        assert_eq!(v["memory"]["zswap"]["stored_pages"], 768);
        let mut keep = with_memory.clone();
        keep.memory.as_mut().unwrap().swap_readahead = None;
        keep.memory.as_mut().unwrap().zswap = None;
        assert_conforms(schema, &json_line("tierd", "interval", &keep).unwrap());
        // A slowdown goal instead of a stall goal: its figures, and the table says them.
        let slow = keep.memory.as_mut().unwrap();
        (slow.stall_some_pct, slow.max_stall_pct) = (None, None);
        (slow.progress_rate, slow.slowdown_pct, slow.max_slowdown_pct) =
            (Some(1.5e6), Some(3.25), Some(10.0));
        assert_conforms(schema, &json_line("tierd", "interval", &keep).unwrap());
        assert!(
            human(&keep).contains("slowdown 3.2% (goal 10%)"),
            "{}",
            human(&keep)
        );
        assert!(!human(&interval).contains("prefetch"));
        let area = tempfile::tempdir().unwrap();
        let teardown = Teardown {
            swapped_off: true,
            removed_file: true,
        };
        let teardown = json_line("tierd", "swap_teardown", &teardown.report(area.path())).unwrap();
        assert_conforms(schema, &teardown);
        // Memory mode's memcg limits: announced (also with --dry-run) and restored.
        let limits = [cxltier_tierd::memcg::Limit {
            file: cxltier_tierd::memcg::HIGH,
            bytes: 12 << 20,
            previous: "max".into(),
        }];
        for dry_run in [false, true] {
            let report = cxltier_tierd::memcg::LimitsReport {
                cgroup: area.path(),
                dry_run,
                limits: &limits,
            };
            let line = json_line("tierd", "memcg_limits", &report).unwrap();
            assert_conforms(schema, &line);
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["limits"][0]["file"], "memory.high");
            assert_eq!(v["limits"][0]["previous"], "max");
        }
        let restored = Restored {
            restored: vec![(cxltier_tierd::memcg::HIGH, "max".into())],
            cgroup_gone: false,
        };
        let restored = json_line("tierd", "memcg_restore", &restored.report(area.path())).unwrap();
        assert_conforms(schema, &restored);

        let quarantine = QuarantineReport {
            event: "quarantine",
            file: "/run/cxltier/poisoned-ranges.jsonl".into(),
            ranges: 1,
            nodes: BTreeMap::from([(
                1,
                QuarantinedNode {
                    ranges: 1,
                    bytes: 4096,
                },
            )]),
            note: Some("no frame numbers".into()),
            ..QuarantineReport::default()
        };
        assert_conforms(
            schema,
            &json_line("tierd", "quarantine", &quarantine).unwrap(),
        );

        let stopped = StopReport {
            event: "stopped",
            reason: StopReason::TargetsExited,
            elapsed_s: 3.0,
            targets_left_running: vec![],
            access_source: "damon",
            damon_removed: true,
            source: SourceKind::Damon,
        };
        assert_conforms(schema, &json_line("tierd", "stopped", &stopped).unwrap());

        let split = SplitOutcome {
            resident_pages: 100,
            fast_pages: 50,
            moved_pages: 10,
            failed_pages: 0,
        };
        for (event, round) in [("tune_step", None), ("sweep_point", Some(1))] {
            let step = TuneStep {
                event,
                pid: 42,
                fast_percent: 50,
                round,
                split,
                throughput_per_s: 1e9,
            };
            assert_conforms(schema, &json_line("tierd", "tune_step", &step).unwrap());
        }
        for (event, rounds) in [
            ("tuned", None),
            ("swept", Some(BTreeMap::from([(50, vec![1.0, 2.0])]))),
        ] {
            let done = TuneDone {
                event,
                pid: 42,
                start_fast_percent: Some(50),
                fast_percent: 60,
                throughput_per_s: 2e9,
                measured: BTreeMap::from([(50, 1e9), (60, 2e9)]),
                rounds,
                weights: Some([3, 2]),
                retunes: Some(1),
            };
            assert_conforms(schema, &json_line("tierd", "tuned", &done).unwrap());
        }
        let watch = WatchWindow {
            event: "watch",
            pid: 42,
            fast_percent: 60,
            throughput_per_s: 2e9,
            baseline_per_s: None,
            streak: -1,
            verdict: Verdict::Calibrating,
        };
        assert_conforms(schema, &json_line("tierd", "watch", &watch).unwrap());
        assert_conforms(
            schema,
            &warnings_event(&["the kernel demotes".to_string()])
                .unwrap()
                .unwrap(),
        );

        // A field renamed in the library fails the schema.
        let renamed = json_line("tierd", "interval", &interval)
            .unwrap()
            .replace("\"retry_pending\"", "\"retries_pending\"");
        let schema_doc: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../docs/json/tierd.schema.json"),
            )
            .unwrap(),
        )
        .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&renamed).unwrap();
        assert!(!jsonschema::is_valid(&schema_doc, &doc));
    }
}
