//! Measurement buffers: anonymous memory with huge pages where the kernel gives them, bound to the
//! target before the first touch, and checked afterwards with `move_pages`.

use crate::plan::TargetPolicy;
use crate::ProbeError;
use cxltier_sys::{query_pages, Advice, Mapping, MbindFlags, Mode, NodeMask, PageStatus, Policy};
use serde::Serialize;
use std::collections::BTreeMap;

/// Where a buffer's pages were found.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementCheck {
    /// Pages queried with `move_pages` (every page, or an even sample of large buffers).
    pub pages_checked: usize,
    /// Pages found on each node.
    pub pages_per_node: BTreeMap<u32, usize>,
    /// Fraction of the checked pages on each node.
    pub share_per_node: BTreeMap<u32, f64>,
    /// Whether every checked page is where the policy says (for interleave: on one of its nodes,
    /// and within 5 percentage points of each node's weight share).
    pub verified: bool,
    /// Bytes of the buffer backed by transparent huge pages (from `AnonHugePages` in smaps: the
    /// share of the mapping the buffer lies in, times the buffer's size).
    pub huge_page_bytes: u64,
    /// Whether most of the buffer is on huge pages.
    pub huge_pages: bool,
}

/// An anonymous mapping placed according to a [`TargetPolicy`].
pub struct Buffer {
    map: Mapping,
}

/// At most this many pages are queried; larger buffers are sampled evenly.
const MAX_QUERY: usize = 1 << 17;

/// 2 MiB: the x86-64 transparent huge page.
pub const HUGE: u64 = 2 << 20;

fn policy(p: &TargetPolicy) -> Result<Policy, ProbeError> {
    let bind_err = |source| ProbeError::Bind {
        target: p.describe(),
        source,
    };
    Ok(match p {
        TargetPolicy::Node(n) => {
            Policy::new(Mode::Bind, NodeMask::from_nodes([*n]).map_err(bind_err)?)
        }
        TargetPolicy::Weighted { nodes, .. } => Policy::new(
            Mode::WeightedInterleave,
            NodeMask::from_nodes(nodes.iter().copied()).map_err(bind_err)?,
        ),
    })
}

/// Check before measuring that memory can be bound to `placement`: bind a small untouched mapping
/// (no memory is allocated). Catches EPERM (a seccomp filter or missing privilege), EINVAL (node
/// outside the cpuset) and a kernel without the mode.
pub fn preflight(placement: &TargetPolicy) -> Result<(), ProbeError> {
    let pol = policy(placement)?;
    let scratch = Mapping::anonymous(HUGE as usize).map_err(|source| ProbeError::Allocate {
        what: "scratch",
        target: placement.describe(),
        source,
    })?;
    match scratch.bind(&pol, MbindFlags::default()) {
        Ok(()) => Ok(()),
        Err(e) if matches!(placement, TargetPolicy::Weighted { .. }) && e.is_unsupported() => {
            Err(ProbeError::NoWeightedInterleave)
        }
        Err(source) => Err(ProbeError::Bind {
            target: placement.describe(),
            source,
        }),
    }
}

