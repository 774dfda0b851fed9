//! The server follows the quarantine file of `cxltier ras --watch --quarantine`: each range
//! appended to it is handed to the store ([`Store::poisoned_physical`]), which restores the
//! objects on it from NVMe or drops them as lost and retires the memory for good. What happened
//! is said through the server's [`LogSink`] (every lost key by name) and counted in `INFO poison`.
//!
//! The file is polled (identity and size: one `stat`) from the loop's background tick, so a
//! change is seen within about a tick. A missing file means nothing is quarantined; a malformed
//! line is reported and skipped; a file that cannot be read is reported once per distinct error
//! and polled again.

use std::path::PathBuf;

use cxltier_quarantine::QuarantineFile;
use cxltier_store::Store;

use crate::ratelog::LogSink;

/// Lost keys `INFO poison` lists (the log has them all).
const LOST_KEYS_SHOWN: usize = 16;

/// What `INFO poison` shows.
#[derive(Debug, Default, Clone)]
pub struct PoisonInfo {
    /// The file followed (None: not following any).
    pub file: Option<PathBuf>,
    /// Ranges read from the file and handed to the store.
    pub ranges_applied: u64,
    /// Ranges the store could not map to its memory (see `last_error`).
    pub ranges_failed: u64,
    pub malformed_lines: u64,
    pub keys_restored: u64,
    pub keys_lost: u64,
    /// The most recent lost keys, newest last.
    pub lost_keys: Vec<String>,
    pub last_error: Option<String>,
}

/// Follows a quarantine file on behalf of the server.
#[derive(Debug)]
pub struct QuarantineFollower {
    file: QuarantineFile,
    log: LogSink,
}

impl QuarantineFollower {
    pub fn new(path: impl Into<PathBuf>, info: &mut PoisonInfo) -> Self {
        let file = QuarantineFile::new(path);
        info.file = Some(file.path().to_path_buf());
        QuarantineFollower {
            file,
            log: LogSink::discard(),
        }
    }

    /// Says what happened through `log`.
    pub fn with_log(mut self, log: LogSink) -> Self {
        self.log = log;
        self
    }

    /// Reads what the file gained and applies it to the store; says through its log what
    /// happened.
    pub fn tick(&mut self, store: &mut Store, info: &mut PoisonInfo, dbs: &crate::db::Databases) {
        let update = match self.file.poll() {
            Ok(u) => u,
            Err(e) => {
                let msg = format!("cannot follow the quarantine file: {e}");
                if info.last_error.as_deref() != Some(msg.as_str()) {
                    self.log.write(&msg);
                    info.last_error = Some(msg);
                }
                return;
            }
        };
        for m in &update.malformed {
            self.log.write(&format!("quarantine file: {m}"));
        }
        info.malformed_lines += update.malformed.len() as u64;
        if update.added.is_empty() {
            return;
        }
        let ranges: Vec<(u64, u64)> = update.added.iter().map(|r| (r.start, r.end)).collect();
        let described: Vec<String> = update
            .added
            .iter()
            .map(|r| {
                format!(
                    "{:#x}-{:#x} ({}, node {})",
                    r.start,
                    r.end,
                    r.memdev.as_deref().unwrap_or("device unknown"),
                    r.node
                        .map_or_else(|| "unknown".to_string(), |n| n.to_string())
                )
            })
            .collect();
        // Where this process had the ranges when they were quarantined (before the pages were
        // soft-offlined and so moved to other frames), then where the ranges are now.
        let own = std::process::id();
        let virtual_ranges: Vec<(usize, usize)> = update
            .added
            .iter()
            .filter_map(|r| r.virtual_range(own))
            .map(|(s, e)| (s as usize, e as usize))
            .collect();
        let mut out = store.poisoned(&virtual_ranges);
        match store.poisoned_physical(&ranges) {
            Ok(more) => {
                out.restored.extend(more.restored);
                out.lost.extend(more.lost);
                out.retired_bytes += more.retired_bytes;
            }
            Err(e) if virtual_ranges.is_empty() => {
                info.ranges_failed += ranges.len() as u64;
                let msg = format!("poisoned memory {} not applied: {e}", described.join(", "));
                self.log.write(&msg);
                info.last_error = Some(msg);
                return;
            }
            Err(e) => {
                let msg = format!(
                    "poisoned memory {}: applied where this process mapped it when it was quarantined; not looked up by physical address: {e}",
                    described.join(", ")
                );
                self.log.write(&msg);
                info.last_error = Some(msg);
            }
        }
        info.ranges_applied += ranges.len() as u64;
        info.keys_restored += out.restored.len() as u64;
        info.keys_lost += out.lost.len() as u64;
        self.log.write(&format!(
            "poisoned memory {}: {} keys restored from NVMe, {} keys lost, {} bytes of the store's memory retired",
            described.join(", "),
            out.restored.len(),
            out.lost.len(),
            out.retired_bytes
        ));
        for k in &out.lost {
            let k = key_name(dbs, k);
            self.log.write(&format!(
                "lost key (its only current copy was on poisoned memory): {k}"
            ));
            info.lost_keys.push(k);
        }
        let over = info.lost_keys.len().saturating_sub(LOST_KEYS_SHOWN);
        info.lost_keys.drain(..over);
    }
}

