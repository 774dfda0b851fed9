//! The performance model.
//!
//! Each tier is a queue whose latency grows with its utilisation; the platform keeps a bounded number
//! of requests in flight. Under weighted interleave a fraction `f_i` of the requests goes to tier `i`
//! (the fraction of pages placed there, since interleaved pages are touched uniformly).
//!
//! Per tier (`L0` idle latency, `B` measured peak for the mix, `u_peak` and `kappa` from
//! [`ModelParams`]):
//! - service capacity `C = B / u_peak`: at its measured peak a tier runs at utilisation `u_peak`;
//! - loaded latency `L(b) = L0 * (1 + kappa * u / (1 - u))` with `u = b / C`. When the profile has a
//!   measured loaded-latency curve for the mix, `kappa` is fitted to that tier's own curve.
//!
//! Peak bandwidth of a split is the throughput `X` of a closed system with `N` bytes in flight:
//! `X * sum_i f_i * L_i(f_i * X) = N` (Little's law). `N` is the concurrency that drives the most
//! demanding single tier to its measured peak, `max_i B_i * L_i(B_i)`: it is a property of the platform's
//! cores, not of the split. Mixing a slow tier in raises the mean latency, so with `N` fixed the
//! total falls short of the sum of capacities — most where the tiers are balanced, which is what the
//! published sweeps show. Latency at a demand `D` is the open-system mean `sum_i f_i * L_i(f_i * D)`.

use cxltier_profile::{Mix, Profile, Tier};
use serde::Serialize;

/// The model's two shape parameters. The defaults describe a typical MLC loaded-latency curve (latency
/// near 3x idle at the measured peak) and are not fitted to any published sweep.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ModelParams {
    /// Utilisation of a tier at its measured peak bandwidth, in (0, 1).
    pub peak_utilization: f64,
    /// Queueing steepness: latency = idle * (1 + kappa * u / (1 - u)).
    pub queueing_factor: f64,
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams {
            peak_utilization: 0.95,
            queueing_factor: 0.1,
        }
    }
}

/// A placement of pages over the profile's tiers: one non-negative weight per tier, in tier order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Split(pub Vec<u32>);

impl Split {
    /// The fraction of pages on each tier.
    pub fn fractions(&self) -> Vec<f64> {
        let total: u32 = self.0.iter().sum();
        self.0
            .iter()
            .map(|&w| {
                if total == 0 {
                    0.0
                } else {
                    f64::from(w) / f64::from(total)
                }
            })
            .collect()
    }

    pub fn weights(&self) -> &[u32] {
        &self.0
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&parts.join(":"))
    }
}

/// What the model predicts for one split.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Prediction {
    /// Total bandwidth in GB/s.
    pub bandwidth_gbps: f64,
    /// Mean latency of a load, in ns.
    pub latency_ns: f64,
}

/// One tier's queue for one mix.
#[derive(Debug, Clone, Copy)]
struct TierQueue {
    idle_ns: f64,
    peak_gbps: f64,
    capacity_gbps: f64,
    kappa: f64,
}

impl TierQueue {
    fn latency(&self, offered_gbps: f64) -> f64 {
        let u = offered_gbps / self.capacity_gbps;
        if u >= 1.0 {
            return f64::INFINITY;
        }
        self.idle_ns * (1.0 + self.kappa * u / (1.0 - u))
    }
}

/// The model bound to a profile.
#[derive(Debug, Clone)]
pub struct Model<'p> {
    profile: &'p Profile,
    params: ModelParams,
}

impl<'p> Model<'p> {
    pub fn new(profile: &'p Profile) -> Self {
        Model {
            profile,
            params: ModelParams::default(),
        }
    }

    pub fn with_params(profile: &'p Profile, params: ModelParams) -> Self {
        Model { profile, params }
    }

