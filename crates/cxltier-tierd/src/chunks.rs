//! Large targets in chunks: the planner's units drawn from a fixed-size sample of pages, so that
//! an interval's cost does not grow with the footprint.
//!
//! Asking where every page is costs one `move_pages` entry per 4 KiB page (26 million at
//! 100 GiB), and so does expanding DAMON's regions into per-page access counts. Above a resident
//! size (`tracking.sampled_above_mib`), a target's mappings are instead cut into aligned chunks of a power-of-two
//! size, at least a huge page and large enough that there are at most `tracking.sample_pages` of
//! them. Each chunk takes its heat from the DAMON regions it overlaps (access counts weighted by
//! overlap, the youngest age) and is asked about at `sample_pages / chunks` pages (at least one),
//! drawn at random from equal strata of the chunk. A chunk is then one unit of placement (a
//! [`PageInfo`] whose `pages` is its estimated resident pages, on the node most of its sampled
//! pages are on), exactly as a huge page is one unit: the planner's budget, room and rate limit
//! count its pages.
//!
//! What it costs per interval: the chunks (bounded by `sample_pages` plus one per mapping) and
//! the sampled entries (at most `sample_pages`, plus one per chunk when there are more mappings
//! than that). Moving a chunk asks about and moves only its own pages, which the rate limit
//! bounds. The `tests` check that the entries asked stay the same at 1x and 16x the footprint.

use std::collections::{BTreeMap, HashMap};

use cxltier_sys::PageStatus;

use crate::damon::Region;
use crate::placement::{NodeQuery, SplitMix64};
use crate::plan::{Heat, PageInfo, Thresholds};
use crate::procfs::Range;
use crate::TierdError;

/// One interval's view of a target in chunks.
#[derive(Debug, Clone, Default)]
pub struct ChunkView {
    /// One unit per chunk with a resident sampled page, in address order: `addr` is the chunk's
    /// start, `pages` its estimated resident pages (at least 1), `node` its sampled majority.
    pub units: Vec<PageInfo>,
    /// Each unit's chunk length in bytes, by its start.
    pub spans: HashMap<usize, usize>,
    /// The chunk size in bytes (chunks at a mapping's edges are shorter).
    pub chunk_bytes: usize,
    /// How many chunks (resident or not).
    pub chunks: usize,
    /// Pages the mappings span.
    pub span_pages: u64,
    /// Entries asked of `move_pages` for this view.
    pub sampled_pages: u64,
    /// Estimated resident pages per node.
    pub nodes: BTreeMap<u32, u64>,
    /// Chunks in a hot region with sampled pages not resident (in swap, or never touched):
    /// `(start, length in bytes)`, in address order.
    pub absent_hot: Vec<(usize, usize)>,
}

/// The chunk size in pages for a span: a power of two, at least `min_pages`, such that the span
/// makes at most `max_chunks` chunks, but no larger than `cap_pages` (rounded down to a power of
/// two; the rate limit's burst: a larger chunk could never move) unless `min_pages` is.
pub fn chunk_pages(span_pages: u64, max_chunks: u64, min_pages: u64, cap_pages: u64) -> u64 {
    let want = span_pages
        .div_ceil(max_chunks.max(1))
        .max(min_pages)
        .max(1)
        .next_power_of_two();
    let cap = 1u64 << (63 - cap_pages.max(1).leading_zeros());
    want.min(cap).max(min_pages.max(1).next_power_of_two())
}

/// The aligned chunks of `ranges`, `chunk` bytes each (shorter at the edges of a range).
fn cut(ranges: &[Range], chunk: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for r in ranges {
        let mut c = r.start;
        while c < r.end {
            let next = ((c / chunk + 1) * chunk).min(r.end);
            out.push((c, next));
            c = next;
        }
    }
    out
}

/// The access count (weighted by overlap) and youngest age of the regions overlapping
/// `[start, end)`; `r` is the first region that may overlap and moves forward (chunks come in
/// address order).
fn heat_of(regions: &[Region], r: &mut usize, start: usize, end: usize) -> (u32, u32) {
    while *r < regions.len() && regions[*r].end <= start {
        *r += 1;
    }
    let (mut weighted, mut covered, mut age) = (0u128, 0u128, u32::MAX);
    let mut j = *r;
    while j < regions.len() && regions[j].start < end {
        let reg = &regions[j];
        let overlap = (reg.end.min(end) - reg.start.max(start)) as u128;
        weighted += overlap * reg.nr_accesses as u128;
        covered += overlap;
        age = age.min(reg.age);
        j += 1;
    }
    if covered == 0 {
        return (0, 0);
    }
    // Rounded to nearest: a chunk wholly inside one region takes that region's figures.
    (((weighted + covered / 2) / covered) as u32, age)
}

