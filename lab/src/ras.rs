//! The RAS proof: boots topology `cxl` with a QMP socket, runs `lab/checks/ras.sh` in the guest,
//! and when the guest's `cxltier ras --watch --json` is running (the guest prints
//! `RAS-INJECT-READY`), injects from the host every error type QEMU 10 offers for a CXL type-3
//! device. The host checks then compare the streamed records with what was injected: each
//! injection must come back with the right type and the right device (by serial number, which
//! the lab gives each device, since guest device names are not stable across boots).

use crate::{repo_root, Report};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Serial numbers `lab/run` gives the two devices (`sn=` on `-device cxl-type3`).
pub const SERIALS: [(&str, u64); 2] = [("cxl-vmem0", 0xc0de_0000), ("cxl-vmem1", 0xc0de_0001)];

/// Device physical address of the injected poison, media and DRAM events: 128 MiB into the
/// 256 MiB device, inside the region on whichever device backs it.
pub const DPA: u64 = 0x800_0000;

/// One error injected over QMP.
#[derive(Debug, Clone)]
pub struct Injection {
    /// What the vendors' tables call it.
    pub label: &'static str,
    /// The QMP command.
    pub command: &'static str,
    /// The record type `cxltier ras --watch --json` must report (`type`).
    pub expect_type: &'static str,
    /// The QEMU device (`id=`).
    pub device: &'static str,
    /// The device's serial.
    pub serial: u64,
    pub arguments: Value,
    /// Poison under a page of a guest process: device and address come from the guest at run time.
    pub victim: bool,
    /// QEMU's answer: `Ok(())` or its error.
    pub accepted: Result<(), String>,
    /// How long after the injection the guest reported its record, or why it did not (then the
    /// next error was injected without it).
    pub seen: Result<Duration, String>,
}

fn path(device: &str) -> String {
    format!("/machine/peripheral/{device}")
}

/// The injections, one per error type QEMU offers for a type-3 device (see `query-qmp-schema`:
/// cxl-inject-correctable-error, -uncorrectable-errors, -poison, -general-media-event,
/// -dram-event, -memory-module-event), spread over both devices. Poison comes first and the
/// uncorrectable error last: QEMU reports it as fatal and the kernel recovers by resetting the
/// link; in a run that injected it first, that device's poison list entries afterwards came back
/// with no host address and no region.
pub fn injections() -> Vec<Injection> {
    let (d0, s0) = SERIALS[0];
    let (d1, s1) = SERIALS[1];
    let inj = |label, command, expect_type, device: &'static str, serial, arguments| Injection {
        label,
        command,
        expect_type,
        device,
        serial,
        arguments,
        victim: false,
        accepted: Err("not injected".to_string()),
        seen: Err("not injected".to_string()),
    };
    vec![
        Injection {
            victim: true,
            ..inj(
                "poison (64 B) under a page of a process",
                "cxl-inject-poison",
                "poison",
                d0,
                s0,
                json!({"path": path(d0), "start": 0, "length": 64}),
            )
        },
        inj(
            "poison (64 B)",
            "cxl-inject-poison",
            "poison",
            d0,
            s0,
            json!({"path": path(d0), "start": DPA, "length": 64}),
        ),
        inj(
            "poison (128 B)",
            "cxl-inject-poison",
            "poison",
            d1,
            s1,
            json!({"path": path(d1), "start": DPA, "length": 128}),
        ),
        inj(
            "CXL.cachemem correctable (memory data ECC)",
            "cxl-inject-correctable-error",
            "aer_correctable",
            d0,
            s0,
            json!({"path": path(d0), "type": "mem-data-ecc"}),
        ),
        inj(
            "general media event (uncorrectable, threshold)",
            "cxl-inject-general-media-event",
            "general_media",
            d0,
            s0,
            json!({"path": path(d0), "log": "informational", "flags": 1, "dpa": DPA + 0x1000,
                   "descriptor": 3, "type": 0, "transaction-type": 1, "channel": 1, "rank": 0,
                   "device": 5, "component-id": "cxltier-lab"}),
        ),
        inj(
            "DRAM event (data path error)",
            "cxl-inject-dram-event",
            "dram",
            d1,
            s1,
            json!({"path": path(d1), "log": "failure", "flags": 1, "dpa": DPA + 0x2000,
                   "descriptor": 3, "type": 3, "transaction-type": 1, "channel": 1, "rank": 0,
                   "nibble-mask": 3, "bank-group": 1, "bank": 2, "row": 3, "column": 4,
                   "correction-mask": [1, 2, 3, 4]}),
        ),
        inj(
            "memory module event (temperature change)",
            "cxl-inject-memory-module-event",
            "memory_module",
            d0,
            s0,
            json!({"path": path(d0), "log": "warning", "flags": 1, "type": 3,
                   "health-status": 3, "media-status": 0, "additional-status": 33,
                   "life-used": 30, "temperature": 42, "dirty-shutdown-count": 1,
                   "corrected-volatile-error-count": 2000, "corrected-persistent-error-count": 0}),
        ),
        inj(
            "CXL.cachemem uncorrectable (memory data ECC)",
            "cxl-inject-uncorrectable-errors",
            "aer_uncorrectable",
            d1,
            s1,
            json!({"path": path(d1), "errors": [{"type": "mem-data-ecc", "header": [0, 1, 2, 3]}]}),
        ),
    ]
}

