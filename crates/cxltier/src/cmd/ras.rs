//! `cxltier ras`: CXL memory devices, their health and poison, and (with `--watch`) their error
//! events as they happen, each tied to region, NUMA node and tier.

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_ras::aer::{self, MaskChange};
use cxltier_ras::inventory::check_memdev_names;
use cxltier_ras::poison::{self, OfflinedPage};
use cxltier_ras::quarantine;
use cxltier_ras::watcher::Watching;
use cxltier_ras::{
    Inventory, InventoryReport, RasError, RasEvent, Tracefs, WatchRecord, WatchSink, Watcher,
};
use cxltier_topo::format_bytes;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// CXL memory RAS: devices, health, poison lists, and error events mapped to tiers.
///
/// Without --watch: every CXL memory device (memdev, serial, firmware, capacity, the region and
/// NUMA node its memory became, its memory tier), the health the kernel exposes (PCIe link, AER
/// counters, security state) and the device's poison list. Reading the poison list enables the
/// cxl_poison trace event in a private tracefs instance and asks each device for its list
/// (trigger_poison_list); both are undone before exiting. Needs root; --no-poison skips it.
///
/// With --watch: streams CXL error and event records from tracefs (AER correctable and
/// uncorrectable errors, poison, general media, DRAM and memory module events), each mapped to
/// memdev, region, node and tier, and for an address, the physical range and the processes mapping
/// it (root only). The events are enabled in a private tracefs instance, removed on exit.
#[derive(clap::Args)]
#[command(long_about)]
pub struct Args {
    /// Stream CXL error and event records as they happen (stop with Ctrl-C, --duration or --count)
    #[arg(long)]
    watch: bool,
    /// Print JSON for scripts (with --watch: one JSON object per line)
    #[arg(long)]
    json: bool,
    /// Only these devices (memN, comma-separated)
    #[arg(long, value_name = "memN,...", value_delimiter = ',')]
    memdev: Vec<String>,
    /// Read sysfs below DIR instead of / (a recorded tree; implies --no-poison)
    #[arg(long, value_name = "DIR", conflicts_with = "watch")]
    sysfs_root: Option<PathBuf>,
    /// Do not read the devices' poison lists
    #[arg(long, conflicts_with = "watch")]
    no_poison: bool,
    /// With --watch: stop after this many seconds
    #[arg(long, value_name = "SECONDS", requires = "watch")]
    duration: Option<f64>,
    /// With --watch: stop after this many records
    #[arg(long, value_name = "N", requires = "watch")]
    count: Option<u64>,
    /// With --watch: read the poison lists every SECONDS and report entries not seen before
    #[arg(long, value_name = "SECONDS", requires = "watch")]
    poison_interval: Option<f64>,
    /// With --watch: clear the Corrected/Uncorrectable Internal Error masks in each device's AER
    /// capability, so that CXL protocol errors reach the kernel (Linux 6.12 leaves them masked on
    /// CXL 2.0 ports); the old masks are written back on exit
    #[arg(long, requires = "watch")]
    unmask_internal_errors: bool,
    /// With --watch: soft-offline poisoned pages of onlined CXL memory and record the affected
    /// ranges in --quarantine-file
    #[arg(long, requires = "watch")]
    quarantine: bool,
    /// Where --quarantine records poisoned ranges, one JSON object per line
    #[arg(
        long,
        value_name = "PATH",
        default_value = quarantine::DEFAULT_PATH,
        requires = "quarantine"
    )]
    quarantine_file: PathBuf,
    /// Show what would be enabled, triggered or written, and change nothing
    #[arg(long)]
    dry_run: bool,
}

pub fn run(args: Args) -> CliResult {
    validate(&args)?;
    if args.watch {
        watch(&args)
    } else {
        // A report that changes nothing: it ends quietly when its reader goes away.
        cxltier_sys::signal::default_sigpipe();
        inventory(&args)
    }
}

fn validate(args: &Args) -> Result<(), CliError> {
    let positive = |name: &str, v: Option<f64>| match v {
        Some(s) if !(s.is_finite() && s > 0.0) => Err(CliError::bad_input(format!(
            "{name} must be a positive number of seconds, not {s}"
        ))
        .with_hint(format!("for example {name} 30"))),
        _ => Ok(()),
    };
    positive("--duration", args.duration)?;
    positive("--poison-interval", args.poison_interval)?;
    if args.count == Some(0) {
        return Err(CliError::bad_input("--count must be at least 1")
            .with_hint("omit it to watch until stopped"));
    }
    check_memdev_names(&args.memdev).map_err(CliError::classified)?;
    if args.quarantine {
        super::check_quarantine_file(&args.quarantine_file)?;
    }
    Ok(())
}

