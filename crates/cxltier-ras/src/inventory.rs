//! The inventory of CXL memory devices, joined with the topology: for each memdev, the region,
//! NUMA node and memory tier its memory became, and the health the kernel exposes in sysfs.
//!
//! Linux 6.12 exposes no media health in sysfs (the Get Health Info mailbox command is only
//! reachable through the `/dev/cxl/memN` ioctl); what it does expose, and what is read here, is the
//! PCIe link (`current_link_speed`, `current_link_width` of the PCI function), the AER counters of
//! the function when the kernel handles AER natively (`aer_dev_correctable`, `aer_dev_fatal`,
//! `aer_dev_nonfatal`), the security state (`memN/security/state`) and whether the device takes
//! `trigger_poison_list`.

use crate::event::{PhysRange, RasEvent};
use crate::RasError;
use cxltier_topo::Topology;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Where CXL devices live, relative to the root.
pub const CXL_DIR: &str = "sys/bus/cxl/devices";

/// Every CXL memory device below a root.
#[derive(Debug, Clone, Serialize)]
pub struct Inventory {
    pub devices: Vec<Device>,
    /// Non-essential files that could not be read, one sentence each.
    pub warnings: Vec<String>,
}

/// One CXL memory device (`memN`) and where its memory went.
#[derive(Debug, Clone, Serialize)]
pub struct Device {
    pub memdev: String,
    /// PCIe Device Serial Number (0 when the device reports none).
    /// A decimal string in JSON (a 64-bit identifier).
    #[serde(serialize_with = "crate::event::serial_string")]
    pub serial: Option<u64>,
    pub firmware_version: Option<String>,
    pub ram_bytes: u64,
    pub pmem_bytes: u64,
    /// The PCI function behind the memdev (`0000:0d:00.0`), as trace events name it (`host`).
    pub pci_address: Option<String>,
    /// Every region using this device.
    pub regions: Vec<String>,
    /// The first region using this device.
    pub region: Option<String>,
    /// Host physical address range of that region.
    pub region_range: Option<PhysRange>,
    /// The NUMA node the device's memory became.
    pub node: Option<u32>,
    /// The kernel memory tier of that node (lower is faster).
    pub memory_tier: Option<u32>,
    /// What that node was classified as (`cxl`, `dram`, ...).
    pub node_kind: Option<String>,
    pub health: Health,
}

/// Health the kernel exposes without a mailbox command.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Health {
    /// `current_link_speed` of the PCI function (`32.0 GT/s PCIe`).
    pub link_speed: Option<String>,
    pub link_width: Option<u32>,
    /// AER counters, `None` when the kernel does not handle AER for the function (firmware-first,
    /// or `pcie_ports=compat`).
    pub aer: Option<AerCounters>,
    /// Whether the function's AER capability masks the internal errors that carry CXL protocol
    /// errors (then `cxl_aer_*` records never come; see [`crate::aer`]). `None` when the extended
    /// config space cannot be read (it needs root) or has no AER capability.
    pub aer_internal_errors_masked: Option<bool>,
    /// `security/state`: `disabled`, `locked`, `unlocked`, `frozen`.
    pub security_state: Option<String>,
    /// Whether the kernel offers `trigger_poison_list` for the device (the device supports Get
    /// Poison List).
    pub poison_list_supported: bool,
}

/// The PCI function's AER counters, per error name; the kernel's `TOTAL_ERR_*` lines become the
/// totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AerCounters {
    pub correctable_total: u64,
    pub fatal_total: u64,
    pub nonfatal_total: u64,
    /// Nonzero counters by name (`BadTLP`, `RxErr`, `PoisonTLPBlocked`, ...), with their class as a
    /// prefix (`correctable.`, `fatal.`, `nonfatal.`).
    pub nonzero: BTreeMap<String, u64>,
}

impl Inventory {
    /// Reads every CXL memory device below `root` (`/` for this machine). Fails with
    /// [`RasError::NoDevices`] when there is none.
    pub fn read(root: &Path) -> Result<Inventory, RasError> {
        let topo = Topology::discover(root)?;
        Inventory::from_topology(root, &topo)
    }

    /// As [`Inventory::read`], from a topology already discovered below `root`.
    pub fn from_topology(root: &Path, topo: &Topology) -> Result<Inventory, RasError> {
        if topo.cxl.memdevs.is_empty() {
            return Err(RasError::NoDevices {
                path: root.join(CXL_DIR),
            });
        }
        let mut warnings = topo.warnings.clone();
        let mut devices = Vec::new();
        for m in &topo.cxl.memdevs {
            let dir = root.join(CXL_DIR).join(&m.name);
            let region_range = m
                .region
                .as_ref()
                .and_then(|r| topo.cxl.regions.iter().find(|x| &x.name == r))
                .and_then(|r| {
                    r.resource.map(|start| PhysRange {
                        start,
                        end: start + r.size_bytes,
                    })
                });
            let node = m.node.and_then(|n| topo.node(n));
            devices.push(Device {
                memdev: m.name.clone(),
                serial: m.serial,
                firmware_version: m.firmware_version.clone(),
                ram_bytes: m.ram_bytes,
                pmem_bytes: m.pmem_bytes,
                pci_address: m.pci_address.clone(),
                regions: m.regions.clone(),
                region: m.region.clone(),
                region_range,
                node: m.node,
                memory_tier: node.and_then(|n| n.memory_tier),
                node_kind: node.map(|n| n.kind.as_str().to_string()),
                health: read_health(&dir, &mut warnings),
            });
        }
        Ok(Inventory { devices, warnings })
    }

