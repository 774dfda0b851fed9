//! `move_pages(2)`: where pages are, and moving them.

use libc::{c_int, c_long, c_ulong, c_void};

use crate::error::{errno_name, ErrorKind, SysError};

/// What `move_pages` says about one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageStatus {
    /// The page is on this node.
    Node(u32),
    /// The kernel's per-page error, as a positive errno: `ENOENT` (not present: never touched, or
    /// the zero page), `EFAULT` (not mapped), `EACCES` (shared and not movable without
    /// `MPOL_MF_MOVE_ALL`), `EBUSY`, `ENOMEM`, `EIO` ...
    Error(i32),
}

impl PageStatus {
    fn from_raw(raw: c_int) -> PageStatus {
        if raw >= 0 {
            PageStatus::Node(raw as u32)
        } else {
            PageStatus::Error(-raw)
        }
    }

    /// The node, if the page has one.
    pub fn node(self) -> Option<u32> {
        match self {
            PageStatus::Node(n) => Some(n),
            PageStatus::Error(_) => None,
        }
    }

    /// A short label: the node id or the errno's name (`ENOENT`).
    pub fn label(self) -> String {
        match self {
            PageStatus::Node(n) => n.to_string(),
            PageStatus::Error(e) => errno_name(e),
        }
    }
}

/// Pages counted by the node they are on, from the statuses [`query_pages`] or [`move_pages`]
/// returned: the one count that every report of where memory landed (a touched buffer, a store
/// arena, an array's chunks, a probe buffer) is made from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PagesPerNode {
    /// Pages on each node.
    pub nodes: std::collections::BTreeMap<u32, u64>,
    /// Pages the kernel gave an error for, by errno (`ENOENT`: not present, ...).
    pub errors: std::collections::BTreeMap<i32, u64>,
}

impl PagesPerNode {
    /// Counts `statuses`.
    pub fn count<'a>(statuses: impl IntoIterator<Item = &'a PageStatus>) -> PagesPerNode {
        let mut c = PagesPerNode::default();
        c.add(statuses);
        c
    }

    /// Adds `statuses` to the count.
    pub fn add<'a>(&mut self, statuses: impl IntoIterator<Item = &'a PageStatus>) {
        for s in statuses {
            match *s {
                PageStatus::Node(n) => *self.nodes.entry(n).or_insert(0) += 1,
                PageStatus::Error(e) => *self.errors.entry(e).or_insert(0) += 1,
            }
        }
    }

    /// Pages found on a node.
    pub fn placed(&self) -> u64 {
        self.nodes.values().sum()
    }

    /// Pages with an error instead of a node.
    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// The outcome of [`move_pages`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Each page's node after the call, or why it was not moved.
    pub status: Vec<PageStatus>,
    /// How many pages the kernel reported as not migrated (Linux 4.17+ counts them; older kernels
    /// report 0 and leave it to `status`).
    pub not_moved: usize,
}

const MPOL_MF_MOVE: c_int = 1 << 1;
const MPOL_MF_MOVE_ALL: c_int = 1 << 2;

fn pid_arg(call: &'static str, pid: Option<u32>) -> Result<c_int, SysError> {
    match pid {
        None => Ok(0),
        Some(p) => c_int::try_from(p).ok().filter(|&p| p > 0).ok_or_else(|| {
            SysError::new(
                call,
                libc::ESRCH,
                ErrorKind::NoSuchProcess,
                format!("{p} is not a valid process id"),
            )
        }),
    }
}

// The address array is passed to the kernel as `void **`: the same size as usize on every Linux
// target.
const _: () = assert!(std::mem::size_of::<usize>() == std::mem::size_of::<*const c_void>());

fn explain(err: SysError, pid: Option<u32>, moving: bool) -> SysError {
    match (err.errno, pid) {
        (libc::ESRCH, Some(p)) => err.with_detail(format!("no process {p} (it may have exited)")),
        (libc::EPERM | libc::EACCES, Some(p)) => err.with_detail(format!(
            "not permitted to {} pages of process {p}: it belongs to another user, or moving \
             needs CAP_SYS_NICE; run as root (try sudo)",
            if moving { "move" } else { "inspect" }
        )),
        (libc::ENODEV, _) => err.with_detail("a target node is offline or has no memory (ENODEV)"),
        _ => err,
    }
}

/// `move_pages(2)` on the pages at `addrs` of process `pid` (`pid_raw` as the kernel takes it,
/// [`pid_arg`]): only where each lives for `nodes` `None` (a NULL node list), else moved to
/// `nodes[i]` with `flags`. Each page's raw status and how many pages were not moved; a failed
/// call's error, explained.
fn move_pages_call(
    pid: Option<u32>,
    pid_raw: c_int,
    addrs: &[usize],
    nodes: Option<&[c_int]>,
    flags: c_int,
) -> Result<(Vec<c_int>, usize), SysError> {
    assert!(
        nodes.is_none_or(|n| n.len() == addrs.len()),
        "one node per address"
    );
    let mut status: Vec<c_int> = vec![0; addrs.len()];
    // SAFETY: move_pages(pid, count, void **pages, const int *nodes, int *status, flags) reads
    // `count` pointer-sized addresses from `addrs` (a live slice of exactly `count` usizes, which
    // have the size of pointers, asserted above), `count` ints from `nodes` when it is given (a
    // live slice of exactly `count` ints, asserted above), and writes `count` ints to `status` (a
    // Vec of exactly `count` ints). With nodes = NULL it only queries: the addresses are only
    // looked up in the target's page tables, never dereferenced by us, and nothing is moved.
    // Migration copies each page's contents to the new node before remapping it, so memory seen
    // by Rust code is unchanged.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid_raw as c_long,
            addrs.len() as c_ulong,
            addrs.as_ptr().cast::<*const c_void>(),
            nodes.map_or(std::ptr::null(), <[c_int]>::as_ptr),
            status.as_mut_ptr(),
            flags as c_long,
        )
    };
    if ret < 0 {
        return Err(explain(SysError::last("move_pages"), pid, nodes.is_some()));
    }
    Ok((status, ret as usize))
}