/// A minimal QMP client: JSON lines over a unix socket.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects (retrying while QEMU creates the socket) and leaves capabilities negotiation.
    pub fn connect(socket: &Path, patience: Duration) -> Result<Qmp, String> {
        let start = Instant::now();
        let stream = loop {
            match UnixStream::connect(socket) {
                Ok(s) => break s,
                Err(e) if start.elapsed() < patience => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(format!("cannot connect to {}: {e}", socket.display())),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = qmp.read()?;
        if greeting.get("QMP").is_none() {
            return Err(format!("no QMP greeting: {greeting}"));
        }
        qmp.execute("qmp_capabilities", json!({}))?;
        Ok(qmp)
    }

    fn read(&mut self) -> Result<Value, String> {
        loop {
            let mut line = String::new();
            let n = self
                .reader
                .read_line(&mut line)
                .map_err(|e| format!("reading from QMP: {e}"))?;
            if n == 0 {
                return Err("QMP closed the connection".to_string());
            }
            let v: Value = serde_json::from_str(&line)
                .map_err(|e| format!("QMP sent something that is not JSON ({e}): {line}"))?;
            // Asynchronous events come between commands and answers.
            if v.get("event").is_none() {
                return Ok(v);
            }
        }
    }

    /// Runs a command; `Err` carries QEMU's error description.
    pub fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, String> {
        let msg = json!({"execute": command, "arguments": arguments});
        writeln!(self.writer, "{msg}").map_err(|e| format!("writing to QMP: {e}"))?;
        let answer = self.read()?;
        match (answer.get("return"), answer.get("error")) {
            (Some(r), _) => Ok(r.clone()),
            (None, Some(e)) => Err(e["desc"].as_str().unwrap_or("error").to_string()),
            _ => Err(format!("unexpected QMP answer: {answer}")),
        }
    }
}

/// How long the host waits for the guest to report an injection's record before it gives up on
/// that record and injects the next error. A hang guard, not a timing assertion: the record's
/// absence is what the checks report.
pub const RECORD_PATIENCE: Duration = Duration::from_secs(180);

/// The console lines of a running guest, read on a thread of their own so that the host can wait
/// for a line with a deadline while it injects.
struct Console {
    lines: Receiver<String>,
    /// Everything read so far.
    output: String,
    /// The guest's output ended (lab/run exited or its stdout failed).
    closed: bool,
}

impl Console {
    fn new(stdout: impl Read + Send + 'static) -> Console {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                // read_until retries on EINTR and joins partial reads into whole lines.
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) => break,
                    Ok(_) => {
                        if tx.send(String::from_utf8_lossy(&buf).into_owned()).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(format!("lab: reading the guest console failed: {e}\n"));
                        break;
                    }
                }
            }
        });
        Console {
            lines: rx,
            output: String::new(),
            closed: false,
        }
    }

    /// The next line, or `None` when none came within `patience` or the output ended.
    fn next(&mut self, patience: Duration) -> Option<String> {
        if self.closed {
            return None;
        }
        match self.lines.recv_timeout(patience) {
            Ok(line) => {
                self.output.push_str(&line);
                Some(line)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.closed = true;
                None
            }
        }
    }

    /// Waits until the guest passes on a record that `inj` produced (`RAS-RECORD <json>`, see
    /// lab/checks/ras.sh); returns how long that took, or why it did not come.
    fn await_record(&mut self, inj: &Injection, patience: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let left = patience.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "no record within {} s of the injection; the next error was injected anyway",
                    patience.as_secs()
                ));
            }
            match self.next(left) {
                Some(line) => {
                    let Some(json) = line.trim_end().strip_prefix("RAS-RECORD ") else {
                        continue;
                    };
                    if serde_json::from_str::<Value>(json).is_ok_and(|r| record_matches(inj, &r)) {
                        return Ok(start.elapsed());
                    }
                }
                None if self.closed => {
                    return Err("the guest's output ended before the record came".to_string())
                }
                None => {}
            }
        }
    }
}

