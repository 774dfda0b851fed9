//! The best hit ratio any cache of a given size can reach on a workload's key choices.
//!
//! YCSB's choosers draw keys independently from a fixed distribution, so no cache of K objects
//! can beat one that always holds the K most requested keys. Drawing the workload's own key
//! sequence and counting gives that bound: a store's measured memory hit ratio is read against
//! it (what a tiered store at 5x its memory can reach is set by the workload, not the store).

use std::sync::Arc;

use crate::workload::{Op, Shared, ThreadGen};
use crate::YcsbError;

/// The bound for each cache size in `cache_objects`: the share of the key choices of `draws`
/// operations (reads, updates, read-modify-writes; scans and inserts excluded) that fall on the
/// most chosen `k` keys.
pub fn best_hit_ratios(
    shared: Arc<Shared>,
    cache_objects: &[u64],
    draws: u64,
    seed: u64,
) -> Result<Vec<f64>, YcsbError> {
    if shared.spec.insert > 0.0 || shared.spec.scan > 0.0 {
        return Err(YcsbError::BadInput(
            "the hit-ratio bound is for workloads that only read and update existing keys (a, b, c, f)"
                .into(),
        ));
    }
    if draws == 0 {
        return Err(YcsbError::BadInput("--draws must be at least 1".into()));
    }
    let records = shared.record_count as usize;
    let start = shared.insert_start as i64;
    let mut counts = vec![0u32; records];
    let mut gen = ThreadGen::new(shared, seed);
    let mut drawn = 0u64;
    for _ in 0..draws {
        if matches!(gen.next_op(), Op::Insert | Op::Scan) {
            continue;
        }
        let k = gen.next_keynum() - start;
        if let Some(c) = usize::try_from(k).ok().and_then(|k| counts.get_mut(k)) {
            *c += 1;
            drawn += 1;
        }
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let mut prefix = Vec::with_capacity(records + 1);
    let mut sum = 0u64;
    prefix.push(0);
    for c in &counts {
        sum += u64::from(*c);
        prefix.push(sum);
    }
    Ok(cache_objects
        .iter()
        .map(|&k| prefix[(k as usize).min(records)] as f64 / drawn.max(1) as f64)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{shared, DataSet, Phase, Spec};

    fn data(records: u64) -> DataSet {
        DataSet {
            records,
            insert_start: 0,
            field_count: 10,
            field_length: 100,
            data_integrity: false,
        }
    }

    #[test]
    fn bounds_grow_with_the_cache_and_reach_one() {
        let s = shared(Spec::core('c').unwrap(), Phase::Run, data(100_000), 100_000).unwrap();
        let r = best_hit_ratios(s, &[0, 1_000, 10_000, 50_000, 100_000], 400_000, 7).unwrap();
        assert_eq!(r[0], 0.0);
        assert!(r.windows(2).all(|w| w[0] <= w[1]), "{r:?}");
        assert_eq!(r[4], 1.0);
        // Scrambled zipfian over 10^10 ranks: a heavy head, but about half of the draws land on
        // ranks past the key count and spread evenly, so 10% of the keys get well under 90%.
        assert!(r[2] > 0.35 && r[2] < 0.75, "{r:?}");
    }

    #[test]
    fn uniform_keys_give_the_cache_share_and_inserts_are_refused() {
        let mut spec = Spec::core('c').unwrap();
        spec.distribution = crate::Distribution::Uniform;
        let s = shared(spec, Phase::Run, data(2_000), 2_000).unwrap();
        let r = best_hit_ratios(s, &[200], 2_000_000, 1).unwrap();
        // The most drawn tenth of uniformly drawn keys gets a tenth, plus a little sampling noise
        // (about 1.75 standard deviations of 1,000 draws per key: 5.5%).
        assert!(r[0] > 0.10 && r[0] < 0.11, "{r:?}");
        let d = shared(Spec::core('d').unwrap(), Phase::Run, data(1_000), 1_000).unwrap();
        assert!(best_hit_ratios(d, &[10], 1_000, 1).is_err());
    }
}
