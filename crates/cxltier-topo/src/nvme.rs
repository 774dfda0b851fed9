//! NVMe controllers and namespaces (`sys/class/nvme`, `sys/class/block`): the flash tier below memory.

use serde::Serialize;

use crate::sysfs::{parse_node, parse_u64, Sysfs};

const NVME_DIR: &str = "sys/class/nvme";
const BLOCK_DIR: &str = "sys/class/block";

/// An NVMe controller (`nvmeN`).
#[derive(Debug, Clone, Serialize)]
pub struct NvmeController {
    pub name: String,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub firmware_rev: Option<String>,
    /// `pcie`, `tcp`, `rdma`, `fc` or `loop`.
    pub transport: Option<String>,
    /// Transport address: the PCI function for `pcie`.
    pub address: Option<String>,
    /// The node nearest to the controller.
    pub numa_node: Option<u32>,
    pub namespaces: Vec<NvmeNamespace>,
}

/// A namespace's block device (`nvmeXnY`).
#[derive(Debug, Clone, Serialize)]
pub struct NvmeNamespace {
    pub name: String,
    pub size_bytes: u64,
    pub logical_block_size: Option<u64>,
}

/// `nvme0n1 (1.8T, 512 B blocks)`, as people read a namespace.
impl std::fmt::Display for NvmeNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = crate::format_bytes(self.size_bytes);
        match self.logical_block_size {
            Some(b) => write!(f, "{} ({size}, {b} B blocks)", self.name),
            None => write!(f, "{} ({size})", self.name),
        }
    }
}

fn is_ctrl_name(name: &str) -> bool {
    name.strip_prefix("nvme")
        .is_some_and(|r| !r.is_empty() && r.bytes().all(|c| c.is_ascii_digit()))
}

/// `nvmeXnY` stays as is; a multipath path device `nvmeXcZnY` maps to its head `nvmeXnY`.
fn namespace_head(name: &str) -> Option<String> {
    let rest = name.strip_prefix("nvme")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let (left, ns) = rest.split_once('n')?;
    if !digits(ns) {
        return None;
    }
    match left.split_once('c') {
        Some((subsys, ctrl)) if digits(subsys) && digits(ctrl) => {
            Some(format!("nvme{subsys}n{ns}"))
        }
        None if digits(left) => Some(name.to_string()),
        _ => None,
    }
}

pub(crate) fn read(fs: &Sysfs, warnings: &mut Vec<String>) -> Vec<NvmeController> {
    let names = match fs.list(NVME_DIR) {
        Ok(n) => n,
        Err(e) => {
            warnings.push(e.to_string());
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for name in names.into_iter().filter(|n| is_ctrl_name(n)) {
        let dir = format!("{NVME_DIR}/{name}");
        // Identify strings are space padded; read_opt trims them.
        let text = |attr: &str, w: &mut Vec<String>| match fs.read_opt(&format!("{dir}/{attr}")) {
            Ok(v) => v.filter(|s| !s.is_empty()),
            Err(e) => {
                w.push(format!("{e}; ignoring it"));
                None
            }
        };
        let model = text("model", warnings);
        let serial = text("serial", warnings);
        let firmware_rev = text("firmware_rev", warnings);
        let transport = text("transport", warnings);
        let address = text("address", warnings);
        let numa_node = ["numa_node", "device/numa_node"]
            .iter()
            .find_map(|attr| {
                match fs.parse_opt(&format!("{dir}/{attr}"), "a node number or -1", parse_node) {
                    Ok(v) => v,
                    Err(e) => {
                        warnings.push(format!("{e}; ignoring it"));
                        None
                    }
                }
            })
            .flatten();
        let mut heads: Vec<String> = fs
            .list(&dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|e| namespace_head(e))
            .collect();
        heads.sort();
        heads.dedup();
        let mut namespaces = Vec::new();
        for ns in heads {
            let bdir = format!("{BLOCK_DIR}/{ns}");
            // `size` counts 512-byte sectors whatever the logical block size (block/genhd.c).
            let size = fs.parse_opt(
                &format!("{bdir}/size"),
                "a number of 512-byte sectors",
                parse_u64,
            );
            let lbs = fs.parse_opt(
                &format!("{bdir}/queue/logical_block_size"),
                "a block size",
                parse_u64,
            );
            match (size, lbs) {
                (Ok(Some(sectors)), Ok(lbs)) => namespaces.push(NvmeNamespace {
                    name: ns,
                    size_bytes: sectors.saturating_mul(512),
                    logical_block_size: lbs,
                }),
                (Ok(None), _) => warnings.push(format!(
                    "{}: missing; namespace {ns} of {name} skipped",
                    fs.display(&format!("{bdir}/size"))
                )),
                (Err(e), _) | (_, Err(e)) => {
                    warnings.push(format!("{e}; namespace {ns} of {name} skipped"))
                }
            }
        }
        out.push(NvmeController {
            name,
            model,
            serial,
            firmware_rev,
            transport,
            address,
            numa_node,
            namespaces,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        assert_eq!(namespace_head("nvme0n1").as_deref(), Some("nvme0n1"));
        assert_eq!(namespace_head("nvme1c3n2").as_deref(), Some("nvme1n2"));
        assert_eq!(namespace_head("nvme0"), None);
        assert_eq!(namespace_head("nvme0n1p1"), None);
        assert_eq!(namespace_head("nvme-subsys0"), None);
    }
}
