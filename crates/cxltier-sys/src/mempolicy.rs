//! NUMA memory policy: `set_mempolicy(2)`, `get_mempolicy(2)` and the node mask they take.
//!
//! A memory policy decides on which NUMA nodes the kernel allocates a thread's pages. It belongs to
//! the calling *thread*, is copied to children at `fork`/`clone`, and survives `execve`, which is how
//! `numactl` and `cxltier run` start a program under a policy. See the kernel's
//! `Documentation/admin-guide/mm/numa_memory_policy.rst`.

use std::fmt;
use std::str::FromStr;

use libc::{c_int, c_long, c_ulong, c_void};

use crate::error::{ErrorKind, SysError};
use crate::mapping::{Mapping, MbindFlags};

// Mode flags from include/uapi/linux/mempolicy.h (the modes are [`Mode`]'s discriminants).
const MPOL_F_NUMA_BALANCING: c_int = 1 << 13;
const MPOL_F_RELATIVE_NODES: c_int = 1 << 14;
const MPOL_F_STATIC_NODES: c_int = 1 << 15;
const MPOL_MODE_FLAGS: c_int = MPOL_F_NUMA_BALANCING | MPOL_F_RELATIVE_NODES | MPOL_F_STATIC_NODES;

/// A memory-policy mode. The variants stand in the kernel's numbering order (`MPOL_*` in
/// include/uapi/linux/mempolicy.h; `libc` has the first five only), so that a mode's
/// discriminant is its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Fall back to the process policy, or allocate on the local node.
    Default,
    /// Allocate on one node if possible, elsewhere if not.
    Preferred,
    /// Allocate only on the given nodes.
    Bind,
    /// Round-robin pages over the given nodes.
    Interleave,
    /// Allocate on the node of the CPU that faults (Linux 3.8+).
    Local,
    /// Prefer any of the given nodes, fall back elsewhere (Linux 5.15+).
    PreferredMany,
    /// Interleave pages over the given nodes in proportion to the kernel's global per-node weights
    /// (`/sys/kernel/mm/mempolicy/weighted_interleave/nodeN`, Linux 6.9+).
    WeightedInterleave,
}

impl Mode {
    /// Every mode, in the kernel's numbering order.
    pub const ALL: [Mode; 7] = [
        Mode::Default,
        Mode::Preferred,
        Mode::Bind,
        Mode::Interleave,
        Mode::Local,
        Mode::PreferredMany,
        Mode::WeightedInterleave,
    ];

    /// The kernel's number for the mode (`MPOL_*`).
    pub fn raw(self) -> i32 {
        self as i32
    }

    /// The mode with kernel number `raw` (mode flags must already be masked off).
    pub fn from_raw(raw: i32) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.raw() == raw)
    }

    /// A stable kebab-case name: `default`, `preferred`, `bind`, `interleave`, `local`,
    /// `preferred-many`, `weighted-interleave`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Preferred => "preferred",
            Mode::Bind => "bind",
            Mode::Interleave => "interleave",
            Mode::Local => "local",
            Mode::PreferredMany => "preferred-many",
            Mode::WeightedInterleave => "weighted-interleave",
        }
    }

    /// The first Linux release with this mode.
    pub fn since(self) -> &'static str {
        match self {
            Mode::Local => "Linux 3.8",
            Mode::PreferredMany => "Linux 5.15",
            Mode::WeightedInterleave => "Linux 6.9",
            _ => "Linux 2.6.7",
        }
    }

    /// Whether the mode takes a node mask (`default` and `local` take an empty one).
    pub fn takes_nodes(self) -> bool {
        !matches!(self, Mode::Default | Mode::Local)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "unknown memory-policy mode {s:?} (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// Optional mode flags (`MPOL_F_*`) that change how a policy's nodes are interpreted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ModeFlags {
    /// `MPOL_F_STATIC_NODES`: the nodes are physical ids, not remapped when the cpuset changes.
    pub static_nodes: bool,
    /// `MPOL_F_RELATIVE_NODES`: the nodes are relative to the cpuset's allowed nodes.
    pub relative_nodes: bool,
    /// `MPOL_F_NUMA_BALANCING`: NUMA balancing may move pages within a `bind` policy (Linux 5.12+).
    pub numa_balancing: bool,
}

