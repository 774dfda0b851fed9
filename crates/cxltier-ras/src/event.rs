//! CXL trace events as typed records, mapped to the device, region, NUMA node and tier they
//! concern.
//!
//! Field names are those of Linux's `include/trace/events/cxl.h` (6.12): every event names the
//! `memdev`, its PCI function (`host`) and `serial`; media events (`cxl_general_media`, `cxl_dram`)
//! and `cxl_poison` carry a device physical address (`dpa`) and, when the address falls in a
//! region, the host physical address (`hpa`, all ones otherwise) and the `region`.

use crate::inventory::Inventory;
use crate::trace::TraceLine;
use serde::Serialize;
use std::collections::BTreeMap;

/// What kind of CXL event a record is. Serialized in snake_case; the names are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// CXL.io/CXL.mem correctable protocol or link error (RAS capability, reported through AER).
    AerCorrectable,
    /// CXL uncorrectable error, fatal or non-fatal (RAS capability, reported through AER).
    AerUncorrectable,
    /// A poisoned range: from the poison list, or injected/cleared.
    Poison,
    /// General Media Event Record.
    GeneralMedia,
    /// DRAM Event Record.
    Dram,
    /// Memory Module Event Record (health, temperature, error counts).
    MemoryModule,
    /// The device's event log overflowed: records were lost.
    Overflow,
    /// An event record of a type the kernel does not decode.
    Generic,
    /// Another event of the `cxl` group.
    Other,
}

impl EventType {
    /// The type of a trace event, by its name.
    pub fn of(event: &str) -> EventType {
        match event {
            "cxl_aer_correctable_error" => EventType::AerCorrectable,
            "cxl_aer_uncorrectable_error" => EventType::AerUncorrectable,
            "cxl_poison" => EventType::Poison,
            "cxl_general_media" => EventType::GeneralMedia,
            "cxl_dram" => EventType::Dram,
            "cxl_memory_module" => EventType::MemoryModule,
            "cxl_overflow" => EventType::Overflow,
            "cxl_generic_event" => EventType::Generic,
            _ => EventType::Other,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::AerCorrectable => "aer_correctable",
            EventType::AerUncorrectable => "aer_uncorrectable",
            EventType::Poison => "poison",
            EventType::GeneralMedia => "general_media",
            EventType::Dram => "dram",
            EventType::MemoryModule => "memory_module",
            EventType::Overflow => "overflow",
            EventType::Generic => "generic",
            EventType::Other => "other",
        }
    }
}

/// A host physical address range, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PhysRange {
    pub start: u64,
    pub end: u64,
}

impl PhysRange {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }
}

/// One CXL event, typed and mapped. JSON field names are stable.
#[derive(Debug, Clone, Serialize)]
pub struct RasEvent {
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// The trace event's name (`cxl_poison`); `trace_event` in JSON, where `event` names what a
    /// JSON line reports.
    #[serde(rename = "trace_event")]
    pub event: String,
    /// Trace clock timestamp in seconds.
    pub timestamp: Option<f64>,
    pub memdev: Option<String>,
    /// The device's PCI function.
    pub host: Option<String>,
    /// The device's serial number: a decimal string in JSON, since a 64-bit integer does not
    /// survive JSON readers that hold numbers as doubles.
    #[serde(serialize_with = "serial_string")]
    pub serial: Option<u64>,
    /// Event log (`informational`, `warning`, `failure`, `fatal`) for event records;
    /// `correctable`/`uncorrectable` for AER errors; the source (`injected`, `internal`, ...) for
    /// poison.
    pub severity: Option<String>,
    /// The error in words, as the kernel decoded it.
    pub summary: String,
    /// Device physical address.
    pub dpa: Option<u64>,
    /// Host physical address, when the address is in a region.
    pub hpa: Option<u64>,
    pub length_bytes: Option<u64>,
    /// Region, from the event or from the device.
    pub region: Option<String>,
    pub node: Option<u32>,
    pub memory_tier: Option<u32>,
    /// What the node is (`cxl`, `dram`, ...).
    pub tier: Option<String>,
    /// Host physical range affected (page-granular ranges are for the caller to derive).
    pub physical_range: Option<PhysRange>,
    /// Processes mapping the range (filled in by the caller where permitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<crate::procmap::Mapper>>,
    /// Why `processes` is missing where it was asked for (e.g. not permitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes_note: Option<String>,
    /// Every field as the kernel printed it.
    pub fields: BTreeMap<String, String>,
}

/// A 64-bit identifier as a decimal string (`null` when absent): JSON readers that hold numbers as
/// doubles (JavaScript, jq) round integers above 2^53.
pub(crate) fn serial_string<S: serde::Serializer>(
    v: &Option<u64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(n) => s.collect_str(n),
        None => s.serialize_none(),
    }
}