/// The settings of a chunked view.
#[derive(Debug, Clone, Copy)]
pub struct ChunkSettings {
    /// Entries to ask per interval (and most chunks).
    pub sample_pages: u64,
    /// The smallest chunk, in pages (a huge page's, so a huge page never spans two chunks).
    pub min_chunk_pages: u64,
    /// The largest chunk, in pages (what the rate limit lets move at once).
    pub max_chunk_pages: u64,
    /// Bytes per page.
    pub page: usize,
}

/// Cut `ranges` into chunks, give each its regions' heat, and sample where its pages are.
/// `regions` are DAMON's, in address order; `seed` picks the sample (vary it between intervals
/// so that no page escapes every sample).
pub fn view(
    ranges: &[Range],
    regions: &[Region],
    settings: ChunkSettings,
    thresholds: &Thresholds,
    seed: u64,
    query: &mut dyn NodeQuery,
) -> Result<ChunkView, TierdError> {
    if settings.sample_pages == 0 {
        return Err(TierdError::Setting {
            setting: "tracking.sample_pages",
            message: "is 0: at least one page must be asked per interval; use a few thousand \
                      (the default is 4096)"
                .into(),
        });
    }
    let page = settings.page;
    let span_pages: u64 = ranges
        .iter()
        .map(|r| (r.end.saturating_sub(r.start) / page) as u64)
        .sum();
    let cp = chunk_pages(
        span_pages,
        settings.sample_pages,
        settings.min_chunk_pages,
        settings.max_chunk_pages,
    );
    let chunk_bytes = cp as usize * page;
    let chunks = cut(ranges, chunk_bytes);
    let per_chunk = (settings.sample_pages / chunks.len().max(1) as u64).max(1);
    let mut rng = SplitMix64(seed);
    let mut addrs = Vec::new();
    let mut asked = Vec::with_capacity(chunks.len());
    for &(start, end) in &chunks {
        let n_pages = ((end - start) / page) as u64;
        let k = per_chunk.min(n_pages);
        for s in 0..k {
            let lo = s * n_pages / k;
            let hi = (s + 1) * n_pages / k;
            let index = lo + rng.below(hi - lo);
            addrs.push(start + index as usize * page);
        }
        asked.push(k as usize);
    }
    let status = query.query(&addrs)?;
    let mut out = ChunkView {
        chunk_bytes,
        chunks: chunks.len(),
        span_pages,
        sampled_pages: addrs.len() as u64,
        ..ChunkView::default()
    };
    let mut nodes: BTreeMap<u32, f64> = BTreeMap::new();
    let mut at = 0;
    let mut r = 0;
    for (&(start, end), &k) in chunks.iter().zip(&asked) {
        let seen = &status[at..at + k];
        at += k;
        let (accesses, age) = heat_of(regions, &mut r, start, end);
        let n_pages = ((end - start) / page) as f64;
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        for s in seen {
            if let PageStatus::Node(node) = s {
                *counts.entry(*node).or_insert(0) += 1;
            }
        }
        let resident: usize = counts.values().sum();
        for (&node, &c) in &counts {
            *nodes.entry(node).or_insert(0.0) += n_pages * c as f64 / k as f64;
        }
        let probe = PageInfo {
            addr: start,
            pages: 1,
            node: 0,
            accesses,
            age,
            written: false,
        };
        if resident < k && thresholds.heat(&probe) == Heat::Hot {
            out.absent_hot.push((start, end - start));
        }
        if resident == 0 {
            continue;
        }
        // The node most sampled pages are on (the lowest id among equals).
        let node = counts
            .iter()
            .max_by_key(|(n, c)| (**c, std::cmp::Reverse(**n)))
            .map(|(n, _)| *n)
            .expect("resident > 0");
        let pages = ((n_pages * resident as f64 / k as f64).round() as u32).max(1);
        out.units.push(PageInfo {
            pages,
            node,
            ..probe
        });
        out.spans.insert(start, end - start);
    }
    out.nodes = nodes
        .into_iter()
        .map(|(n, p)| (n, p.round() as u64))
        .collect();
    Ok(out)
}