    pub fn profile(&self) -> &'p Profile {
        self.profile
    }

    pub fn params(&self) -> ModelParams {
        self.params
    }

    fn queue(&self, tier: &Tier, mix: Mix) -> TierQueue {
        let peak = tier.peak_bandwidth(mix);
        let capacity = peak / self.params.peak_utilization;
        let kappa = tier
            .loaded_latency_for(mix)
            .and_then(|curve| fit_kappa(tier.idle_latency_ns, capacity, &curve.points))
            .unwrap_or(self.params.queueing_factor);
        TierQueue {
            idle_ns: tier.idle_latency_ns,
            peak_gbps: peak,
            capacity_gbps: capacity,
            kappa,
        }
    }

    /// Each tier's queue with `u_peak` applied alike, before the tiers are made consistent.
    fn shape_queues(&self, mix: Mix) -> Vec<TierQueue> {
        self.profile
            .tiers
            .iter()
            .map(|t| self.queue(t, mix))
            .collect()
    }

    /// Each tier's queue, with capacity such that the tier alone, driven by the platform's bytes in
    /// flight, delivers exactly its measured peak. The peaks were measured with the same cores issuing
    /// as many misses as they can, so that is what a single-tier measurement means; `u_peak` then holds
    /// for the most demanding tier, and a less demanding one runs a little closer to its capacity.
    fn queues(&self, mix: Mix) -> Vec<TierQueue> {
        let mut queues = self.shape_queues(mix);
        let in_flight = bytes_in_flight(&queues);
        for q in &mut queues {
            // Solve peak * idle * (1 + kappa * x) = in_flight for x = u / (1 - u).
            let x = (in_flight / (q.peak_gbps * q.idle_ns) - 1.0) / q.kappa;
            if x.is_finite() && x > 0.0 {
                let u = x / (1.0 + x);
                q.capacity_gbps = q.peak_gbps / u;
            }
        }
        queues
    }

    /// Bytes the platform keeps in flight at full load for `mix` (see the module docs).
    pub fn saturation_bytes_in_flight(&self, mix: Mix) -> f64 {
        bytes_in_flight(&self.shape_queues(mix))
    }

    /// Peak bandwidth of `split` under `mix`, with the latency seen at that load.
    pub fn peak(&self, split: &Split, mix: Mix) -> Prediction {
        self.at_bytes_in_flight(split, mix, self.saturation_bytes_in_flight(mix))
    }

    /// Bandwidth and latency with `outstanding` requests (cache lines) in flight.
    pub fn at_outstanding(&self, split: &Split, mix: Mix, outstanding: f64) -> Prediction {
        let line = f64::from(self.profile.platform.line_bytes);
        self.at_bytes_in_flight(split, mix, outstanding.max(0.0) * line)
    }

    fn at_bytes_in_flight(&self, split: &Split, mix: Mix, bytes: f64) -> Prediction {
        let queues = self.queues(mix);
        let f = split.fractions();
        let mean_latency = |x: f64| -> f64 {
            queues
                .iter()
                .zip(&f)
                .filter(|(_, &fi)| fi > 0.0)
                .map(|(q, &fi)| fi * q.latency(fi * x))
                .sum()
        };
        if bytes <= 0.0 {
            return Prediction {
                bandwidth_gbps: 0.0,
                latency_ns: mean_latency(0.0),
            };
        }
        // X * L(X) rises monotonically from 0 to infinity on [0, X_max): bisect for X * L(X) = bytes.
        let x_max = queues
            .iter()
            .zip(&f)
            .filter(|(_, &fi)| fi > 0.0)
            .map(|(q, &fi)| q.capacity_gbps / fi)
            .fold(f64::INFINITY, f64::min);
        let (mut lo, mut hi) = (0.0, x_max);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if mid * mean_latency(mid) < bytes {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let x = 0.5 * (lo + hi);
        Prediction {
            bandwidth_gbps: x,
            latency_ns: bytes / x,
        }
    }

    /// Mean latency when the workload asks for `demand_gbps` in total, or `None` when the split cannot
    /// deliver that much (the demand is above its predicted peak).
    pub fn at_demand(&self, split: &Split, mix: Mix, demand_gbps: f64) -> Option<Prediction> {
        let peak = self.peak(split, mix);
        if demand_gbps > peak.bandwidth_gbps {
            return None;
        }
        let queues = self.queues(mix);
        let latency = queues
            .iter()
            .zip(split.fractions())
            .filter(|(_, fi)| *fi > 0.0)
            .map(|(q, fi)| fi * q.latency(fi * demand_gbps))
            .sum();
        Some(Prediction {
            bandwidth_gbps: demand_gbps,
            latency_ns: latency,
        })
    }

    /// Idle latency of `split`: the page-weighted mean of the tiers' idle latencies.
    pub fn idle_latency(&self, split: &Split) -> f64 {
        self.profile
            .tiers
            .iter()
            .zip(split.fractions())
            .map(|(t, fi)| fi * t.idle_latency_ns)
            .sum()
    }
}

