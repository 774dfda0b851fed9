//! Parsing and formatting of the kernel's list syntax for CPUs and NUMA nodes (`"0-3,8,10-11"`).
//!
//! The kernel prints `cpulist`, `nodelist` and friends in this form (see `bitmap_print_to_pagebuf`
//! and `bitmap_parselist` in lib/bitmap.c), and `numactl` accepts it on the command line. The parser
//! also accepts the kernel's stride form `0-7:2` (every 2nd id from 0 to 7, i.e. `0,2,4,6`) and
//! `a-b:used/group`, which `bitmap_parselist` supports, plus surrounding whitespace and an empty list.

use std::fmt;

/// The largest id accepted, so that a typo like `0-4000000000` cannot allocate gigabytes.
/// Linux caps NUMA nodes at 1024 (`CONFIG_NODES_SHIFT` <= 10) and CPUs at 8192 (`CONFIG_NR_CPUS`);
/// 1 << 20 leaves ample room for both.
pub const MAX_ID: u32 = 1 << 20;

/// Why a list could not be parsed. The message quotes the list and the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid node/cpu list {list:?}: {reason} (expected comma-separated ids or ranges, like \"0-3,8\")")]
pub struct ParseError {
    /// The whole input.
    pub list: String,
    /// What is wrong with it, naming the offending part.
    pub reason: String,
}

/// Parse a list such as `"0-3,8"` into its ids, sorted ascending without duplicates.
///
/// An empty (or all-whitespace) string is the empty list, as the kernel prints for a CPU-less node's
/// `cpulist`.
pub fn parse(list: &str) -> Result<Vec<u32>, ParseError> {
    let err = |reason: String| ParseError {
        list: list.to_string(),
        reason,
    };
    let trimmed = list.trim();
    let mut ids = Vec::new();
    if trimmed.is_empty() {
        return Ok(ids);
    }
    for part in trimmed.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(err("empty element between commas".into()));
        }
        let (range, stride) = match part.split_once(':') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (
                parse_id(a, part).map_err(err)?,
                parse_id(b, part).map_err(err)?,
            ),
            None => {
                if stride.is_some() {
                    return Err(err(format!("{part:?}: a stride needs a range, like 0-7:2")));
                }
                let id = parse_id(range, part).map_err(err)?;
                (id, id)
            }
        };
        if lo > hi {
            return Err(err(format!(
                "{part:?}: range start {lo} is greater than its end {hi}"
            )));
        }
        // `used/group`: within each group of `group` ids starting at `lo`, take the first `used`.
        // A bare `:n` is shorthand for `:1/n`.
        let (used, group) = match stride {
            None => (1, 1),
            Some(s) => {
                let (u, g) = match s.split_once('/') {
                    Some((u, g)) => (
                        parse_id(u, part).map_err(err)?,
                        parse_id(g, part).map_err(err)?,
                    ),
                    None => (1, parse_id(s, part).map_err(err)?),
                };
                if g == 0 || u == 0 || u > g {
                    return Err(err(format!(
                        "{part:?}: stride needs 0 < used <= group, like 0-7:2 or 0-15:2/4"
                    )));
                }
                (u, g)
            }
        };
        let mut id = lo;
        while id <= hi {
            if (id - lo) % group < used {
                ids.push(id);
            }
            id += 1;
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

fn parse_id(text: &str, part: &str) -> Result<u32, String> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{part:?}: {text:?} is not a non-negative integer"));
    }
    match text.parse::<u32>() {
        Ok(id) if id <= MAX_ID => Ok(id),
        _ => Err(format!(
            "{part:?}: {text} is larger than the maximum id {MAX_ID}"
        )),
    }
}

/// Format ids in the kernel's compact form: sorted, consecutive runs as `a-b`, e.g. `[0,1,2,3,8]` →
/// `"0-3,8"`. Duplicates are ignored; the empty list formats as `""`.
pub fn format(ids: &[u32]) -> String {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// A set of node (or CPU) ids that parses from and displays as the kernel's list syntax.
///
/// ```
/// use cxltier_topo::nodelist::NodeSet;
/// let set: NodeSet = "0-1,3".parse().unwrap();
/// assert_eq!(set.ids(), &[0, 1, 3]);
/// assert_eq!(set.to_string(), "0-1,3");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeSet(Vec<u32>);

impl NodeSet {
    /// A set holding `ids` (sorted and deduplicated).
    pub fn new(ids: impl IntoIterator<Item = u32>) -> Self {
        let mut v: Vec<u32> = ids.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        NodeSet(v)
    }
    /// The ids, ascending.
    pub fn ids(&self) -> &[u32] {
        &self.0
    }
    pub fn contains(&self, id: u32) -> bool {
        self.0.binary_search(&id).is_ok()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }
}

impl std::str::FromStr for NodeSet {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        parse(s).map(NodeSet)
    }
}

impl fmt::Display for NodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(&self.0))
    }
}

impl From<Vec<u32>> for NodeSet {
    fn from(ids: Vec<u32>) -> Self {
        NodeSet::new(ids)
    }
}

impl serde::Serialize for NodeSet {
    /// Serialized as an array of ids, like the `cpus` field of a node.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_forms() {
        assert_eq!(parse("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("0\n").unwrap(), vec![0]);
        assert_eq!(parse("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse("8,0-1, 1").unwrap(), vec![0, 1, 8]);
        assert_eq!(parse("0-7:2").unwrap(), vec![0, 2, 4, 6]);
        assert_eq!(parse("0-15:2/4").unwrap(), vec![0, 1, 4, 5, 8, 9, 12, 13]);
    }

    #[test]
    fn rejects_garbage_with_reason() {
        for bad in [
            "a",
            "1-",
            "-1",
            "3-1",
            "0,,1",
            "1:2",
            "0-7:0",
            "0-7:3/2",
            "99999999999",
            "0x1",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.list, bad);
            assert!(e.to_string().contains("expected comma-separated"), "{e}");
        }
        assert!(parse("3-1").unwrap_err().reason.contains("greater than"));
    }

    #[test]
    fn formats_runs() {
        assert_eq!(format(&[]), "");
        assert_eq!(format(&[3]), "3");
        assert_eq!(format(&[8, 0, 1, 2, 3, 3]), "0-3,8");
        assert_eq!(format(&[0, 2, 4]), "0,2,4");
        assert_eq!(format(&[0, 1, 5, 6]), "0-1,5-6");
    }

    #[test]
    fn round_trips() {
        for s in ["", "0", "0-3,8", "1,3,5-9,100"] {
            assert_eq!(format(&parse(s).unwrap()), s);
            assert_eq!(s.parse::<NodeSet>().unwrap().to_string(), s);
        }
    }
}
