//! CXL memory devices, regions, and the dax devices that turn memory ranges into NUMA nodes.
//!
//! The layout, as Linux 6.x shows it (see the kernel's `Documentation/ABI/testing/sysfs-bus-cxl` and
//! `Documentation/driver-api/cxl/`):
//!
//! ```text
//! sys/bus/cxl/devices/mem0     -> ../../../devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0/mem0
//!     serial, firmware_version, payload_max, numa_node, ram/size, pmem/size
//! sys/bus/cxl/devices/endpoint2 -> .../root0/port1/endpoint2          (uport -> .../mem0)
//! sys/bus/cxl/devices/decoder2.0 -> .../root0/port1/endpoint2/decoder2.0   (an endpoint decoder)
//! sys/bus/cxl/devices/region0  -> ../../../devices/platform/ACPI0017:00/root0/decoder0.0/region0
//!     mode (ram|pmem), size, resource, interleave_ways, commit, target0 = "decoder2.0", access0/
//!     dax_region0/dax0.0/      (when the dax_cxl driver has bound the region)
//! sys/bus/dax/devices/dax0.0   -> ../../../devices/.../region0/dax_region0/dax0.0
//!     target_node, size, driver -> .../bus/dax/drivers/kmem   (kmem: onlined as system RAM)
//! ```
//!
//! A memdev's PCI address is the name of the directory its device lives in (as `cxl list` reports it
//! as `host`). A region's memdevs are found through its `targetN` endpoint decoders, whose port's
//! `uport` link is the memdev.

use serde::Serialize;

use crate::node::{read_perf, MemoryBlocks, Perf};
use crate::sysfs::{natural_cmp, parse_bool, parse_node, parse_u64, Sysfs};

pub(crate) const CXL_DIR: &str = "sys/bus/cxl/devices";
pub(crate) const DAX_DIR: &str = "sys/bus/dax/devices";

/// CXL memory as the kernel's CXL driver sees it. Empty without CXL devices or without the driver.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cxl {
    pub memdevs: Vec<CxlMemdev>,
    pub regions: Vec<CxlRegion>,
}

/// A CXL memory device (`memN`): a type-3 memory expander.
fn serial_string<S: serde::Serializer>(serial: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match serial {
        Some(n) => s.collect_str(n),
        None => s.serialize_none(),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CxlMemdev {
    pub name: String,
    /// PCIe Device Serial Number: identifies the device across reboots and renumbering. A
    /// decimal string in JSON: a 64-bit identifier does not survive readers that hold numbers as
    /// doubles.
    #[serde(serialize_with = "serial_string")]
    pub serial: Option<u64>,
    pub firmware_version: Option<String>,
    /// Volatile capacity in bytes (`ram/size`).
    pub ram_bytes: u64,
    /// Persistent capacity in bytes (`pmem/size`).
    pub pmem_bytes: u64,
    /// The PCI function behind the memdev (`0000:0d:00.0`).
    pub pci_address: Option<String>,
    /// The node of the CPUs nearest to the device (its PCI affinity), not the node its memory became.
    pub numa_node: Option<u32>,
    /// Largest mailbox payload, in bytes.
    pub payload_max: Option<u64>,
    /// The first region using this device, if any.
    pub region: Option<String>,
    /// Every region using this device.
    pub regions: Vec<String>,
    /// The node the device's memory became (through its first region that became one).
    pub node: Option<u32>,
}

/// A CXL region (`regionN`): an interleave set of memdevs mapped at a host physical address range.
#[derive(Debug, Clone, Serialize)]
pub struct CxlRegion {
    pub name: String,
    /// `ram` (volatile) or `pmem` (persistent); `mixed`/`none` for incomplete regions.
    pub mode: String,
    pub size_bytes: u64,
    /// Host physical start address.
    pub resource: Option<u64>,
    pub interleave_ways: Option<u32>,
    /// Whether the region is decoding in hardware (`commit`).
    pub committed: Option<bool>,
    /// Memdevs in interleave order.
    pub memdevs: Vec<String>,
    /// The endpoint decoders in interleave order (`targetN`).
    pub decoders: Vec<String>,
    /// Dax devices carved from the region.
    pub dax: Vec<String>,
    /// The NUMA node the region's memory became, if it was onlined as system RAM.
    pub node: Option<u32>,
    /// How `node` was found: `dax` (a dax device onlined by kmem targets it) or `memory-blocks`
    /// (the region's address range lies in the node's memory blocks, e.g. onlined by firmware).
    pub node_source: Option<String>,
    /// Performance the kernel computed for the region from CDAT and HMAT (Linux 6.9+), access class 0.
    pub access0: Option<Perf>,
    /// Same, from CPU initiators only.
    pub access1: Option<Perf>,
}

/// A device-DAX instance (`daxX.Y`).
#[derive(Debug, Clone, Serialize)]
pub struct DaxDevice {
    pub name: String,
    /// The node the memory joins when onlined as system RAM (`target_node`).
    pub target_node: Option<u32>,
    pub size_bytes: Option<u64>,
    /// The bound driver (`kmem`, `device_dax`), if any.
    pub driver: Option<String>,
    pub mode: DaxMode,
    /// What provides the memory.
    pub source: DaxSource,
    /// The CXL or NVDIMM region the device is carved from, if any.
    pub region: Option<String>,
}

/// How a dax device's memory is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DaxMode {
    /// Bound to `kmem`: onlined as system RAM into `target_node`.
    SystemRam,
    /// Bound to `device_dax`: a `/dev/daxX.Y` character device, not part of any node.
    Devdax,
    /// Bound to no driver (or one we do not know).
    Unbound,
}

/// Where a dax device's memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DaxSource {
    /// A CXL region.
    Cxl,
    /// An NVDIMM (libnvdimm) region: persistent memory such as Optane DC PMem, or `memmap=` pmem.
    Nvdimm,
    /// Memory the firmware marked specific-purpose (EFI_MEMORY_SP, "soft reserved"), claimed by
    /// `dax_hmem`. Often CXL or HBM that the firmware set aside; which one is not recorded.
    Hmem,
    Other,
}

