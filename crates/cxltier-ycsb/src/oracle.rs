//! The best hit ratio any cache of a given size can reach on a workload's key choices.
//!
//! YCSB's choosers draw keys independently from a fixed distribution, so no cache of K objects
//! can beat one that always holds the K most requested keys. Drawing the workload's own key
//! sequence and counting gives that bound: a store's measured memory hit ratio is read against
//! it (what a tiered store at 5x its memory can reach is set by the workload, not the store).
//!
//! A page-level tier (the kernel's swap, `cxltier tierd` in memory mode) sees pages, not
//! records: a page holds the bytes of many records, and a record's bytes lie on several pages.
//! [`page_fault_bounds`] gives the same kind of bound for it: the fewest page faults per
//! operation that any policy keeping `K` pages resident can have on the workload's key choices,
//! with least-recently-used's figure beside it, for a layout of the records in memory.

use std::sync::Arc;

use crate::workload::{Op, Shared, Spec, ThreadGen};
use crate::{DataSet, Phase, YcsbError};

/// The bound for each cache size in `cache_objects`: the share of the key choices of `draws`
/// operations (reads, updates, read-modify-writes; scans and inserts excluded) that fall on the
/// most chosen `k` keys.
pub fn best_hit_ratios(
    shared: Arc<Shared>,
    cache_objects: &[u64],
    draws: u64,
    seed: u64,
) -> Result<Vec<f64>, YcsbError> {
    check_bound(&shared, "hit-ratio", draws)?;
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

/// Refuse what the `bound` (`hit-ratio`, `page-level`) cannot answer: a workload that inserts or
/// scans (it is over the existing keys' choices), or no draws.
fn check_bound(shared: &Shared, bound: &str, draws: u64) -> Result<(), YcsbError> {
    if shared.spec.insert > 0.0 || shared.spec.scan > 0.0 {
        return Err(YcsbError::BadInput(format!(
            "the {bound} bound is for workloads that only read and update existing keys (a, b, c, f)"
        )));
    }
    if draws == 0 {
        return Err(YcsbError::BadInput("--draws must be at least 1".into()));
    }
    Ok(())
}

/// Where the records' bytes lie in memory. An allocator that keeps each size class in a region
/// of its own and fills it in allocation order (jemalloc, as Redis uses it) puts record `r`'s
/// share of class `c` at bytes `r * b_c .. (r + 1) * b_c` of that class's region, records in
/// load order: `bytes_per_record[c] = b_c`.
#[derive(Debug, Clone)]
pub struct PageLayout {
    /// Bytes of each record in each region (one entry per region, in any order).
    pub bytes_per_record: Vec<u64>,
    /// The page size.
    pub page_bytes: u64,
}

/// The page-level bound at one cache size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageFaults {
    /// Pages kept resident.
    pub cache_pages: u64,
    /// The fewest page faults per operation any policy keeping `cache_pages` pages can have: the
    /// most touched pages always resident (keys are drawn independently, so no policy that
    /// decides from the past does better).
    pub best_faults_per_op: f64,
    /// Page faults per operation under least-recently-used replacement of `cache_pages` pages
    /// (the second half of the draws, after the first warmed the cache).
    pub lru_faults_per_op: f64,
}

/// [`page_fault_bounds`]' answer.
#[derive(Debug, Clone)]
pub struct PageBounds {
    /// Pages the records occupy.
    pub pages: u64,
    /// Pages an operation touches, on average.
    pub pages_per_op: f64,
    /// One row per cache size.
    pub rows: Vec<PageFaults>,
}

/// Pages of record `k` under `layout`, appended to `out`.
fn record_pages(layout: &PageLayout, bases: &[u64], k: u64, out: &mut Vec<u32>) {
    let page = layout.page_bytes;
    for (&b, &base) in layout.bytes_per_record.iter().zip(bases) {
        if b == 0 {
            continue;
        }
        let first = k * b / page;
        let last = ((k + 1) * b - 1) / page;
        // Fits: page_fault_bounds refuses layouts of more than u32::MAX pages.
        out.extend((first..=last).map(|p| (base + p) as u32));
    }
}