impl Buffer {
    /// Map `bytes`, ask for huge pages (when `huge`), bind to `placement`, then touch every page so
    /// that the policy places it. `what` names the buffer in errors.
    pub fn allocate(
        bytes: u64,
        placement: &TargetPolicy,
        huge: bool,
        what: &'static str,
    ) -> Result<Buffer, ProbeError> {
        let target = placement.describe();
        let mut map =
            Mapping::anonymous(bytes as usize).map_err(|source| ProbeError::Allocate {
                what,
                target: target.clone(),
                source,
            })?;
        if huge {
            // A kernel without THP refuses the advice; the buffer then simply has base pages, and
            // the report says so.
            let _ = map.advise(Advice::HugePage);
        }
        map.bind(&policy(placement)?, MbindFlags::default())
            .map_err(|source| ProbeError::Bind {
                target: target.clone(),
                source,
            })?;
        map.write_each(cxltier_sys::page_size(), 1);
        Ok(Buffer { map })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn words(&self) -> &[u64] {
        cxltier_sys::stream::words(self.map.as_slice())
    }

    pub fn words_mut(&mut self) -> &mut [u64] {
        cxltier_sys::stream::words_mut(self.map.as_mut_slice())
    }

    /// Query where the pages are and whether that is what `placement` asked for.
    pub fn check(
        &self,
        placement: &TargetPolicy,
        what: &'static str,
    ) -> Result<PlacementCheck, ProbeError> {
        let page = cxltier_sys::page_size();
        let pages = self.map.len() / page;
        let stride = pages.div_ceil(MAX_QUERY).max(1) * page;
        let addrs: Vec<usize> = self.map.page_addresses(stride).collect();
        let status = query_pages(None, &addrs).map_err(|source| ProbeError::Verify {
            what,
            target: placement.describe(),
            source,
        })?;
        let share = crate::host::own_huge_share(self.map.addr()).unwrap_or(0.0);
        let huge_page_bytes = (share * self.map.len() as f64) as u64;
        let check = summarize(&status, placement, huge_page_bytes, self.map.len() as u64);
        if !check.verified {
            return Err(ProbeError::Placement {
                what,
                target: placement.describe(),
                detail: describe_mismatch(&status, &check, placement),
            });
        }
        Ok(check)
    }
}

/// Judge page statuses against a placement.
pub fn summarize(
    status: &[PageStatus],
    placement: &TargetPolicy,
    huge_page_bytes: u64,
    len: u64,
) -> PlacementCheck {
    let counted = cxltier_sys::PagesPerNode::count(status);
    let per_node: BTreeMap<u32, usize> = counted
        .nodes
        .iter()
        .map(|(&n, &c)| (n, c as usize))
        .collect();
    let missing = counted.failed() as usize;
    let total = status.len().max(1);
    let share: BTreeMap<u32, f64> = per_node
        .iter()
        .map(|(&n, &c)| (n, c as f64 / total as f64))
        .collect();
    let verified = missing == 0
        && match placement {
            TargetPolicy::Node(n) => per_node.keys().all(|k| k == n),
            TargetPolicy::Weighted { nodes, weights } => {
                let sum: u32 = weights.iter().sum();
                per_node.keys().all(|k| nodes.contains(k))
                    && nodes.iter().zip(weights).all(|(n, w)| {
                        let want = f64::from(*w) / f64::from(sum);
                        (share.get(n).copied().unwrap_or(0.0) - want).abs() <= 0.05
                    })
            }
        };
    PlacementCheck {
        pages_checked: status.len(),
        pages_per_node: per_node,
        share_per_node: share,
        verified,
        huge_page_bytes,
        huge_pages: huge_page_bytes * 2 >= len,
    }
}

fn describe_mismatch(
    status: &[PageStatus],
    check: &PlacementCheck,
    placement: &TargetPolicy,
) -> String {
    let missing = status.iter().filter(|s| s.node().is_none()).count();
    let found: Vec<String> = check
        .pages_per_node
        .iter()
        .map(|(n, c)| format!("{c} on node {n}"))
        .collect();
    let mut text = format!(
        "of {} pages checked, {}",
        check.pages_checked,
        if found.is_empty() {
            "none has a node".to_string()
        } else {
            found.join(", ")
        }
    );
    if missing > 0 {
        let first = status
            .iter()
            .find(|s| s.node().is_none())
            .map(|s| s.label())
            .unwrap_or_default();
        text.push_str(&format!(", {missing} not present ({first})"));
    }
    text.push_str(&format!("; expected {}", placement.describe()));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_pages_must_all_be_on_the_node() {
        let p = TargetPolicy::Node(1);
        let ok = summarize(&[PageStatus::Node(1); 10], &p, 0, 40960);
        assert!(ok.verified);
        assert_eq!(ok.pages_per_node[&1], 10);
        let mut mixed = vec![PageStatus::Node(1); 9];
        mixed.push(PageStatus::Node(0));
        let bad = summarize(&mixed, &p, 0, 40960);
        assert!(!bad.verified);
        let text = describe_mismatch(&mixed, &bad, &p);
        assert!(text.contains("1 on node 0"), "{text}");
        let absent = summarize(&[PageStatus::Error(2)], &p, 0, 4096);
        assert!(!absent.verified);
    }

    #[test]
    fn weighted_pages_follow_the_weights() {
        let p = TargetPolicy::Weighted {
            nodes: vec![0, 1],
            weights: vec![3, 1],
        };
        let mut s = vec![PageStatus::Node(0); 75];
        s.extend(vec![PageStatus::Node(1); 25]);
        assert!(summarize(&s, &p, 0, 1).verified);
        let mut skew = vec![PageStatus::Node(0); 50];
        skew.extend(vec![PageStatus::Node(1); 50]);
        assert!(!summarize(&skew, &p, 0, 1).verified);
    }

    #[test]
    fn allocates_binds_and_verifies_on_this_machine() {
        let node = cxltier_sys::mems_allowed().unwrap().nodes()[0];
        let p = TargetPolicy::Node(node);
        preflight(&p).unwrap();
        let mut b = Buffer::allocate(8 << 20, &p, true, "test").unwrap();
        let w = b.words_mut();
        assert_eq!(w.len(), (8 << 20) / 8);
        w[5] = 7;
        let check = b.check(&p, "test").unwrap();
        assert!(check.verified);
        assert!(check.pages_checked >= 2048);
    }
}
