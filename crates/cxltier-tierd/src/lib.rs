//! Auto-tiering for unmodified processes, the library behind `cxltier tierd`.
//!
//! - [`engine`]: the control loop. It picks the access source ([`engine::choose_source`]: DAMON's
//!   sysfs interface), starts one kdamond per target ([`damon`]), and each interval reads the
//!   regions' access counts, finds where each page of the target's private anonymous memory is,
//!   decides what to move ([`plan`]) and moves it with `move_pages(2)`.
//! - [`plan`]: the placement rules (hot up, cold down, per-target DRAM budget, watermarks,
//!   hysteresis, rate limit, retry of failed pages) as a pure function.
//! - [`policy`]: the policy file (TOML, see docs/tierd.md).
//! - [`metrics`]: Prometheus text and a loopback HTTP listener for it.
//! - [`quarantine`]: follows the quarantine file of `cxltier ras --watch --quarantine`, moves the
//!   targets' pages off poisoned frames and reports quarantined memory per node.
//! - [`workload`]: a test workload whose hot set moves, for the lab and for demos.
//!
//! Nothing here prints or exits; every failure is a [`TierdError`] that says what to do.

pub mod damon;
pub mod engine;
mod error;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod procfs;
pub mod quarantine;
pub mod ratelimit;
pub mod softdirty;
pub mod tune;
pub mod workload;

#[cfg(test)]
mod testutil;

pub use engine::{choose_source, Engine, Source, TargetReport, Tiers};
pub use error::{ErrorClass, TierdError};
pub use policy::Policy;
