//! Predict what a placement of pages over memory tiers delivers, and choose interleave weights.
//!
//! - [`model`]: for a split of pages over tiers and a traffic mix, the peak bandwidth, the loaded
//!   latency at a given demand, and the bandwidth and latency at a given number of outstanding requests.
//!   The assumptions are written down in `docs/model.md`, with the error against published figures.
//! - [`plan`]: search weight vectors for a mix and a goal, compare with DRAM alone and with the
//!   weights the kernel derives from firmware bandwidth (its `auto` mode).

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod model;
pub mod plan;
pub mod published;

pub use model::{Model, ModelParams, Prediction, Split};
pub use plan::{
    kernel_auto_weights, parse_candidates, parse_weights, plan, Action, Candidate, Goal,
    ModelError, PlanError, PlanReport, PlanRequest, Recommendation, TierSummary, WeightPlan,
};
