//! Where memory is.
//!
//! [`touch`] allocates anonymous memory, writes every page (so the kernel allocates each under the
//! calling thread's memory policy) and asks `move_pages(2)` which node each page landed on.
//! [`show`] reads a process's `/proc/PID/numa_maps` (joined with `/proc/PID/maps` for end addresses
//! and names like `[vdso]`) into bytes per node, per mapping, per kind of mapping (the summary
//! `numastat -p` prints, [`MappingKind`] from the `numa_maps` flags) and in total.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use cxltier_sys::{
    errno_name, get_mempolicy, query_pages, Advice, Mapping, PageStatus, PagesPerNode,
};
use serde::{Serialize, Serializer};

use crate::ControlError;

/// Where the pages of a [`touch`] landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacementReport {
    /// Bytes asked for.
    pub bytes: u64,
    /// The base page size used for counting.
    pub page_size: u64,
    /// Pages touched (the size rounded up to whole pages).
    pub pages: u64,
    /// Pages per node (`pages_per_node` in JSON: the unit is in the name).
    #[serde(rename = "pages_per_node")]
    pub nodes: BTreeMap<u32, u64>,
    /// Pages the kernel could not place (see `failures`).
    pub failed: u64,
    /// Failed pages by the kernel's reason (`ENOENT`, `EFAULT` ...).
    pub failures: BTreeMap<String, u64>,
    /// Whether transparent huge pages were allowed (`--huge`); otherwise every base page was
    /// allocated on its own.
    pub huge: bool,
    /// The calling thread's memory policy mode while touching (`default`, `bind`,
    /// `weighted-interleave` ...).
    pub policy: String,
    /// The policy's nodes.
    pub policy_nodes: Vec<u32>,
    /// The policy's mode flags (`static-nodes`, `relative-nodes`, `numa-balancing`).
    pub policy_flags: Vec<String>,
}

impl PlacementReport {
    /// The share of pages on `node`, in percent of all pages touched.
    pub fn percent(&self, node: u32) -> f64 {
        if self.pages == 0 {
            return 0.0;
        }
        *self.nodes.get(&node).unwrap_or(&0) as f64 * 100.0 / self.pages as f64
    }
}

/// Memory that [`touch`] allocated, kept mapped while this lives.
pub struct Touched {
    /// Where the pages landed.
    pub placement: PlacementReport,
    /// The memory itself; unmapped on drop.
    pub mapping: Mapping,
}

/// Allocate `bytes` of anonymous memory, write every page in address order, and report which node
/// each page is on. Unless `huge`, the mapping is advised `MADV_NOHUGEPAGE` first, so that no
/// transparent huge page (of any size) lands whole on one node and skews the counts.
pub fn touch(bytes: u64, huge: bool) -> Result<Touched, ControlError> {
    let policy = get_mempolicy()?;
    let len = usize::try_from(bytes).map_err(|_| ControlError::BadSize {
        text: bytes.to_string(),
        reason: "larger than this machine's address space".into(),
    })?;
    let page = cxltier_sys::page_size();
    let mut mapping = Mapping::anonymous(len)?;
    mapping.advise(if huge {
        Advice::HugePage
    } else {
        Advice::NoHugePage
    })?;
    mapping.write_each(page, 0xa5);
    let addrs: Vec<usize> = mapping.page_addresses(page).collect();
    let status = query_pages(None, &addrs)?;
    let placement = count(bytes, page as u64, &status, huge, &policy);
    Ok(Touched { placement, mapping })
}

fn count(
    bytes: u64,
    page_size: u64,
    status: &[PageStatus],
    huge: bool,
    policy: &cxltier_sys::Policy,
) -> PlacementReport {
    let counted = PagesPerNode::count(status);
    let mut failures = BTreeMap::new();
    for (&e, &n) in &counted.errors {
        *failures.entry(errno_name(e)).or_insert(0) += n;
    }
    PlacementReport {
        bytes,
        page_size,
        pages: status.len() as u64,
        nodes: counted.nodes,
        failed: failures.values().sum(),
        failures,
        huge,
        policy: policy.mode.name().to_string(),
        policy_nodes: policy.nodes.nodes(),
        policy_flags: policy.flags.names().into_iter().map(String::from).collect(),
    }
}

/// What a mapping is, as a summary row: the kinds `numastat -p` sums over, with anonymous memory
/// split from files and kernel mappings apart.
///
/// Declared in the order summaries list them (`Ord` follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// The brk heap (`heap` in `numa_maps`).
    Heap,
    /// The main thread's stack (`stack`).
    Stack,
    /// Private anonymous memory: malloc arenas, anonymous mmap, thread stacks (no `file=`).
    Anon,
    /// A file mapping (`file=`), including shared memory: tmpfs, memfd, SysV segments and shared
    /// anonymous mappings are files to the kernel.
    File,
    /// hugetlb pages (`huge`), anonymous (`MAP_HUGETLB`) or from a hugetlbfs file. Transparent huge
    /// pages are not here: `numa_maps` counts them as base pages of their mapping, so they stay in
    /// that mapping's kind (see [`ProcessPlacement::transparent_huge_bytes`]).
    Huge,
    /// A kernel-provided mapping named in brackets in `/proc/PID/maps` (`[vdso]`, `[vvar]`,
    /// `[vsyscall]`, `[uprobes]`), which has no pages of its own to report.
    Other,
}

