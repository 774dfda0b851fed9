//! The planner's advice for the live machine, the library behind `cxltier apply --plan`,
//! `cxltier run --plan` and `cxltier tierd --tune`'s starting split.
//!
//! - [`live`]: a profile of the live machine built from the firmware's performance tables
//!   (HMAT/CDAT as sysfs shows them).
//! - [`advice`]: the planner run for a mix on that profile (or on the built-in one when the
//!   firmware gives no figures), with the safety rules: a default (the kernel's `auto` weights)
//!   is kept unless beaten by more than the model's error, and "do not interleave" is refused
//!   rather than written as a weight of 0.
//!
//! Nothing here prints or exits; every failure is an [`AdviceError`] that says what to do.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod advice;
pub mod live;

pub use advice::{advise, advise_live, live_or_builtin, tier_weights, Advice, ProfileChoice};
pub use cxltier_error::{Class, Classify};
pub use live::{live_profile, profile_from_topology};

use cxltier_model::PlanError;
use cxltier_profile::ProfileError;
use cxltier_topo::TopoError;

/// Everything that can go wrong while advising.
#[derive(Debug, thiserror::Error)]
pub enum AdviceError {
    /// The live topology could not be read.
    #[error("the topology could not be read ({0})")]
    TopologyUnreadable(TopoError),
    /// Fewer than two memory tiers: nothing to interleave.
    #[error("this machine has a single memory tier (node {nodes})")]
    SingleTier { nodes: String },
    /// A tier's node has no firmware performance figures.
    #[error("node {node} has no firmware (HMAT/CDAT) bandwidth and latency figures")]
    NoFirmwareFigures { node: u32 },
    /// The profile built from the firmware figures is not a valid profile.
    #[error("{0}")]
    Profile(ProfileError),
    /// A profile named by the user (a built-in name or a file) does not load.
    #[error("{0}")]
    ProfileFile(ProfileError),
    /// The live machine cannot be planned for (the reason inside).
    #[error("cannot plan for this machine: {0}")]
    NoLiveProfile(Box<AdviceError>),
    /// The planner's own refusal.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The planner advises leaving everything on the fastest tier, which weighted interleave
    /// cannot express (the kernel takes weights 1..=255).
    #[error("the planner advises not interleaving for mix {mix}: {reason}")]
    DoNotInterleave { mix: String, reason: String },
}

impl Classify for AdviceError {
    /// A machine without two described tiers is a platform the advice does not support; the
    /// planner's refusals keep their own class.
    fn class(&self) -> Class {
        match self {
            AdviceError::Plan(e) => e.class(),
            AdviceError::TopologyUnreadable(e) => e.class(),
            AdviceError::ProfileFile(e) => e.class(),
            _ => Class::Unsupported,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            AdviceError::Plan(e) => e.hint(),
            AdviceError::ProfileFile(_) => Some(
                "fix the profile (format in docs/profiles.md) or name a built-in one, e.g. --profile xeon6-6900p-8xcz122".into(),
            ),
            AdviceError::NoLiveProfile(_) => Some(
                "give weights yourself (--weights), e.g. from `cxltier plan --profile ...`".into(),
            ),
            AdviceError::DoNotInterleave { .. } => Some(
                "leave the default policy, or bind to the fastest tier's nodes (cxltier run --bind NODES -- CMD); give --weights to interleave anyway".into(),
            ),
            _ => None,
        }
    }
}