/// The page-level bound for each cache size in `cache_pages`, on the key choices of `draws`
/// operations (reads, updates, read-modify-writes; scans and inserts excluded), each touching
/// every page of its record under `layout` (a read of the whole record does; an update of one
/// field touches fewer, so for updates the figures are an upper bound of the faults).
pub fn page_fault_bounds(
    shared: Arc<Shared>,
    layout: &PageLayout,
    cache_pages: &[u64],
    draws: u64,
    seed: u64,
) -> Result<PageBounds, YcsbError> {
    check_bound(&shared, "page-level", draws)?;
    if layout.page_bytes == 0 || !layout.page_bytes.is_power_of_two() {
        return Err(YcsbError::BadInput(format!(
            "a page of {} bytes: give a power of two, such as 4096",
            layout.page_bytes
        )));
    }
    if layout.bytes_per_record.iter().all(|&b| b == 0) {
        return Err(YcsbError::BadInput(
            "the page layout gives every record 0 bytes: give each region's bytes per record, \
             e.g. --page-layout 80,450,140,1120"
                .into(),
        ));
    }
    let records = shared.record_count;
    let mut bases = Vec::with_capacity(layout.bytes_per_record.len());
    let mut pages = 0u64;
    for &b in &layout.bytes_per_record {
        bases.push(pages);
        let bytes = records.checked_mul(b).ok_or_else(|| {
            YcsbError::BadInput(format!("{records} records of {b} bytes overflow 64 bits"))
        })?;
        pages += bytes.div_ceil(layout.page_bytes);
    }
    if pages > u64::from(u32::MAX) {
        return Err(YcsbError::BadInput(format!(
            "the layout spans {pages} pages; the bound handles at most {} (give fewer records \
             or larger pages)",
            u32::MAX
        )));
    }
    let start = shared.insert_start as i64;
    let mut gen = ThreadGen::new(shared, seed);
    // Every operation's pages in order, and where each operation's pages begin.
    let mut trace: Vec<u32> = Vec::new();
    let mut op_starts: Vec<usize> = Vec::new();
    for _ in 0..draws {
        if matches!(gen.next_op(), Op::Insert | Op::Scan) {
            continue;
        }
        let k = gen.next_keynum() - start;
        if let Some(k) = u64::try_from(k).ok().filter(|&k| k < records) {
            op_starts.push(trace.len());
            record_pages(layout, &bases, k, &mut trace);
        }
    }
    let ops = op_starts.len();
    if ops == 0 {
        return Err(YcsbError::BadInput(
            "no operation of the draws fell on a loaded record: draw more (--draws)".into(),
        ));
    }
    // The best: the most touched pages resident.
    let mut counts = vec![0u32; pages as usize];
    for &p in &trace {
        counts[p as usize] += 1;
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let mut prefix = Vec::with_capacity(counts.len() + 1);
    let mut sum = 0u64;
    prefix.push(0u64);
    for &c in &counts {
        sum += u64::from(c);
        prefix.push(sum);
    }
    let touches = trace.len() as u64;
    let counted_from = op_starts[ops / 2];
    let lru = lru_misses(&trace, pages as usize, counted_from, cache_pages);
    let counted_ops = (ops - ops / 2) as f64;
    let rows = cache_pages
        .iter()
        .zip(lru)
        .map(|(&k, misses)| {
            let kept = (k as usize).min(counts.len());
            PageFaults {
                cache_pages: k,
                best_faults_per_op: (touches - prefix[kept]) as f64 / ops as f64,
                lru_faults_per_op: misses as f64 / counted_ops,
            }
        })
        .collect();
    Ok(PageBounds {
        pages,
        pages_per_op: touches as f64 / ops as f64,
        rows,
    })
}

/// Misses of least-recently-used caches of each size in `cache_pages` on `trace` (page numbers
/// below `pages`), counting the accesses from `counted_from` on. An access hits a cache of K
/// pages when fewer than K other pages were touched since that page's last access (its stack
/// distance): one pass for every size, the distances counted with a Fenwick tree over the trace
/// that marks each page's latest access.
fn lru_misses(trace: &[u32], pages: usize, counted_from: usize, cache_pages: &[u64]) -> Vec<u64> {
    let largest = cache_pages.iter().copied().max().unwrap_or(0) as usize;
    // by_distance[d]: counted accesses at stack distance d (the last slot: `largest` or more,
    // and first accesses).
    let mut by_distance = vec![0u64; largest + 1];
    let mut tree = vec![0i32; trace.len() + 1];
    let add = |tree: &mut [i32], i: usize, v: i32| {
        let mut i = i + 1;
        while i < tree.len() {
            tree[i] += v;
            i += i & i.wrapping_neg();
        }
    };
    // The marks at positions below i.
    let below = |tree: &[i32], mut i: usize| -> i64 {
        let mut s = 0i64;
        while i > 0 {
            s += i64::from(tree[i]);
            i -= i & i.wrapping_neg();
        }
        s
    };
    let mut last = vec![usize::MAX; pages];
    for (t, &p) in trace.iter().enumerate() {
        let prev = last[p as usize];
        let distance = if prev == usize::MAX {
            largest
        } else {
            let d = below(&tree, t) - below(&tree, prev + 1);
            add(&mut tree, prev, -1);
            (d as usize).min(largest)
        };
        add(&mut tree, t, 1);
        last[p as usize] = t;
        if t >= counted_from {
            by_distance[distance] += 1;
        }
    }
    let counted = (trace.len() - counted_from) as u64;
    cache_pages
        .iter()
        .map(|&k| counted - by_distance[..k as usize].iter().sum::<u64>())
        .collect()
}

/// What the bounds draw from: a workload's key choices in its run phase over its records (no
/// server; values are never built, so data integrity plays no part), `draws` of them from
/// `seed`.
#[derive(Debug, Clone)]
pub struct BoundDraws {
    spec: Spec,
    data: DataSet,
    operations: u64,
    draws: u64,
    seed: u64,
}

impl BoundDraws {
    /// The default number of key choices drawn.
    pub const DRAWS: u64 = 4_000_000;

    /// Draws of `spec` over `data`: [`BoundDraws::DRAWS`] of them from seed 1 (so that a bound
    /// is the same each time), the run planning as many operations as records.
    pub fn new(spec: Spec, data: DataSet) -> BoundDraws {
        BoundDraws {
            spec,
            operations: data.records,
            data: DataSet {
                data_integrity: false,
                ..data
            },
            draws: Self::DRAWS,
            seed: 1,
        }
    }

    /// The run's operationcount (the latest distribution's inserts are planned by it).
    pub fn operations(mut self, operations: u64) -> Self {
        self.operations = operations;
        self
    }

    /// Key choices to draw.
    pub fn draws(mut self, draws: u64) -> Self {
        self.draws = draws;
        self
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    fn shared(&self) -> Result<Arc<Shared>, YcsbError> {
        crate::shared(self.spec.clone(), Phase::Run, self.data, self.operations)
    }

    /// The best hit ratio of a cache of each of `cache_objects` sizes ([`best_hit_ratios`]).
    pub fn hit_bounds(&self, cache_objects: &[u64]) -> Result<HitBounds, YcsbError> {
        if cache_objects.is_empty() {
            return Err(YcsbError::Usage {
                message: "hit-bound needs --cache-objects N[,N...]".into(),
                hint: "e.g. --cache-objects 30000,60000 for caches of 30,000 and 60,000 records"
                    .into(),
            });
        }
        let records = self.data.records;
        let ratios = best_hit_ratios(self.shared()?, cache_objects, self.draws, self.seed)?;
        Ok(HitBounds {
            workload: self.spec.name,
            records,
            draws: self.draws,
            seed: self.seed.to_string(),
            bounds: cache_objects
                .iter()
                .zip(ratios)
                .map(|(&k, r)| HitBound {
                    cache_objects: k,
                    cache_share: k.min(records) as f64 / records as f64,
                    best_hit_ratio: r,
                })
                .collect(),
        })
    }

    /// The fewest page faults per operation, and LRU's, for each of `cache_pages` resident
    /// sizes with the records laid out as `layout` says ([`page_fault_bounds`]).
    pub fn page_bounds(
        &self,
        layout: &PageLayout,
        cache_pages: &[u64],
    ) -> Result<PageBoundReport, YcsbError> {
        if cache_pages.is_empty() || layout.bytes_per_record.is_empty() {
            return Err(YcsbError::Usage {
                message:
                    "page-bound needs --cache-pages N[,N...] and --page-layout BYTES[,BYTES...]"
                        .into(),
                hint: "e.g. --page-layout 80,450,140,1120,129 --cache-pages 4096,6144: the bytes \
                       each record has in each allocator size class (Redis: MEMORY MALLOC-STATS), \
                       and resident sizes in 4 KiB pages"
                    .into(),
            });
        }
        let bounds = page_fault_bounds(self.shared()?, layout, cache_pages, self.draws, self.seed)?;
        Ok(PageBoundReport {
            workload: self.spec.name,
            records: self.data.records,
            draws: self.draws,
            seed: self.seed.to_string(),
            page_bytes: layout.page_bytes,
            page_layout: layout.bytes_per_record.clone(),
            pages: bounds.pages,
            pages_per_op: bounds.pages_per_op,
            bounds: bounds
                .rows
                .iter()
                .map(|r| PageBoundRow {
                    cache_pages: r.cache_pages,
                    cache_share: r.cache_pages.min(bounds.pages) as f64
                        / bounds.pages.max(1) as f64,
                    best_faults_per_op: r.best_faults_per_op,
                    lru_faults_per_op: r.lru_faults_per_op,
                })
                .collect(),
        })
    }
}

/// `ycsb hit-bound`'s report: the draws' settings once, and a bound per cache size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HitBounds {
    pub workload: char,
    pub records: u64,
    pub draws: u64,
    /// A decimal string, as every 64-bit seed in the JSON contract.
    pub seed: String,
    pub bounds: Vec<HitBound>,
}

/// The best hit ratio of one cache size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HitBound {
    pub cache_objects: u64,
    /// The cache's objects over the records (at most 1).
    pub cache_share: f64,
    pub best_hit_ratio: f64,
}

