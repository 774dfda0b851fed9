//! Where a target's memory is, estimated from a fixed-size sample of its pages: bytes per node
//! with an error bound, at a cost that does not grow with the footprint.
//!
//! Asking `move_pages` for every page costs one entry per 4 KiB page (26 million at 100 GiB).
//! [`estimate_placement`] asks for at most `sample_pages` pages whatever the size of the ranges:
//! the pages are split into `sample_pages` equal strata and one page is drawn at random from
//! each, so the sample covers the whole address space evenly (a node holding one contiguous
//! stretch of memory is seen in proportion to its length) and each page is drawn at most once.
//! Ranges no larger than the sample are queried page by page and the result is exact.
//!
//! The queries go through [`NodeQuery`], so the count of entries asked for is observable: the
//! tests check that it stays the same at 1x and 16x the footprint.

use std::collections::BTreeMap;

use cxltier_sys::{query_pages, PageStatus};

use crate::procfs::Range;
use crate::TierdError;

/// Asks where pages are (`move_pages` in query mode, or a stand-in in tests).
pub trait NodeQuery {
    /// One status per address, in order.
    fn query(&mut self, addrs: &[usize]) -> Result<Vec<PageStatus>, TierdError>;
}

/// The pages of a live process, asked with `move_pages(2)`.
pub struct ProcessPages {
    pub pid: u32,
}

/// How many pages one `move_pages` call queries: bounds the kernel's temporary arrays.
const QUERY_CHUNK: usize = 1 << 16;

impl NodeQuery for ProcessPages {
    fn query(&mut self, addrs: &[usize]) -> Result<Vec<PageStatus>, TierdError> {
        let mut status = Vec::with_capacity(addrs.len());
        for chunk in addrs.chunks(QUERY_CHUNK) {
            status.extend(query_pages(Some(self.pid), chunk)?);
        }
        Ok(status)
    }
}

/// One node's share of the ranges.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeEstimate {
    /// Estimated bytes on the node.
    pub bytes: u64,
    /// Half-width of the ~95% confidence interval around `bytes` (0 when every page was asked).
    pub error_bytes: u64,
    /// Sampled pages found on the node.
    pub sampled_pages: u64,
}

/// The estimate for one target.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlacementEstimate {
    /// Pages the ranges span (mapped, resident or not).
    pub span_pages: u64,
    /// Pages asked for: `min(span_pages, sample_pages)`.
    pub sampled_pages: u64,
    /// Whether every page was asked (the estimate is then exact).
    pub exact: bool,
    /// Resident bytes per node.
    pub nodes: BTreeMap<u32, NodeEstimate>,
    /// Estimated bytes spanned but not resident (never touched, swapped out, or not movable).
    pub absent: NodeEstimate,
}

