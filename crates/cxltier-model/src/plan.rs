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
    /// Relative difference below which two predictions count as equal. `None` takes the model's stated
    /// error against the published figures ([`crate::published::stated_error`]).
    pub tolerance: Option<f64>,
}

impl PlanRequest {
    pub fn new(mix: Mix, goal: Goal) -> Self {
        PlanRequest {
            mix,
            goal,
            demand_gbps: None,
            candidates: None,
            max_weight: 10,
            tolerance: None,
        }
    }

    /// The total demand in GB/s (`None`: the goal's default).
    pub fn with_demand(mut self, gbps: Option<f64>) -> Self {
        self.demand_gbps = gbps;
        self
    }

    /// Without candidates, search every ratio with weights 1..=`max_weight` per tier.
    pub fn with_max_weight(mut self, max_weight: u32) -> Self {
        self.max_weight = max_weight;
        self
    }

    /// Predictions closer than `percent` percent count as equal (`None`: the model's stated
    /// error). Refuses a negative or non-finite percentage.
    pub fn with_tolerance_percent(mut self, percent: Option<f64>) -> Result<Self, PlanError> {
        if let Some(t) = percent {
            if !(t.is_finite() && t >= 0.0) {
                return Err(PlanError::BadTolerance(t));
            }
            self.tolerance = Some(t / 100.0);
        }
        Ok(self)
    }

    /// Only consider these weight vectors, written as `1:1,2:1,5:2` (see [`parse_candidates`])
    /// for a profile of `tiers` tiers.
    pub fn with_candidates_text(
        mut self,
        text: Option<&str>,
        tiers: usize,
    ) -> Result<Self, PlanError> {
        if let Some(text) = text {
            self.candidates = Some(parse_candidates(text, tiers)?);
        }
        Ok(self)
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

impl Candidate {
    /// The figure `goal` compares: peak bandwidth (GB/s), or latency at the demand (ns; `None`
    /// when the split cannot carry it).
    pub fn figure(&self, goal: Goal) -> Option<f64> {
        match goal {
            Goal::Bandwidth => Some(self.bandwidth_gbps),
            Goal::Latency => self.latency_at_demand_ns,
        }
    }

    /// The fastest tier's share of the pages of a two-tier split, in percent.
    pub fn first_tier_share(&self) -> f64 {
        100.0 * f64::from(self.weights[0]) / f64::from(self.weights[0] + self.weights[1])
    }

    /// The candidate's (fastest tier's page share, figure) point on a two-tier sweep's curve.
    pub fn curve_point(&self, goal: Goal) -> Option<(f64, f64)> {
        self.figure(goal).map(|v| (self.first_tier_share(), v))
    }

    /// The weights as written: `3:1`.
    pub fn weights_text(&self) -> String {
        Split(self.weights.clone()).to_string()
    }
}

impl WeightPlan {
    /// The two-tier sweep with the DRAM-only and kernel-auto splits as a curve: (fastest tier's
    /// page share in percent, the goal's figure), by rising share, one point per share.
    pub fn sweep_curve(&self) -> Vec<(f64, f64)> {
        let mut points: Vec<(f64, f64)> = self
            .sweep
            .iter()
            .chain([&self.dram_only, &self.kernel_auto])
            .filter_map(|c| c.curve_point(self.goal))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points.dedup_by(|a, b| a.0 == b.0);
        points
    }
}

/// What the planner advises doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Action {
    /// Leave memory on the fastest tier: no split beats it by more than the model's error.
    #[serde(rename = "do not interleave")]
    DoNotInterleave,
    /// Use the weights the kernel derives itself: no other split beats them by more than the model's
    /// error.
    #[serde(rename = "keep auto")]
    KeepAuto,
    /// Set the recommended weights: they beat both defaults by more than the model's error.
    #[serde(rename = "interleave")]
    Interleave,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::DoNotInterleave => "do not interleave",
            Action::KeepAuto => "keep auto",
            Action::Interleave => "interleave",
        })
    }
}

/// The recommended candidate with what to do, the candidates the model cannot tell apart from it, and
/// why it was picked.
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    #[serde(flatten)]
    pub candidate: Candidate,
    pub action: Action,
    /// Other weight vectors predicted within the tolerance of the best one, best first.
    pub equivalent: Vec<Vec<u32>>,
    pub reason: String,
}

impl std::ops::Deref for Recommendation {
    type Target = Candidate;
    fn deref(&self) -> &Candidate {
        &self.candidate
    }
}

/// The model's error against the published figures: over all of them, and over the splits it predicts
/// (the single-tier figures are its inputs).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ModelError {
    pub all: crate::published::ErrorSummary,
    pub predicted: crate::published::ErrorSummary,
}