/// Whether a streamed record is the one `inj` produced: same type and device (serial), and for
/// poison, media and DRAM records the injected device address.
pub fn record_matches(inj: &Injection, rec: &Value) -> bool {
    let dpa = inj
        .arguments
        .get("start")
        .or_else(|| inj.arguments.get("dpa"))
        .and_then(Value::as_u64);
    rec["type"] == inj.expect_type
        // Serial numbers are decimal strings in the JSON (docs/json.md: 64-bit identifiers).
        && serial_of(rec) == Some(inj.serial)
        && dpa.is_none_or(|d| rec["dpa"].as_u64() == Some(d))
}

/// Boots `cxl` with a QMP socket, runs `ras.sh`, injects when the guest is ready. Returns the
/// guest's report and the injections with QEMU's answers.
///
/// One error is in flight at a time: after each injection the host waits until the guest's watch
/// has reported its record (the guest passes each record on to the console) before it injects the
/// next. Injected back to back, the records raced the device: the fatal error's recovery resets the
/// link, and a device reset drops the event records the kernel had not fetched yet (QEMU clears the
/// event status with the device's registers), so the event injected just before it on the same
/// device was lost; and the device's memdev is re-probed by the recovery, which the periodic
/// poison-list read then met half-way. See lab/README.md, "Why the RAS boot was flaky".
pub fn boot_and_inject(timeout: Duration) -> (Report, Vec<Injection>) {
    let root = repo_root();
    let socket = root.join(format!("lab/cache/run/ras-{}.qmp", std::process::id()));
    let mut injections = injections();
    let started = Instant::now();
    let child = Command::new(root.join("lab/run"))
        .args(["cxl", "--", "sh", "/lab/ras.sh"])
        .env("LAB_FILES", root.join("lab/checks"))
        .env("LAB_TIMEOUT", timeout.as_secs().to_string())
        .env("LAB_QMP", &socket)
        .current_dir(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let report = Report {
                topology: "cxl (ras)".to_string(),
                stderr: format!("could not start lab/run: {e}"),
                ..Report::default()
            };
            return (report, injections);
        }
    };
    let mut stderr_pipe = child.stderr.take().expect("piped");
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let mut console = Console::new(child.stdout.take().expect("piped"));
    let mut inject_note = None;
    let mut victim_pid: Option<String> = None;
    // lab/run kills the guest after `timeout`; the console then ends.
    let patience = timeout + Duration::from_secs(60);
    while let Some(line) = console.next(patience) {
        let Some(args) = line.trim_end().strip_prefix("RAS-INJECT-READY") else {
            continue;
        };
        // "SERIAL DPA PID": the serial of the device backing region0, and the device address
        // and pid of the guest process's page on it ("-" when the guest found none).
        let mut it = args.split_whitespace();
        let region_serial = it.next().and_then(hex);
        let victim = match (region_serial, it.next().and_then(hex), it.next()) {
            (Some(serial), Some(dpa), Some(pid)) if pid != "-" => {
                Some((serial, dpa, pid.to_string()))
            }
            _ => None,
        };
        // The fatal error goes to the device that backs no memory in use: on the device
        // backing the region, CXL.mem goes down under the kernel's feet (in the lab the guest
        // then stopped).
        if let Some(rs) = region_serial {
            if let Some(&(device, serial)) = SERIALS.iter().find(|(_, s)| *s != rs) {
                for inj in injections
                    .iter_mut()
                    .filter(|i| i.command == "cxl-inject-uncorrectable-errors")
                {
                    inj.device = device;
                    inj.serial = serial;
                    inj.arguments["path"] = json!(path(device));
                }
            }
        }
        for inj in injections.iter_mut().filter(|i| i.victim) {
            match &victim {
                Some((serial, dpa, pid)) => {
                    let (device, _) = *SERIALS
                        .iter()
                        .find(|(_, s)| s == serial)
                        .unwrap_or(&SERIALS[0]);
                    inj.device = device;
                    inj.serial = *serial;
                    inj.arguments = json!({"path": path(device), "start": dpa, "length": 64});
                    victim_pid = Some(pid.clone());
                }
                None => {
                    inj.accepted =
                        Err("the guest found no page of its process on CXL memory".to_string())
                }
            }
        }
        match Qmp::connect(&socket, Duration::from_secs(5)) {
            Ok(mut qmp) => {
                for inj in injections
                    .iter_mut()
                    .filter(|i| !i.victim || victim.is_some())
                {
                    inj.accepted = qmp.execute(inj.command, inj.arguments.clone()).map(|_| ());
                    if inj.accepted.is_ok() {
                        inj.seen = console.await_record(inj, RECORD_PATIENCE);
                    }
                }
            }
            Err(e) => inject_note = Some(e),
        }
    }
    let status = child.wait().ok().and_then(|s| s.code());
    let mut report = Report::parse("cxl (ras)", &console.output);
    report.status = status;
    report.stderr = stderr_reader.join().unwrap_or_default();
    if let Some(note) = inject_note {
        report.stderr.push_str(&format!("\nQMP: {note}\n"));
    }
    report.elapsed = started.elapsed();
    if let Some(pid) = victim_pid {
        report.data.insert("victim-pid".to_string(), pid);
    }
    let _ = std::fs::remove_file(&socket);
    (report, injections)
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// The streamed records (JSON lines).
fn records(report: &Report) -> Result<Vec<Value>, String> {
    report
        .data("ras-watch")?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| format!("a watch line is not JSON ({e}): {l}"))
        })
        .collect()
}