/// A small, seedable generator (SplitMix64): a sample must be reproducible in tests and needs
/// no cryptographic quality (used here and by [`crate::chunks`]).
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`, `n > 0` (the modulo bias is below 2^-40 for the spans tierd sees).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The address of the `index`th page of `ranges` (in order), given the page count before each
/// range (`starts`, ascending).
fn page_address(ranges: &[Range], starts: &[u64], index: u64, page: usize) -> usize {
    let r = starts.partition_point(|&s| s <= index) - 1;
    ranges[r].start + ((index - starts[r]) as usize) * page
}

/// Half-width of a ~95% interval for a proportion seen `hits` times in `n` draws out of a
/// population of `population`, in population units. The normal approximation with the finite
/// population correction, plus one draw's worth (`population / n`) so that a node seen in no
/// sampled page, or in every one, still gets the uncertainty a sample of `n` cannot rule out.
fn error_bound(hits: u64, n: u64, population: u64) -> u64 {
    if n >= population || n == 0 {
        return 0;
    }
    let (nf, pf) = (n as f64, population as f64);
    let p = hits as f64 / nf;
    let fpc = ((pf - nf) / (pf - 1.0)).max(0.0);
    let half = 1.96 * (p * (1.0 - p) / nf * fpc).sqrt() + 1.0 / nf;
    (half * pf).ceil() as u64
}

/// Estimate bytes per node over `ranges` from at most `sample_pages` pages asked through
/// `query`. `seed` picks the sample (vary it between intervals so that no page escapes every
/// sample). Refuses a zero sample size.
pub fn estimate_placement(
    ranges: &[Range],
    page: usize,
    sample_pages: u64,
    seed: u64,
    query: &mut dyn NodeQuery,
) -> Result<PlacementEstimate, TierdError> {
    if sample_pages == 0 {
        return Err(TierdError::Setting {
            setting: "placement_sample_pages",
            message: "is 0: at least one page must be asked per interval; use a sample of a \
                      few thousand pages (e.g. 4096)"
                .into(),
        });
    }
    let mut starts = Vec::with_capacity(ranges.len());
    let mut span = 0u64;
    for r in ranges {
        starts.push(span);
        span += (r.end.saturating_sub(r.start) / page) as u64;
    }
    let mut est = PlacementEstimate {
        span_pages: span,
        ..PlacementEstimate::default()
    };
    if span == 0 {
        est.exact = true;
        return Ok(est);
    }
    let n = sample_pages.min(span);
    est.sampled_pages = n;
    est.exact = n == span;
    let mut rng = SplitMix64(seed);
    let addrs: Vec<usize> = (0..n)
        .map(|k| {
            // Stratum k is [k*span/n, (k+1)*span/n): non-empty since n <= span.
            let lo = (k as u128 * span as u128 / n as u128) as u64;
            let hi = ((k + 1) as u128 * span as u128 / n as u128) as u64;
            let index = if est.exact {
                lo
            } else {
                lo + rng.below(hi - lo)
            };
            page_address(ranges, &starts, index, page)
        })
        .collect();
    let status = query.query(&addrs)?;
    let mut hits: BTreeMap<u32, u64> = BTreeMap::new();
    let mut absent = 0u64;
    for s in &status {
        match s {
            PageStatus::Node(node) => *hits.entry(*node).or_insert(0) += 1,
            PageStatus::Error(_) => absent += 1,
        }
    }
    let page_bytes = page as u64;
    let scale = |h: u64| -> NodeEstimate {
        let pages = (h as u128 * span as u128 / n as u128) as u64;
        NodeEstimate {
            bytes: pages * page_bytes,
            error_bytes: error_bound(h, n, span) * page_bytes,
            sampled_pages: h,
        }
    };
    est.nodes = hits.into_iter().map(|(node, h)| (node, scale(h))).collect();
    est.absent = scale(absent);
    Ok(est)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// A made-up address space: the first `node0` fraction of the pages on node 0, the next
    /// `node1` fraction on node 1, the rest not resident. Counts the entries asked for.
    struct Layout {
        ranges: Vec<Range>,
        span: u64,
        node0: f64,
        node1: f64,
        asked: u64,
    }

    impl Layout {
        /// `pages` pages split over three ranges with gaps between them.
        fn new(pages: u64, node0: f64, node1: f64) -> Layout {
            let third = (pages / 3) as usize;
            let base = 0x7f00_0000_0000usize;
            let ranges = vec![
                Range {
                    start: base,
                    end: base + third * PAGE,
                },
                Range {
                    start: base + (third + 10) * PAGE,
                    end: base + (2 * third + 10) * PAGE,
                },
                Range {
                    start: base + (2 * third + 100) * PAGE,
                    end: base + (pages as usize + 100) * PAGE,
                },
            ];
            Layout {
                ranges,
                span: pages,
                node0,
                node1,
                asked: 0,
            }
        }

        fn index_of(&self, addr: usize) -> u64 {
            let mut before = 0u64;
            for r in &self.ranges {
                if addr >= r.start && addr < r.end {
                    return before + ((addr - r.start) / PAGE) as u64;
                }
                before += ((r.end - r.start) / PAGE) as u64;
            }
            panic!("{addr:#x} is outside the ranges");
        }

        fn true_pages(&self) -> (u64, u64) {
            let n0 = (self.node0 * self.span as f64) as u64;
            let n1 = (self.node1 * self.span as f64) as u64;
            (n0, n1)
        }
    }

    impl NodeQuery for Layout {
        fn query(&mut self, addrs: &[usize]) -> Result<Vec<PageStatus>, TierdError> {
            self.asked += addrs.len() as u64;
            let (n0, n1) = self.true_pages();
            Ok(addrs
                .iter()
                .map(|&a| {
                    let i = self.index_of(a);
                    if i < n0 {
                        PageStatus::Node(0)
                    } else if i < n0 + n1 {
                        PageStatus::Node(1)
                    } else {
                        // ENOENT: the kernel's answer for a page never touched.
                        PageStatus::Error(2)
                    }
                })
                .collect())
        }
    }

    #[test]
    fn ranges_no_larger_than_the_sample_are_counted_exactly() {
        let mut l = Layout::new(3000, 0.25, 0.5);
        let e = estimate_placement(&l.ranges.clone(), PAGE, 4096, 7, &mut l).unwrap();
        assert!(e.exact);
        assert_eq!(e.sampled_pages, 3000);
        assert_eq!(l.asked, 3000);
        assert_eq!(e.nodes[&0].bytes, 750 * PAGE as u64);
        assert_eq!(e.nodes[&1].bytes, 1500 * PAGE as u64);
        assert_eq!(e.absent.bytes, 750 * PAGE as u64);
        assert_eq!(e.nodes[&0].error_bytes, 0);
    }

    #[test]
    fn the_sampled_estimate_is_within_its_error_bound() {
        // 1 GiB worth of 4 KiB pages, a 4096-page sample, many seeds: the true bytes per node
        // lie inside the stated interval every time, and the interval is a few percent wide.
        for seed in 0..50u64 {
            let mut l = Layout::new(262_144, 0.3, 0.6);
            let ranges = l.ranges.clone();
            let e = estimate_placement(&ranges, PAGE, 4096, seed, &mut l).unwrap();
            assert!(!e.exact);
            let (n0, n1) = l.true_pages();
            for (node, truth) in [(0u32, n0), (1, n1)] {
                let got = e.nodes[&node];
                let truth = truth * PAGE as u64;
                assert!(
                    got.bytes.abs_diff(truth) <= got.error_bytes,
                    "seed {seed} node {node}: {} vs true {truth}, bound {}",
                    got.bytes,
                    got.error_bytes
                );
                let span_bytes = l.span * PAGE as u64;
                assert!(
                    (got.error_bytes as f64) < 0.05 * span_bytes as f64,
                    "bound {} is too loose",
                    got.error_bytes
                );
            }
        }
    }

    #[test]
    fn a_node_the_sample_misses_still_gets_an_error_bound() {
        // 3 pages in a million on node 1: most samples miss them, but the bound covers them.
        let mut l = Layout::new(1 << 20, 1.0 - 3e-6, 3e-6);
        let ranges = l.ranges.clone();
        let e = estimate_placement(&ranges, PAGE, 1024, 1, &mut l).unwrap();
        let seen = e.nodes.get(&1).map_or(0, |n| n.sampled_pages);
        let on1 = e.nodes.get(&1).map_or(0, |n| n.bytes);
        let bound = error_bound(seen, e.sampled_pages, e.span_pages) * PAGE as u64;
        assert!(bound > 0);
        assert!(
            on1.abs_diff(3 * PAGE as u64) <= bound,
            "{on1} vs 3 pages, bound {bound}"
        );
    }

    #[test]
    fn the_pages_asked_do_not_grow_with_the_footprint() {
        let asked = |pages: u64| {
            let mut l = Layout::new(pages, 0.5, 0.4);
            let ranges = l.ranges.clone();
            estimate_placement(&ranges, PAGE, 4096, 3, &mut l).unwrap();
            l.asked
        };
        // 1 GiB and 16 GiB of 4 KiB pages.
        let one = asked(262_144);
        let sixteen = asked(16 * 262_144);
        assert_eq!(one, 4096);
        assert_eq!(sixteen, one);
    }

    #[test]
    fn a_larger_sample_tightens_the_bound() {
        let bound = |sample: u64| {
            let mut l = Layout::new(1 << 20, 0.5, 0.5);
            let ranges = l.ranges.clone();
            let e = estimate_placement(&ranges, PAGE, sample, 9, &mut l).unwrap();
            e.nodes[&0].error_bytes
        };
        assert!(bound(16_384) < bound(1024) / 2);
    }

    #[test]
    fn every_sampled_page_is_distinct_and_inside_the_ranges() {
        struct Collect(Vec<usize>);
        impl NodeQuery for Collect {
            fn query(&mut self, addrs: &[usize]) -> Result<Vec<PageStatus>, TierdError> {
                self.0.extend_from_slice(addrs);
                Ok(vec![PageStatus::Node(0); addrs.len()])
            }
        }
        let l = Layout::new(100_000, 1.0, 0.0);
        let mut c = Collect(Vec::new());
        estimate_placement(&l.ranges, PAGE, 5000, 11, &mut c).unwrap();
        let mut seen = std::collections::HashSet::new();
        for &a in &c.0 {
            assert!(l.ranges.iter().any(|r| a >= r.start && a < r.end));
            assert_eq!(a % PAGE, 0);
            assert!(seen.insert(a), "{a:#x} drawn twice");
        }
        assert_eq!(c.0.len(), 5000);
    }

    #[test]
    fn this_process_s_own_pages_are_found_where_move_pages_says() {
        // A real buffer, every page written, asked with move_pages through ProcessPages: the
        // estimate covers the whole buffer on the node(s) the kernel reports, within its bound.
        let pages = 16_384usize; // 64 MiB
        let mut buf = vec![0u8; pages * PAGE + PAGE];
        for b in buf.iter_mut().step_by(PAGE) {
            *b = 1;
        }
        let start = (buf.as_ptr() as usize).div_ceil(PAGE) * PAGE;
        let ranges = [Range {
            start,
            end: start + pages * PAGE,
        }];
        let mut q = ProcessPages {
            pid: std::process::id(),
        };
        let e = estimate_placement(&ranges, PAGE, 1024, 5, &mut q).unwrap();
        assert_eq!(e.span_pages, pages as u64);
        assert_eq!(e.sampled_pages, 1024);
        let resident: u64 = e.nodes.values().map(|n| n.sampled_pages).sum();
        assert_eq!(resident, 1024, "every page was written: {e:?}");
        let truth = cxltier_sys::query_pages(None, &[start]).unwrap()[0]
            .node()
            .unwrap();
        if e.nodes.len() == 1 {
            assert_eq!(e.nodes[&truth].bytes, (pages * PAGE) as u64);
        }
        std::hint::black_box(&buf);
    }

    /// The cost this module removes, measured: `move_pages` on every page of a written buffer
    /// (what the engine asks each interval) against a 4096-page sample, at the sizes in
    /// `CXLTIER_PLACEMENT_COST_GIB` (default 1,4). Allocates that much memory, so opt-in:
    /// `cargo test -p cxltier-tierd --release --lib placement_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    #[allow(clippy::print_stderr)]
    fn placement_cost_every_page_vs_a_sample() {
        let sizes = std::env::var("CXLTIER_PLACEMENT_COST_GIB").unwrap_or_else(|_| "1,4".into());
        eprintln!("size_gib pages every_page_ms every_page_entries sample_ms sample_entries");
        for gib in sizes.split(',').map(|g| g.trim().parse::<usize>().unwrap()) {
            let pages = gib << 18;
            let mut buf = vec![0u8; pages * PAGE + PAGE];
            for b in buf.iter_mut().step_by(PAGE) {
                *b = 1;
            }
            let start = (buf.as_ptr() as usize).div_ceil(PAGE) * PAGE;
            let ranges = [Range {
                start,
                end: start + (pages - 1) * PAGE,
            }];
            let mut q = ProcessPages {
                pid: std::process::id(),
            };
            let t = std::time::Instant::now();
            let all = estimate_placement(&ranges, PAGE, u64::MAX, 1, &mut q).unwrap();
            let every_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = std::time::Instant::now();
            let some = estimate_placement(&ranges, PAGE, 4096, 1, &mut q).unwrap();
            let sample_ms = t.elapsed().as_secs_f64() * 1e3;
            assert!(all.exact && !some.exact);
            eprintln!(
                "{gib} {} {every_ms:.1} {} {sample_ms:.2} {}",
                pages - 1,
                all.sampled_pages,
                some.sampled_pages
            );
            std::hint::black_box(&buf);
        }
    }

    #[test]
    fn a_zero_sample_is_refused_with_what_to_use() {
        let mut l = Layout::new(1000, 1.0, 0.0);
        let ranges = l.ranges.clone();
        let err = estimate_placement(&ranges, PAGE, 0, 0, &mut l).unwrap_err();
        assert!(err.to_string().contains("4096"), "{err}");
    }
}