/// The planner's answer.
#[derive(Debug, Clone, Serialize)]
pub struct WeightPlan {
    pub mix: Mix,
    pub goal: Goal,
    pub profile: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demand_gbps: Option<f64>,
    pub recommended: Recommendation,
    pub kernel_auto: Candidate,
    pub dram_only: Candidate,
    /// The candidate with the best prediction, before the tolerance is applied (may differ from
    /// `recommended` when a default is as good within the model's error).
    pub best_predicted: Candidate,
    /// Relative difference below which two predictions were taken as equal (the model's stated error
    /// unless the request gave one).
    pub tolerance: f64,
    /// The model's error against the published figures it is checked on.
    pub model_error: ModelError,
    /// Every candidate evaluated, best first; DRAM only and the kernel's `auto` weights are always
    /// among them.
    pub sweep: Vec<Candidate>,
}

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    BadRequest(String),
    #[error("--tolerance must be a non-negative percentage, got {0}")]
    BadTolerance(f64),
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
            PlanError::BadTolerance(_) => {
                Some("e.g. --tolerance 2 treats predictions within 2% as equal".into())
            }
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

/// Parse a weight vector such as `3:1` or `5:2:1` ([`cxltier_topo::Weights`]' rules), one weight
/// per tier.
pub fn parse_weights(text: &str, tiers: usize) -> Result<Vec<u32>, PlanError> {
    let weights = cxltier_topo::Weights::parse(text)
        .map_err(|e| PlanError::BadRequest(e.to_string()))?
        .into_vec();
    if weights.len() != tiers {
        return Err(PlanError::BadRequest(format!(
            "invalid weights {text:?}: expected {tiers} weights, one per tier fastest first"
        )));
    }
    Ok(weights)
}

/// Weight vectors as written in a list: `1:1,2:1,5:2` (empty items skipped), each with one weight
/// per tier of a profile of `tiers` tiers.
pub fn parse_candidates(text: &str, tiers: usize) -> Result<Vec<Vec<u32>>, PlanError> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|c| parse_weights(c.trim(), tiers))
        .collect()
}

/// The plans for one profile, as `cxltier plan --json` prints them: the profile, where it came
/// from, its tiers, and one plan per mix.
#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub profile: String,
    pub source: String,
    pub tiers: Vec<TierSummary>,
    pub plans: Vec<WeightPlan>,
}

/// A tier of the profile planned on, in a [`PlanReport`].
#[derive(Debug, Clone, Serialize)]
pub struct TierSummary {
    pub name: String,
    pub kind: &'static str,
    pub nodes: Vec<u32>,
    pub capacity_bytes: u64,
    pub idle_latency_ns: f64,
}

impl PlanReport {
    /// The report of `plans` made on `profile`, which came from `source` (a note for people).
    pub fn new(profile: &Profile, source: &str, plans: Vec<WeightPlan>) -> PlanReport {
        PlanReport {
            profile: profile.name.clone(),
            source: source.to_string(),
            tiers: profile
                .tiers
                .iter()
                .map(|t| TierSummary {
                    name: t.name.clone(),
                    kind: t.kind.as_str(),
                    nodes: t.nodes.clone(),
                    capacity_bytes: t.capacity_bytes,
                    idle_latency_ns: t.idle_latency_ns,
                })
                .collect(),
            plans,
        }
    }
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

    let auto_weights = kernel_auto_weights(
        &profile
            .tiers
            .iter()
            .map(|t| t.firmware_bandwidth())
            .collect::<Vec<_>>(),
    );
    let report = crate::published::error_report();
    let model_error = ModelError {
        all: report.all,
        predicted: report.predicted,
    };
    let tolerance = match req.tolerance {
        Some(t) if t.is_finite() && t >= 0.0 => t,
        Some(t) => {
            return Err(PlanError::BadRequest(format!(
                "tolerance must be a non-negative fraction such as 0.02, got {t}"
            )))
        }
        None => model_error.predicted.median_abs_error,
    };

    // The two defaults are always candidates: advice must never be worse than doing nothing.
    let mut vectors = vectors;
    for default in [&dram_vec, &auto_weights] {
        if !vectors.iter().any(|v| same_ratio(v, default)) {
            vectors.push(default.clone());
        }
    }
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
    let dram_only = evaluate(dram_vec);
    let kernel_auto = evaluate(auto_weights);
    let recommended = recommend(req.goal, &sweep, &dram_only, &kernel_auto, tolerance);
    Ok(WeightPlan {
        mix: req.mix,
        goal: req.goal,
        profile: profile.name.clone(),
        demand_gbps: demand,
        recommended,
        kernel_auto,
        dram_only,
        best_predicted: sweep[0].clone(),
        tolerance,
        model_error,
        sweep,
    })
}

