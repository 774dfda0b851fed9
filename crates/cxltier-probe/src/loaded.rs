//! The loaded-latency sweep: which delays, and how a measured curve becomes profile points.
//!
//! Like MLC, the traffic generators run with an injected delay between requests, from a long delay
//! (memory nearly idle) down to none (saturation), while one thread measures load latency. Each
//! delay gives one (bandwidth, latency) point.
//!
//! A profile only accepts curves that make physical sense (`crates/cxltier-profile/src/raw.rs`):
//! latency at least 0.97x the tier's idle latency, bandwidth at most 1.05x its peak for the mix,
//! bandwidth strictly rising and latency never falling. Measured curves wobble (other programs,
//! frequency changes, the chase's own noise), and on a machine with few cores the latency may hardly
//! rise at all, so that noise is all there is. [`clean`] makes a measured curve fit: it drops points
//! that cannot be repaired (beyond the peak), raises latencies below the idle latency to it (queueing
//! only adds delay), merges points of equal bandwidth, and replaces the latencies by their isotonic
//! fit (the non-decreasing curve closest to them in least squares, pool-adjacent-violators). It
//! reports what it dropped and how far it moved any point.

use serde::Serialize;

/// Injected delays per line, in spin iterations (a few cycles each), from nearly idle to flat out.
/// Geometric, denser near zero where bandwidth climbs fastest.
pub const DELAYS: [u64; 19] = [
    8192, 4096, 2048, 1024, 512, 256, 160, 96, 64, 48, 32, 24, 16, 12, 8, 4, 2, 1, 0,
];

/// The delays to sweep: `DELAYS` thinned to at most `max_points`, always keeping the first (most
/// idle) and the last (no delay), in descending order.
pub fn delays(max_points: usize) -> Vec<u64> {
    let n = DELAYS.len();
    let k = max_points.clamp(2, n);
    if k == n {
        return DELAYS.to_vec();
    }
    let mut out: Vec<u64> = (0..k)
        .map(|i| DELAYS[(i * (n - 1) + (k - 1) / 2) / (k - 1)])
        .collect();
    out[0] = DELAYS[0];
    out[k - 1] = 0;
    out.dedup();
    out
}

/// A curve made fit for a profile.
#[derive(Debug, Clone, Serialize)]
pub struct Cleaned {
    /// `[GB/s, ns]` points by rising bandwidth, latency never falling.
    pub points: Vec<[f64; 2]>,
    /// Points left out, each with the reason.
    pub dropped: Vec<String>,
    /// Points whose latency the fit moved by more than 0.05 ns.
    pub adjusted: usize,
    /// The largest such move, ns.
    pub max_adjust_ns: f64,
}

