//! The planner: choose interleave weights for a mix and a goal.

use crate::model::{Model, Prediction, Split};
use cxltier_profile::{Mix, Profile};
use serde::Serialize;

/// What the weights should optimise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    /// Highest total bandwidth at full load.
    Bandwidth,
    /// Lowest mean latency at the given demand.
    Latency,
}

impl std::str::FromStr for Goal {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Goal, PlanError> {
        match s {
            "bandwidth" | "bw" => Ok(Goal::Bandwidth),
            "latency" | "lat" => Ok(Goal::Latency),
            _ => Err(PlanError::BadRequest(format!(
                "unknown goal {s:?} (use bandwidth or latency)"
            ))),
        }
    }
}

impl std::fmt::Display for Goal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Goal::Bandwidth => "bandwidth",
            Goal::Latency => "latency",
        })
    }
}

/// A planning question.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    pub mix: Mix,
    pub goal: Goal,
    /// Total demand in GB/s. For the latency goal it is the load at which latency is compared (default:
    /// half of what DRAM alone delivers for the mix); for the bandwidth goal, when given, latencies are
    /// reported at this load instead of at full load.
    pub demand_gbps: Option<f64>,
    /// Weight vectors to choose from, in tier order. `None` searches every vector the kernel accepts
    /// (each weight 1..=max_weight), reduced to lowest terms.
    pub candidates: Option<Vec<Vec<u32>>>,
    pub max_weight: u32,
}

impl PlanRequest {
    pub fn new(mix: Mix, goal: Goal) -> Self {
        PlanRequest {
            mix,
            goal,
            demand_gbps: None,
            candidates: None,
            max_weight: 10,
        }
    }
}

/// One evaluated weight vector.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub weights: Vec<u32>,
    pub tiers: Vec<String>,
    pub bandwidth_gbps: f64,
    pub latency_ns: f64,
    /// Bandwidth relative to DRAM (the fastest tier) alone, at full load.
    pub gain_vs_dram_only: f64,
    /// Latency at the requested demand, or `None` when the split cannot carry that demand or none was
    /// given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_at_demand_ns: Option<f64>,
}

/// The planner's answer.
#[derive(Debug, Clone, Serialize)]
pub struct WeightPlan {
    pub mix: Mix,
    pub goal: Goal,
    pub profile: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demand_gbps: Option<f64>,
    pub recommended: Candidate,
    pub kernel_auto: Candidate,
    pub dram_only: Candidate,
    /// Every candidate evaluated, best first.
    pub sweep: Vec<Candidate>,
}

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    BadRequest(String),
    #[error("profile {0:?} has a single memory tier: there is nothing to interleave")]
    SingleTier(String),
    #[error("no candidate can carry a demand of {demand} GB/s for mix {mix} (the best reaches {best:.1} GB/s)")]
    DemandTooHigh {
        demand: String,
        mix: String,
        best: f64,
    },
}

impl cxltier_error::Classify for PlanError {
    /// A single-tier profile is a platform with nothing to plan; the rest are requests that
    /// cannot be met as asked.
    fn class(&self) -> cxltier_error::Class {
        match self {
            PlanError::SingleTier(_) => cxltier_error::Class::Unsupported,
            _ => cxltier_error::Class::BadInput,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            PlanError::SingleTier(_) => Some(
                "plan needs two or more tiers; pass --profile with a multi-tier profile".into(),
            ),
            _ => None,
        }
    }
}

/// The weights the kernel's `auto` mode derives from per-node bandwidth (Linux 6.16+,
/// `reduce_interleave_weights` in mm/mempolicy.c): each node gets `32 * bw / sum(bw)` rounded down,
/// at least 1, and the vector is divided by its greatest common divisor.
pub fn kernel_auto_weights(bandwidths: &[f64]) -> Vec<u32> {
    const WEIGHTINESS: f64 = 32.0;
    let sum: f64 = bandwidths.iter().sum();
    let raw: Vec<u32> = bandwidths
        .iter()
        .map(|&bw| {
            let scaled = WEIGHTINESS * bw;
            if bw > 0.0 && sum < scaled {
                (scaled / sum).floor() as u32
            } else {
                1
            }
        })
        .collect();
    let g = raw.iter().copied().fold(0, gcd).max(1);
    raw.iter().map(|w| w / g).collect()
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Parse a weight vector such as `3:1` or `5:2:1`.
pub fn parse_weights(text: &str, tiers: usize) -> Result<Vec<u32>, PlanError> {
    let bad = |why: &str| PlanError::BadRequest(format!("invalid weights {text:?}: {why}"));
    let weights: Vec<u32> = text
        .split(':')
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .map_err(|_| bad(&format!("{p:?} is not a whole number")))
        })
        .collect::<Result<_, _>>()?;
    if weights.len() != tiers {
        return Err(bad(&format!(
            "expected {tiers} weights, one per tier fastest first"
        )));
    }
    if weights.iter().all(|&w| w == 0) {
        return Err(bad("at least one weight must be positive"));
    }
    if weights.iter().any(|&w| w > 255) {
        return Err(bad("the kernel accepts weights from 1 to 255"));
    }
    Ok(weights)
}