/// The pages of `[start, start + len)` to move to `to`: those resident on another node, asked
/// through `query` (a chunk's pages need not all be where its sample said).
pub fn pages_to_move(
    start: usize,
    len: usize,
    to: u32,
    page: usize,
    query: &mut dyn NodeQuery,
) -> Result<Vec<usize>, TierdError> {
    let addrs: Vec<usize> = (start..start + len).step_by(page).collect();
    let status = query.query(&addrs)?;
    Ok(addrs
        .into_iter()
        .zip(status)
        .filter(|(_, s)| matches!(s, PageStatus::Node(n) if *n != to))
        .map(|(a, _)| a)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;
    const TH: Thresholds = Thresholds {
        hot_min: 4,
        cold_max: 0,
        cold_min_age: 2,
    };

    /// A made-up target: pages below `node1_from` on node 0, from there to `absent_from` on
    /// node 1, the rest not resident. Counts the entries asked.
    struct Layout {
        base: usize,
        node1_from: usize,
        absent_from: usize,
        asked: u64,
    }

    /// Pages from `node1_from` on node 1 (before it, node 0), from `absent_from` not present.
    fn layout_with(node1_from: usize, absent_from: usize) -> Layout {
        Layout {
            base: BASE,
            node1_from,
            absent_from,
            asked: 0,
        }
    }

    impl NodeQuery for Layout {
        fn query(&mut self, addrs: &[usize]) -> Result<Vec<PageStatus>, TierdError> {
            self.asked += addrs.len() as u64;
            Ok(addrs
                .iter()
                .map(|&a| {
                    let i = (a - self.base) / PAGE;
                    if i >= self.absent_from {
                        PageStatus::Error(ENOENT)
                    } else if i >= self.node1_from {
                        PageStatus::Node(1)
                    } else {
                        PageStatus::Node(0)
                    }
                })
                .collect())
        }
    }

    fn settings(sample_pages: u64) -> ChunkSettings {
        ChunkSettings {
            sample_pages,
            min_chunk_pages: 512,
            max_chunk_pages: 1 << 20,
            page: PAGE,
        }
    }

    const BASE: usize = 1 << 40;
    const ENOENT: i32 = 2;

    #[test]
    fn the_chunk_size_is_a_power_of_two_of_at_least_a_huge_page() {
        let cap = 1 << 20;
        assert_eq!(chunk_pages(1000, 4096, 512, cap), 512);
        assert_eq!(chunk_pages(4096 * 512, 4096, 512, cap), 512);
        assert_eq!(chunk_pages(4096 * 512 + 1, 4096, 512, cap), 1024);
        assert_eq!(chunk_pages(26_000_000, 4096, 512, cap), 8192);
        assert_eq!(chunk_pages(0, 4096, 512, cap), 512);
        // A slow rate limit caps the chunk (more chunks, each movable), never below a huge page.
        assert_eq!(chunk_pages(26_000_000, 4096, 512, 3000), 2048);
        assert_eq!(chunk_pages(26_000_000, 4096, 512, 100), 512);
    }

    #[test]
    fn the_entries_asked_do_not_grow_with_the_footprint() {
        let mut asked = Vec::new();
        for gib in [1usize, 16] {
            let pages = gib << 18;
            let ranges = [Range {
                start: BASE,
                end: BASE + pages * PAGE,
            }];
            let mut layout = layout_with(pages / 4, pages / 2);
            let v = view(&ranges, &[], settings(4096), &TH, 7, &mut layout).unwrap();
            assert!(v.chunks <= 4096, "{} chunks", v.chunks);
            assert_eq!(layout.asked, v.sampled_pages);
            asked.push(layout.asked);
            // A quarter on node 0, a quarter on node 1 (a contiguous layout: chunk-exact).
            let quarter = pages as u64 / 4;
            assert_eq!(v.nodes.get(&0).copied(), Some(quarter), "{gib} GiB");
            assert_eq!(v.nodes.get(&1).copied(), Some(quarter), "{gib} GiB");
            let unit_pages: u64 = v.units.iter().map(|u| u.pages as u64).sum();
            assert_eq!(unit_pages, 2 * quarter);
        }
        assert_eq!(asked[0], asked[1], "{asked:?}");
        assert!(asked[0] <= 4096);
    }

    #[test]
    fn chunks_take_their_regions_heat_and_report_absent_hot_ones() {
        let chunk = 512 * PAGE;
        let ranges = [Range {
            start: BASE,
            end: BASE + 8 * chunk,
        }];
        // Chunks 0-3 in a hot region, 4-7 in a cold old one; chunks 6 and 7 not resident.
        let regions = [
            Region {
                start: BASE,
                end: BASE + 4 * chunk,
                nr_accesses: 10,
                age: 3,
            },
            Region {
                start: BASE + 4 * chunk,
                end: BASE + 8 * chunk,
                nr_accesses: 0,
                age: 9,
            },
        ];
        let mut layout = layout_with(2 * 512, 6 * 512);
        let v = view(&ranges, &regions, settings(64), &TH, 1, &mut layout).unwrap();
        assert_eq!(v.chunks, 8);
        assert_eq!(v.units.len(), 6);
        for (i, u) in v.units.iter().enumerate() {
            assert_eq!(u.addr, BASE + i * chunk);
            assert_eq!(u.pages, 512);
            assert_eq!(u.node, if i < 2 { 0 } else { 1 });
            assert_eq!(TH.heat(u), if i < 4 { Heat::Hot } else { Heat::Cold });
            assert_eq!(v.spans[&u.addr], chunk);
        }
        // Absent chunks of a cold region are not wanted back.
        assert!(v.absent_hot.is_empty());
        let mut layout = layout_with(8 * 512, 3 * 512);
        let v = view(&ranges, &regions, settings(64), &TH, 1, &mut layout).unwrap();
        assert_eq!(v.absent_hot, vec![(BASE + 3 * chunk, chunk)]);
    }

    #[test]
    fn a_chunk_straddling_two_regions_takes_their_weighted_heat() {
        let regions = [
            Region {
                start: 0,
                end: 300,
                nr_accesses: 10,
                age: 5,
            },
            Region {
                start: 300,
                end: 1000,
                nr_accesses: 0,
                age: 2,
            },
        ];
        let mut r = 0;
        assert_eq!(heat_of(&regions, &mut r, 0, 400), (8, 2));
        assert_eq!(heat_of(&regions, &mut r, 400, 800), (0, 2));
        assert_eq!(r, 1);
        assert_eq!(heat_of(&regions, &mut r, 2000, 3000), (0, 0));
    }

    #[test]
    fn a_partly_resident_chunk_counts_its_share_and_edges_are_cut_at_the_mapping() {
        // A mapping of 1.5 chunks starting mid-chunk: three chunks, the first and last short.
        let chunk = 512 * PAGE;
        let ranges = [Range {
            start: BASE + chunk / 2,
            end: BASE + 2 * chunk + chunk / 4,
        }];
        let cuts = cut(&ranges, chunk);
        assert_eq!(
            cuts,
            vec![
                (BASE + chunk / 2, BASE + chunk),
                (BASE + chunk, BASE + 2 * chunk),
                (BASE + 2 * chunk, BASE + 2 * chunk + chunk / 4)
            ]
        );
        // Every page asked (sample >= span): half of the middle chunk resident.
        let mut layout = layout_with(usize::MAX, 512 + 256);
        let v = view(&ranges, &[], settings(1 << 20), &TH, 3, &mut layout).unwrap();
        let pages: Vec<u32> = v.units.iter().map(|u| u.pages).collect();
        assert_eq!(pages, vec![256, 256]);
        assert_eq!(v.nodes[&0], 512);
    }

    #[test]
    fn pages_to_move_are_the_resident_ones_elsewhere() {
        let mut layout = layout_with(4, 6);
        let got = pages_to_move(BASE, 8 * PAGE, 0, PAGE, &mut layout).unwrap();
        assert_eq!(got, vec![BASE + 4 * PAGE, BASE + 5 * PAGE]);
        assert_eq!(layout.asked, 8);
    }

    #[test]
    fn a_zero_sample_is_refused_with_the_fix() {
        let mut layout = layout_with(0, 0);
        let e = view(&[], &[], settings(0), &TH, 0, &mut layout).unwrap_err();
        assert!(e.to_string().contains("4096"), "{e}");
    }
}