/// Parses a hexadecimal value with or without `0x`.
fn hex(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u64::from_str_radix(t, 16).ok()
}

impl RasEvent {
    /// Types a parsed trace line. Fields the event lacks stay `None`.
    pub fn from_trace(line: &TraceLine) -> RasEvent {
        let event_type = EventType::of(&line.event);
        let get = |k: &str| line.get(k).filter(|v| !v.is_empty()).map(str::to_string);
        let fields: BTreeMap<String, String> = line.fields.iter().cloned().collect();
        let serial = line
            .get("serial")
            .and_then(|s| s.parse::<i64>().ok().map(|v| v as u64).or_else(|| hex(s)));
        let dpa = line.get("dpa").and_then(hex).filter(|&d| d != u64::MAX);
        // All ones: the address is in no region.
        let hpa = line.get("hpa").and_then(hex).filter(|&h| h != u64::MAX);
        let length_bytes = match event_type {
            EventType::Poison => line.get("dpa_length").and_then(hex),
            // Media event records name one cache line.
            EventType::GeneralMedia | EventType::Dram if dpa.is_some() => Some(64),
            _ => None,
        };
        let log = get("log").map(|l| l.to_lowercase());
        let (severity, summary) = match event_type {
            EventType::AerCorrectable => (
                Some("correctable".to_string()),
                get("status").unwrap_or_default(),
            ),
            EventType::AerUncorrectable => {
                let status = get("status").unwrap_or_default();
                let summary = match get("first_error") {
                    Some(first) => format!("{status} (first error: {first})"),
                    None => status,
                };
                (Some("uncorrectable".to_string()), summary)
            }
            EventType::Poison => (
                get("source").map(|s| s.to_lowercase()),
                join(&[
                    get("trace_type"),
                    get("flags").map(|f| format!("flags {f}")),
                ]),
            ),
            EventType::GeneralMedia | EventType::Dram => (
                log,
                join(&[get("descriptor"), get("type"), get("transaction_type")]),
            ),
            EventType::MemoryModule => (
                log,
                join(&[
                    get("event_type"),
                    get("health_status").map(|h| format!("health {h}")),
                    get("media_status").map(|h| format!("media {h}")),
                ]),
            ),
            EventType::Overflow | EventType::Generic | EventType::Other => (log, String::new()),
        };
        let physical_range = hpa.map(|start| PhysRange {
            start,
            end: start + length_bytes.unwrap_or(1).max(1),
        });
        RasEvent {
            event_type,
            event: line.event.clone(),
            timestamp: line.timestamp.as_deref().and_then(|t| t.parse().ok()),
            memdev: get("memdev"),
            host: get("host"),
            serial,
            severity,
            summary,
            dpa,
            hpa,
            length_bytes,
            region: get("region"),
            node: None,
            memory_tier: None,
            tier: None,
            physical_range,
            processes: None,
            processes_note: None,
            fields,
        }
    }

    /// Fills in region, node and tier from the inventory: by memdev name, checked against the
    /// PCI function, or by serial when the name is unknown (names can change across reboots and
    /// hot-plug; a nonzero serial cannot).
    pub fn map(&mut self, inventory: &Inventory) {
        let by_name = self
            .memdev
            .as_deref()
            .and_then(|m| inventory.device(m))
            .filter(|d| match (&self.host, &d.pci_address) {
                (Some(h), Some(p)) => h == p,
                _ => true,
            });
        let by_serial = || {
            let s = self.serial.filter(|&s| s != 0)?;
            let mut it = inventory.devices.iter().filter(|d| d.serial == Some(s));
            let d = it.next()?;
            it.next().is_none().then_some(d)
        };
        let Some(dev) = by_name.or_else(by_serial) else {
            return;
        };
        // An address in a region names it; otherwise the device's own region is where its memory
        // went (for a device in one region, the same).
        let region = match (&self.region, self.hpa) {
            (Some(r), _) => Some(r.clone()),
            (None, Some(h)) if dev.region_range.is_some_and(|r| r.contains(h)) => {
                dev.region.clone()
            }
            (None, _) => dev.region.clone(),
        };
        // The region decides the node: the device that backs it in the inventory says which.
        let backing = region
            .as_deref()
            .and_then(|r| {
                inventory
                    .devices
                    .iter()
                    .find(|d| d.region.as_deref() == Some(r))
            })
            .unwrap_or(dev);
        self.region = region;
        self.node = backing.node;
        self.memory_tier = backing.memory_tier;
        self.tier = backing.node_kind.clone();
        if self.memdev.is_none() {
            self.memdev = Some(dev.memdev.clone());
        }
    }
}

fn join(parts: &[Option<String>]) -> String {
    parts
        .iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}