/// A store key as clients know it: `db3:name` for a key of a database they can select (its
/// logical number), the bytes as they are for any other.
fn key_name(dbs: &crate::db::Databases, key: &[u8]) -> String {
    match cxltier_store::split_db_key(key) {
        Some((physical, user)) if dbs.logical(physical).is_some() => format!(
            "db{}:{}",
            dbs.logical(physical).unwrap_or_default(),
            String::from_utf8_lossy(user)
        ),
        _ => String::from_utf8_lossy(key).into_owned(),
    }
}

/// The `# Poison` section of INFO.
pub fn info_section(store: &Store, p: &PoisonInfo) -> String {
    use std::fmt::Write;
    let mut t = String::from("# Poison\r\n");
    let _ = write!(
        t,
        "quarantine_file:{}\r\nquarantine_ranges_applied:{}\r\nquarantine_ranges_failed:{}\r\nquarantine_malformed_lines:{}\r\npoison_keys_restored:{}\r\npoison_keys_lost:{}\r\npoison_lost_keys:{}\r\n",
        p.file
            .as_ref()
            .map_or_else(|| "-".to_string(), |f| f.display().to_string()),
        p.ranges_applied,
        p.ranges_failed,
        p.malformed_lines,
        p.keys_restored,
        p.keys_lost,
        p.lost_keys.join(",")
    );
    for r in store.retired_memory() {
        let _ = write!(t, "tier_{}_retired_bytes:{}\r\n", r.tier, r.bytes);
    }
    if let Some(e) = &p.last_error {
        let _ = write!(t, "poison_last_error:{}\r\n", e.replace(['\r', '\n'], " "));
    }
    t.push_str("\r\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxltier_quarantine::{append, QuarantinedRange};
    use cxltier_store::{Durability, Kind, SsdSpec, StoreBuilder};
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    /// The host physical address of a byte of this process, or None without CAP_SYS_ADMIN.
    fn physical(va: u64) -> Option<u64> {
        let page = cxltier_sys::page_size() as u64;
        let f = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut e = [0u8; 8];
        f.read_exact_at(&mut e, va / page * 8).unwrap();
        let pfn = u64::from_le_bytes(e) & ((1 << 55) - 1);
        (pfn != 0).then_some(pfn * page + va % page)
    }

    /// A lost key is named as clients know it: its logical database (after a SWAPDB too) and
    /// its bytes, not the byte the store keeps it under.
    #[test]
    fn lost_keys_are_named_by_database_and_key() {
        let mut dbs = crate::db::Databases::default();
        assert_eq!(key_name(&dbs, &crate::db::store_key(0, b"k")), "db0:k");
        dbs.swap(2, 7);
        assert_eq!(key_name(&dbs, &crate::db::store_key(7, b"k")), "db2:k");
        // A key of no selectable database is shown as it is.
        assert_eq!(key_name(&dbs, b"\xffx"), "\u{fffd}x");
    }

    #[test]
    fn ranges_appended_to_the_file_reach_the_store_and_info() {
        let dir = tempfile::tempdir().unwrap();
        let ssd = dir.path().join("store.log");
        let qfile = dir.path().join("poisoned.jsonl");
        let mut store = StoreBuilder::new()
            .dram(16 << 20)
            .ssd(SsdSpec {
                path: ssd.clone(),
                capacity: Some(64 << 20),
            })
            .durability(Durability::EverySec)
            .build()
            .unwrap();
        store
            .put(b"victim", Kind::String, &[7u8; 300], None)
            .unwrap();
        store.commit().unwrap();
        let mut info = PoisonInfo::default();
        let mut q = QuarantineFollower::new(&qfile, &mut info);
        q.tick(&mut store, &mut info, &crate::db::Databases::default());
        assert_eq!(info.ranges_applied, 0, "missing file: nothing quarantined");
        assert!(info.last_error.is_none());

        // The only object is in the first slot of the DRAM arena's first slab page.
        assert_eq!(store.arenas()[0].tier, "dram");
        let bytes = store.arenas()[0].addr as u64;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&qfile)
            .unwrap();
        f.write_all(b"{\"start\":\"oops\"}\n").unwrap();
        match physical(bytes) {
            Some(hpa) => {
                append(
                    &qfile,
                    &QuarantinedRange {
                        start: hpa,
                        end: hpa + 64,
                        memdev: Some("mem0".into()),
                        serial: None,
                        region: None,
                        node: Some(0),
                        processes: Vec::new(),
                    },
                )
                .unwrap();
                q.tick(&mut store, &mut info, &crate::db::Databases::default());
                assert_eq!(info.malformed_lines, 1);
                assert_eq!(info.ranges_applied, 1);
                assert_eq!(info.keys_restored, 1, "{info:?}");
                assert_eq!(info.keys_lost, 0);
                assert_eq!(
                    store.get(b"victim").unwrap().unwrap().value,
                    &[7u8; 300][..]
                );
                let text = info_section(&store, &info);
                assert!(text.contains("poison_keys_restored:1\r\n"), "{text}");
                assert!(
                    text.contains(&format!(
                        "tier_dram_retired_bytes:{}\r\n",
                        cxltier_sys::page_size()
                    )),
                    "{text}"
                );
                // Unchanged file: nothing applied twice.
                q.tick(&mut store, &mut info, &crate::db::Databases::default());
                assert_eq!(info.ranges_applied, 1);
            }
            None => {
                // Unprivileged: the store cannot see frame numbers; the server says so and
                // counts the range as not applied.
                append(
                    &qfile,
                    &QuarantinedRange {
                        start: 0x1000,
                        end: 0x1040,
                        memdev: None,
                        serial: None,
                        region: None,
                        node: None,
                        processes: Vec::new(),
                    },
                )
                .unwrap();
                q.tick(&mut store, &mut info, &crate::db::Databases::default());
                assert_eq!(info.malformed_lines, 1);
                assert_eq!(info.ranges_failed, 1);
                let e = info.last_error.clone().unwrap();
                assert!(e.contains("CAP_SYS_ADMIN"), "{e}");
                assert!(info_section(&store, &info).contains("poison_last_error:"));
            }
        }
    }

    #[test]
    fn a_range_this_process_mapped_is_found_at_its_virtual_address() {
        // As after a soft-offline: the physical range is nowhere in the store any more, but the
        // record says where this process had it. Durability none: the object is lost.
        let dir = tempfile::tempdir().unwrap();
        let qfile = dir.path().join("virtual.jsonl");
        let mut store = StoreBuilder::new()
            .dram(16 << 20)
            .durability(Durability::None)
            .build()
            .unwrap();
        store.put(b"only", Kind::String, &[3u8; 100], None).unwrap();
        store
            .put(b"other", Kind::String, &[4u8; 100], None)
            .unwrap();
        let va = store.arenas()[0].addr as u64;
        let mut info = PoisonInfo::default();
        // What the server would say, captured: the library writes to its sink, never to stderr.
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = {
            let said = said.clone();
            LogSink::new(move |line| said.lock().unwrap().push(line.to_string()))
        };
        let mut q = QuarantineFollower::new(&qfile, &mut info).with_log(sink);
        append(
            &qfile,
            &QuarantinedRange {
                // A page-aligned physical address no process has: only the virtual address can
                // find the object.
                start: 0x10,
                end: 0x20,
                memdev: None,
                serial: None,
                region: None,
                node: None,
                processes: vec![cxltier_quarantine::Mapper {
                    pid: std::process::id(),
                    comm: "cxltier".into(),
                    vaddr: va,
                    pages: 1,
                }],
            },
        )
        .unwrap();
        q.tick(&mut store, &mut info, &crate::db::Databases::default());
        assert_eq!(info.keys_lost, 1, "{info:?}");
        assert_eq!(info.lost_keys, vec!["only".to_string()]);
        assert_eq!(info.ranges_applied, 1);
        assert!(store.get(b"only").unwrap().is_none());
        assert_eq!(store.get(b"other").unwrap().unwrap().value, &[4u8; 100][..]);
        let text = info_section(&store, &info);
        assert!(text.contains("poison_lost_keys:only\r\n"), "{text}");
        let said = said.lock().unwrap();
        assert!(
            said.iter()
                .any(|l| l == "lost key (its only current copy was on poisoned memory): only"),
            "{said:?}"
        );
        assert!(
            said.iter()
                .any(|l| l.starts_with("poisoned memory 0x10-0x20 (device unknown, node unknown): 0 keys restored from NVMe, 1 keys lost")),
            "{said:?}"
        );
    }
}