/// The check name for an injection.
pub fn check_name(inj: &Injection) -> String {
    if inj.victim {
        return "ras-reports-poison-under-process".to_string();
    }
    if inj.command == "cxl-inject-uncorrectable-errors" {
        // Its device is chosen at run time (the one backing no region).
        return "ras-reports-aer-uncorrectable".to_string();
    }
    format!(
        "ras-reports-{}-{}",
        inj.expect_type.replace('_', "-"),
        inj.device.trim_start_matches("cxl-")
    )
}

/// Every check name [`host_checks`] reports.
pub fn host_check_names() -> Vec<String> {
    let mut names: Vec<String> = injections()
        .iter()
        .flat_map(|i| {
            [
                format!(
                    "qmp-accepts-{}",
                    check_name(i).trim_start_matches("ras-reports-")
                ),
                check_name(i),
            ]
        })
        .collect();
    names.extend(
        [
            "ras-inventory-serials",
            "ras-inventory-region-node-tier",
            "ras-poison-mapped-to-region",
            "ras-quarantine-offlined",
            "ras-quarantine-file",
            "ras-poison-maps-to-process",
        ]
        .map(String::from),
    );
    names
}

/// Judges the guest's data against the injections; one result per name of [`host_check_names`].
/// Returns the result table (injected type, device, reported or not, and what was missing).
pub fn host_checks(report: &mut Report, injections: &[Injection]) -> Vec<(String, String, String)> {
    let recs = records(report);
    let mut table = Vec::new();
    for inj in injections {
        let short = check_name(inj);
        let qmp_name = format!("qmp-accepts-{}", short.trim_start_matches("ras-reports-"));
        report.check(
            &qmp_name,
            inj.accepted.is_ok(),
            match &inj.accepted {
                Ok(()) => format!("{} accepted", inj.command),
                Err(e) => format!("{} refused: {e}", inj.command),
            },
        );
        let (pass, detail) = match &recs {
            Err(e) => (false, e.clone()),
            Ok(recs) => {
                let same_type: Vec<&Value> = recs
                    .iter()
                    .filter(|r| r["type"] == inj.expect_type)
                    .collect();
                // Poison, media and DRAM records must also name the injected address.
                match same_type.iter().find(|r| record_matches(inj, r)) {
                    Some(r) => (
                        true,
                        format!(
                            "{} from {} (serial {:#x}): {} {}, region {}, node {}; {}",
                            inj.expect_type,
                            r["memdev"].as_str().unwrap_or("?"),
                            inj.serial,
                            r["severity"].as_str().unwrap_or("-"),
                            r["summary"].as_str().unwrap_or(""),
                            r["region"].as_str().unwrap_or("-"),
                            r["node"],
                            match &inj.seen {
                                Ok(d) => format!(
                                    "passed on {:.1} s after the injection (emulator time)",
                                    d.as_secs_f64()
                                ),
                                Err(e) => format!("the host did not see it in time: {e}"),
                            }
                        ),
                    ),
                    None if same_type.is_empty() => (
                        false,
                        format!(
                            "no {} record at all ({} records streamed; {})",
                            inj.expect_type,
                            recs.len(),
                            inj.seen.as_ref().err().map_or("", String::as_str)
                        ),
                    ),
                    None => (
                        false,
                        format!(
                            "{} records only from other devices or addresses: {:?}",
                            inj.expect_type,
                            same_type
                                .iter()
                                .map(|r| (r["serial"].clone(), r["dpa"].clone()))
                                .collect::<Vec<_>>()
                        ),
                    ),
                }
            }
        };
        table.push((
            inj.label.to_string(),
            format!("{} ({})", inj.device, inj.command),
            if pass {
                "reported".to_string()
            } else {
                format!("NOT reported: {detail}")
            },
        ));
        report.check(&short, pass, detail);
    }

    // The inventory names both devices by serial, and the region device's node and tier.
    let inv = crate::host_json(report, "ras-inventory");
    let devices = inv
        .as_ref()
        .ok()
        .and_then(|v| v["devices"].as_array().cloned())
        .unwrap_or_default();
    let mut serials: Vec<u64> = devices.iter().filter_map(serial_of).collect();
    serials.sort_unstable();
    report.check(
        "ras-inventory-serials",
        serials == [SERIALS[0].1, SERIALS[1].1],
        format!(
            "serials {serials:x?}{}",
            inv.as_ref()
                .err()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
    );
    let in_region: Vec<&Value> = devices
        .iter()
        .filter(|d| d["region"] == "region0")
        .collect();
    let ok = in_region.len() == 1
        && in_region[0]["node"] == 1
        && in_region[0]["node_kind"] == "cxl"
        && in_region[0]["memory_tier"].as_u64().is_some_and(|t| t > 4)
        && in_region[0]["poison"].is_array();
    report.check(
        "ras-inventory-region-node-tier",
        ok,
        in_region
            .first()
            .map(|d| {
                format!(
                    "{} region0 node {} kind {} tier {} poison {}",
                    d["memdev"], d["node"], d["node_kind"], d["memory_tier"], d["poison"]
                )
            })
            .unwrap_or_else(|| "no device backs region0".to_string()),
    );

    // The poison in the region: host physical range, node, quarantine.
    let region_serial = in_region.first().and_then(|d| serial_of(d));
    let poison_in_region = recs.as_ref().ok().and_then(|recs| {
        recs.iter()
            .find(|r| {
                r["type"] == "poison"
                    && serial_of(r) == region_serial
                    && region_serial.is_some()
                    && r["dpa"].as_u64() == Some(DPA)
            })
            .cloned()
    });
    let region_start = in_region
        .first()
        .and_then(|d| d["region_range"]["start"].as_u64());
    match &poison_in_region {
        Some(p) => {
            let start = p["physical_range"]["start"].as_u64();
            let want = region_start.map(|s| s + DPA);
            report.check(
                "ras-poison-mapped-to-region",
                start.is_some()
                    && start == want
                    && p["node"] == 1
                    && p["region"] == "region0"
                    && p["tier"] == "cxl",
                format!(
                    "hpa range {} (want start {:?}), region {}, node {}, tier {}, processes {}",
                    p["physical_range"],
                    want.map(|w| format!("{w:#x}")),
                    p["region"],
                    p["node"],
                    p["tier"],
                    p.get("processes").cloned().unwrap_or(Value::Null)
                ),
            );
            let pages = p["quarantine"].as_array().cloned().unwrap_or_default();
            report.check(
                "ras-quarantine-offlined",
                !pages.is_empty() && pages.iter().all(|pg| pg["offlined"] == true),
                format!("quarantine {}", p["quarantine"]),
            );
        }
        None => {
            let why = format!(
                "no poison record from the device backing region0 (serial {region_serial:?})"
            );
            report.check("ras-poison-mapped-to-region", false, why.clone());
            report.check("ras-quarantine-offlined", false, why);
        }
    }
    let qfile = report.data("ras-quarantine").map(str::to_string);
    let ok = match (&qfile, region_start) {
        (Ok(text), Some(rs)) => text.lines().filter(|l| !l.trim().is_empty()).any(|l| {
            serde_json::from_str::<Value>(l)
                .is_ok_and(|v| v["start"].as_u64() == Some(rs + DPA) && v["node"] == 1)
        }),
        _ => false,
    };
    report.check(
        "ras-quarantine-file",
        ok,
        qfile.unwrap_or_else(|e| e).trim().to_string(),
    );

    // The poison under the guest process's page names that process.
    let pid = report
        .data("victim-pid")
        .ok()
        .and_then(|p| p.trim().parse::<u64>().ok());
    let victim = injections.iter().find(|i| i.victim);
    let dpa = victim.and_then(|v| v.arguments["start"].as_u64());
    let rec = recs.as_ref().ok().and_then(|recs| {
        recs.iter()
            .find(|r| {
                r["type"] == "poison"
                    && r["dpa"].as_u64() == dpa
                    && victim.is_some_and(|v| serial_of(r) == Some(v.serial))
            })
            .cloned()
    });
    let (pass, detail) = match (&rec, pid) {
        (Some(r), Some(pid)) => {
            let procs = r["processes"].as_array().cloned().unwrap_or_default();
            (
                procs.iter().any(|p| p["pid"].as_u64() == Some(pid)),
                format!(
                    "pid {pid}: processes {} for hpa range {}",
                    r["processes"], r["physical_range"]
                ),
            )
        }
        (None, _) => (false, format!("no poison record at dpa {dpa:?}")),
        (_, None) => (false, "the guest named no process".to_string()),
    };
    report.check("ras-poison-maps-to-process", pass, detail);
    table
}

/// A record's or device's serial: a decimal string in cxltier's JSON (64-bit identifiers are
/// strings there, docs/json.md).
fn serial_of(v: &Value) -> Option<u64> {
    v["serial"].as_str().and_then(|s| s.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injection(command: &str) -> Injection {
        injections()
            .into_iter()
            .find(|i| i.command == command && !i.victim)
            .expect("listed")
    }

    #[test]
    fn a_record_matches_by_type_device_and_address() {
        let dram = injection("cxl-inject-dram-event");
        let rec = json!({"type": "dram", "serial": dram.serial.to_string(), "dpa": DPA + 0x2000});
        assert!(record_matches(&dram, &rec));
        let other_device =
            json!({"type": "dram", "serial": (dram.serial + 1).to_string(), "dpa": DPA + 0x2000});
        assert!(!record_matches(&dram, &other_device));
        let other_address = json!({"type": "dram", "serial": dram.serial.to_string(), "dpa": DPA});
        assert!(!record_matches(&dram, &other_address));
        let other_type = json!({"type": "general_media", "serial": dram.serial.to_string(), "dpa": DPA + 0x2000});
        assert!(!record_matches(&dram, &other_type));
        // The AER records carry no address: type and device are enough.
        let aer = injection("cxl-inject-correctable-error");
        assert!(record_matches(
            &aer,
            &json!({"type": "aer_correctable", "serial": aer.serial.to_string()})
        ));
    }

    /// The host waits for the injected error's own record, reading past other lines and other
    /// records, and says why when the guest's output ends without it (a real pipe from a child).
    #[test]
    fn await_record_waits_for_the_injections_own_record() {
        let dram = injection("cxl-inject-dram-event");
        let mine = json!({"type": "dram", "serial": dram.serial.to_string(), "dpa": DPA + 0x2000});
        let other = json!({"type": "poison", "serial": dram.serial.to_string(), "dpa": DPA});
        let script = format!(
            "printf '%s\\n' 'CHECK x PASS @1s' 'RAS-RECORD {other}' 'RAS-RECORD not json' 'RAS-RECORD {mine}' 'after'"
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut console = Console::new(child.stdout.take().unwrap());
        // A generous hang guard; the lines are already there.
        assert!(console.await_record(&dram, Duration::from_secs(60)).is_ok());
        assert_eq!(
            console.next(Duration::from_secs(60)).as_deref(),
            Some("after\n")
        );
        let err = console
            .await_record(&dram, Duration::from_secs(60))
            .unwrap_err();
        assert!(err.contains("output ended"), "{err}");
        assert!(console.output.contains("CHECK x PASS"));
        child.wait().unwrap();
    }
}
