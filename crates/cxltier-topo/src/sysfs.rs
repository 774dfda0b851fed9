//! Reading a sysfs tree that may be the live `/sys` or a recorded copy of it.
//!
//! Every path is relative to a root (`/` normally, or a directory holding a recorded `sys/`). Symlinks
//! are followed by hand rather than by the OS so that a recorded tree behaves exactly like the live
//! one: an absolute link target is taken relative to the root, and `..` never climbs above it. A
//! recording therefore can never make us read files outside it.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::TopoError;

/// Largest attribute we read. sysfs attributes are at most one page; anything bigger is not an
/// attribute, and a recorded tree could hold anything.
const MAX_ATTR_BYTES: u64 = 64 * 1024;

/// A sysfs tree below `root`.
#[derive(Debug, Clone)]
pub(crate) struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub(crate) fn new(root: &Path) -> Self {
        Sysfs {
            root: root.to_path_buf(),
        }
    }

    /// The host path of `rel` (which is relative to the root, like `sys/devices/system/node`).
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// How to name `rel` in messages: the full host path, so the user can look at it.
    pub(crate) fn display(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    pub(crate) fn is_dir(&self, rel: &str) -> bool {
        self.resolve(rel)
            .map(|r| self.root.join(r).is_dir())
            .unwrap_or(false)
    }

    /// Read an attribute, with surrounding whitespace removed. `Ok(None)` if it does not exist.
    pub(crate) fn read_opt(&self, rel: &str) -> Result<Option<String>, TopoError> {
        let Some(resolved) = self.resolve(rel) else {
            return Ok(None);
        };
        let path = self.root.join(resolved);
        let err = |source: io::Error| TopoError::Read {
            path: self.path(rel),
            source,
        };
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(err(e)),
        };
        if meta.is_dir() {
            return Err(TopoError::Garbled {
                path: self.path(rel),
                content: String::new(),
                reason: "is a directory, expected an attribute file".into(),
            });
        }
        // sysfs reports 4096 (one page) for text attributes, so this only stops odd recorded files.
        if meta.len() > MAX_ATTR_BYTES {
            return Err(TopoError::Garbled {
                path: self.path(rel),
                content: format!("<{} bytes>", meta.len()),
                reason: format!("larger than any sysfs attribute ({MAX_ATTR_BYTES} bytes)"),
            });
        }
        let bytes = fs::read(&path).map_err(err)?;
        let text = String::from_utf8_lossy(&bytes);
        Ok(Some(text.trim().to_string()))
    }

    /// Parse an attribute with `parse`, naming the file and its content if that fails.
    pub(crate) fn parse_opt<T>(
        &self,
        rel: &str,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, TopoError> {
        match self.read_opt(rel)? {
            None => Ok(None),
            Some(text) => match parse(&text) {
                Some(v) => Ok(Some(v)),
                None => Err(TopoError::Garbled {
                    path: self.path(rel),
                    content: text,
                    reason: format!("expected {what}"),
                }),
            },
        }
    }

    /// The names in a directory, sorted naturally (`node2` before `node10`). Empty if it does not
    /// exist.
    pub(crate) fn list(&self, rel: &str) -> Result<Vec<String>, TopoError> {
        let Some(resolved) = self.resolve(rel) else {
            return Ok(Vec::new());
        };
        let path = self.root.join(resolved);
        let entries = match fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Ok(Vec::new()),
            Err(source) => {
                return Err(TopoError::Read {
                    path: self.path(rel),
                    source,
                })
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| TopoError::Read {
                path: self.path(rel),
                source,
            })?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        names.sort_by(|a, b| natural_cmp(a, b));
        Ok(names)
    }

    /// Names in `rel` of the form `{prefix}{number}` with their numbers, ascending.
    pub(crate) fn numbered(
        &self,
        rel: &str,
        prefix: &str,
    ) -> Result<Vec<(u32, String)>, TopoError> {
        let mut out: Vec<(u32, String)> = self
            .list(rel)?
            .into_iter()
            .filter_map(|name| {
                let n = name.strip_prefix(prefix)?;
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Some((n.parse().ok()?, name))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// The last component of a symlink's target (`driver -> ../../bus/dax/drivers/kmem` gives
    /// `kmem`), without following it: recordings keep such links even when their targets are absent.
    pub(crate) fn link_name(&self, rel: &str) -> Option<String> {
        let parent = Path::new(rel.trim_start_matches('/')).parent()?;
        let name = Path::new(rel).file_name()?;
        let dir = self.resolve(parent.to_str()?)?;
        let target = fs::read_link(self.root.join(dir).join(name)).ok()?;
        Some(target.file_name()?.to_str()?.to_string())
    }

    /// Where `rel` really lives, relative to the root, following symlinks within the root.
    ///
    /// `None` if a component is missing or the links loop. The result has no `.`/`..` components
    /// and no symlinks, so its components name the device hierarchy (e.g. `sys/devices/pci0000:0c/
    /// 0000:0c:00.0/0000:0d:00.0/mem0`).
    pub(crate) fn resolve(&self, rel: &str) -> Option<PathBuf> {
        let mut pending: Vec<String> = components(Path::new(rel)).into_iter().rev().collect();
        let mut done: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(part) = pending.pop() {
            match part.as_str() {
                "." => continue,
                ".." => {
                    done.pop();
                    continue;
                }
                _ => {}
            }
            let mut candidate: PathBuf = done.iter().collect();
            candidate.push(&part);
            let host = self.root.join(&candidate);
            match fs::symlink_metadata(&host) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    hops += 1;
                    if hops > 40 {
                        return None;
                    }
                    let target = fs::read_link(&host).ok()?;
                    if target.is_absolute() {
                        done.clear();
                    }
                    for c in components(&target).into_iter().rev() {
                        pending.push(c);
                    }
                }
                Ok(_) => done.push(part),
                Err(_) => return None,
            }
        }
        Some(done.iter().collect())
    }
}

fn components(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str().map(str::to_string),
            Component::ParentDir => Some("..".to_string()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Compare names so that embedded numbers sort numerically: `node2` < `node10`, `dax0.2` < `dax0.10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let ord = da
                    .len()
                    .cmp(&db.len())
                    .then_with(|| da.cmp(db))
                    .then_with(|| na.cmp(&nb));
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|&&c| c == b'0').count();
    &d[n.min(d.len().saturating_sub(1))..]
}

/// Parse a non-negative integer as sysfs prints it: decimal, or hex with `0x`.
pub(crate) fn parse_u64(text: &str) -> Option<u64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// Parse a node number where the kernel prints `-1` for "none" (`numa_node`, `target_node`).
/// `Some(None)` is "no node"; `None` is garbage.
pub(crate) fn parse_node(text: &str) -> Option<Option<u32>> {
    let v: i64 = text.trim().parse().ok()?;
    match v {
        -1 => Some(None),
        0..=0xffff => Some(Some(v as u32)),
        _ => None,
    }
}

/// Parse a sysfs boolean: the kernel prints `true`/`false`, `1`/`0` or `Y`/`N` depending on the
/// attribute.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text.trim() {
        "1" | "Y" | "y" | "true" | "on" | "yes" => Some(true),
        "0" | "N" | "n" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["node10", "node2", "node1", "dax0.10", "dax0.2", "a"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "dax0.2", "dax0.10", "node1", "node2", "node10"]);
    }

    #[test]
    fn integers() {
        assert_eq!(parse_u64("0x10\n"), Some(16));
        assert_eq!(parse_u64("268435456"), Some(268435456));
        assert_eq!(parse_u64("-1"), None);
        assert_eq!(parse_node("-1"), Some(None));
        assert_eq!(parse_node("2\n"), Some(Some(2)));
        assert_eq!(parse_node("x"), None);
        assert_eq!(parse_bool("true"), Some(true));
        assert_eq!(parse_bool("N"), Some(false));
        assert_eq!(parse_bool("maybe"), None);
    }
}
