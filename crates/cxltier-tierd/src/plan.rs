//! The placement decision for one target and one interval: a pure function from where pages are
//! and how hot they are to the pages to move, so that every rule is tested without a kernel.
//!
//! Rules, in order:
//! 1. A page is hot when its region's access count reaches the hot threshold, cold when it is at or
//!    below the cold threshold and has stayed there for `cold_min_age` intervals, warm otherwise.
//!    The gap between the thresholds, the age, and `min_residency` (a moved page stays put for a
//!    while) are the hysteresis that keeps pages from ping-ponging.
//! 2. Over the DRAM budget: demote the coldest non-hot fast-tier pages until within it.
//! 3. Promote hot pages on slower tiers, hottest first, while the budget and the fast nodes'
//!    watermarks leave room; when they do not, swap: demote a colder fast-tier page to make room.
//! 4. Demote the remaining cold fast-tier pages, unless the budget is to be filled
//!    ([`Input::demote_idle`] false: memory mode, where the DRAM budget is what the target is
//!    given, and a page that reads cold is still better in DRAM than in CXL while there is room).
//!
//! Every move costs its pages of the rate limit's tokens; what the tokens do not cover waits for the
//! next interval. Pages whose move failed last time come first among equals.
//!
//! A unit of placement is one page or one huge page ([`PageInfo::pages`] base pages): the kernel
//! moves a transparent huge page whole, so the budget, the watermarks' room and the tokens are
//! counted in base pages, and a huge page is ranked by its pages' mean access count (what it
//! gives per page of DRAM it takes).

use std::collections::{BTreeMap, HashSet};

/// One resident page of the target, or one huge page (its first address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo {
    pub addr: usize,
    /// Base pages it spans: 1, or a huge page's (512 for 2 MiB over 4 KiB).
    pub pages: u32,
    pub node: u32,
    /// Its access frequency (DAMON: its region's `nr_accesses`; idle-page tracking: intervals
    /// accessed among its last `idle_history`).
    pub accesses: u32,
    /// For how many intervals that level has held (DAMON: its region's age).
    pub age: u32,
    /// Written since the last interval (soft-dirty).
    pub written: bool,
}

/// How hot a page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Heat {
    Cold,
    Warm,
    Hot,
}

/// Thresholds in the access source's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Hot at or above this many accesses per aggregation interval (at least 1).
    pub hot_min: u32,
    /// Cold at or below this many ...
    pub cold_max: u32,
    /// ... for at least this many intervals.
    pub cold_min_age: u32,
}

impl Thresholds {
    pub fn heat(&self, p: &PageInfo) -> Heat {
        if p.written || p.accesses >= self.hot_min.max(1) {
            Heat::Hot
        } else if p.accesses <= self.cold_max && p.age >= self.cold_min_age {
            Heat::Cold
        } else {
            Heat::Warm
        }
    }
}

/// Everything the decision depends on.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    pub pages: &'a [PageInfo],
    /// The fastest tier's nodes, and the slower nodes to demote to (preferred first).
    pub fast: &'a [u32],
    pub slow: &'a [u32],
    /// Pages each node can still take above its watermark.
    pub room: BTreeMap<u32, u64>,
    /// Most pages of this target on the fast tier.
    pub budget_pages: Option<u64>,
    /// Pages the rate limit lets move now.
    pub tokens: u64,
    pub thresholds: Thresholds,
    /// Pages moved too recently to move again.
    pub recently_moved: &'a HashSet<usize>,
    /// Pages whose last move failed.
    pub retry: &'a HashSet<usize>,
    /// Rule 4: demote cold pages although the fast tier is within the budget (memtierd's way:
    /// idle memory makes room for others). False in memory mode: cold pages leave the fast tier
    /// only to keep the budget or make room for hotter ones.
    pub demote_idle: bool,
}

/// Why a page is moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Hot, to the fast tier.
    Promote,
    /// Off the fast tier: cold, or to keep within the budget or make room.
    Demote,
}

/// One move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub addr: usize,
    /// Base pages moved (a huge page's count for a huge page).
    pub pages: u32,
    pub from: u32,
    pub to: u32,
    pub reason: Reason,
}

/// The decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MovePlan {
    /// Demotions first (they make room), then promotions.
    pub moves: Vec<Move>,
    /// Pages whose move was wanted but left for later because the rate limit's tokens ran out.
    pub held_by_rate: u64,
    /// Hot pages left on slower tiers because the budget or the watermarks leave no room and no
    /// colder fast-tier page can make room.
    pub held_by_room: u64,
    /// Pages left alone because they moved too recently.
    pub held_by_residency: u64,
}

