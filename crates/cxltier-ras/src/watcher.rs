//! The watch loop behind `cxltier ras --watch`: CXL events from a private tracefs instance, each
//! mapped to device, region, node and tier and to the processes mapping its range; poison lists
//! read periodically (each entry reported once); poisoned pages soft-offlined and their ranges
//! appended to the quarantine file; AER internal-error masks cleared while it runs and put back
//! after. What happens is told to a [`WatchSink`], one method per event.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::aer::{self, MaskChange};
use crate::poison::{self, OfflinedPage};
use crate::quarantine::{self, QuarantinedRange};
use crate::{procmap, EventType, Inventory, RasError, RasEvent, Tracefs, Watch};

/// Why a watch failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Reading or changing the devices or tracefs failed.
    #[error(transparent)]
    Ras(#[from] RasError),
    /// The quarantine file could not be appended to.
    #[error("{0}")]
    Quarantine(crate::quarantine::QuarantineError),
    /// The sink could not write its report (its output is gone).
    #[error("{0}")]
    Output(io::Error),
}

impl cxltier_error::Classify for WatchError {
    /// A quarantine file that cannot be appended to is a runtime failure whatever the reason:
    /// the watcher has run, and the fix is another path.
    fn class(&self) -> cxltier_error::Class {
        match self {
            WatchError::Ras(e) => e.class(),
            WatchError::Quarantine(_) | WatchError::Output(_) => cxltier_error::Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            WatchError::Ras(e) => e.hint(),
            WatchError::Quarantine(_) => {
                Some("pass --quarantine-file PATH in a writable directory".into())
            }
            WatchError::Output(_) => None,
        }
    }
}

/// One streamed record as `cxltier ras --watch --json` prints it: the event's fields, and the
/// pages soft-offlined for it.
#[derive(Debug, serde::Serialize)]
pub struct WatchRecord<'a> {
    #[serde(flatten)]
    pub event: &'a RasEvent,
    /// Pages soft-offlined for this record (with --quarantine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<&'a [OfflinedPage]>,
}

/// What the watch is about to do, once the trace instance exists.
#[derive(Debug)]
pub struct Watching<'a> {
    /// The private tracefs instance.
    pub instance: &'a Path,
    /// The `cxl` events enabled in it.
    pub events: &'a [String],
    /// Poison lists are read every this often.
    pub poison_interval: Option<Duration>,
    /// With quarantine: the soft-offline attribute written and the quarantine file appended to.
    pub quarantine: Option<(PathBuf, &'a Path)>,
}

/// What a watch tells as it runs, one method per event.
pub trait WatchSink {
    /// The AER masks of `memdev` were changed; they are written back when the watch ends.
    fn masks_changed(&mut self, _memdev: &str, _change: &MaskChange) {}
    /// `memdev`'s AER capability masks internal errors (and they were not unmasked).
    fn internal_errors_masked(&mut self, _memdev: &str) {}
    /// The trace instance is set up; records follow.
    fn watching(&mut self, _w: &Watching<'_>) -> io::Result<()> {
        Ok(())
    }
    /// A device's poison list, read before, failed to read (said once until it reads again).
    fn poison_list_failing(&mut self, _err: &RasError, _interval: Duration) {}
    /// A device's poison list reads again.
    fn poison_list_back(&mut self, _memdev: &str) {}
    /// One record, with the pages soft-offlined for it (with quarantine, for poison in memory in
    /// use).
    fn record(&mut self, event: &RasEvent, quarantine: Option<&[OfflinedPage]>) -> io::Result<()>;
    /// The AER masks could not be written back.
    fn masks_not_restored(&mut self, _err: &RasError) {}
}

/// Watches CXL events, configured builder-style and then [`run`](Watcher::run).
#[derive(Debug)]
pub struct Watcher {
    root: PathBuf,
    memdevs: Vec<String>,
    tracefs: Tracefs,
    inventory: Inventory,
    events: Vec<String>,
    instance: String,
    duration: Option<Duration>,
    count: Option<u64>,
    poison_interval: Option<Duration>,
    unmask_internal_errors: bool,
    quarantine_file: Option<PathBuf>,
}