/// Every weight vector with each weight in 1..=max, in lowest terms.
fn all_vectors(tiers: usize, max: u32) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut v = vec![1u32; tiers];
    loop {
        if v.iter().copied().fold(0, gcd) == 1 {
            out.push(v.clone());
        }
        let mut i = tiers;
        loop {
            if i == 0 {
                return out;
            }
            i -= 1;
            if v[i] < max {
                v[i] += 1;
                break;
            }
            v[i] = 1;
        }
    }
}

/// Choose weights for `req` on `profile`.
pub fn plan(profile: &Profile, req: &PlanRequest) -> Result<WeightPlan, PlanError> {
    let n = profile.tiers.len();
    if n < 2 {
        return Err(PlanError::SingleTier(profile.name.clone()));
    }
    if !(1..=255).contains(&req.max_weight) {
        return Err(PlanError::BadRequest(format!(
            "--max-weight must be 1..255, got {}",
            req.max_weight
        )));
    }
    if let Some(d) = req.demand_gbps {
        if !(d.is_finite() && d > 0.0) {
            return Err(PlanError::BadRequest(format!(
                "--demand must be a positive number of GB/s, got {d}"
            )));
        }
    }
    let model = Model::new(profile);
    let tiers: Vec<String> = profile.tiers.iter().map(|t| t.name.clone()).collect();
    let mut dram_vec = vec![0u32; n];
    dram_vec[0] = 1;
    let dram_peak = model.peak(&Split(dram_vec.clone()), req.mix).bandwidth_gbps;

    let demand = match (req.goal, req.demand_gbps) {
        (_, Some(d)) => Some(d),
        (Goal::Latency, None) => Some(dram_peak * 0.5),
        (Goal::Bandwidth, None) => None,
    };

    let evaluate = |weights: Vec<u32>| -> Candidate {
        let split = Split(weights.clone());
        let Prediction {
            bandwidth_gbps,
            latency_ns,
        } = model.peak(&split, req.mix);
        let latency_at_demand_ns = demand
            .and_then(|d| model.at_demand(&split, req.mix, d))
            .map(|p| p.latency_ns);
        Candidate {
            weights,
            tiers: tiers.clone(),
            bandwidth_gbps,
            latency_ns: latency_at_demand_ns.unwrap_or(latency_ns),
            gain_vs_dram_only: bandwidth_gbps / dram_peak,
            latency_at_demand_ns,
        }
    };

    let vectors = match &req.candidates {
        Some(c) => {
            if c.is_empty() {
                return Err(PlanError::BadRequest("--candidates is empty".into()));
            }
            for v in c {
                if v.len() != n {
                    return Err(PlanError::BadRequest(format!(
                        "candidate {} has {} weights but the profile has {n} tiers ({})",
                        Split(v.clone()),
                        v.len(),
                        tiers.join(", ")
                    )));
                }
            }
            c.clone()
        }
        None => all_vectors(n, req.max_weight),
    };

    let mut sweep: Vec<Candidate> = vectors.into_iter().map(evaluate).collect();
    match req.goal {
        Goal::Bandwidth => sweep.sort_by(|a, b| b.bandwidth_gbps.total_cmp(&a.bandwidth_gbps)),
        Goal::Latency => {
            let key = |c: &Candidate| c.latency_at_demand_ns.unwrap_or(f64::INFINITY);
            sweep.sort_by(|a, b| key(a).total_cmp(&key(b)));
            if sweep[0].latency_at_demand_ns.is_none() {
                return Err(PlanError::DemandTooHigh {
                    demand: format!("{:.1}", demand.unwrap_or_default()),
                    mix: req.mix.to_string(),
                    best: sweep.iter().map(|c| c.bandwidth_gbps).fold(0.0, f64::max),
                });
            }
        }
    }
    let auto_weights = kernel_auto_weights(
        &profile
            .tiers
            .iter()
            .map(|t| t.firmware_bandwidth())
            .collect::<Vec<_>>(),
    );
    Ok(WeightPlan {
        mix: req.mix,
        goal: req.goal,
        profile: profile.name.clone(),
        demand_gbps: demand,
        recommended: sweep[0].clone(),
        kernel_auto: evaluate(auto_weights),
        dram_only: evaluate(dram_vec),
        sweep,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_auto_matches_the_kernel_arithmetic() {
        // 556:205 -> 32*556/761 = 23, 32*205/761 = 8 -> 23:8
        assert_eq!(kernel_auto_weights(&[556.0, 205.0]), vec![23, 8]);
        assert_eq!(kernel_auto_weights(&[100.0, 100.0]), vec![1, 1]);
        assert_eq!(kernel_auto_weights(&[300.0, 100.0]), vec![3, 1]);
        // A node with tiny bandwidth still gets weight 1.
        assert_eq!(kernel_auto_weights(&[1000.0, 1.0]), vec![31, 1]);
    }

    #[test]
    fn search_space_is_every_reduced_vector() {
        let v = all_vectors(2, 4);
        assert!(v.contains(&vec![3, 1]) && v.contains(&vec![1, 4]));
        assert!(!v.contains(&vec![2, 2]) && !v.contains(&vec![4, 2]));
        assert_eq!(v.len(), 11); // coprime pairs in 1..=4
    }

    #[test]
    fn weights_parse_and_reject() {
        assert_eq!(parse_weights("3:1", 2).unwrap(), vec![3, 1]);
        assert!(parse_weights("3:x", 2).is_err());
        assert!(parse_weights("3", 2).is_err());
        assert!(parse_weights("0:0", 2).is_err());
        assert!(parse_weights("300:1", 2).is_err());
    }
}