fn take_room(room: &mut BTreeMap<u32, u64>, nodes: &[u32], pages: u64) -> Option<u32> {
    // The node with the most room, first in the list on a tie.
    let best = nodes
        .iter()
        .copied()
        .filter(|n| room.get(n).copied().unwrap_or(0) >= pages)
        .max_by_key(|n| {
            (
                room[n],
                std::cmp::Reverse(nodes.iter().position(|m| m == n)),
            )
        })?;
    *room.get_mut(&best).expect("present") -= pages;
    Some(best)
}

/// Base pages of a run of units.
fn pages_of<'a>(units: impl IntoIterator<Item = &'a PageInfo>) -> u64 {
    units.into_iter().map(|p| p.pages as u64).sum()
}

/// Decide what to move.
pub fn plan(input: &Input) -> MovePlan {
    let th = &input.thresholds;
    let mut room = input.room.clone();
    let mut tokens = input.tokens;
    let mut out = MovePlan::default();
    let is_fast = |n: u32| input.fast.contains(&n);
    let is_slow = |n: u32| input.slow.contains(&n);

    let mut fast_used = pages_of(input.pages.iter().filter(|p| is_fast(p.node)));
    let mut promote: Vec<&PageInfo> = Vec::new();
    let mut pool: Vec<(&PageInfo, Heat)> = Vec::new();
    for p in input.pages {
        let heat = th.heat(p);
        let wanted =
            (heat == Heat::Hot && is_slow(p.node)) || (heat != Heat::Hot && is_fast(p.node));
        if !wanted {
            continue;
        }
        if input.recently_moved.contains(&p.addr) {
            out.held_by_residency += p.pages as u64;
        } else if heat == Heat::Hot {
            promote.push(p);
        } else {
            pool.push((p, heat));
        }
    }
    let retry_first = |p: &PageInfo| !input.retry.contains(&p.addr);
    promote.sort_by_key(|p| (std::cmp::Reverse(p.accesses), retry_first(p), p.addr));
    // Coldest first: cold before warm, fewer accesses, then older.
    pool.sort_by_key(|(p, h)| {
        (
            *h,
            p.accesses,
            std::cmp::Reverse(p.age),
            retry_first(p),
            p.addr,
        )
    });
    let mut pool = pool.into_iter().peekable();
    let mut demotions = Vec::new();
    let mut promotions = Vec::new();

    let demote = |p: &PageInfo, room: &mut BTreeMap<u32, u64>, demotions: &mut Vec<Move>| -> bool {
        match take_room(room, input.slow, p.pages as u64) {
            Some(to) => {
                *room.entry(p.node).or_insert(0) += p.pages as u64;
                demotions.push(Move {
                    addr: p.addr,
                    pages: p.pages,
                    from: p.node,
                    to,
                    reason: Reason::Demote,
                });
                true
            }
            None => false,
        }
    };

    // 2. Back within the budget.
    if let Some(budget) = input.budget_pages {
        while fast_used > budget {
            let Some((p, _)) = pool.peek().copied() else {
                break;
            };
            if tokens < p.pages as u64 {
                out.held_by_rate += fast_used - budget;
                break;
            }
            if !demote(p, &mut room, &mut demotions) {
                break;
            }
            pool.next();
            tokens -= p.pages as u64;
            fast_used -= p.pages as u64;
        }
    }

    // 3. Hot pages up.
    let mut i = 0;
    while i < promote.len() {
        let p = promote[i];
        let need = p.pages as u64;
        if tokens < need {
            out.held_by_rate += pages_of(promote[i..].iter().copied());
            break;
        }
        if input.budget_pages.is_some_and(|b| need > b) {
            // A huge page larger than the whole budget never fits: demoting others for it
            // would only empty DRAM.
            out.held_by_room += need;
            i += 1;
            continue;
        }
        let within_budget = input.budget_pages.is_none_or(|b| fast_used + need <= b);
        if within_budget {
            if let Some(to) = take_room(&mut room, input.fast, need) {
                promotions.push(Move {
                    addr: p.addr,
                    pages: p.pages,
                    from: p.node,
                    to,
                    reason: Reason::Promote,
                });
                tokens -= need;
                fast_used += need;
                i += 1;
                continue;
            }
        }
        // No room: swap with a colder fast-tier page, if one is colder and tokens cover both.
        let colder = pool
            .peek()
            .is_some_and(|(q, h)| *h != Heat::Hot && q.accesses < p.accesses);
        if !colder {
            out.held_by_room += pages_of(promote[i..].iter().copied());
            break;
        }
        let (q, _) = *pool.peek().expect("peeked");
        if tokens < need + q.pages as u64 {
            out.held_by_rate += pages_of(promote[i..].iter().copied());
            break;
        }
        pool.next();
        if !demote(q, &mut room, &mut demotions) {
            out.held_by_room += pages_of(promote[i..].iter().copied());
            break;
        }
        tokens -= q.pages as u64;
        fast_used -= q.pages as u64;
        // The freed pages make room on their own node for the promotion (the loop retries `p`;
        // a huge page may take several colder units to make room for).
    }

    // 4. Cold pages down.
    for (p, heat) in pool.filter(|_| input.demote_idle) {
        if heat != Heat::Cold {
            continue;
        }
        if tokens < p.pages as u64 {
            out.held_by_rate += p.pages as u64;
            continue;
        }
        if demote(p, &mut room, &mut demotions) {
            tokens -= p.pages as u64;
        }
    }

    out.moves = demotions;
    out.moves.extend(promotions);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page `i` (from 0) at `0x1000 * (i + 1)`.
    fn page(i: usize, node: u32, accesses: u32, age: u32) -> PageInfo {
        crate::testutil::page_at(0x1000 * (i + 1), node, accesses, age)
    }

    const TH: Thresholds = Thresholds {
        hot_min: 4,
        cold_max: 0,
        cold_min_age: 3,
    };

    /// Page `i` of the list at `page(i, ..)`, from its (node, accesses, age).
    fn numbered(pages: &[(u32, u32, u32)]) -> Vec<PageInfo> {
        pages
            .iter()
            .enumerate()
            .map(|(i, &(node, accesses, age))| page(i, node, accesses, age))
            .collect()
    }

    fn input<'a>(
        pages: &'a [PageInfo],
        budget: Option<u64>,
        tokens: u64,
        none: &'a HashSet<usize>,
    ) -> Input<'a> {
        Input {
            pages,
            fast: &[0],
            slow: &[1],
            room: BTreeMap::from([(0, 1000), (1, 1000)]),
            budget_pages: budget,
            tokens,
            thresholds: TH,
            recently_moved: none,
            retry: none,
            demote_idle: true,
        }
    }

    fn count(plan: &MovePlan, reason: Reason) -> usize {
        plan.moves.iter().filter(|m| m.reason == reason).count()
    }

    #[test]
    fn heat_has_a_dead_band() {
        assert_eq!(TH.heat(&page(0, 0, 4, 0)), Heat::Hot);
        assert_eq!(TH.heat(&page(0, 0, 3, 100)), Heat::Warm);
        assert_eq!(
            TH.heat(&page(0, 0, 0, 2)),
            Heat::Warm,
            "not cold for long enough"
        );
        assert_eq!(TH.heat(&page(0, 0, 0, 3)), Heat::Cold);
        let written = PageInfo {
            written: true,
            ..page(0, 0, 0, 3)
        };
        assert_eq!(
            TH.heat(&written),
            Heat::Hot,
            "a written page is hot whatever its region says"
        );
    }

    #[test]
    fn memory_mode_keeps_cold_pages_in_dram_while_the_budget_has_room() {
        let none = HashSet::new();
        // Budget 3 pages; two cold pages and one hot page on the fast tier, one hot page on the
        // slow tier.
        let pages = numbered(&[(0, 0, 9), (0, 0, 9), (0, 10, 0), (1, 10, 0)]);
        let keep_idle = |budget| Input {
            demote_idle: false,
            ..input(&pages, Some(budget), 100, &none)
        };
        let p = plan(&keep_idle(3));
        // The hot page comes up by swapping with one cold page; the other cold page stays.
        assert_eq!(count(&p, Reason::Promote), 1, "{p:?}");
        assert_eq!(count(&p, Reason::Demote), 1, "{p:?}");
        // With room for all, nothing cold leaves.
        let p = plan(&keep_idle(8));
        assert_eq!(count(&p, Reason::Demote), 0, "{p:?}");
        assert_eq!(count(&p, Reason::Promote), 1, "{p:?}");
        // memtierd's way: the cold pages go down regardless.
        let p = plan(&input(&pages, Some(8), 100, &none));
        assert_eq!(count(&p, Reason::Demote), 2, "{p:?}");
    }

    #[test]
    fn hot_up_cold_down_warm_stays() {
        let none = HashSet::new();
        let pages = numbered(&[(1, 10, 0), (0, 0, 9), (0, 2, 9), (1, 0, 9)]);
        let p = plan(&input(&pages, None, 100, &none));
        assert_eq!(
            p.moves,
            vec![
                Move {
                    addr: 0x2000,
                    pages: 1,
                    from: 0,
                    to: 1,
                    reason: Reason::Demote
                },
                Move {
                    addr: 0x1000,
                    pages: 1,
                    from: 1,
                    to: 0,
                    reason: Reason::Promote
                },
            ]
        );
    }

    #[test]
    fn the_budget_is_kept_by_swapping_colder_pages_out() {
        let none = HashSet::new();
        // Budget 2 pages; fast tier holds 3 warm/cold pages; 2 hot pages on the slow tier.
        let pages = numbered(&[(0, 1, 0), (0, 2, 0), (0, 0, 5), (1, 9, 0), (1, 8, 0)]);
        let p = plan(&input(&pages, Some(2), 100, &none));
        assert_eq!(count(&p, Reason::Promote), 2);
        let fast_after = pages.iter().filter(|q| q.node == 0).count() + count(&p, Reason::Promote)
            - count(&p, Reason::Demote);
        assert_eq!(fast_after, 2, "{p:?}");
        // The coldest page went first.
        assert_eq!(p.moves[0].addr, pages[2].addr);
        // Hot pages never go down.
        assert!(p
            .moves
            .iter()
            .all(|m| m.reason == Reason::Promote || m.addr != 0x4000));
    }

    #[test]
    fn hot_pages_beyond_the_budget_wait_and_hot_pages_are_never_demoted_for_them() {
        let none = HashSet::new();
        let pages = [page(0, 0, 9, 0), page(1, 1, 9, 0), page(2, 1, 5, 0)];
        let p = plan(&input(&pages, Some(1), 100, &none));
        assert!(p.moves.is_empty(), "{p:?}");
        assert_eq!(p.held_by_room, 2);
    }

    #[test]
    fn the_rate_limit_caps_moves_and_counts_what_waits() {
        let none = HashSet::new();
        let pages: Vec<PageInfo> = (0..10).map(|i| page(i, 1, 9, 0)).collect();
        let p = plan(&input(&pages, None, 3, &none));
        assert_eq!(p.moves.len(), 3);
        assert_eq!(p.held_by_rate, 7);
    }

    #[test]
    fn recently_moved_pages_stay_and_failed_pages_go_first() {
        let recent: HashSet<usize> = [0x1000].into();
        let retry: HashSet<usize> = [0x3000].into();
        let pages = [page(0, 1, 9, 0), page(1, 1, 9, 0), page(2, 1, 9, 0)];
        let mut i = input(&pages, None, 1, &recent);
        i.retry = &retry;
        let p = plan(&i);
        assert_eq!(p.held_by_residency, 1);
        assert_eq!(p.moves.len(), 1);
        assert_eq!(p.moves[0].addr, 0x3000);
    }

    #[test]
    fn watermarks_stop_promotion_and_demotion() {
        let none = HashSet::new();
        let pages = [page(0, 1, 9, 0), page(1, 0, 0, 9)];
        let mut i = input(&pages, None, 10, &none);
        i.room = BTreeMap::from([(0, 0), (1, 0)]);
        let p = plan(&i);
        assert!(p.moves.is_empty(), "{p:?}");
        assert_eq!(p.held_by_room, 1);
    }

    fn huge(i: usize, node: u32, accesses: u32) -> PageInfo {
        PageInfo {
            addr: 0x10_0000_0000 + (i << 21),
            pages: 512,
            ..page(0, node, accesses, 0)
        }
    }

    /// A hot huge page takes its 512 pages of the budget: colder pages make exactly that room,
    /// and the fast tier ends within the budget (moving it as one page overshot by 511).
    #[test]
    fn a_huge_page_counts_all_its_pages_against_the_budget() {
        let none = HashSet::new();
        let mut pages: Vec<PageInfo> = (0..100).map(|i| page(i, 0, 1, 0)).collect();
        pages.push(huge(0, 1, 9));
        let p = plan(&input(&pages, Some(600), 10_000, &none));
        let promoted: Vec<&Move> = p
            .moves
            .iter()
            .filter(|m| m.reason == Reason::Promote)
            .collect();
        assert_eq!(promoted.len(), 1, "{p:?}");
        assert_eq!(promoted[0].pages, 512);
        assert_eq!(count(&p, Reason::Demote), 12, "{p:?}");
        let fast_after: u64 = 100 + 512 - 12;
        assert!(fast_after <= 600);
        // Not enough tokens for the huge page: it waits, counted in pages.
        let p = plan(&input(&pages, Some(600), 300, &none));
        assert_eq!(count(&p, Reason::Promote), 0, "{p:?}");
        assert_eq!(p.held_by_rate, 512);
    }

    /// A huge page larger than the budget never goes up, and nothing is demoted for it.
    #[test]
    fn a_huge_page_over_the_whole_budget_stays_and_demotes_nothing() {
        let none = HashSet::new();
        let mut pages: Vec<PageInfo> = (0..100).map(|i| page(i, 0, 1, 0)).collect();
        pages.push(huge(0, 1, 9));
        pages.push(page(200, 1, 8, 0));
        let p = plan(&input(&pages, Some(256), 10_000, &none));
        assert_eq!(p.held_by_room, 512, "{p:?}");
        // The 4 KiB hot page behind it still goes up, into the room under the budget.
        assert_eq!(
            p.moves,
            vec![Move {
                addr: page(200, 1, 8, 0).addr,
                pages: 1,
                from: 1,
                to: 0,
                reason: Reason::Promote
            }]
        );
    }
}