impl Watcher {
    /// A watcher of the devices `memdevs` (all when empty) of the machine below `root`: finds
    /// tracefs and its `cxl` events and reads the inventory; changes nothing yet.
    pub fn new(root: impl Into<PathBuf>, memdevs: &[String]) -> Result<Watcher, RasError> {
        let root = root.into();
        let tracefs = Tracefs::locate(&root)?;
        let mut inventory = Inventory::read(&root)?;
        inventory.select(memdevs)?;
        let events = tracefs.cxl_events()?;
        Ok(Watcher {
            root,
            memdevs: memdevs.to_vec(),
            tracefs,
            inventory,
            events,
            instance: Tracefs::private_instance_name(),
            duration: None,
            count: None,
            poison_interval: None,
            unmask_internal_errors: false,
            quarantine_file: None,
        })
    }

    /// Stop this long after the start.
    pub fn duration(mut self, d: Option<Duration>) -> Watcher {
        self.duration = d;
        self
    }

    /// Stop after this many records.
    pub fn count(mut self, n: Option<u64>) -> Watcher {
        self.count = n;
        self
    }

    /// Read every device's poison list this often (entries are reported once).
    pub fn poison_interval(mut self, every: Option<Duration>) -> Watcher {
        self.poison_interval = every;
        self
    }

    /// Clear the devices' AER internal-error masks while watching.
    pub fn unmask_internal_errors(mut self, yes: bool) -> Watcher {
        self.unmask_internal_errors = yes;
        self
    }

    /// Soft-offline poisoned pages in memory in use and append their ranges to this file.
    pub fn quarantine_file(mut self, path: Option<PathBuf>) -> Watcher {
        self.quarantine_file = path;
        self
    }

    /// The tracefs found.
    pub fn tracefs(&self) -> &Tracefs {
        &self.tracefs
    }

    /// The private instance the watch creates.
    pub fn instance_dir(&self) -> PathBuf {
        self.tracefs.instance_dir(&self.instance)
    }

    /// The `cxl` trace events the kernel has.
    pub fn events(&self) -> &[String] {
        &self.events
    }

    /// The attribute soft-offlining writes.
    pub fn soft_offline_path(&self) -> PathBuf {
        self.root.join(poison::SOFT_OFFLINE)
    }

    /// Each watched device with a PCI function: its memdev and PCI device directory.
    pub fn pci_dirs(&self) -> Vec<(String, PathBuf)> {
        self.inventory
            .devices
            .iter()
            .filter_map(|d| {
                d.pci_address.as_ref().map(|p| {
                    (
                        d.memdev.clone(),
                        self.root.join("sys/bus/pci/devices").join(p),
                    )
                })
            })
            .collect()
    }

    /// Watch until the deadline, the count, or the stop flag. Returns the records reported. The
    /// trace instance is removed and the AER masks are written back before it returns, also on
    /// error.
    pub fn run(&mut self, sink: &mut dyn WatchSink, stop: &AtomicBool) -> Result<u64, WatchError> {
        let mut masks = Vec::new();
        let result = self
            .unmask(&mut masks, sink)
            .and_then(|()| {
                for d in &self.inventory.devices {
                    if !self.unmask_internal_errors
                        && d.health.aer_internal_errors_masked == Some(true)
                    {
                        sink.internal_errors_masked(&d.memdev);
                    }
                }
                Ok(self.tracefs.watch(&self.instance, &[])?)
            })
            .and_then(|mut watch| self.watch(&mut watch, sink, stop));
        for c in &masks {
            if let Err(e) = c.restore() {
                sink.masks_not_restored(&e);
            }
        }
        result
    }

    fn unmask(
        &self,
        masks: &mut Vec<MaskChange>,
        sink: &mut dyn WatchSink,
    ) -> Result<(), WatchError> {
        if self.unmask_internal_errors {
            for (memdev, dir) in self.pci_dirs() {
                let c = aer::unmask_internal(&dir, true)?;
                sink.masks_changed(&memdev, &c);
                masks.push(c);
            }
        }
        Ok(())
    }