/// Whether two weight vectors place pages in the same proportions (2:0 is 1:0, 6:2 is 3:1).
fn same_ratio(a: &[u32], b: &[u32]) -> bool {
    let reduce = |v: &[u32]| {
        let g = v.iter().copied().fold(0, gcd).max(1);
        v.iter().map(|w| w / g).collect::<Vec<_>>()
    };
    reduce(a) == reduce(b)
}

/// How much better `a` is predicted than `b` for `goal`, as a fraction: bandwidth `a/b - 1`, latency
/// `b/a - 1`. A split that cannot carry the demand is infinitely worse.
fn advantage(goal: Goal, a: &Candidate, b: &Candidate) -> f64 {
    match goal {
        Goal::Bandwidth => a.bandwidth_gbps / b.bandwidth_gbps - 1.0,
        Goal::Latency => {
            let lat = |c: &Candidate| c.latency_at_demand_ns.unwrap_or(f64::INFINITY);
            match (lat(a), lat(b)) {
                (x, y) if x.is_infinite() && y.is_infinite() => 0.0,
                (x, y) => y / x - 1.0,
            }
        }
    }
}

fn describe(goal: Goal, c: &Candidate) -> String {
    match goal {
        Goal::Bandwidth => format!("{} GB/s", fmt1(c.bandwidth_gbps)),
        Goal::Latency => match c.latency_at_demand_ns {
            Some(l) => format!("{} ns", fmt1(l)),
            None => "cannot carry the demand".into(),
        },
    }
}

fn fmt1(x: f64) -> String {
    format!("{x:.1}")
}

fn pct(x: f64) -> String {
    if x.abs() < 0.0005 {
        "under 0.1%".into()
    } else {
        format!("{:.1}%", x * 100.0)
    }
}