/// The concurrency that drives the most demanding tier to its measured peak.
fn bytes_in_flight(queues: &[TierQueue]) -> f64 {
    queues
        .iter()
        .map(|q| q.peak_gbps * q.latency(q.peak_gbps))
        .fold(0.0, f64::max)
}

/// Least-squares fit of `kappa` in `L = L0 * (1 + kappa * x)`, `x = u / (1 - u)`, to measured points.
fn fit_kappa(idle_ns: f64, capacity_gbps: f64, points: &[(f64, f64)]) -> Option<f64> {
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for &(bw, lat) in points {
        let u = bw / capacity_gbps;
        if u <= 0.0 || u >= 1.0 {
            continue;
        }
        let x = u / (1.0 - u);
        let y = lat / idle_ns - 1.0;
        sxy += x * y;
        sxx += x * x;
    }
    (sxx > 0.0 && sxy > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The built-in profile of the published Xeon 6 machine.
    pub(crate) fn xeon6() -> Profile {
        Profile::load(crate::published::XEON6_PROFILE).unwrap()
    }

    #[test]
    fn single_tier_peak_is_the_measured_peak() {
        let p = xeon6();
        let m = Model::new(&p);
        for mix in Mix::common() {
            // The platform's concurrency is sized by the most demanding tier; each tier's capacity is
            // such that, alone under that concurrency, it reaches exactly its measured peak.
            for (i, split) in [Split(vec![1, 0]), Split(vec![0, 1])].iter().enumerate() {
                let bw = m.peak(split, mix).bandwidth_gbps;
                let err = bw / p.tiers[i].peak_bandwidth(mix) - 1.0;
                assert!(err.abs() < 1e-6, "{mix} tier {i}: {bw}");
            }
        }
    }

    #[test]
    fn interleave_is_below_the_sum_of_capacities_and_above_dram_alone_near_the_optimum() {
        let p = xeon6();
        let m = Model::new(&p);
        let three_one = m.peak(&Split(vec![3, 1]), Mix::READ_ONLY).bandwidth_gbps;
        assert!(
            three_one > 556.0 && three_one < 556.0 + 205.0,
            "{three_one}"
        );
    }

    #[test]
    fn more_outstanding_requests_never_lower_bandwidth() {
        let p = xeon6();
        let m = Model::new(&p);
        let split = Split(vec![3, 1]);
        let mut last = 0.0;
        for n in [1.0, 10.0, 100.0, 1000.0, 3000.0, 10000.0] {
            let pr = m.at_outstanding(&split, Mix::READ_ONLY, n);
            assert!(pr.bandwidth_gbps >= last, "{n}: {pr:?}");
            assert!(pr.latency_ns >= m.idle_latency(&split) - 1e-9);
            last = pr.bandwidth_gbps;
        }
    }

    #[test]
    fn demand_above_peak_is_refused() {
        let p = xeon6();
        let m = Model::new(&p);
        assert!(m
            .at_demand(&Split(vec![1, 0]), Mix::READ_ONLY, 600.0)
            .is_none());
        let low = m
            .at_demand(&Split(vec![1, 0]), Mix::READ_ONLY, 1.0)
            .unwrap();
        assert!((low.latency_ns - 110.0).abs() < 0.1);
    }

    #[test]
    fn kappa_fit_recovers_the_curve() {
        let cap = 100.0;
        let pts: Vec<(f64, f64)> = [10.0, 50.0, 80.0, 90.0]
            .iter()
            .map(|&b| {
                let u: f64 = b / cap;
                (b, 100.0 * (1.0 + 0.3 * u / (1.0 - u)))
            })
            .collect();
        assert!((fit_kappa(100.0, cap, &pts).unwrap() - 0.3).abs() < 1e-9);
    }
}