/// Turn measured `(GB/s, ns)` points into a curve a profile accepts for a tier with idle latency
/// `idle_ns` and peak bandwidth `peak_gbps` for the mix. Returns no points (and says why) when
/// fewer than two distinct bandwidths survive. Values are rounded to 0.01 GB/s and 0.1 ns as
/// written to the profile.
pub fn clean(raw: &[(f64, f64)], idle_ns: f64, peak_gbps: f64) -> Cleaned {
    let mut dropped = Vec::new();
    // (bandwidth, measured latency, latency to fit)
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for &(bw, lat) in raw {
        let (bw, lat) = (round(bw, 100.0), round(lat, 10.0));
        if !(bw.is_finite() && lat.is_finite() && bw >= 0.0 && lat > 0.0) {
            dropped.push(format!("[{bw}, {lat}]: not a measurement"));
        } else if bw > peak_gbps * 1.05 {
            dropped.push(format!(
                "[{bw}, {lat}]: bandwidth above 1.05x the measured peak {peak_gbps:.2} GB/s"
            ));
        } else {
            pts.push((bw, lat));
        }
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Merge equal bandwidths (their mean latency), keeping weights for the fit.
    let mut groups: Vec<(f64, f64, usize)> = Vec::new(); // (bw, sum of latency, count)
    for (bw, lat) in &pts {
        match groups.last_mut() {
            Some(g) if g.0 == *bw => {
                g.1 += lat;
                g.2 += 1;
            }
            _ => groups.push((*bw, *lat, 1)),
        }
    }
    // Queueing only adds delay: nothing is faster than idle.
    let target: Vec<f64> = groups
        .iter()
        .map(|g| (g.1 / g.2 as f64).max(idle_ns))
        .collect();
    let weights: Vec<f64> = groups.iter().map(|g| g.2 as f64).collect();
    let fit = isotonic(&target, &weights);
    let mut points = Vec::new();
    let mut adjusted = 0;
    let mut max_adjust = 0.0f64;
    let mut k = 0;
    for (g, f) in groups.iter().zip(&fit) {
        let f = round(*f, 10.0);
        for (bw, lat) in &pts[k..k + g.2] {
            debug_assert_eq!(*bw, g.0);
            let moved = (f - lat).abs();
            if moved > 0.05 {
                adjusted += 1;
                max_adjust = max_adjust.max(moved);
            }
        }
        k += g.2;
        points.push([g.0, f]);
    }
    if points.len() < 2 {
        for p in points.drain(..) {
            dropped.push(format!(
                "[{}, {}]: fewer than two distinct bandwidths; no curve written",
                p[0], p[1]
            ));
        }
    }
    Cleaned {
        points,
        dropped,
        adjusted,
        max_adjust_ns: round(max_adjust, 10.0),
    }
}

/// The weighted least-squares non-decreasing fit to `y` (pool adjacent violators).
pub fn isotonic(y: &[f64], w: &[f64]) -> Vec<f64> {
    // Blocks of (mean, weight, count).
    let mut blocks: Vec<(f64, f64, usize)> = Vec::new();
    for (&v, &wt) in y.iter().zip(w) {
        blocks.push((v, wt, 1));
        while blocks.len() > 1 && blocks[blocks.len() - 2].0 > blocks[blocks.len() - 1].0 {
            let b = blocks.pop().expect("two blocks");
            let a = blocks.last_mut().expect("two blocks");
            let total = a.1 + b.1;
            a.0 = (a.0 * a.1 + b.0 * b.1) / total;
            a.1 = total;
            a.2 += b.2;
        }
    }
    blocks
        .iter()
        .flat_map(|&(m, _, n)| std::iter::repeat_n(m, n))
        .collect()
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_run_from_idle_to_flat_out() {
        let all = delays(100);
        assert_eq!(all, DELAYS.to_vec());
        assert!(all.windows(2).all(|w| w[0] > w[1]));
        let few = delays(5);
        assert_eq!(few.len(), 5);
        assert_eq!(few[0], 8192);
        assert_eq!(*few.last().unwrap(), 0);
        assert!(few.windows(2).all(|w| w[0] > w[1]), "{few:?}");
        assert_eq!(delays(1), vec![8192, 0]);
    }

    fn valid(c: &Cleaned, idle: f64, peak: f64) {
        for w in c.points.windows(2) {
            assert!(w[1][0] > w[0][0] && w[1][1] >= w[0][1], "{c:?}");
        }
        assert!(
            c.points
                .iter()
                .all(|p| p[1] >= idle * 0.97 && p[0] <= peak * 1.05),
            "{c:?}"
        );
    }

    #[test]
    fn a_clean_curve_is_kept_as_measured() {
        let raw = [(1.0, 100.0), (5.0, 105.0), (9.0, 130.0), (10.0, 200.0)];
        let c = clean(&raw, 100.0, 10.0);
        assert_eq!(
            c.points,
            vec![[1.0, 100.0], [5.0, 105.0], [9.0, 130.0], [10.0, 200.0]]
        );
        assert!(c.dropped.is_empty());
        assert_eq!(c.adjusted, 0);
    }

    #[test]
    fn wobbles_are_smoothed_and_impossible_points_dropped() {
        let raw = [
            (0.5, 90.0), // below idle: raised to it
            (1.0, 101.0),
            (3.0, 99.0), // latency dips: pooled with its neighbour
            (5.0, 110.0),
            (8.0, 150.0),
            (12.0, 300.0), // above 1.05 x peak: dropped
        ];
        let c = clean(&raw, 100.0, 10.0);
        assert_eq!(
            c.points,
            vec![
                [0.5, 100.0],
                [1.0, 100.5],
                [3.0, 100.5],
                [5.0, 110.0],
                [8.0, 150.0]
            ]
        );
        assert_eq!(c.dropped.len(), 1);
        assert!(c.dropped[0].contains("above 1.05x"));
        assert_eq!(c.adjusted, 3);
        assert!((c.max_adjust_ns - 10.0).abs() < 1e-9);
        valid(&c, 100.0, 10.0);
    }

    #[test]
    fn a_flat_noisy_curve_keeps_every_bandwidth() {
        // A machine whose latency hardly rises with load: only noise.
        let raw = [
            (0.35, 189.0),
            (0.36, 189.8),
            (0.5, 186.0),
            (1.06, 193.4),
            (2.0, 184.0),
            (4.0, 188.0),
            (8.0, 185.0),
            (12.0, 191.0),
            (23.5, 190.0),
        ];
        let idle = 188.6;
        let c = clean(&raw, idle, 40.0);
        assert_eq!(c.points.len(), raw.len(), "{c:?}");
        assert!(c.dropped.is_empty());
        valid(&c, idle, 40.0);
        // Equal bandwidths merge; the result still passes.
        let dup = clean(&[(1.0, 200.0), (1.0, 210.0), (2.0, 205.0)], 190.0, 10.0);
        assert_eq!(dup.points, vec![[1.0, 205.0], [2.0, 205.0]]);
    }

    #[test]
    fn isotonic_fit_pools_violators() {
        let f = isotonic(&[1.0, 3.0, 2.0, 4.0], &[1.0; 4]);
        assert_eq!(f, vec![1.0, 2.5, 2.5, 4.0]);
        let f = isotonic(&[5.0, 1.0], &[3.0, 1.0]);
        assert_eq!(f, vec![4.0, 4.0]);
    }

    #[test]
    fn too_few_points_give_no_curve() {
        let c = clean(&[(1.0, 150.0), (20.0, 120.0)], 100.0, 10.0);
        assert!(c.points.is_empty());
        assert_eq!(c.dropped.len(), 2);
    }
}