/// A memory policy as `numa_maps` writes it: the mode, each flag after `=`, the nodes after
/// `:` (`bind:0-1`, `interleave=static-nodes:0,2`).
pub fn policy_text(mode: &str, flags: &[String], nodes: &[u32]) -> String {
    let mut text = mode.to_string();
    for f in flags {
        text.push('=');
        text.push_str(f);
    }
    if !nodes.is_empty() {
        text.push(':');
        text.push_str(&cxltier_topo::nodelist::format(nodes));
    }
    text
}

impl MappingPlacement {
    /// The mapping's policy as `numa_maps` writes it ([`policy_text`]).
    pub fn policy_text(&self) -> String {
        policy_text(&self.policy, &self.policy_flags, &self.policy_nodes)
    }
}

impl MappingKind {
    /// Every kind, in summary order.
    pub const ALL: [MappingKind; 6] = [
        MappingKind::Heap,
        MappingKind::Stack,
        MappingKind::Anon,
        MappingKind::File,
        MappingKind::Huge,
        MappingKind::Other,
    ];

    /// The name `numastat -p` gives the kind's summary row, capitalised.
    pub fn label(self) -> &'static str {
        match self {
            MappingKind::Heap => "Heap",
            MappingKind::Stack => "Stack",
            MappingKind::Anon => "Anon",
            MappingKind::File => "File",
            MappingKind::Huge => "Huge",
            MappingKind::Other => "Other",
        }
    }

    /// A short lowercase name (the JSON's).
    pub fn as_str(self) -> &'static str {
        match self {
            MappingKind::Heap => "heap",
            MappingKind::Stack => "stack",
            MappingKind::Anon => "anon",
            MappingKind::File => "file",
            MappingKind::Huge => "huge",
            MappingKind::Other => "other",
        }
    }

    /// The kind of a `numa_maps` line from its flag fields: `huge` (hugetlb) first, since a
    /// hugetlb mapping also carries `file=` (`/anon_hugepage` for `MAP_HUGETLB`); then `heap`,
    /// `stack`, `file=`; anything else is anonymous. [`MappingKind::refine`] then tells kernel
    /// mappings apart by their name in `/proc/PID/maps`, which `numa_maps` does not carry.
    pub fn classify(huge: bool, heap: bool, stack: bool, file: Option<&str>) -> MappingKind {
        if huge {
            MappingKind::Huge
        } else if heap {
            MappingKind::Heap
        } else if stack {
            MappingKind::Stack
        } else if file.is_some() {
            MappingKind::File
        } else {
            MappingKind::Anon
        }
    }

    /// An anonymous mapping whose `/proc/PID/maps` name is bracketed (`[vdso]`) is the kernel's;
    /// `[anon:NAME]` (named with `PR_SET_VMA_ANON_NAME`) stays anonymous memory.
    pub fn refine(self, maps_name: &str) -> MappingKind {
        if self == MappingKind::Anon
            && maps_name.starts_with('[')
            && !maps_name.starts_with("[anon")
        {
            MappingKind::Other
        } else {
            self
        }
    }
}

/// Resident bytes of one [`MappingKind`], in total and per node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KindTotal {
    /// Resident bytes of every mapping of this kind.
    pub bytes: u64,
    /// The same per node; every node the process has memory on is listed, zeros included, so
    /// that the rows of a summary have the same columns.
    pub bytes_per_node: BTreeMap<u32, u64>,
}

fn hex<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

fn hex_opt<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => hex(v, s),
        None => s.serialize_none(),
    }
}

/// One mapping of a process, from `numa_maps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappingPlacement {
    /// Start address (JSON: hex string `"0x7f..."`).
    #[serde(serialize_with = "hex")]
    pub start: u64,
    /// End address (exclusive) from `/proc/PID/maps`, if the mapping was still there.
    #[serde(serialize_with = "hex_opt")]
    pub end: Option<u64>,
    /// What the mapping is.
    pub kind: MappingKind,
    /// The file path, or the kernel's name for a special mapping (`[vdso]`, `[anon:...]`).
    pub name: Option<String>,
    /// The mapping's memory policy mode (`default`, `bind`, `interleave`, `weighted-interleave`,
    /// `preferred`, `preferred-many`, `local`).
    pub policy: String,
    /// The policy's nodes.
    pub policy_nodes: Vec<u32>,
    /// The policy's mode flags (`static-nodes`, `relative-nodes`, `numa-balancing`).
    pub policy_flags: Vec<String>,
    /// A hugetlbfs mapping.
    pub huge: bool,
    /// The mapping's page size in bytes (`kernelpagesize_kB`).
    pub page_size: u64,
    /// Resident bytes per node (`bytes_per_node` in JSON: the unit is in the name).
    #[serde(rename = "bytes_per_node")]
    pub nodes: BTreeMap<u32, u64>,
    /// Resident bytes in total.
    pub bytes: u64,
}