impl ModeFlags {
    fn raw(self) -> c_int {
        let mut raw = 0;
        if self.static_nodes {
            raw |= MPOL_F_STATIC_NODES;
        }
        if self.relative_nodes {
            raw |= MPOL_F_RELATIVE_NODES;
        }
        if self.numa_balancing {
            raw |= MPOL_F_NUMA_BALANCING;
        }
        raw
    }

    fn from_raw(raw: c_int) -> ModeFlags {
        ModeFlags {
            static_nodes: raw & MPOL_F_STATIC_NODES != 0,
            relative_nodes: raw & MPOL_F_RELATIVE_NODES != 0,
            numa_balancing: raw & MPOL_F_NUMA_BALANCING != 0,
        }
    }

    /// The flags that are set, as stable kebab-case names (`static-nodes`, `relative-nodes`,
    /// `numa-balancing`).
    pub fn names(self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.static_nodes {
            names.push("static-nodes");
        }
        if self.relative_nodes {
            names.push("relative-nodes");
        }
        if self.numa_balancing {
            names.push("numa-balancing");
        }
        names
    }
}

/// Words of the node mask: `unsigned long`s, as the kernel reads them.
const WORDS: usize = NodeMask::MAX_NODES / c_ulong::BITS as usize;

/// The `maxnode` argument for a [`NodeMask`]: the number of bits plus one. The kernel reads
/// `maxnode - 1` bits (an off-by-one kept since 2.6 for compatibility; libnuma passes `size + 1` too)
/// and `get_mempolicy` writes `ALIGN(maxnode - 1, 64) / 8` bytes, exactly our 128.
const MAXNODE: c_ulong = NodeMask::MAX_NODES as c_ulong + 1;

/// A set of NUMA node ids in the kernel's bitmap layout, sized for the kernel's largest
/// `MAX_NUMNODES` (1024, from `CONFIG_NODES_SHIFT` <= 10).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeMask {
    words: [c_ulong; WORDS],
}

impl Default for NodeMask {
    fn default() -> Self {
        NodeMask { words: [0; WORDS] }
    }
}

impl NodeMask {
    /// The number of node ids a mask holds; ids run from 0 to `MAX_NODES - 1`.
    pub const MAX_NODES: usize = 1024;

    /// The empty mask.
    pub fn new() -> Self {
        Self::default()
    }

    /// A mask holding `nodes`; fails for an id of [`NodeMask::MAX_NODES`] or more.
    pub fn from_nodes<I: IntoIterator<Item = u32>>(nodes: I) -> Result<Self, SysError> {
        let mut mask = NodeMask::new();
        for node in nodes {
            mask.insert(node)?;
        }
        Ok(mask)
    }

    /// Add `node`; fails for an id of [`NodeMask::MAX_NODES`] or more.
    pub fn insert(&mut self, node: u32) -> Result<(), SysError> {
        let n = node as usize;
        if n >= Self::MAX_NODES {
            return Err(SysError::new(
                "nodemask",
                libc::EINVAL,
                ErrorKind::InvalidArgument,
                format!(
                    "node {node} is beyond the kernel's limit of {} NUMA nodes",
                    Self::MAX_NODES
                ),
            ));
        }
        let bits = c_ulong::BITS as usize;
        self.words[n / bits] |= 1 << (n % bits);
        Ok(())
    }

    /// Whether `node` is in the mask.
    pub fn contains(&self, node: u32) -> bool {
        let n = node as usize;
        let bits = c_ulong::BITS as usize;
        n < Self::MAX_NODES && self.words[n / bits] & (1 << (n % bits)) != 0
    }

    /// The node ids in the mask, ascending.
    pub fn nodes(&self) -> Vec<u32> {
        (0..Self::MAX_NODES as u32)
            .filter(|&n| self.contains(n))
            .collect()
    }

    /// Whether the mask is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The number of nodes in the mask.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn as_ptr(&self) -> *const c_ulong {
        self.words.as_ptr()
    }

    fn as_mut_ptr(&mut self) -> *mut c_ulong {
        self.words.as_mut_ptr()
    }

    pub(crate) fn syscall_args(&self) -> (*const c_ulong, c_ulong) {
        (self.as_ptr(), MAXNODE)
    }
}