/// Pick from `sweep` (best first): a default when none beats it by more than `tolerance`, otherwise
/// the best prediction; list the candidates within `tolerance` of the best.
fn recommend(
    goal: Goal,
    sweep: &[Candidate],
    dram_only: &Candidate,
    kernel_auto: &Candidate,
    tolerance: f64,
) -> Recommendation {
    let best = &sweep[0];
    let within = |c: &Candidate| advantage(goal, best, c) <= tolerance;
    let auto_name = format!(
        "the kernel's auto weights {}",
        Split(kernel_auto.weights.clone())
    );
    let margin = format!("the model's error of {}", pct(tolerance));
    // Of the defaults the model cannot tell from the best, the better one.
    let default = [
        (dram_only, Action::DoNotInterleave, "DRAM only".to_string()),
        (kernel_auto, Action::KeepAuto, auto_name.clone()),
    ]
    .into_iter()
    .filter(|(c, _, _)| within(c))
    .min_by(|a, b| advantage(goal, best, a.0).total_cmp(&advantage(goal, best, b.0)));
    // The best split with its prediction, and another candidate's prediction with how far
    // behind the best it is.
    let best_text = format!("{} ({})", Split(best.weights.clone()), describe(goal, best));
    let behind = |c: &Candidate| {
        format!(
            "({}) by {}",
            describe(goal, c),
            pct(advantage(goal, best, c))
        )
    };
    let (candidate, action, reason) = match default {
        Some((c, action, name)) => {
            let reason = if same_ratio(&c.weights, &best.weights) {
                format!(
                    "{name} is predicted best ({}); no split does better",
                    describe(goal, c)
                )
            } else {
                format!(
                    "the best prediction, {best_text}, beats {name} {}, within {margin}: not worth changing",
                    behind(c)
                )
            };
            (c.clone(), action, reason)
        }
        None => (
            best.clone(),
            Action::Interleave,
            format!(
                "{best_text} beats {auto_name} {} and DRAM only {}, more than {margin}",
                behind(kernel_auto),
                behind(dram_only),
            ),
        ),
    };
    let equivalent: Vec<Vec<u32>> = sweep
        .iter()
        .filter(|c| within(c) && !same_ratio(&c.weights, &candidate.weights))
        .map(|c| c.weights.clone())
        .collect();
    let reason = if equivalent.is_empty() {
        reason
    } else {
        let list: Vec<String> = equivalent
            .iter()
            .map(|w| Split(w.clone()).to_string())
            .collect();
        format!(
            "{reason}; {} predicted within {} of the best, as good as far as the model can tell",
            list.join(", "),
            pct(tolerance)
        )
    };
    Recommendation {
        candidate,
        action,
        equivalent,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::xeon6;

    #[test]
    fn latency_goal_for_read_only_says_do_not_interleave() {
        // Every interleave ratio puts some loads on CXL at 2.3x the idle latency; at half of DRAM's
        // peak DRAM alone is not yet queueing enough to make that worth it.
        let plan = plan(&xeon6(), &PlanRequest::new(Mix::READ_ONLY, Goal::Latency)).unwrap();
        assert_eq!(plan.recommended.action, Action::DoNotInterleave);
        assert_eq!(plan.recommended.weights, vec![1, 0]);
        let best_interleave = plan
            .sweep
            .iter()
            .filter(|c| c.weights.iter().all(|&w| w > 0))
            .filter_map(|c| c.latency_at_demand_ns)
            .fold(f64::INFINITY, f64::min);
        assert!(plan.recommended.latency_ns < best_interleave);
        assert!(
            plan.recommended.reason.contains("DRAM only"),
            "{}",
            plan.recommended.reason
        );
    }

    #[test]
    fn defaults_are_candidates_even_when_not_asked_for() {
        let mut req = PlanRequest::new(Mix::READ_ONLY, Goal::Bandwidth);
        req.candidates = Some(vec![vec![1, 1], vec![2, 1]]);
        let plan = plan(&xeon6(), &req).unwrap();
        assert!(plan.sweep.iter().any(|c| c.weights == vec![1, 0]));
        assert!(plan.sweep.iter().any(|c| c.weights == vec![23, 8]));
        // Asking for 2:0 is DRAM only already: it is not added twice.
        req.candidates = Some(vec![vec![2, 0], vec![3, 1]]);
        let plan = super::plan(&xeon6(), &req).unwrap();
        assert_eq!(plan.sweep.len(), 3, "{:?}", plan.sweep);
    }

    #[test]
    fn keep_auto_when_the_best_split_is_within_the_error() {
        // 2:1nt: the best split is predicted a fraction of a percent above the auto weights 23:8.
        let plan = plan(
            &xeon6(),
            &PlanRequest::new("2:1nt".parse().unwrap(), Goal::Bandwidth),
        )
        .unwrap();
        assert_ne!(plan.best_predicted.weights, vec![23, 8]);
        let gap = plan.best_predicted.bandwidth_gbps / plan.kernel_auto.bandwidth_gbps - 1.0;
        assert!(gap > 0.0 && gap <= plan.tolerance, "{gap}");
        assert_eq!(plan.recommended.action, Action::KeepAuto);
        assert_eq!(plan.recommended.weights, vec![23, 8]);
        assert!(plan
            .recommended
            .equivalent
            .contains(&plan.best_predicted.weights));
        assert!(
            plan.recommended.reason.contains("within"),
            "{}",
            plan.recommended.reason
        );
        // With no tolerance at all the best prediction wins.
        let mut req = PlanRequest::new("2:1nt".parse().unwrap(), Goal::Bandwidth);
        req.tolerance = Some(0.0);
        let strict = super::plan(&xeon6(), &req).unwrap();
        assert_eq!(strict.recommended.action, Action::Interleave);
        assert_eq!(strict.recommended.weights, strict.best_predicted.weights);
    }

    #[test]
    fn candidates_within_the_error_are_listed_together() {
        // 1:1 mix among the published ratios: 5:2 and 2:1 are under 1% apart, the auto weights and
        // DRAM only well below.
        let mut req = PlanRequest::new("1:1".parse().unwrap(), Goal::Bandwidth);
        req.candidates = Some(Vec::from(
            [[1, 1], [2, 1], [5, 2], [3, 1], [4, 1]].map(Vec::from),
        ));
        let plan = plan(&xeon6(), &req).unwrap();
        assert_eq!(plan.recommended.action, Action::Interleave);
        assert_eq!(plan.recommended.weights, vec![5, 2]);
        assert!(
            plan.recommended.equivalent.contains(&vec![2, 1]),
            "{:?}",
            plan.recommended.equivalent
        );
        for w in &plan.recommended.equivalent {
            let c = plan.sweep.iter().find(|c| &c.weights == w).unwrap();
            assert!(plan.recommended.bandwidth_gbps / c.bandwidth_gbps - 1.0 <= plan.tolerance);
        }
        for c in &plan.sweep {
            let close = plan.recommended.bandwidth_gbps / c.bandwidth_gbps - 1.0 <= plan.tolerance;
            let listed = plan.recommended.equivalent.contains(&c.weights);
            assert_eq!(close && c.weights != vec![5, 2], listed, "{:?}", c.weights);
        }
    }

    #[test]
    fn bad_tolerance_is_refused() {
        let mut req = PlanRequest::new(Mix::READ_ONLY, Goal::Bandwidth);
        req.tolerance = Some(-0.1);
        let err = plan(&xeon6(), &req).unwrap_err();
        assert!(err.to_string().contains("tolerance"), "{err}");
    }

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