impl DaxMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            DaxMode::SystemRam => "system-ram",
            DaxMode::Devdax => "devdax",
            DaxMode::Unbound => "unbound",
        }
    }
}

impl DaxSource {
    pub fn as_str(&self) -> &'static str {
        match self {
            DaxSource::Cxl => "cxl",
            DaxSource::Nvdimm => "nvdimm",
            DaxSource::Hmem => "hmem",
            DaxSource::Other => "other",
        }
    }
}

fn is_dax_name(name: &str) -> bool {
    // daxX.Y
    name.strip_prefix("dax")
        .and_then(|r| r.split_once('.'))
        .is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && (a.to_string() + b).bytes().all(|c| c.is_ascii_digit())
        })
}

fn is_region_name(name: &str) -> bool {
    name.strip_prefix("region")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
}

/// Read every dax device.
pub(crate) fn read_dax(fs: &Sysfs, warnings: &mut Vec<String>) -> Vec<DaxDevice> {
    let names = match fs.list(DAX_DIR) {
        Ok(n) => n,
        Err(e) => {
            warnings.push(e.to_string());
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for name in names.into_iter().filter(|n| is_dax_name(n)) {
        let dir = format!("{DAX_DIR}/{name}");
        if fs.resolve(&dir).is_none() {
            warnings.push(format!(
                "{}: dangling or looping symlink; skipping {name}",
                fs.display(&dir)
            ));
            continue;
        }
        out.push(read_one_dax(fs, &dir, &name, warnings));
    }
    out
}

fn read_one_dax(fs: &Sysfs, dir: &str, name: &str, warnings: &mut Vec<String>) -> DaxDevice {
    let target_node = warn(
        fs.parse_opt(
            &format!("{dir}/target_node"),
            "a node number or -1",
            parse_node,
        ),
        warnings,
    )
    .flatten()
    .flatten();
    let size_bytes = warn(
        fs.parse_opt(&format!("{dir}/size"), "a size in bytes", parse_u64),
        warnings,
    )
    .flatten();
    let driver = fs.link_name(&format!("{dir}/driver"));
    let mode = match driver.as_deref() {
        Some("kmem") => DaxMode::SystemRam,
        Some("device_dax") => DaxMode::Devdax,
        _ => DaxMode::Unbound,
    };
    // The device's place in the device tree says what provides it.
    let real = fs.resolve(dir).map(|p| {
        p.iter()
            .filter_map(|c| c.to_str().map(str::to_string))
            .collect::<Vec<_>>()
    });
    let parts = real.unwrap_or_default();
    let region = parts.iter().rev().find(|c| is_region_name(c)).cloned();
    let source = if parts.iter().any(|c| c.starts_with("ndbus")) {
        DaxSource::Nvdimm
    } else if parts.iter().any(|c| c.starts_with("hmem")) {
        DaxSource::Hmem
    } else if parts.iter().any(|c| c.starts_with("dax_region")) && region.is_some() {
        DaxSource::Cxl
    } else {
        DaxSource::Other
    };
    DaxDevice {
        name: name.to_string(),
        target_node,
        size_bytes,
        driver,
        mode,
        source,
        region,
    }
}

/// Keep a value, turning an error into a warning.
fn warn<T>(r: Result<T, crate::TopoError>, warnings: &mut Vec<String>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            warnings.push(format!("{e}; ignoring it"));
            None
        }
    }
}