/// Formats as the kernel's list syntax, e.g. `0-1,3`; the empty mask formats as `""`.
impl fmt::Display for NodeMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes = self.nodes();
        let mut i = 0;
        let mut first = true;
        while i < nodes.len() {
            let start = nodes[i];
            while i + 1 < nodes.len() && nodes[i + 1] == nodes[i] + 1 {
                i += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if nodes[i] == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{}", nodes[i])?;
            }
            i += 1;
        }
        Ok(())
    }
}

impl fmt::Debug for NodeMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeMask({self})")
    }
}

/// A memory policy: a mode, its flags and its nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The mode.
    pub mode: Mode,
    /// Mode flags.
    pub flags: ModeFlags,
    /// The nodes (empty for `default` and `local`).
    pub nodes: NodeMask,
}

impl Policy {
    /// A policy with no mode flags.
    pub fn new(mode: Mode, nodes: NodeMask) -> Self {
        Policy {
            mode,
            flags: ModeFlags::default(),
            nodes,
        }
    }

    /// The default policy (local allocation, or the process policy for a VMA).
    pub fn default_policy() -> Self {
        Policy::new(Mode::Default, NodeMask::new())
    }

    pub(crate) fn raw_mode(&self) -> c_int {
        self.mode.raw() | self.flags.raw()
    }

    /// Check the policy's shape before the kernel sees it, so that the common mistakes get a
    /// precise message instead of a bare EINVAL.
    pub(crate) fn check(&self, call: &'static str) -> Result<(), SysError> {
        let invalid =
            |detail: String| SysError::new(call, libc::EINVAL, ErrorKind::InvalidArgument, detail);
        match self.mode {
            Mode::Default | Mode::Local if !self.nodes.is_empty() => Err(invalid(format!(
                "the {} policy takes no nodes (got {})",
                self.mode, self.nodes
            ))),
            Mode::Preferred if self.nodes.len() != 1 => Err(invalid(format!(
                "the preferred policy takes exactly one node (got {:?}); use preferred-many for several",
                self.nodes.to_string()
            ))),
            m if m.takes_nodes() && self.nodes.is_empty() => {
                Err(invalid(format!("the {m} policy needs at least one node")))
            }
            _ if self.flags.static_nodes && self.flags.relative_nodes => Err(invalid(
                "static-nodes and relative-nodes cannot be combined".into(),
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mode.name())?;
        for flag in self.flags.names() {
            write!(f, "={flag}")?;
        }
        if !self.nodes.is_empty() {
            write!(f, ":{}", self.nodes)?;
        }
        Ok(())
    }
}

/// Set the calling thread's memory policy (`set_mempolicy(2)`).
///
/// Children created afterwards (`fork`, `std::process::Command::spawn`) inherit it, and it survives
/// `exec`. On EINVAL the error says whether the kernel lacks the mode (for example
/// "the kernel lacks weighted interleave (needs Linux 6.9+)") or which nodes were not usable.
pub fn set_mempolicy(policy: &Policy) -> Result<(), SysError> {
    const CALL: &str = "set_mempolicy";
    policy.check(CALL)?;
    let (mask, maxnode) = policy.nodes.syscall_args();
    // SAFETY: set_mempolicy(int mode, const unsigned long *nmask, unsigned long maxnode) only reads
    // `maxnode - 1` bits from `nmask`; `mask` points at the NodeMask's `MAX_NODES` bits, which
    // lives until the call returns. No memory of ours is written.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            policy.raw_mode() as c_long,
            mask,
            maxnode,
        )
    };
    if ret == 0 {
        return Ok(());
    }
    Err(explain_einval(CALL, SysError::last(CALL), policy))
}

/// Turn a bare EINVAL for `policy` into the reason: a mode the kernel lacks, or nodes that are not
/// usable (offline, memory-less, or outside this process's cpuset).
pub(crate) fn explain_einval(call: &'static str, err: SysError, policy: &Policy) -> SysError {
    if err.errno != libc::EINVAL {
        return err;
    }
    if let Ok(false) = kernel_supports(policy.mode) {
        return unsupported(call, policy.mode);
    }
    let allowed = mems_allowed()
        .map(|m| m.to_string())
        .unwrap_or_else(|_| "unknown".into());
    err.with_detail(format!(
        "the kernel rejected the {} policy on nodes {:?}: they must be online nodes with memory \
         allowed by this process's cpuset (allowed: {allowed:?}){}",
        policy.mode,
        policy.nodes.to_string(),
        if policy.flags == ModeFlags::default() {
            String::new()
        } else {
            format!(", and flags {:?} must be supported", policy.flags.names())
        }
    ))
}