/// Where a process's resident memory is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessPlacement {
    pub pid: u32,
    /// The command name (`/proc/PID/comm`); `process_name` in JSON, where `command` names the
    /// cxltier command that printed the document.
    #[serde(rename = "process_name")]
    pub command: String,
    /// Resident bytes per node, all mappings together (`bytes_per_node` in JSON).
    #[serde(rename = "bytes_per_node")]
    pub nodes: BTreeMap<u32, u64>,
    /// Resident bytes in total.
    pub total_bytes: u64,
    /// Resident bytes per kind of mapping, every kind listed (zeros included): the summary
    /// `numastat -p` gives, with anonymous memory, files and kernel mappings apart.
    pub by_kind: BTreeMap<MappingKind, KindTotal>,
    /// Resident bytes in transparent huge pages (`AnonHugePages`, `ShmemPmdMapped` and
    /// `FilePmdMapped` of `/proc/PID/smaps_rollup`), counted within their mappings' kinds above;
    /// the kernel reports them per process, not per node. `None` where `smaps_rollup` could not be
    /// read (kernels before 4.14).
    pub transparent_huge_bytes: Option<u64>,
    /// Every mapping, in address order (including those with nothing resident).
    pub mappings: Vec<MappingPlacement>,
}

impl ProcessPlacement {
    /// Totals per node, per kind and overall, from a process's mappings.
    pub fn from_mappings(
        pid: u32,
        command: String,
        mappings: Vec<MappingPlacement>,
        transparent_huge_bytes: Option<u64>,
    ) -> ProcessPlacement {
        let mut nodes: BTreeMap<u32, u64> = BTreeMap::new();
        for m in &mappings {
            for (n, b) in &m.nodes {
                *nodes.entry(*n).or_insert(0) += b;
            }
        }
        let zeros: BTreeMap<u32, u64> = nodes.keys().map(|&n| (n, 0)).collect();
        let mut by_kind: BTreeMap<MappingKind, KindTotal> = MappingKind::ALL
            .iter()
            .map(|&k| {
                let total = KindTotal {
                    bytes: 0,
                    bytes_per_node: zeros.clone(),
                };
                (k, total)
            })
            .collect();
        for m in &mappings {
            let total = by_kind.entry(m.kind).or_default();
            total.bytes += m.bytes;
            for (n, b) in &m.nodes {
                *total.bytes_per_node.entry(*n).or_insert(0) += b;
            }
        }
        ProcessPlacement {
            pid,
            command,
            total_bytes: nodes.values().sum(),
            nodes,
            by_kind,
            transparent_huge_bytes,
            mappings,
        }
    }

    /// The nodes to show the process's memory on: every node of this machine that holds memory,
    /// as `numastat -p` lists them (so that a CXL node with nothing of the process on it shows
    /// as 0), and any other node the process has memory on. Without a readable topology, the
    /// process's nodes alone.
    pub fn node_columns(&self) -> Vec<u32> {
        let mut nodes: Vec<u32> = cxltier_topo::Topology::live()
            .map(|t| t.memory_nodes().map(|n| n.id).collect())
            .unwrap_or_default();
        nodes.extend(self.nodes.keys().copied());
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The `n` mappings with the most resident bytes, largest first (ties in address order);
    /// mappings with nothing resident are never among them.
    pub fn largest(&self, n: usize) -> Vec<&MappingPlacement> {
        let mut resident: Vec<&MappingPlacement> =
            self.mappings.iter().filter(|m| m.bytes > 0).collect();
        resident.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.start.cmp(&b.start)));
        resident.truncate(n);
        resident
    }

    /// The share of resident bytes on `node`, in percent.
    pub fn percent(&self, node: u32) -> f64 {
        if self.total_bytes == 0 {
            return 0.0;
        }
        *self.nodes.get(&node).unwrap_or(&0) as f64 * 100.0 / self.total_bytes as f64
    }
}

/// Read process `pid`'s placement from `/proc`.
pub fn show(pid: u32) -> Result<ProcessPlacement, ControlError> {
    show_in(Path::new("/proc"), pid)
}

/// [`show`] with another procfs root (for recorded samples).
pub fn show_in(proc_root: &Path, pid: u32) -> Result<ProcessPlacement, ControlError> {
    let dir = proc_root.join(pid.to_string());
    let numa_maps = dir.join("numa_maps");
    let text = read_proc(&numa_maps, pid, &dir)?;
    let maps = read_proc(&dir.join("maps"), pid, &dir)
        .map(|t| parse_maps(&t))
        .unwrap_or_default();
    let command = std::fs::read_to_string(dir.join("comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default();
    let page_size = cxltier_sys::page_size() as u64;
    let mut mappings = parse_numa_maps(&text, &numa_maps, page_size)?;
    for m in &mut mappings {
        if let Some((end, name)) = maps.get(&m.start) {
            m.end = Some(*end);
            if m.name.is_none() && !name.is_empty() {
                m.name = Some(name.clone());
                m.kind = m.kind.refine(name);
            }
        }
    }
    // Optional: what it adds is a note, so an unreadable file costs only the note.
    let transparent_huge_bytes = std::fs::read_to_string(dir.join("smaps_rollup"))
        .ok()
        .and_then(|t| transparent_huge_bytes(&t));
    Ok(ProcessPlacement::from_mappings(
        pid,
        command,
        mappings,
        transparent_huge_bytes,
    ))
}

/// The bytes in transparent huge pages that `smaps_rollup` (or `smaps`) text reports: the sum of
/// its `AnonHugePages`, `ShmemPmdMapped` and `FilePmdMapped` lines (kB); `None` if it has none of
/// them.
pub fn transparent_huge_bytes(smaps: &str) -> Option<u64> {
    let mut total: Option<u64> = None;
    for line in smaps.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if !matches!(key, "AnonHugePages" | "ShmemPmdMapped" | "FilePmdMapped") {
            continue;
        }
        let kb = value.trim().strip_suffix("kB").map(str::trim);
        if let Some(kb) = kb.and_then(|v| v.parse::<u64>().ok()) {
            total = Some(total.unwrap_or(0).saturating_add(kb.saturating_mul(1024)));
        }
    }
    total
}

fn read_proc(path: &Path, pid: u32, dir: &Path) -> Result<String, ControlError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) => Err(match (e.kind(), e.raw_os_error()) {
            (io::ErrorKind::PermissionDenied, _) => ControlError::ProcessPermission {
                pid,
                path: path.to_path_buf(),
            },
            // The process exited between open and read.
            (_, Some(errno)) if errno == ESRCH => ControlError::NoProcess { pid },
            (io::ErrorKind::NotFound, _) if dir.is_dir() => ControlError::NoNumaMaps {
                path: path.to_path_buf(),
            },
            (io::ErrorKind::NotFound, _) => ControlError::NoProcess { pid },
            _ => ControlError::Read {
                path: path.to_path_buf(),
                source: e,
            },
        }),
    }
}