/// The library's error as a CLI error; for a tree named with `--sysfs-root` (`explicit_root`),
/// one without CXL devices or NUMA nodes is the user's mistake, not the machine's.
fn ras_error(err: RasError, explicit_root: bool) -> CliError {
    CliError::classified(if explicit_root {
        err.below_named_root()
    } else {
        err
    })
}

fn inventory(args: &Args) -> CliResult {
    let explicit = args.sysfs_root.is_some();
    let root = args
        .sysfs_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut inv = match Inventory::read(&root) {
        // For a script, a machine without CXL devices has an empty inventory, as `cxl list`
        // prints `[]`: that is an answer, not a failure. (A tree named with --sysfs-root without
        // devices stays a mistake, and people still get the error that says why there are none.)
        Err(e @ RasError::NoDevices { .. }) if args.json && !explicit => {
            print_json("ras", &InventoryReport::without_devices(&e))?;
            return Ok(ExitCode::SUCCESS);
        }
        read => read.map_err(|e| ras_error(e, explicit))?,
    };
    inv.select(&args.memdev)
        .map_err(|e| ras_error(e, explicit))?;
    let read_poison = !args.no_poison && !explicit;
    let mut poison = None;
    if read_poison {
        let tracefs = Tracefs::locate(&root).map_err(|e| ras_error(e, false))?;
        let name = Tracefs::private_instance_name();
        let supported = inv.poison_list_devices();
        if args.dry_run {
            eprintln!(
                "cxltier: dry run: would create tracefs instance {} with cxl/cxl_poison enabled and write 1 to trigger_poison_list of {}; nothing changed",
                tracefs.instance_dir(&name).display(),
                list_or_none(&supported)
            );
        } else {
            eprintln!(
                "cxltier: reading poison lists: enabling cxl_poison in a private tracefs instance ({}) and asking {} for their poison lists; the instance is removed on exit",
                tracefs.instance_dir(&name).display(),
                list_or_none(&supported)
            );
            let mut w = tracefs
                .watch(&name, &["cxl_poison".to_string()])
                .map_err(|e| ras_error(e, false))?;
            poison =
                Some(poison::read_lists(&root, &inv, &mut w).map_err(|e| ras_error(e, false))?);
        }
    }
    let report = InventoryReport::new(inv, poison);
    if args.json {
        print_json("ras", &report)?;
    } else {
        print!("{}", render_inventory(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "no device (none supports Get Poison List)".to_string()
    } else {
        names.join(", ")
    }
}

/// A failed read of a poison list that earlier reads of the same device show is not about
/// privileges: the kernel refused it this time.
fn refused(e: &RasError) -> String {
    match e {
        RasError::Path(cxltier_error::PathError::Permission { action, path }) => format!(
            "{action} was refused this time (permission denied on {})",
            path.display()
        ),
        other => other.to_string(),
    }
}

fn hex(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:#x}"))
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn render_inventory(r: &InventoryReport) -> String {
    let mut t = Table::new([
        "memdev", "serial", "firmware", "ram", "pmem", "pci", "region", "node", "tier", "kind",
        "link", "aer cor", "aer unc", "poison",
    ]);
    for d in &r.devices {
        let h = &d.device.health;
        let link = match (&h.link_speed, h.link_width) {
            (Some(s), Some(w)) => format!("{} x{w}", s.trim_end_matches(" PCIe")),
            _ => "-".to_string(),
        };
        t.row([
            d.device.memdev.clone(),
            hex(d.device.serial),
            dash(d.device.firmware_version.clone()),
            format_bytes(d.device.ram_bytes),
            format_bytes(d.device.pmem_bytes),
            dash(d.device.pci_address.clone()),
            dash(d.device.region.clone()),
            dash(d.device.node),
            dash(d.device.memory_tier),
            dash(d.device.node_kind.clone()),
            link,
            dash(h.aer.as_ref().map(|a| a.correctable_total)),
            dash(h.aer.as_ref().map(|a| a.fatal_total + a.nonfatal_total)),
            match (&d.poison, h.poison_list_supported) {
                (Some(p), _) => p.len().to_string(),
                (None, false) => "unsupported".to_string(),
                (None, true) => "not read".to_string(),
            },
        ]);
    }
    let mut out = t.render();
    let entries: Vec<&RasEvent> = r
        .devices
        .iter()
        .flat_map(|d| d.poison.iter().flatten())
        .collect();
    if !entries.is_empty() {
        out.push_str("\npoison\n");
        let mut p = Table::new(["memdev", "dpa", "bytes", "hpa", "region", "node", "source"]);
        for e in entries {
            p.row([
                dash(e.memdev.clone()),
                hex(e.dpa),
                dash(e.length_bytes),
                hex(e.hpa),
                dash(e.region.clone()),
                dash(e.node),
                dash(e.severity.clone()),
            ]);
        }
        out.push_str(&p.render());
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// Renders a watch: messages on stderr, records on stdout (a table, or one JSON object per line).
struct Render {
    json: bool,
}

impl WatchSink for Render {
    fn masks_changed(&mut self, memdev: &str, c: &MaskChange) {
        eprintln!(
            "cxltier: changed the AER masks of {memdev} ({}): {c}; restored on exit",
            c.config.display()
        );
    }

    fn internal_errors_masked(&mut self, memdev: &str) {
        eprintln!(
            "cxltier: note: {memdev}'s AER capability masks internal errors: its CXL protocol errors (aer_correctable, aer_uncorrectable) will not be reported; --unmask-internal-errors unmasks them while watching"
        );
    }

    fn watching(&mut self, w: &Watching<'_>) -> std::io::Result<()> {
        eprintln!(
            "cxltier: watching CXL events: enabled the cxl event group ({}) in a private tracefs instance {}; it is removed on exit",
            w.events.join(", "),
            w.instance.display()
        );
        if w.poison_interval.is_some() {
            eprintln!("cxltier: reading poison lists periodically: writing 1 to trigger_poison_list of every device that supports it");
        }
        if let Some((soft_offline, file)) = &w.quarantine {
            eprintln!(
                "cxltier: quarantine: poisoned pages of onlined CXL memory are soft-offlined ({}) and their ranges appended to {}",
                soft_offline.display(),
                file.display()
            );
        }
        if !self.json {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{:>12}  {:<17} {:<6} {:<12} {:<8} {:<5} {:<5} {:<13} summary",
                "time", "type", "memdev", "serial", "region", "node", "tier", "severity"
            )?;
        }
        Ok(())
    }

    fn poison_list_failing(&mut self, e: &RasError, interval: Duration) {
        eprintln!(
            "cxltier: warning: {}; it was read before, so the watch goes on and tries again every {} s",
            refused(e),
            interval.as_secs_f64()
        );
    }

    fn poison_list_back(&mut self, memdev: &str) {
        eprintln!("cxltier: the poison list of {memdev} reads again");
    }

    fn record(&mut self, e: &RasEvent, quarantine: Option<&[OfflinedPage]>) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.json {
            let rec = WatchRecord {
                event: e,
                quarantine,
            };
            writeln!(out, "{}", crate::output::json_line("ras", "record", &rec)?)?;
        } else {
            writeln!(
                out,
                "{:>12}  {:<17} {:<6} {:<12} {:<8} {:<5} {:<5} {:<13} {}{}",
                e.timestamp
                    .map_or_else(|| "-".to_string(), |t| format!("{t:.6}")),
                e.event_type.as_str(),
                dash(e.memdev.clone()),
                hex(e.serial),
                dash(e.region.clone()),
                dash(e.node),
                dash(e.memory_tier),
                dash(e.severity.clone()),
                e.summary,
                match (e.dpa, e.hpa) {
                    (Some(d), Some(h)) => format!(" dpa {d:#x} hpa {h:#x}"),
                    (Some(d), None) => format!(" dpa {d:#x}"),
                    _ => String::new(),
                }
            )?;
            if let Some(q) = quarantine {
                let n = q.iter().filter(|p| p.offlined).count();
                writeln!(
                    out,
                    "{:>14}quarantine: {n} of {} pages soft-offlined",
                    "",
                    q.len()
                )?;
            }
        }
        out.flush()
    }

    fn masks_not_restored(&mut self, e: &RasError) {
        eprintln!("cxltier: warning: could not restore the AER masks: {e}");
    }
}

fn watch(args: &Args) -> CliResult {
    let watcher = Watcher::new("/", &args.memdev).map_err(|e| ras_error(e, false))?;
    if args.dry_run {
        eprintln!(
            "cxltier: dry run: would create tracefs instance {} and enable the cxl events {}",
            watcher.instance_dir().display(),
            watcher.events().join(", ")
        );
        if let Some(s) = args.poison_interval {
            eprintln!("cxltier: dry run: would write 1 to trigger_poison_list of every device every {s} s");
        }
        if args.unmask_internal_errors {
            for (memdev, dir) in &watcher.pci_dirs() {
                let c = aer::unmask_internal(dir, false).map_err(|e| ras_error(e, false))?;
                eprintln!(
                    "cxltier: dry run: would set the AER masks of {memdev} ({}): {c}",
                    c.config.display()
                );
            }
        }
        if args.quarantine {
            eprintln!(
                "cxltier: dry run: would soft-offline poisoned pages ({}) and append their ranges to {}",
                watcher.soft_offline_path().display(),
                args.quarantine_file.display()
            );
        }
        eprintln!("cxltier: dry run: nothing changed");
        return Ok(ExitCode::SUCCESS);
    }

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| CliError::runtime(format!("cannot handle signal {sig}: {e}")))?;
    }
    let mut watcher = watcher
        .duration(args.duration.map(Duration::from_secs_f64))
        .count(args.count)
        .poison_interval(args.poison_interval.map(Duration::from_secs_f64))
        .unmask_internal_errors(args.unmask_internal_errors)
        .quarantine_file(args.quarantine.then(|| args.quarantine_file.clone()));
    watcher
        .run(&mut Render { json: args.json }, &stop)
        .map_err(CliError::classified)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod json_tests {
    use super::*;
    use crate::output::{assert_conforms, json_line};

    fn fixtures() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cxltier-ras/tests/fixtures")
    }

    /// The events of a trace recorded in the lab, mapped to the lab's devices.
    fn recorded_events() -> Vec<RasEvent> {
        let inventory = Inventory::read(&fixtures().join("lab-cxl")).unwrap();
        let trace = std::fs::read_to_string(fixtures().join("lab-cxl-trace.txt")).unwrap();
        let events: Vec<RasEvent> = trace
            .lines()
            .filter_map(cxltier_ras::trace::parse_line)
            .map(|l| {
                let mut e = RasEvent::from_trace(&l);
                e.map(&inventory);
                e
            })
            .collect();
        assert!(events.len() >= 4);
        events
    }

    /// Each `ras --watch --json` line, from real trace lines, conforms to
    /// docs/json/ras-watch.schema.json (a watch needs CXL tracefs events to run).
    #[test]
    fn watch_records_conform_to_their_schema() {
        let offlined = [OfflinedPage {
            address: 0x2_d000_2000,
            offlined: false,
            error: Some("EBUSY".into()),
        }];
        for (i, e) in recorded_events().iter().enumerate() {
            let rec = WatchRecord {
                event: e,
                quarantine: (i == 0).then_some(&offlined[..]),
            };
            let line = json_line("ras", "record", &rec).unwrap();
            assert_conforms("ras-watch.schema.json", &line);
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["event"], "record");
            // The device's 64-bit serial number as a decimal string.
            assert!(v["serial"].as_str().unwrap().parse::<u64>().is_ok(), "{v}");
            assert!(
                v["trace_event"].as_str().unwrap().starts_with("cxl_"),
                "{v}"
            );
        }
    }

    /// The inventory with poison lists read (on a CXL machine only) conforms too.
    #[test]
    fn an_inventory_with_poison_lists_conforms_to_its_schema() {
        let inventory = Inventory::read(&fixtures().join("lab-cxl")).unwrap();
        let events = recorded_events();
        let report = InventoryReport::new(inventory, Some(events));
        assert!(report.poison_list_read);
        let doc = serde_json::json!({"schema_version": 1, "command": "ras"});
        let mut doc = doc.as_object().unwrap().clone();
        if let serde_json::Value::Object(body) = serde_json::to_value(&report).unwrap() {
            doc.extend(body);
        }
        assert_conforms(
            "ras.schema.json",
            &serde_json::Value::Object(doc).to_string(),
        );
    }
}