fn unsupported(call: &'static str, mode: Mode) -> SysError {
    let what = match mode {
        Mode::WeightedInterleave => "weighted interleave".to_string(),
        m => format!("the {m} memory policy"),
    };
    SysError::new(
        call,
        libc::EINVAL,
        ErrorKind::Unsupported,
        format!("the kernel lacks {what} (needs {}+)", mode.since()),
    )
}

/// The calling thread's memory policy (`get_mempolicy(2)` with no flags).
pub fn get_mempolicy() -> Result<Policy, SysError> {
    const CALL: &str = "get_mempolicy";
    let mut mode: c_int = 0;
    let mut nodes = NodeMask::new();
    // SAFETY: get_mempolicy(int *mode, unsigned long *nmask, unsigned long maxnode, void *addr,
    // unsigned long flags) writes one int to `mode` and at most ALIGN(maxnode - 1, 64) / 8 = 128
    // bytes to `nmask` (see MAXNODE), which is exactly the NodeMask's storage; both are live locals.
    // With flags 0 the kernel ignores `addr`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut c_int,
            nodes.as_mut_ptr(),
            MAXNODE,
            std::ptr::null_mut::<c_void>(),
            0 as c_ulong,
        )
    };
    if ret != 0 {
        return Err(SysError::last(CALL));
    }
    let raw_mode = mode & !MPOL_MODE_FLAGS;
    let mode_value = Mode::from_raw(raw_mode).ok_or_else(|| {
        SysError::new(
            CALL,
            0,
            ErrorKind::Other,
            format!("the kernel reported policy mode {raw_mode}, which this build does not know"),
        )
    })?;
    Ok(Policy {
        mode: mode_value,
        flags: ModeFlags::from_raw(mode),
        nodes,
    })
}

/// The node holding the page at `addr` in this process (`get_mempolicy(2)` with
/// `MPOL_F_NODE | MPOL_F_ADDR`). Faults the page in if it is not present (a read fault: an untouched
/// anonymous page maps the shared zero page, so the answer for it says little).
pub fn node_of_address(addr: usize) -> Result<u32, SysError> {
    const CALL: &str = "get_mempolicy";
    const MPOL_F_NODE: c_ulong = 1 << 0;
    const MPOL_F_ADDR: c_ulong = 1 << 1;
    let mut node: c_int = -1;
    // SAFETY: with MPOL_F_NODE | MPOL_F_ADDR and a NULL nodemask, the kernel writes one int (the node
    // id) to `node`, a live local. `addr` is only looked up in this process's page tables (the kernel
    // validates it and returns EFAULT if unmapped); no memory at `addr` is written.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut c_int,
            std::ptr::null_mut::<c_ulong>(),
            0 as c_ulong,
            addr as *mut c_void,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if ret != 0 {
        return Err(SysError::last(CALL));
    }
    u32::try_from(node).map_err(|_| {
        SysError::new(
            CALL,
            0,
            ErrorKind::Other,
            format!("the kernel reported node {node} for address {addr:#x}"),
        )
    })
}

/// The nodes this thread may allocate on: its cpuset's `mems_allowed` (`get_mempolicy(2)` with
/// `MPOL_F_MEMS_ALLOWED`, Linux 2.6.24+).
pub fn mems_allowed() -> Result<NodeMask, SysError> {
    const CALL: &str = "get_mempolicy";
    const MPOL_F_MEMS_ALLOWED: c_ulong = 1 << 2;
    let mut nodes = NodeMask::new();
    // SAFETY: with MPOL_F_MEMS_ALLOWED the kernel writes at most ALIGN(maxnode - 1, 64) / 8 = 128
    // bytes (see MAXNODE) to `nmask`, exactly the NodeMask's storage, a live local; `mode` may be
    // NULL and `addr` is ignored.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            std::ptr::null_mut::<c_int>(),
            nodes.as_mut_ptr(),
            MAXNODE,
            std::ptr::null_mut::<c_void>(),
            MPOL_F_MEMS_ALLOWED,
        )
    };
    if ret != 0 {
        return Err(SysError::last(CALL));
    }
    Ok(nodes)
}