/// `ESRCH`, the same number on every Linux architecture.
const ESRCH: i32 = 3;

/// `/proc/PID/maps` as start → (end, name).
fn parse_maps(text: &str) -> BTreeMap<u64, (u64, String)> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.splitn(6, ' ');
        let Some(range) = fields.next() else { continue };
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
            continue;
        };
        let name = fields.nth(4).unwrap_or("").trim().to_string();
        out.insert(s, (e, name));
    }
    out
}

/// Undo the kernel's octal escapes in paths (`\040` for a space, `\012` for a newline ...).
fn unescape(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') as u32 * 64
                + (bytes[i + 2] - b'0') as u32 * 8
                + (bytes[i + 3] - b'0') as u32;
            if let Ok(b) = u8::try_from(v) {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The kernel's policy names in `numa_maps` (`mpol_to_str`), two of which contain a space.
const KERNEL_MODES: [(&str, &str); 7] = [
    ("weighted interleave", "weighted-interleave"),
    ("prefer (many)", "preferred-many"),
    ("default", "default"),
    ("prefer", "preferred"),
    ("bind", "bind"),
    ("interleave", "interleave"),
    ("local", "local"),
];

/// Parse a policy as `mpol_to_str` prints it: `mode[=flag[|flag]][:nodes]`. Returns (mode, flags,
/// nodes) with our names.
fn parse_policy(text: &str) -> Result<(String, Vec<String>, Vec<u32>), String> {
    let (head, nodes) = match text.split_once(':') {
        Some((h, n)) => (
            h,
            cxltier_topo::nodelist::parse(n).map_err(|e| e.to_string())?,
        ),
        None => (text, Vec::new()),
    };
    let (mode, flags) = match head.split_once('=') {
        Some((m, f)) => (m, f.split('|').collect::<Vec<_>>()),
        None => (head, Vec::new()),
    };
    let mode = KERNEL_MODES
        .iter()
        .find(|(k, _)| *k == mode)
        .map(|(_, ours)| ours.to_string())
        .ok_or_else(|| format!("unknown policy {mode:?}"))?;
    let flags = flags
        .into_iter()
        .map(|f| match f {
            "static" => "static-nodes".to_string(),
            "relative" => "relative-nodes".to_string(),
            "balancing" => "numa-balancing".to_string(),
            other => other.to_string(),
        })
        .collect();
    Ok((mode, flags, nodes))
}

/// Parse `numa_maps` text. `path` is for error messages; `base_page` is the size assumed for a
/// line without `kernelpagesize_kB`.
pub fn parse_numa_maps(
    text: &str,
    path: &Path,
    base_page: u64,
) -> Result<Vec<MappingPlacement>, ControlError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |reason: String| ControlError::NumaMaps {
            path: PathBuf::from(path),
            line: i + 1,
            text: line.to_string(),
            reason,
        };
        let (addr, rest) = line.split_once(' ').unwrap_or((line, ""));
        let start = u64::from_str_radix(addr, 16)
            .map_err(|_| err(format!("{addr:?} is not a hex address")))?;
        // The policy is the next field, except that two kernel mode names contain a space.
        let rest = rest.trim_start();
        let policy_len = KERNEL_MODES
            .iter()
            .filter(|(k, _)| k.contains(' '))
            .find(|(k, _)| rest.starts_with(k))
            .map_or(0, |(k, _)| k.len());
        let policy_end = rest[policy_len..]
            .find(' ')
            .map_or(rest.len(), |p| p + policy_len);
        let (policy_text, fields) = rest.split_at(policy_end);
        if policy_text.is_empty() {
            return Err(err("no policy after the address".into()));
        }
        let (policy, policy_flags, policy_nodes) = parse_policy(policy_text).map_err(&err)?;

        let mut name = None;
        let (mut huge, mut heap, mut stack) = (false, false, false);
        let mut page_kb = None;
        let mut pages: BTreeMap<u32, u64> = BTreeMap::new();
        for field in fields.split_whitespace() {
            let number = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| err(format!("{field:?}: {v:?} is not a count")))
            };
            match field.split_once('=') {
                Some(("file", p)) => name = Some(unescape(p)),
                Some(("kernelpagesize_kB", v)) => page_kb = Some(number(v)?),
                Some((k, v))
                    if k.len() > 1
                        && k.starts_with('N')
                        && k[1..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    let node: u32 = k[1..]
                        .parse()
                        .map_err(|_| err(format!("{k:?} is not a node")))?;
                    pages.insert(node, number(v)?);
                }
                Some(_) => {} // anon=, dirty=, mapped=, mapmax=, active=, writeback=, swapcache=
                None if field == "heap" => heap = true,
                // `stack:TID` is how kernels before 4.5 marked thread stacks.
                None if field == "stack" || field.starts_with("stack:") => stack = true,
                None if field == "huge" => huge = true,
                None => {} // fields added by later kernels
            }
        }
        let kind = MappingKind::classify(huge, heap, stack, name.as_deref());
        let page_size = page_kb.map_or(base_page, |kb| kb * 1024);
        let nodes: BTreeMap<u32, u64> = pages
            .into_iter()
            .map(|(n, p)| (n, p.saturating_mul(page_size)))
            .collect();
        out.push(MappingPlacement {
            start,
            end: None,
            kind,
            name,
            policy,
            policy_nodes,
            policy_flags,
            huge,
            page_size,
            bytes: nodes.values().sum(),
            nodes,
        });
    }
    Ok(out)
}