    /// The loop, over an open trace instance.
    fn watch(
        &mut self,
        w: &mut Watch,
        sink: &mut dyn WatchSink,
        stop: &AtomicBool,
    ) -> Result<u64, WatchError> {
        sink.watching(&Watching {
            instance: w.dir(),
            events: &self.events,
            poison_interval: self.poison_interval,
            quarantine: self
                .quarantine_file
                .as_deref()
                .map(|f| (self.soft_offline_path(), f)),
        })
        .map_err(WatchError::Output)?;
        let started = Instant::now();
        let mut next_poison = Instant::now();
        // Devices whose poison list has been read at least once, and those whose last read failed.
        // A device's first read failing is an error (privileges, a kernel without the command); a
        // later one is the device going through something (after a fatal error the kernel's
        // recovery re-probes its memdev, and the attribute is briefly missing, or the endpoint not
        // yet back), so the watch says so once and reads again at the next interval.
        let mut poison_read = BTreeSet::new();
        let mut poison_failing = BTreeSet::new();
        let mut seen_poison = BTreeSet::new();
        let mut reported = 0u64;
        let proc_root = self.root.join("proc");
        while !stop.load(Ordering::Relaxed) && self.duration.is_none_or(|d| started.elapsed() < d) {
            if let Some(iv) = self.poison_interval {
                if Instant::now() >= next_poison {
                    for d in self
                        .inventory
                        .devices
                        .iter()
                        .filter(|d| d.health.poison_list_supported)
                    {
                        match poison::trigger(&self.root, &d.memdev) {
                            Ok(()) => {
                                poison_read.insert(d.memdev.clone());
                                if poison_failing.remove(&d.memdev) {
                                    sink.poison_list_back(&d.memdev);
                                }
                            }
                            Err(e) if !poison_read.contains(&d.memdev) => return Err(e.into()),
                            Err(e) => {
                                if poison_failing.insert(d.memdev.clone()) {
                                    sink.poison_list_failing(&e, iv);
                                }
                            }
                        }
                    }
                    next_poison = Instant::now() + iv;
                }
            }
            let lines = w.poll()?;
            if lines.is_empty() {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            for l in lines {
                let mut e = RasEvent::from_trace(&l);
                let memdev = e.memdev.clone().unwrap_or_default();
                if e.memdev.is_some() && self.inventory.device(&memdev).is_none() {
                    // A device that appeared (or was renamed) since the start.
                    if let Ok(fresh) = Inventory::read(&self.root) {
                        self.inventory = fresh;
                        self.inventory.select(&self.memdevs).ok();
                    }
                    if !self.memdevs.is_empty() && self.inventory.device(&memdev).is_none() {
                        continue;
                    }
                }
                e.map(&self.inventory);
                if e.event_type == EventType::Poison && !seen_poison.insert(poison::key(&e)) {
                    // Every read of the poison list repeats every entry.
                    continue;
                }
                if let Some(range) = e.physical_range {
                    match procmap::mappers(&proc_root, range) {
                        Ok(m) => e.processes = Some(m),
                        Err(procmap::Denied::NoFrameNumbers) => {
                            e.processes_note = Some("not permitted: reading frame numbers from /proc/PID/pagemap needs CAP_SYS_ADMIN".to_string())
                        }
                    }
                }
                let offlined = match &self.quarantine_file {
                    Some(file) if e.event_type == EventType::Poison => {
                        quarantine_one(&self.root, &e, file)?
                    }
                    _ => None,
                };
                sink.record(&e, offlined.as_deref())
                    .map_err(WatchError::Output)?;
                reported += 1;
                if self.count.is_some_and(|c| reported >= c) {
                    return Ok(reported);
                }
            }
        }
        Ok(reported)
    }
}

/// Soft-offlines the pages of a poison record in onlined memory and appends its range to the
/// quarantine file. Poison outside any region (no host address) touches no data in use.
fn quarantine_one(
    root: &Path,
    e: &RasEvent,
    file: &Path,
) -> Result<Option<Vec<OfflinedPage>>, WatchError> {
    let (Some(range), Some(_node)) = (e.physical_range, e.node) else {
        return Ok(None);
    };
    let pages = poison::soft_offline(root, range, false)?;
    let rec = QuarantinedRange {
        start: range.start,
        end: range.end,
        memdev: e.memdev.clone(),
        serial: e.serial,
        region: e.region.clone(),
        node: e.node,
        processes: e.processes.clone().unwrap_or_default(),
    };
    quarantine::append(file, &rec).map_err(WatchError::Quarantine)?;
    Ok(Some(pages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A scratch copy of the sysfs recorded in the lab (two memdevs; mem0 backs region0 on node
    /// 1), with tracefs, the soft-offline attribute and a trace instance whose `trace_pipe` holds
    /// the trace lines recorded there followed by `extra`.
    fn scratch(extra: &str) -> (tempfile::TempDir, PathBuf) {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(fixtures.join("lab-cxl/."))
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "copying the recorded sysfs");
        let root = dir.path();
        for e in ["cxl_poison", "cxl_dram", "cxl_general_media"] {
            fs::create_dir_all(root.join("sys/kernel/tracing/events/cxl").join(e)).unwrap();
        }
        fs::create_dir_all(root.join("sys/kernel/tracing/instances")).unwrap();
        fs::create_dir_all(root.join("sys/devices/system/memory")).unwrap();
        fs::write(root.join(poison::SOFT_OFFLINE), "").unwrap();
        let instance = root.join("sys/kernel/tracing/instances/recorded");
        fs::create_dir(&instance).unwrap();
        let mut trace = fs::read_to_string(fixtures.join("lab-cxl-trace.txt")).unwrap();
        trace.push_str(extra);
        fs::write(instance.join("trace_pipe"), trace).unwrap();
        (dir, instance)
    }

    #[derive(Default)]
    struct Recorder {
        watching: usize,
        records: Vec<(EventType, Option<u32>, Option<usize>)>,
    }

    impl WatchSink for Recorder {
        fn watching(&mut self, _: &Watching<'_>) -> io::Result<()> {
            self.watching += 1;
            Ok(())
        }
        fn record(&mut self, e: &RasEvent, q: Option<&[OfflinedPage]>) -> io::Result<()> {
            self.records.push((e.event_type, e.node, q.map(<[_]>::len)));
            Ok(())
        }
    }

    /// `w` run over the trace instance `instance` (with the stop flag set if `stopped`): what
    /// it returned, and what it reported.
    fn watch_over(w: &mut Watcher, instance: PathBuf, stopped: bool) -> (u64, Recorder) {
        let mut sink = Recorder::default();
        let n = w
            .watch(
                &mut Watch::over(instance).unwrap(),
                &mut sink,
                &AtomicBool::new(stopped),
            )
            .unwrap();
        (n, sink)
    }

    fn poison_line(text: &str) -> String {
        text.lines()
            .find(|l| l.contains("cxl_poison:") && l.contains("region=region0"))
            .expect("a recorded poison record in region0")
            .to_string()
    }

    #[test]
    fn recorded_events_are_mapped_and_the_count_stops_the_watch() {
        let (root, instance) = scratch("");
        let mut w = Watcher::new(root.path(), &[]).unwrap().count(Some(4));
        let (n, sink) = watch_over(&mut w, instance.clone(), false);
        assert_eq!((n, sink.watching), (4, 1));
        let types: Vec<EventType> = sink.records.iter().map(|r| r.0).collect();
        assert_eq!(
            types,
            [
                EventType::GeneralMedia,
                EventType::Dram,
                EventType::MemoryModule,
                EventType::Poison
            ]
        );
        assert!(sink.records.iter().all(|r| r.2.is_none()), "no quarantine");
    }

    #[test]
    fn the_deadline_and_the_stop_flag_end_a_quiet_watch() {
        let (root, instance) = scratch("");
        fs::write(instance.join("trace_pipe"), "").unwrap();
        let mut w = Watcher::new(root.path(), &[])
            .unwrap()
            .duration(Some(Duration::from_millis(150)));
        let (n, sink) = watch_over(&mut w, instance, false);
        assert_eq!((n, sink.records.len()), (0, 0));

        let (root, instance) = scratch("");
        let mut w = Watcher::new(root.path(), &[]).unwrap();
        let (n, _) = watch_over(&mut w, instance, true);
        assert_eq!(n, 0, "stopped before the first read");
    }

    #[test]
    fn poison_in_memory_in_use_is_quarantined_once() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let trace = fs::read_to_string(fixtures.join("lab-cxl-trace.txt")).unwrap();
        // The poison list read again repeats its entries: they are reported once.
        let (root, instance) = scratch(&format!("{}\n", poison_line(&trace)));
        let file = root.path().join("quarantine/ranges.jsonl");
        let mut w = Watcher::new(root.path(), &[])
            .unwrap()
            .duration(Some(Duration::from_millis(300)))
            .quarantine_file(Some(file.clone()));
        let (n, sink) = watch_over(&mut w, instance, false);
        assert_eq!(
            n, 10,
            "the ten recorded lines, the repeated poison entry left out"
        );
        let poison: Vec<_> = sink
            .records
            .iter()
            .filter(|r| r.0 == EventType::Poison)
            .collect();
        // With a host address in region0 (node 1): one 64-byte record, one page soft-offlined;
        // without one (not in memory in use): nothing to offline, nothing quarantined.
        assert_eq!(
            poison,
            [
                &(EventType::Poison, Some(1), Some(1)),
                &(EventType::Poison, Some(1), None)
            ]
        );
        let written = fs::read_to_string(root.path().join(poison::SOFT_OFFLINE)).unwrap();
        assert_eq!(written, "0x2d0002000");
        let text = fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("\"region\":\"region0\""), "{text}");
    }
}
