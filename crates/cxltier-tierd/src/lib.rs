//! Auto-tiering for unmodified processes, the library behind `cxltier tierd`.
//!
//! - [`daemon`]: the daemon around the engine: targets from a [`daemon::TargetSource`] (pids, a
//!   cgroup, a launched child), deadline, stop flag, quarantine, metrics and pacing, reported to a
//!   [`daemon::DaemonSink`].
//! - [`engine`]: one interval of the control loop. Each interval it reads every target page's access frequency
//!   from the access source, finds where each page of the target's private anonymous memory is,
//!   decides what to move ([`plan`]) and moves it with `move_pages(2)`.
//! - [`access`]: the plug point for access sources ([`access::choose_source`]): DAMON's sysfs
//!   interface ([`damon`], one kdamond per target) or, on kernels without it, idle-page tracking
//!   ([`idle`]: the page-idle bitmap and `/proc/PID/pagemap`); both give the planner per-page
//!   access frequencies and ages in the same terms.
//! - [`plan`]: the placement rules (hot up, cold down, per-target DRAM budget, watermarks,
//!   hysteresis, rate limit, retry of failed pages) as a pure function.
//! - [`chunks`]: a large target (above `tracking.sampled_above_mib`) cut into chunks whose heat
//!   comes from DAMON's regions and whose node from a fixed-size sample of pages: the planner's
//!   units at a cost that does not grow with the footprint.
//! - [`placement`]: bytes per node estimated from a fixed-size sample of pages, with an error
//!   bound: `move_pages` entries that do not grow with the footprint.
//! - [`policy`]: the policy file (TOML, see docs/tierd.md).
//! - [`metrics`]: tierd's Prometheus exposition ([`metrics::TierdMetrics`]: the current targets'
//!   series, departed targets dropped; served by `cxltier-metrics`).
//! - [`quarantine`]: follows the quarantine file of `cxltier ras --watch --quarantine`, moves the
//!   targets' pages off poisoned frames and reports quarantined memory per node.
//! - [`tuning`]: the `--tune`/`--sweep` session: [`tune`]'s search driven against a target
//!   ([`tuning::Measurer`]), the weighted-interleave table held at the chosen split
//!   ([`tuning::AllocationWeights`]), reported to a [`tuning::TuneSink`]; [`tune_run`]: the
//!   whole run around it (settings checked, the target found or started under weighted
//!   interleave, the table put back), reported to a [`tune_run::TuneRunSink`].
//! - memory mode (`--nvme`): [`swap`] (the swap area on NVMe: checked, created, turned on, and
//!   undone), [`pageout`] (which resident pages go beyond the DRAM + CXL budgets, sent with
//!   `process_madvise(MADV_PAGEOUT)`), [`psi`] (memory pressure and the SLA controller that
//!   sets the pageout allowance), [`readahead`] (`vm.page-cluster` tuned by swap readahead's
//!   hit rate) and [`zswap`] (the compressed pool turned on for the run), both held by
//!   [`setting`] and restored; [`memory_session`] makes them all as one
//!   [`memory_session::MemoryModeSession`] that records each change and undoes them in reverse
//!   order (reported to a [`memory_session::MemoryModeSink`]).
//! - [`workload`]: test workloads: a hot set that moves, a stream and a pointer chase (the
//!   footprint sweep's), for the lab, benchmarks and demos.
//!
//! Nothing here prints or exits; every failure is a [`TierdError`] that says what to do.

// A library reports through its return values and sinks; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod access;
pub mod chunks;
pub mod daemon;
pub mod damon;
pub mod engine;
mod error;
pub mod hugepage;
pub mod idle;
pub mod memcg;
pub mod memory_session;
pub mod metrics;
pub mod pageout;
pub mod placement;
pub mod plan;
pub mod policy;
pub mod procfs;
pub mod psi;
pub mod quarantine;
pub mod ratelimit;
pub mod readahead;
pub mod setting;
pub mod softdirty;
pub mod swap;
pub mod tune;
pub mod tune_run;
pub mod tuning;
pub mod workload;
pub mod zswap;

#[cfg(test)]
mod testutil;

pub use access::{choose_source, AccessSource, Source, SourceKind};
pub use daemon::{Daemon, DaemonSink, TargetSource};
pub use engine::{Engine, IntervalReport, MemoryMode, MemoryReport, Tiers};
pub use error::{Class, Classify, TierdError};
pub use memory_session::{MemoryModePlan, MemoryModeRequest, MemoryModeSession, MemoryModeSink};
pub use policy::Policy;