/// The policy of a process's anonymous memory from `numa_maps`, e.g. `default` or
/// `weighted-interleave`: the most common, by bytes, among its private anonymous mappings
/// (hugetlb ones included: their pages follow a policy as well).
pub fn anonymous_policy(mappings: &[MappingPlacement]) -> String {
    let mut count: BTreeMap<String, u64> = BTreeMap::new();
    for m in mappings {
        if matches!(
            m.kind,
            MappingKind::Anon | MappingKind::Heap | MappingKind::Stack | MappingKind::Huge
        ) {
            *count.entry(m.policy.clone()).or_default() += m.bytes.max(1);
        }
    }
    count
        .into_iter()
        .max_by_key(|(_, b)| *b)
        .map_or_else(|| "default".to_string(), |(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;
    use crate::{Class, Classify};

    /// `cat /proc/self/numa_maps` on a one-node machine (Linux 6.18, 4 KiB pages, default policy).
    const RECORDED: &str = include_str!("../tests/fixtures/numa_maps/cat-1node.txt");
    /// A hand-written two-node sample: weighted interleave, THP, hugetlb, escaped paths, flags.
    const TWO_NODES: &str = include_str!("../tests/fixtures/numa_maps/two-node.txt");

    #[test]
    fn recorded_one_node_sample() {
        let maps = parse_numa_maps(RECORDED, Path::new("numa_maps"), 4096).unwrap();
        assert_eq!(maps.len(), 37);
        assert!(maps.iter().all(|m| m.policy == "default"));
        assert!(maps.iter().all(|m| m.nodes.keys().all(|&n| n == 0)));
        let heap = maps.iter().find(|m| m.kind == MappingKind::Heap).unwrap();
        assert_eq!(heap.bytes, 4 * 4096);
        let stack = maps.iter().find(|m| m.kind == MappingKind::Stack).unwrap();
        assert_eq!(stack.bytes, 3 * 4096);
        let libc = maps
            .iter()
            .find(|m| m.name.as_deref() == Some("/usr/lib/x86_64-linux-gnu/libc.so.6"))
            .unwrap();
        assert_eq!(libc.kind, MappingKind::File);
        assert_eq!(libc.bytes, 38 * 4096);
        let empty: Vec<_> = maps.iter().filter(|m| m.bytes == 0).collect();
        assert_eq!(empty.len(), 3, "vvar/vdso lines carry no counts");
        let total: u64 = maps.iter().map(|m| m.bytes).sum();
        assert_eq!(total, 425 * 4096);
    }

    #[test]
    fn recorded_samples_under_a_process_policy() {
        // `cxltier run --weights 1 -- cat /proc/self/numa_maps` and `run --bind 0 -- ...` on the
        // same machine: this kernel reports the process policy on every mapping.
        for (text, mode) in [
            (
                include_str!("../tests/fixtures/numa_maps/cat-weighted-interleave-1node.txt"),
                "weighted-interleave",
            ),
            (
                include_str!("../tests/fixtures/numa_maps/cat-bind-1node.txt"),
                "bind",
            ),
        ] {
            let maps = parse_numa_maps(text, Path::new("numa_maps"), 4096).unwrap();
            assert_eq!(maps.len(), 37);
            for m in &maps {
                assert_eq!(m.policy, mode);
                assert_eq!(m.policy_nodes, vec![0]);
            }
            assert!(maps
                .iter()
                .any(|m| m.kind == MappingKind::Heap && m.bytes > 0));
        }
    }

    #[test]
    fn hand_written_two_node_sample() {
        let maps = parse_numa_maps(TWO_NODES, Path::new("numa_maps"), 4096).unwrap();
        let wi = &maps[0];
        assert_eq!(wi.policy, "weighted-interleave");
        assert_eq!(wi.policy_nodes, vec![0, 1]);
        assert_eq!(wi.kind, MappingKind::Anon);
        assert_eq!(
            wi.nodes,
            BTreeMap::from([(0, 3072 * 4096), (1, 1024 * 4096)])
        );
        assert_eq!(wi.bytes, 16 << 20);

        let pm = &maps[1];
        assert_eq!(pm.policy, "preferred-many");
        assert_eq!(pm.policy_nodes, vec![1, 2]);

        let bind = &maps[2];
        assert_eq!(bind.policy, "bind");
        assert_eq!(bind.policy_flags, vec!["static-nodes".to_string()]);
        assert_eq!(bind.policy_nodes, vec![1]);
        assert_eq!(bind.name.as_deref(), Some("/data/my file.bin"));
        assert_eq!(bind.kind, MappingKind::File);

        let hugetlb = &maps[3];
        assert!(hugetlb.huge);
        assert_eq!(hugetlb.kind, MappingKind::Huge);
        assert_eq!(hugetlb.page_size, 2 << 20);
        assert_eq!(hugetlb.nodes, BTreeMap::from([(1, 4 << 20)]));

        let thp = &maps[4];
        assert_eq!(thp.policy, "interleave");
        assert_eq!(thp.page_size, 4096);
        assert_eq!(thp.nodes, BTreeMap::from([(0, 2 << 20), (1, 2 << 20)]));

        assert_eq!(maps[5].policy, "preferred");
        assert_eq!(maps[5].policy_flags, vec!["relative-nodes".to_string()]);
        assert_eq!(maps[6].policy, "local");
        assert_eq!(maps[6].kind, MappingKind::Stack);
        assert_eq!(maps[7].bytes, 0);
    }

    /// A recorded procfs tree (`numa_maps`, `maps`, `comm`, `smaps_rollup` of one process, with
    /// `numastat -p PID` taken right after: `tests/fixtures/proc/PID.numastat.txt`).
    fn recorded_proc() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc")
    }

    /// `numastat -p`'s rows (label → MiB on its last column, the total).
    fn numastat_totals(text: &str) -> BTreeMap<String, f64> {
        text.lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let label = words.next()?;
                let total = words.last()?.parse::<f64>().ok()?;
                Some((label.to_string(), total))
            })
            .collect()
    }

    fn mib(bytes: u64) -> f64 {
        bytes as f64 / (1 << 20) as f64
    }

    #[test]
    fn classification_follows_numa_maps_flags() {
        use MappingKind::*;
        // hugetlb wins over the file it comes from; heap and stack over anonymous.
        assert_eq!(
            MappingKind::classify(true, false, false, Some("/anon_hugepage (deleted)")),
            Huge
        );
        assert_eq!(
            MappingKind::classify(true, false, false, Some("/mnt/huge/f")),
            Huge
        );
        assert_eq!(MappingKind::classify(false, true, false, None), Heap);
        assert_eq!(MappingKind::classify(false, false, true, None), Stack);
        assert_eq!(
            MappingKind::classify(false, false, false, Some("/usr/bin/cat")),
            File
        );
        assert_eq!(MappingKind::classify(false, false, false, None), Anon);
        assert_eq!(Anon.refine("[vdso]"), Other);
        assert_eq!(Anon.refine("[vsyscall]"), Other);
        assert_eq!(Anon.refine("[anon:jemalloc]"), Anon);
        assert_eq!(Anon.refine(""), Anon);
        assert_eq!(
            File.refine("[vdso]"),
            File,
            "only anonymous lines are refined"
        );
        assert_eq!(
            MappingKind::ALL.map(MappingKind::as_str),
            ["heap", "stack", "anon", "file", "huge", "other"]
        );
    }

    #[test]
    fn summary_by_kind_of_a_hand_written_two_node_sample() {
        let maps = parse_numa_maps(TWO_NODES, Path::new("numa_maps"), 4096).unwrap();
        let p = ProcessPlacement::from_mappings(1, "x".into(), maps, None);
        let k = |kind| &p.by_kind[&kind];
        // Every kind is listed, and every node in every kind.
        assert_eq!(p.by_kind.len(), MappingKind::ALL.len());
        for total in p.by_kind.values() {
            assert_eq!(
                total.bytes_per_node.keys().copied().collect::<Vec<_>>(),
                [0, 1]
            );
            assert_eq!(total.bytes, total.bytes_per_node.values().sum::<u64>());
        }
        assert_eq!(
            k(MappingKind::Huge).bytes_per_node,
            BTreeMap::from([(0, 0), (1, 4 << 20)])
        );
        assert_eq!(
            k(MappingKind::Stack).bytes_per_node,
            BTreeMap::from([(0, 3 * 4096), (1, 0)])
        );
        assert_eq!(k(MappingKind::File).bytes, 512 * 4096);
        // The weighted-interleave, preferred-many, interleave and preferred lines.
        assert_eq!(
            k(MappingKind::Anon).bytes_per_node,
            BTreeMap::from([(0, (3072 + 512 + 1) * 4096), (1, (1024 + 10 + 512) * 4096)])
        );
        assert_eq!(k(MappingKind::Heap).bytes, 0);
        assert_eq!(
            p.by_kind.values().map(|t| t.bytes).sum::<u64>(),
            p.total_bytes
        );

        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["by_kind"]["huge"]["bytes"], 4 << 20);
        assert_eq!(json["by_kind"]["huge"]["bytes_per_node"]["1"], 4 << 20);
        assert_eq!(json["by_kind"]["other"]["bytes"], 0);
        assert_eq!(json["mappings"][3]["kind"], "huge");
    }

    #[test]
    fn largest_mappings_first_without_empty_ones() {
        let maps = parse_numa_maps(TWO_NODES, Path::new("numa_maps"), 4096).unwrap();
        let p = ProcessPlacement::from_mappings(1, "x".into(), maps, None);
        let top: Vec<u64> = p.largest(3).iter().map(|m| m.bytes).collect();
        assert_eq!(top, [16 << 20, 4 << 20, 4 << 20]);
        // Equal sizes in address order.
        let top = p.largest(3);
        assert!(top[1].start < top[2].start);
        let all = p.largest(usize::MAX);
        assert_eq!(all.len(), p.mappings.iter().filter(|m| m.bytes > 0).count());
        assert!(all.iter().all(|m| m.bytes > 0));
        assert!(all.windows(2).all(|w| w[0].bytes >= w[1].bytes));
        assert!(p.largest(0).is_empty());
    }

    #[test]
    fn summary_agrees_with_numastat_on_recorded_processes() {
        // `sleep`, a python process holding 16 MiB advised MADV_HUGEPAGE (2 MiB of it became a
        // transparent huge page) and one holding 4 MiB of hugetlb pages (MAP_HUGETLB), recorded
        // on a one-node machine (Linux 6.18).
        for (pid, thp, hugetlb) in [(17773, 0, 0), (18175, 2 << 20, 0), (11735, 0, 4 << 20)] {
            let root = recorded_proc();
            let p = show_in(&root, pid).unwrap();
            let numastat =
                std::fs::read_to_string(root.join(format!("{pid}.numastat.txt"))).unwrap();
            let theirs = numastat_totals(&numastat);
            let ours = |k: MappingKind| mib(p.by_kind[&k].bytes);
            let close = |label: &str, ours: f64| {
                let theirs = theirs[label];
                assert!(
                    (ours - theirs).abs() < 0.006,
                    "{pid} {label}: ours {ours:.3} MiB, numastat {theirs:.2}"
                );
            };
            close("Heap", ours(MappingKind::Heap));
            close("Stack", ours(MappingKind::Stack));
            close("Huge", ours(MappingKind::Huge));
            // numastat's Private is everything else.
            close(
                "Private",
                ours(MappingKind::Anon) + ours(MappingKind::File) + ours(MappingKind::Other),
            );
            close("Total", mib(p.total_bytes));
            assert!(ours(MappingKind::Heap) > 0.0 && ours(MappingKind::Stack) > 0.0);
            assert!(ours(MappingKind::File) > 0.0 && ours(MappingKind::Anon) > 0.0);
            assert_eq!(p.transparent_huge_bytes, Some(thp));
            assert_eq!(p.by_kind[&MappingKind::Huge].bytes, hugetlb);
            // [vdso] and [vvar] are the kernel's, named only in maps.
            let other: Vec<_> = p
                .mappings
                .iter()
                .filter(|m| m.kind == MappingKind::Other)
                .filter_map(|m| m.name.as_deref())
                .collect();
            assert!(other.contains(&"[vdso]"), "{other:?}");
            assert!(other.contains(&"[vvar]"), "{other:?}");
        }
    }

    #[test]
    fn transparent_huge_pages_from_smaps() {
        let text = "Rss:  1812 kB\nAnonHugePages:  4096 kB\nShmemPmdMapped:  2048 kB\n\
                    FilePmdMapped:     0 kB\nShared_Hugetlb:  2048 kB\n";
        assert_eq!(transparent_huge_bytes(text), Some(6 << 20));
        assert_eq!(transparent_huge_bytes("Rss: 4 kB\n"), None);
        assert_eq!(transparent_huge_bytes(""), None);
    }

    #[test]
    fn garbled_lines_name_the_line() {
        for (bad, why) in [
            ("zz default anon=1 N0=1", "hex address"),
            ("7f00 default N0=x kernelpagesize_kB=4", "not a count"),
            ("7f00 sometimes N0=1", "unknown policy"),
            ("7f00 interleave:0-x N0=1", "node/cpu list"),
            ("7f00", "no policy"),
        ] {
            let text = format!("7e00 default\n{bad}\n");
            let e = parse_numa_maps(&text, Path::new("/proc/1/numa_maps"), 4096).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("/proc/1/numa_maps:2:"), "{msg}");
            assert!(msg.contains(why), "{bad}: {msg}");
        }
    }

    #[test]
    fn show_from_a_recorded_proc_tree() {
        let t = TempDir::new("proc");
        t.write("4242/numa_maps", TWO_NODES);
        t.write(
            "4242/maps",
            "7f0000000000-7f0001000000 rw-p 00000000 00:00 0 \n\
             7f2000000000-7f2000400000 rw-s 00000000 00:10 77  /data/my file.bin\n\
             7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]\n",
        );
        t.write("4242/comm", "bench\n");
        let p = show_in(t.path(), 4242).unwrap();
        assert_eq!(p.command, "bench");
        assert_eq!(p.mappings[0].end, Some(0x7f0001000000));
        assert_eq!(
            p.total_bytes,
            p.mappings.iter().map(|m| m.bytes).sum::<u64>()
        );
        assert_eq!(
            p.nodes.values().sum::<u64>(),
            p.total_bytes,
            "per-node totals add up"
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["mappings"][0]["start"], "0x7f0000000000");
        assert_eq!(json["mappings"][0]["kind"], "anon");
        assert_eq!(json["mappings"][0]["bytes_per_node"]["0"], 3072 * 4096);
        assert!(json["mappings"][3]["end"].is_null());

        let e = show_in(t.path(), 4343).unwrap_err();
        assert!(matches!(e, ControlError::NoProcess { pid: 4343 }), "{e}");
        assert_eq!(e.class(), Class::BadInput);
        t.write("4444/comm", "x\n");
        let e = show_in(t.path(), 4444).unwrap_err();
        assert_eq!(e.class(), Class::Unsupported, "{e}");
    }

    #[test]
    fn show_self_sees_touched_memory() {
        let touched = touch(4 << 20, false).unwrap();
        let p = show(std::process::id()).unwrap();
        // The kernel may merge the new mapping with an adjacent anonymous one (another test
        // thread's), and another thread's mbind may split that again, so the touched range can
        // lie in one listed mapping or across several: the mappings that overlap it must cover
        // it, and hold at least its bytes.
        let start = touched.mapping.addr() as u64;
        let end = start + (4 << 20);
        let mut overlapping: Vec<_> = p
            .mappings
            .iter()
            .filter(|m| m.start < end && m.end.is_none_or(|e| e > start))
            .collect();
        overlapping.sort_by_key(|m| m.start);
        let mut covered = start;
        for m in &overlapping {
            if m.start <= covered {
                covered = covered.max(m.end.unwrap_or(u64::MAX));
            }
        }
        assert!(
            covered >= end,
            "the touched range {start:#x}..{end:#x} is covered by listed mappings only up to {covered:#x}"
        );
        let bytes: u64 = overlapping.iter().map(|m| m.bytes).sum();
        assert!(bytes >= 4 << 20, "{bytes} resident bytes");
        assert!(p.total_bytes >= 4 << 20);
        // The summary adds up, and the touched memory is private anonymous.
        assert_eq!(
            p.by_kind.values().map(|t| t.bytes).sum::<u64>(),
            p.total_bytes
        );
        for (n, bytes) in &p.nodes {
            let per_kind: u64 = p.by_kind.values().map(|t| t.bytes_per_node[n]).sum();
            assert_eq!(per_kind, *bytes, "node {n}");
        }
        assert!(overlapping.iter().all(|m| m.kind == MappingKind::Anon));
        assert!(p.by_kind[&MappingKind::Anon].bytes >= 4 << 20);
        assert!(
            p.by_kind[&MappingKind::File].bytes > 0,
            "the test binary's own text"
        );
        assert!(p.by_kind[&MappingKind::Stack].bytes > 0);
        assert!(
            p.transparent_huge_bytes.is_some(),
            "this kernel has smaps_rollup"
        );
    }

    #[test]
    fn touch_places_every_page() {
        let t = touch(1 << 20, false).unwrap();
        let p = &t.placement;
        assert_eq!(p.pages, (1 << 20) / p.page_size);
        assert_eq!(p.failed, 0);
        assert_eq!(p.nodes.values().sum::<u64>(), p.pages);
        let allowed = cxltier_sys::mems_allowed().unwrap();
        assert!(p.nodes.keys().all(|&n| allowed.contains(n)));
        let json = serde_json::to_value(p).unwrap();
        for key in [
            "bytes",
            "page_size",
            "pages",
            "pages_per_node",
            "failed",
            "policy",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        // One page more than asked for when the size is not a multiple of the page size.
        let t = touch(4097, false).unwrap();
        assert_eq!(t.placement.pages, 4096 / t.placement.page_size + 1);
        assert_eq!(t.placement.bytes, 4097);
    }

    #[test]
    fn counts_failures_by_reason() {
        let status = [
            PageStatus::Node(0),
            PageStatus::Node(1),
            PageStatus::Node(0),
            PageStatus::Error(2),
        ];
        let p = count(
            16384,
            4096,
            &status,
            false,
            &cxltier_sys::Policy::default_policy(),
        );
        assert_eq!(p.nodes, BTreeMap::from([(0, 2), (1, 1)]));
        assert_eq!(p.failed, 1);
        assert_eq!(p.failures, BTreeMap::from([("ENOENT".to_string(), 1)]));
        assert_eq!(p.percent(0), 50.0);
        assert_eq!(p.policy, "default");
    }
}

#[cfg(test)]
mod anonymous_policy_tests {
    use super::*;

    #[test]
    fn the_policy_holding_most_anonymous_memory_hugetlb_included() {
        // One anonymous page under bind, 4 MiB of hugetlb under interleave, a large file under
        // preferred: the file does not count, the hugetlb pages do.
        let text = "7f00 bind:0 anon=1 dirty=1 N0=1 kernelpagesize_kB=4\n\
                    7f01 interleave:0-1 file=/anon_hugepage\\040(deleted) huge anon=2 N0=1 N1=1 kernelpagesize_kB=2048\n\
                    7f02 prefer:1 file=/data/big mapped=4096 N1=4096 kernelpagesize_kB=4\n";
        let maps = parse_numa_maps(text, std::path::Path::new("numa_maps"), 4096).unwrap();
        assert_eq!(anonymous_policy(&maps), "interleave");
        assert_eq!(anonymous_policy(&maps[..1]), "bind");
        assert_eq!(
            anonymous_policy(&maps[2..]),
            "default",
            "no anonymous memory"
        );
    }
}