/// Where each page at `addrs` lives, in process `pid` (`None`: this process) — `move_pages(2)` in
/// query mode (NULL node list). Addresses need not be page-aligned. Does not fault pages in: an
/// untouched page reports `Error(ENOENT)`.
pub fn query_pages(pid: Option<u32>, addrs: &[usize]) -> Result<Vec<PageStatus>, SysError> {
    const CALL: &str = "move_pages";
    let pid_raw = pid_arg(CALL, pid)?;
    if addrs.is_empty() {
        return Ok(Vec::new());
    }
    let (status, _) = move_pages_call(pid, pid_raw, addrs, None, 0)?;
    Ok(status.into_iter().map(PageStatus::from_raw).collect())
}

/// Move the page at `addrs[i]` to node `nodes[i]`, in process `pid` (`None`: this process) —
/// `move_pages(2)` in migrate mode. `move_all` also moves pages shared with other processes (needs
/// CAP_SYS_NICE). Migration preserves contents.
pub fn move_pages(
    pid: Option<u32>,
    addrs: &[usize],
    nodes: &[u32],
    move_all: bool,
) -> Result<Moved, SysError> {
    const CALL: &str = "move_pages";
    let pid_raw = pid_arg(CALL, pid)?;
    if addrs.len() != nodes.len() {
        return Err(SysError::new(
            CALL,
            libc::EINVAL,
            ErrorKind::InvalidArgument,
            format!(
                "{} addresses but {} target nodes: give one node per page",
                addrs.len(),
                nodes.len()
            ),
        ));
    }
    if addrs.is_empty() {
        return Ok(Moved {
            status: Vec::new(),
            not_moved: 0,
        });
    }
    let targets: Vec<c_int> = nodes
        .iter()
        .map(|&n| {
            c_int::try_from(n).map_err(|_| {
                SysError::new(
                    CALL,
                    libc::EINVAL,
                    ErrorKind::InvalidArgument,
                    format!("node {n} is not a valid node id"),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    let flags = if move_all {
        MPOL_MF_MOVE_ALL
    } else {
        MPOL_MF_MOVE
    };
    let (status, not_moved) = move_pages_call(pid, pid_raw, addrs, Some(&targets), flags)?;
    Ok(Moved {
        status: status.into_iter().map(PageStatus::from_raw).collect(),
        not_moved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_counted_per_node_and_errors_per_errno() {
        let c = PagesPerNode::count(&[
            PageStatus::Node(0),
            PageStatus::Node(1),
            PageStatus::Node(0),
            PageStatus::Error(libc::ENOENT),
        ]);
        assert_eq!(
            c.nodes.into_iter().collect::<Vec<_>>(),
            vec![(0, 2), (1, 1)]
        );
        assert_eq!(c.errors.get(&libc::ENOENT), Some(&1));
        let mut c = PagesPerNode::default();
        c.add(&[PageStatus::Node(2)]);
        c.add(&[PageStatus::Node(2), PageStatus::Error(libc::EFAULT)]);
        assert_eq!((c.placed(), c.failed()), (2, 1));
    }
    use crate::mapping::Mapping;
    use crate::mempolicy::{mems_allowed, node_of_address};

    #[test]
    fn touched_pages_have_nodes_untouched_do_not() {
        let page = crate::page_size();
        let mut m = Mapping::anonymous(8 * page).unwrap();
        m.advise(crate::Advice::NoHugePage).unwrap();
        let addrs: Vec<usize> = m.page_addresses(page).collect();
        let before = query_pages(None, &addrs).unwrap();
        assert!(before.iter().all(|s| *s == PageStatus::Error(libc::ENOENT)));
        m.write_each(page, 1);
        let after = query_pages(None, &addrs).unwrap();
        let allowed = mems_allowed().unwrap();
        for s in &after {
            assert!(allowed.contains(s.node().expect("touched page has a node")));
        }
        assert_eq!(node_of_address(addrs[0]).unwrap(), after[0].node().unwrap());
        assert_eq!(PageStatus::Error(libc::ENOENT).label(), "ENOENT");
    }

    #[test]
    fn migrate_to_current_node_is_a_no_op() {
        let page = crate::page_size();
        let mut m = Mapping::anonymous(2 * page).unwrap();
        m.write_each(page, 3);
        let addrs: Vec<usize> = m.page_addresses(page).collect();
        let here: Vec<u32> = query_pages(None, &addrs)
            .unwrap()
            .iter()
            .map(|s| s.node().unwrap())
            .collect();
        let moved = move_pages(None, &addrs, &here, false).unwrap();
        assert_eq!(moved.not_moved, 0);
        assert_eq!(
            moved
                .status
                .iter()
                .map(|s| s.node().unwrap())
                .collect::<Vec<_>>(),
            here
        );
        assert_eq!(m.as_slice()[page], 3);
        assert!(move_pages(None, &addrs, &here[..1], false).is_err());
    }

    #[test]
    fn missing_process_is_named() {
        // pid_max is at most 2^22; this pid cannot exist.
        let e = query_pages(Some(i32::MAX as u32), &[4096]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoSuchProcess, "{e}");
        assert!(e.to_string().contains(&(i32::MAX).to_string()), "{e}");
    }
}
