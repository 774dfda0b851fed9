//! The inventory and the event mapping against sysfs and trace lines recorded in the lab's real
//! Linux 6.12 kernel (see tests/fixtures/README.md).

use cxltier_ras::trace::parse_line;
use cxltier_ras::{EventType, Inventory, RasError, RasEvent};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

const VMEM0: u64 = 0xc0de_0000;
const VMEM1: u64 = 0xc0de_0001;

#[test]
fn inventory_of_the_lab() {
    let inv = Inventory::read(&fixture("lab-cxl")).unwrap();
    assert_eq!(inv.devices.len(), 2);
    let m0 = inv.device("mem0").unwrap();
    assert_eq!(m0.serial, Some(VMEM0));
    assert_eq!(m0.firmware_version.as_deref(), Some("BWFW VERSION 00"));
    assert_eq!(m0.ram_bytes, 256 << 20);
    assert_eq!(m0.pci_address.as_deref(), Some("0000:0d:00.0"));
    assert_eq!(m0.region.as_deref(), Some("region0"));
    assert_eq!(m0.node, Some(1));
    assert_eq!(m0.memory_tier, Some(22));
    assert_eq!(m0.node_kind.as_deref(), Some("cxl"));
    let r = m0.region_range.unwrap();
    assert_eq!((r.start, r.len()), (0x2_d000_0000, 256 << 20));
    assert!(m0.health.poison_list_supported);
    assert_eq!(m0.health.link_width, Some(16));
    assert_eq!(m0.health.security_state.as_deref(), Some("disabled"));
    let aer = m0.health.aer.as_ref().unwrap();
    assert_eq!(
        aer.correctable_total + aer.fatal_total + aer.nonfatal_total,
        0
    );
    // The recorder leaves config space out: whether the AER masks hide internal errors is unknown.
    assert_eq!(m0.health.aer_internal_errors_masked, None);
    let m1 = inv.device("mem1").unwrap();
    assert_eq!(m1.serial, Some(VMEM1));
    assert_eq!((m1.region.as_deref(), m1.node), (None, None));
}

#[test]
fn no_devices_and_unknown_devices() {
    let err =
        Inventory::read(&fixture("../../../cxltier-topo/tests/fixtures/lab-hmat")).unwrap_err();
    assert!(matches!(err, RasError::NoDevices { .. }), "{err}");
    assert!(err.to_string().contains("modprobe"), "{err}");
    let mut inv = Inventory::read(&fixture("lab-cxl")).unwrap();
    let err = inv.select(&["mem7".to_string()]).unwrap_err();
    assert!(err.to_string().contains("mem0, mem1"), "{err}");
    inv.select(&["mem1".to_string()]).unwrap();
    assert_eq!(inv.devices.len(), 1);
}

fn events() -> Vec<RasEvent> {
    let inv = Inventory::read(&fixture("lab-cxl")).unwrap();
    let text = std::fs::read_to_string(fixture("lab-cxl-trace.txt")).unwrap();
    text.lines()
        .map(|l| parse_line(l).unwrap_or_else(|| panic!("unparsed: {l}")))
        .map(|t| {
            let mut e = RasEvent::from_trace(&t);
            e.map(&inv);
            e
        })
        .collect()
}

#[test]
fn every_recorded_type_is_typed_and_mapped() {
    let ev = events();
    let of = |t: EventType| ev.iter().filter(move |e| e.event_type == t);
    for t in [
        EventType::AerCorrectable,
        EventType::AerUncorrectable,
        EventType::Poison,
        EventType::GeneralMedia,
        EventType::Dram,
        EventType::MemoryModule,
    ] {
        assert!(of(t).count() > 0, "no {t:?} in the fixture");
    }
    assert!(ev.iter().all(|e| e.event_type != EventType::Other));

    let cor = of(EventType::AerCorrectable).next().unwrap();
    assert_eq!(cor.serial, Some(VMEM0));
    assert_eq!(cor.summary, "Memory Data ECC Error");
    assert_eq!(cor.severity.as_deref(), Some("correctable"));
    // vmem0 backs region0 (node 1, memory tier 22) in the recorded sysfs.
    assert_eq!(
        (cor.region.as_deref(), cor.node, cor.memory_tier),
        (Some("region0"), Some(1), Some(22))
    );
    assert_eq!(cor.tier.as_deref(), Some("cxl"));
    let unc = of(EventType::AerUncorrectable).next().unwrap();
    assert_eq!(
        unc.summary,
        "Memory Data ECC Error (first error: Memory Data ECC Error)"
    );

    let gm = of(EventType::GeneralMedia).next().unwrap();
    assert_eq!(gm.dpa, Some(0x4000));
    assert_eq!(gm.hpa, None, "all ones: not in a region");
    assert_eq!(gm.severity.as_deref(), Some("informational"));
    assert!(
        gm.summary
            .starts_with("UNCORRECTABLE_EVENT|THRESHOLD_EVENT"),
        "{}",
        gm.summary
    );
    let dram = of(EventType::Dram).next().unwrap();
    assert_eq!(
        (dram.dpa, dram.severity.as_deref()),
        (Some(0x5000), Some("failure"))
    );
    assert!(dram.summary.contains("Data Path Error"), "{}", dram.summary);
    let mm = of(EventType::MemoryModule).next().unwrap();
    assert_eq!(mm.serial, Some(VMEM1));
    assert_eq!(mm.severity.as_deref(), Some("warning"));
    assert!(mm.summary.contains("Temperature Change"), "{}", mm.summary);
    assert_eq!(mm.fields.get("device_temp").map(String::as_str), Some("42"));
    assert_eq!(mm.node, None, "vmem1 backs no region in the recorded sysfs");
}

#[test]
fn poison_in_a_region_has_a_physical_range_and_a_node() {
    let ev = events();
    let mut poison = ev.iter().filter(|e| e.event_type == EventType::Poison);
    let in_region = poison.find(|e| e.hpa.is_some()).unwrap();
    assert_eq!(in_region.hpa, Some(0x2_d000_2000));
    assert_eq!(in_region.dpa, Some(0x2000));
    assert_eq!(in_region.length_bytes, Some(64));
    let r = in_region.physical_range.unwrap();
    assert_eq!((r.start, r.end), (0x2_d000_2000, 0x2_d000_2040));
    assert_eq!(in_region.region.as_deref(), Some("region0"));
    assert_eq!(in_region.node, Some(1));
    assert_eq!(in_region.memory_tier, Some(22));
    let outside = ev
        .iter()
        .find(|e| e.event_type == EventType::Poison && e.hpa.is_none())
        .unwrap();
    assert_eq!(
        (outside.dpa, outside.length_bytes),
        (Some(0x1000), Some(128))
    );
    assert!(outside.physical_range.is_none());
    let json = serde_json::to_value(in_region).unwrap();
    assert_eq!(json["type"], "poison");
    assert_eq!(json["physical_range"]["start"], 0x2_d000_2000u64);
}

#[test]
fn poison_lists_repeat_and_are_deduplicated() {
    let ev: Vec<RasEvent> = events()
        .into_iter()
        .filter(|e| e.event_type == EventType::Poison)
        .collect();
    let n = ev.len();
    let twice: Vec<RasEvent> = ev.iter().chain(ev.iter()).cloned().collect();
    assert_eq!(cxltier_ras::poison::dedup(twice).len(), n);
}