    /// The device with this memdev name.
    pub fn device(&self, memdev: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.memdev == memdev)
    }

    /// The memdev names, for messages.
    pub fn names(&self) -> String {
        self.devices
            .iter()
            .map(|d| d.memdev.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The devices that support Get Poison List.
    pub fn poison_list_devices(&self) -> Vec<&str> {
        self.devices
            .iter()
            .filter(|d| d.health.poison_list_supported)
            .map(|d| d.memdev.as_str())
            .collect()
    }

    /// Keeps only the named devices; fails naming the first unknown one.
    pub fn select(&mut self, names: &[String]) -> Result<(), RasError> {
        if names.is_empty() {
            return Ok(());
        }
        for n in names {
            if self.device(n).is_none() {
                return Err(RasError::UnknownDevice {
                    name: n.clone(),
                    known: self.names(),
                });
            }
        }
        self.devices.retain(|d| names.contains(&d.memdev));
        Ok(())
    }
}

/// Checks that every name is spelled as the kernel names memory devices (`memN`), before
/// anything is read.
pub fn check_memdev_names(names: &[String]) -> Result<(), RasError> {
    for name in names {
        let ok = name
            .strip_prefix("mem")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
        if !ok {
            return Err(RasError::NotADeviceName { name: name.clone() });
        }
    }
    Ok(())
}

/// The inventory with each device's poison list, as `cxltier ras --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct InventoryReport {
    pub devices: Vec<DeviceReport>,
    pub poison_list_read: bool,
    pub warnings: Vec<String>,
}

/// One device of an [`InventoryReport`].
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    #[serde(flatten)]
    pub device: Device,
    /// The poison list; `null` when it was not read.
    pub poison: Option<Vec<RasEvent>>,
}

impl InventoryReport {
    /// The devices of `inventory`, each with its entries of `poison` (`None`: the lists were not
    /// read).
    pub fn new(inventory: Inventory, poison: Option<Vec<RasEvent>>) -> InventoryReport {
        InventoryReport {
            poison_list_read: poison.is_some(),
            devices: inventory
                .devices
                .into_iter()
                .map(|device| DeviceReport {
                    poison: poison.as_ref().map(|p| {
                        p.iter()
                            .filter(|e| e.memdev.as_deref() == Some(&device.memdev))
                            .cloned()
                            .collect()
                    }),
                    device,
                })
                .collect(),
            warnings: inventory.warnings,
        }
    }

    /// A machine without devices, for a script: an empty inventory, with why as its warning (as
    /// `cxl list` prints `[]`, an answer rather than a failure).
    pub fn without_devices(why: &RasError) -> InventoryReport {
        InventoryReport {
            devices: Vec::new(),
            poison_list_read: false,
            warnings: vec![why.to_string()],
        }
    }
}

fn read_text(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_health(memdev_dir: &Path, warnings: &mut Vec<String>) -> Health {
    // The PCI function is the memdev's parent directory.
    let pci: Option<PathBuf> = fs::canonicalize(memdev_dir)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let mut h = Health {
        security_state: read_text(&memdev_dir.join("security/state")).filter(|s| !s.is_empty()),
        poison_list_supported: memdev_dir.join("trigger_poison_list").exists(),
        ..Health::default()
    };
    if let Some(pci) = pci {
        h.aer_internal_errors_masked = fs::read(pci.join("config")).ok().and_then(|c| {
            let off = crate::aer::find_aer(&c)? as usize;
            let word = |o: usize| Some(u32::from_le_bytes(c.get(o..o + 4)?.try_into().ok()?));
            let uncor = word(off + 8)?;
            let cor = word(off + 0x14)?;
            Some(uncor & crate::aer::UNCOR_INTERNAL != 0 || cor & crate::aer::COR_INTERNAL != 0)
        });
        h.link_speed = read_text(&pci.join("current_link_speed")).filter(|s| !s.is_empty());
        h.link_width = read_text(&pci.join("current_link_width")).and_then(|s| s.parse().ok());
        let mut aer = AerCounters::default();
        let mut any = false;
        for (file, class) in [
            ("aer_dev_correctable", "correctable"),
            ("aer_dev_fatal", "fatal"),
            ("aer_dev_nonfatal", "nonfatal"),
        ] {
            let Some(text) = read_text(&pci.join(file)) else {
                continue;
            };
            any = true;
            match parse_aer_counters(&text) {
                Ok(counts) => {
                    for (name, n) in counts {
                        if name.starts_with("TOTAL_ERR") {
                            match class {
                                "correctable" => aer.correctable_total = n,
                                "fatal" => aer.fatal_total = n,
                                _ => aer.nonfatal_total = n,
                            }
                        } else if n > 0 {
                            aer.nonzero.insert(format!("{class}.{name}"), n);
                        }
                    }
                }
                Err(line) => warnings.push(format!(
                    "{}: unexpected line {line:?}; ignoring the file",
                    pci.join(file).display()
                )),
            }
        }
        if any {
            h.aer = Some(aer);
        }
    }
    h
}

/// Parses an `aer_dev_*` file: lines of `NAME COUNT`.
pub fn parse_aer_counters(text: &str) -> Result<Vec<(String, u64)>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split_whitespace();
            match (it.next(), it.next().and_then(|n| n.parse().ok()), it.next()) {
                (Some(name), Some(n), None) => Ok((name.to_string(), n)),
                _ => Err(l.to_string()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aer_counter_files() {
        let c = parse_aer_counters("RxErr 0\nBadTLP 2\nTOTAL_ERR_COR 2\n").unwrap();
        assert_eq!(c[1], ("BadTLP".to_string(), 2));
        assert!(parse_aer_counters("RxErr zero\n").is_err());
    }
}