/// Whether the running kernel accepts `mode`, tested without touching this thread's policy: the mode
/// is applied with `mbind(2)` to a scratch page that is then unmapped.
///
/// `Err` only when the test itself fails for another reason (no NUMA support at all, out of memory).
pub fn kernel_supports(mode: Mode) -> Result<bool, SysError> {
    let nodes = if mode.takes_nodes() {
        let allowed = mems_allowed()?;
        let first = allowed.nodes().first().copied().unwrap_or(0);
        NodeMask::from_nodes([first])?
    } else {
        NodeMask::new()
    };
    let scratch = Mapping::anonymous(crate::page_size())?;
    match scratch.bind_raw(&Policy::new(mode, nodes), MbindFlags::default()) {
        Ok(()) => Ok(true),
        Err(e) if e.errno == libc::EINVAL => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodemask_layout_and_format() {
        let mask = NodeMask::from_nodes([0, 1, 3, 64, 65, 1023]).unwrap();
        assert_eq!(mask.nodes(), vec![0, 1, 3, 64, 65, 1023]);
        assert_eq!(mask.to_string(), "0-1,3,64-65,1023");
        assert_eq!(mask.len(), 6);
        assert!(mask.contains(64) && !mask.contains(2) && !mask.contains(5000));
        // Bit n lives in byte n / 8, as the kernel's bitmap of unsigned longs has it on little
        // endian machines.
        if cfg!(target_endian = "little") {
            let bytes: Vec<u8> = mask.words.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(bytes[0], 0b1011);
            assert_eq!(bytes[8], 0b11);
            assert_eq!(bytes[127], 0x80);
        }
        assert!(NodeMask::from_nodes([1024]).is_err());
        assert_eq!(NodeMask::new().to_string(), "");
        assert!(NodeMask::new().is_empty());
    }

    #[test]
    fn mode_names_round_trip() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
            assert_eq!(Mode::from_raw(m.raw()), Some(m));
        }
        assert_eq!(Mode::WeightedInterleave.raw(), 6);
        assert!("weighted".parse::<Mode>().is_err());
    }

    #[test]
    fn policy_shape_is_checked_before_the_kernel() {
        let one = NodeMask::from_nodes([0]).unwrap();
        let two = NodeMask::from_nodes([0, 1]).unwrap();
        assert!(Policy::new(Mode::Default, one).check("t").is_err());
        assert!(Policy::new(Mode::Bind, NodeMask::new()).check("t").is_err());
        let e = Policy::new(Mode::Preferred, two).check("t").unwrap_err();
        assert!(e.detail.contains("preferred-many"), "{e}");
        assert!(Policy::new(Mode::Interleave, two).check("t").is_ok());
        assert_eq!(
            Policy::new(Mode::WeightedInterleave, two).to_string(),
            "weighted-interleave:0-1"
        );
    }

    #[test]
    fn own_policy_round_trips_on_this_kernel() {
        // Runs in its own thread: the policy is per thread, so the test harness is unaffected.
        std::thread::spawn(|| {
            let before = get_mempolicy().unwrap();
            assert_eq!(before.mode, Mode::Default);
            let allowed = mems_allowed().unwrap();
            assert!(!allowed.is_empty());
            let bind = Policy::new(Mode::Bind, allowed);
            set_mempolicy(&bind).unwrap();
            assert_eq!(get_mempolicy().unwrap(), bind);
            set_mempolicy(&Policy::default_policy()).unwrap();
            assert_eq!(get_mempolicy().unwrap().mode, Mode::Default);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn unusable_nodes_are_explained() {
        std::thread::spawn(|| {
            let allowed = mems_allowed().unwrap();
            let absent = (0..NodeMask::MAX_NODES as u32)
                .rev()
                .find(|n| !allowed.contains(*n))
                .unwrap();
            let policy = Policy::new(Mode::Bind, NodeMask::from_nodes([absent]).unwrap());
            let e = set_mempolicy(&policy).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
            assert!(e.detail.contains(&absent.to_string()), "{e}");
            assert!(e.detail.contains("allowed"), "{e}");
            assert_eq!(get_mempolicy().unwrap().mode, Mode::Default);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn classic_modes_are_supported() {
        for m in [Mode::Bind, Mode::Interleave, Mode::Preferred, Mode::Local] {
            assert_eq!(kernel_supports(m), Ok(true), "{m}");
        }
    }
}