/// `ycsb page-bound`'s report: the draws' settings and the layout once, and a row per cache
/// size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PageBoundReport {
    pub workload: char,
    pub records: u64,
    pub draws: u64,
    /// A decimal string, as every 64-bit seed in the JSON contract.
    pub seed: String,
    pub page_bytes: u64,
    pub page_layout: Vec<u64>,
    /// Pages the records take.
    pub pages: u64,
    /// Pages an operation touches, on average.
    pub pages_per_op: f64,
    pub bounds: Vec<PageBoundRow>,
}

/// The page faults of one resident size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PageBoundRow {
    pub cache_pages: u64,
    /// The resident pages over the records' pages (at most 1).
    pub cache_share: f64,
    pub best_faults_per_op: f64,
    pub lru_faults_per_op: f64,
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
    fn bound_reports_give_each_size_its_share_and_refuse_no_sizes() {
        let draws = BoundDraws::new(Spec::core('c').unwrap(), data(1_000))
            .draws(20_000)
            .seed(7);
        let hits = draws.hit_bounds(&[100, 2_000]).unwrap();
        assert_eq!(
            (hits.workload, hits.records, hits.seed.as_str()),
            ('c', 1_000, "7")
        );
        let shares: Vec<f64> = hits.bounds.iter().map(|b| b.cache_share).collect();
        assert_eq!(shares, vec![0.1, 1.0]);
        assert_eq!(hits.bounds[1].best_hit_ratio, 1.0);
        let err = draws.hit_bounds(&[]).unwrap_err();
        assert!(cxltier_error::Classify::hint(&err).is_some(), "{err}");

        let layout = PageLayout {
            bytes_per_record: vec![1024],
            page_bytes: 4096,
        };
        let pages = draws.page_bounds(&layout, &[125, 500]).unwrap();
        assert_eq!((pages.pages, pages.page_layout.clone()), (250, vec![1024]));
        assert_eq!(pages.bounds[0].cache_share, 0.5);
        assert_eq!(pages.bounds[1].cache_share, 1.0);
        assert!(matches!(
            draws.page_bounds(&layout, &[]),
            Err(YcsbError::Usage { .. })
        ));
    }

    #[test]
    fn lru_misses_are_those_of_a_plain_lru_cache() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        // Skewed, so that every cache size sees hits and misses.
        let trace: Vec<u32> = (0..5_000)
            .map(|_| (rng.random::<f64>().powi(3) * 300.0) as u32)
            .collect();
        let sizes = [0u64, 1, 7, 50, 120, 299, 300, 400];
        let got = lru_misses(&trace, 300, 1_000, &sizes);
        for (&k, &misses) in sizes.iter().zip(&got) {
            // Most recent last.
            let mut cache: Vec<u32> = Vec::new();
            let mut expected = 0u64;
            for (t, &p) in trace.iter().enumerate() {
                let hit = if let Some(at) = cache.iter().position(|&q| q == p) {
                    cache.remove(at);
                    true
                } else {
                    false
                };
                if !hit && t >= 1_000 {
                    expected += 1;
                }
                cache.push(p);
                if cache.len() > k as usize {
                    cache.remove(0);
                }
            }
            assert_eq!(misses, expected, "cache of {k} pages");
        }
    }

    #[test]
    fn a_record_a_page_gives_the_object_bound_and_packed_pages_fault_more() {
        let s = || shared(Spec::core('c').unwrap(), Phase::Run, data(20_000), 20_000).unwrap();
        let hits = best_hit_ratios(s(), &[2_000], 200_000, 5).unwrap()[0];
        let whole = PageLayout {
            bytes_per_record: vec![4096],
            page_bytes: 4096,
        };
        let one = page_fault_bounds(s(), &whole, &[2_000], 200_000, 5).unwrap();
        assert_eq!(one.pages, 20_000);
        assert_eq!(one.pages_per_op, 1.0);
        assert!(
            (one.rows[0].best_faults_per_op - (1.0 - hits)).abs() < 1e-12,
            "{one:?} against a hit ratio of {hits}"
        );
        assert!(
            one.rows[0].best_faults_per_op <= one.rows[0].lru_faults_per_op + 0.01,
            "{one:?}"
        );
        // The same bytes with 64 records to a page: a tenth of the pages resident serves far
        // fewer operations, since every page holds some popular record.
        let packed = PageLayout {
            bytes_per_record: vec![64],
            page_bytes: 4096,
        };
        let p = page_fault_bounds(s(), &packed, &[32], 200_000, 5).unwrap();
        assert_eq!(p.pages, 313);
        assert!(
            p.rows[0].best_faults_per_op > one.rows[0].best_faults_per_op + 0.1,
            "{p:?} against {one:?}"
        );
        // Two regions: an operation touches a page in each (sometimes two where a record
        // straddles a page).
        let two = PageLayout {
            bytes_per_record: vec![64, 1000],
            page_bytes: 4096,
        };
        let t = page_fault_bounds(s(), &two, &[0], 100_000, 5).unwrap();
        assert!(t.pages_per_op > 2.0 && t.pages_per_op < 2.5, "{t:?}");
        assert_eq!(t.rows[0].best_faults_per_op, t.pages_per_op);
    }

    #[test]
    fn page_bounds_refuse_bad_layouts_and_workloads() {
        let s = || shared(Spec::core('c').unwrap(), Phase::Run, data(1_000), 1_000).unwrap();
        let bad_page = PageLayout {
            bytes_per_record: vec![100],
            page_bytes: 3000,
        };
        assert!(page_fault_bounds(s(), &bad_page, &[1], 100, 1).is_err());
        let empty = PageLayout {
            bytes_per_record: vec![0, 0],
            page_bytes: 4096,
        };
        assert!(page_fault_bounds(s(), &empty, &[1], 100, 1).is_err());
        let e = shared(Spec::core('e').unwrap(), Phase::Run, data(1_000), 1_000).unwrap();
        let fine = PageLayout {
            bytes_per_record: vec![100],
            page_bytes: 4096,
        };
        assert!(page_fault_bounds(e, &fine, &[1], 100, 1).is_err());
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