pub(crate) fn read_cxl(
    fs: &Sysfs,
    dax: &[DaxDevice],
    blocks: &MemoryBlocks,
    warnings: &mut Vec<String>,
) -> Cxl {
    let names = match fs.list(CXL_DIR) {
        Ok(n) => n,
        Err(e) => {
            warnings.push(e.to_string());
            return Cxl::default();
        }
    };
    let mut memdevs: Vec<CxlMemdev> = names
        .iter()
        .filter(|n| {
            n.strip_prefix("mem")
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|c| c.is_ascii_digit()))
        })
        .map(|n| read_memdev(fs, n, warnings))
        .collect();
    let mut regions: Vec<CxlRegion> = names
        .iter()
        .filter(|n| is_region_name(n))
        .map(|n| read_region(fs, n, dax, blocks, warnings))
        .collect();
    regions.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    for m in &mut memdevs {
        for r in &regions {
            if r.memdevs.contains(&m.name) {
                m.regions.push(r.name.clone());
                if m.node.is_none() {
                    m.node = r.node;
                }
            }
        }
        m.region = m.regions.first().cloned();
    }
    Cxl { memdevs, regions }
}

fn read_memdev(fs: &Sysfs, name: &str, warnings: &mut Vec<String>) -> CxlMemdev {
    let dir = format!("{CXL_DIR}/{name}");
    let size = |attr: &str, w: &mut Vec<String>| {
        warn(
            fs.parse_opt(&format!("{dir}/{attr}"), "a size in bytes", parse_u64),
            w,
        )
        .flatten()
        .unwrap_or(0)
    };
    let ram_bytes = size("ram/size", warnings);
    let pmem_bytes = size("pmem/size", warnings);
    let serial = warn(
        fs.parse_opt(
            &format!("{dir}/serial"),
            "a hexadecimal serial number",
            parse_u64,
        ),
        warnings,
    )
    .flatten();
    let firmware_version = warn(fs.read_opt(&format!("{dir}/firmware_version")), warnings)
        .flatten()
        .filter(|s| !s.is_empty());
    let numa_node = warn(
        fs.parse_opt(
            &format!("{dir}/numa_node"),
            "a node number or -1",
            parse_node,
        ),
        warnings,
    )
    .flatten()
    .flatten();
    let payload_max = warn(
        fs.parse_opt(&format!("{dir}/payload_max"), "a size in bytes", parse_u64),
        warnings,
    )
    .flatten();
    // The memdev's parent device is its PCI function (libcxl takes the `host` the same way).
    let pci_address = fs
        .resolve(&dir)
        .and_then(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .and_then(|s| s.to_str())
                .map(str::to_string)
        })
        .filter(|s| is_pci_address(s));
    CxlMemdev {
        name: name.to_string(),
        serial,
        firmware_version,
        ram_bytes,
        pmem_bytes,
        pci_address,
        numa_node,
        payload_max,
        region: None,
        regions: Vec::new(),
        node: None,
    }
}

/// `dddd:bb:dd.f`, as PCI names functions in sysfs.
fn is_pci_address(s: &str) -> bool {
    let hex = |t: &str, n: usize| t.len() >= n && t.bytes().all(|c| c.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    match parts.as_slice() {
        [dom, bus, devfn] => match devfn.split_once('.') {
            Some((dev, f)) => {
                hex(dom, 4) && hex(bus, 2) && hex(dev, 2) && f.len() == 1 && hex(f, 1)
            }
            None => false,
        },
        _ => false,
    }
}

fn read_region(
    fs: &Sysfs,
    name: &str,
    dax: &[DaxDevice],
    blocks: &MemoryBlocks,
    warnings: &mut Vec<String>,
) -> CxlRegion {
    let dir = format!("{CXL_DIR}/{name}");
    let size_bytes = warn(
        fs.parse_opt(&format!("{dir}/size"), "a size in bytes", parse_u64),
        warnings,
    )
    .flatten()
    .unwrap_or(0);
    let resource = warn(
        fs.parse_opt(&format!("{dir}/resource"), "an address", parse_u64),
        warnings,
    )
    .flatten()
    // The kernel prints all ones when no address range is allocated yet.
    .filter(|&r| r != u64::MAX);
    let interleave_ways = warn(
        fs.parse_opt(&format!("{dir}/interleave_ways"), "a count", |t| {
            t.parse().ok()
        }),
        warnings,
    )
    .flatten();
    let committed = warn(
        fs.parse_opt(&format!("{dir}/commit"), "0 or 1", parse_bool),
        warnings,
    )
    .flatten();
    let access0 = read_region_perf(fs, &dir, 0, warnings);
    let access1 = read_region_perf(fs, &dir, 1, warnings);

    // Targets in interleave order: target0, target1, ... (empty when the position is unset).
    let mut decoders = Vec::new();
    let mut memdevs = Vec::new();
    for (_, target) in fs.numbered(&dir, "target").unwrap_or_default() {
        let Some(decoder) = warn(fs.read_opt(&format!("{dir}/{target}")), warnings).flatten()
        else {
            continue;
        };
        if decoder.is_empty() {
            continue;
        }
        match memdev_of_decoder(fs, &decoder) {
            Some(m) => memdevs.push(m),
            None => warnings.push(format!(
                "{}: cannot find the memdev behind endpoint decoder {decoder} (no uport link on its port)",
                fs.display(&format!("{dir}/{target}"))
            )),
        }
        decoders.push(decoder);
    }

    // The mode; on kernels without `mode`, the endpoint decoders' mode says the same.
    let mode = warn(fs.read_opt(&format!("{dir}/mode")), warnings)
        .flatten()
        .or_else(|| {
            decoders
                .first()
                .and_then(|d| fs.read_opt(&format!("{CXL_DIR}/{d}/mode")).ok().flatten())
        })
        .unwrap_or_else(|| "unknown".to_string());

    // Dax devices below the region: found in the region's own directory (dax_regionN/daxX.Y), and in
    // the dax bus for devices whose real path passes through this region.
    let mut dax_names: Vec<String> = Vec::new();
    for sub in fs
        .list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.starts_with("dax_region"))
    {
        for d in fs.list(&format!("{dir}/{sub}")).unwrap_or_default() {
            if is_dax_name(&d) {
                dax_names.push(d);
            }
        }
    }
    let region_real = fs.resolve(&dir);
    for d in dax {
        let under = match (&region_real, fs.resolve(&format!("{DAX_DIR}/{}", d.name))) {
            (Some(r), Some(p)) => p.starts_with(r),
            _ => false,
        };
        if under && !dax_names.contains(&d.name) {
            dax_names.push(d.name.clone());
        }
    }
    dax_names.sort_by(|a, b| natural_cmp(a, b));

    // The node: a dax device of the region onlined as system RAM says which; otherwise the memory
    // blocks covering the region's address range (memory the firmware onlined at boot has no dax).
    let mut node = None;
    let mut node_source = None;
    for d in dax.iter().filter(|d| dax_names.contains(&d.name)) {
        if d.mode == DaxMode::SystemRam {
            if let Some(t) = d.target_node {
                if node.is_none() {
                    node = Some(t);
                    node_source = Some("dax".to_string());
                } else if node != Some(t) {
                    warnings.push(format!(
                        "{name}: dax devices target different nodes ({} and {t}); reporting the first",
                        node.unwrap_or(t)
                    ));
                }
            }
        }
    }
    if node.is_none() {
        if let Some(start) = resource {
            if let Some((n, _, _)) = blocks.node_for_range(start, size_bytes) {
                node = Some(n);
                node_source = Some("memory-blocks".to_string());
            }
        }
    }
    CxlRegion {
        name: name.to_string(),
        mode,
        size_bytes,
        resource,
        interleave_ways,
        committed,
        memdevs,
        decoders,
        dax: dax_names,
        node,
        node_source,
        access0,
        access1,
    }
}

fn read_region_perf(fs: &Sysfs, dir: &str, class: u32, warnings: &mut Vec<String>) -> Option<Perf> {
    let sub = format!("{dir}/access{class}");
    if !fs.is_dir(&sub) {
        return None;
    }
    Some(read_perf(fs, &sub, warnings)).filter(|p| !p.is_empty())
}

/// The memdev behind an endpoint decoder: the decoder lives in its endpoint port's directory, and the
/// port's `uport` link points at the memdev.
fn memdev_of_decoder(fs: &Sysfs, decoder: &str) -> Option<String> {
    if decoder.contains('/') || decoder.contains("..") {
        return None;
    }
    let real = fs.resolve(&format!("{CXL_DIR}/{decoder}"))?;
    let port = real.parent()?;
    let candidates = [
        port.join("uport").to_str().map(str::to_string),
        port.file_name()
            .and_then(|p| p.to_str())
            .map(|p| format!("{CXL_DIR}/{p}/uport")),
    ];
    for c in candidates.into_iter().flatten() {
        if let Some(target) = fs.resolve(&c) {
            if let Some(name) = target.file_name().and_then(|s| s.to_str()) {
                if name.starts_with("mem") {
                    return Some(name.to_string());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dax_name("dax0.0"));
        assert!(is_dax_name("dax12.3"));
        assert!(!is_dax_name("dax0"));
        assert!(!is_dax_name("dax_region0"));
        assert!(is_region_name("region0"));
        assert!(!is_region_name("regionx"));
        assert!(is_pci_address("0000:0d:00.0"));
        assert!(is_pci_address("10000:e1:00.1"));
        assert!(!is_pci_address("pci0000:0c"));
        assert!(!is_pci_address("0000:0d:00"));
    }
}
