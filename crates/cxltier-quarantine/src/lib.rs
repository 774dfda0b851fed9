//! The quarantine file: poisoned host physical ranges, one JSON object per line, appended by
//! `cxltier ras --watch --quarantine` and read by the store's server and the tiering daemon.
//!
//! A line is `{"start":S,"end":E,"memdev":..,"serial":..,"region":..,"node":..}` with `[S, E)` a
//! host physical range. Writers only append whole lines; readers ([`QuarantineFile`]) poll the
//! file's identity and size, read what was appended since, and keep a partial last line for the
//! next poll. A malformed line is reported with its line number and skipped. The ranges are
//! physical addresses of the running system: the default file lives in `/run` (a tmpfs), so a
//! reboot starts it empty.
//!
//! This is a crate of its own so that its readers (the server, the tiering daemon) need not pull in
//! the rest of RAS (tracefs, poison lists, AER) to follow one file format.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cxltier_error::PathError;
use serde::{Deserialize, Serialize};

const PAGE: u64 = 4096;

/// Where `cxltier ras --watch --quarantine` writes, and where readers look, by default.
pub const DEFAULT_PATH: &str = "/run/cxltier/poisoned-ranges.jsonl";

/// A process that maps part of a range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapper {
    pub pid: u32,
    pub comm: String,
    /// Virtual address of the first mapped page found in the range.
    pub vaddr: u64,
    /// Pages of the range the process maps.
    pub pages: u64,
}

/// Why the quarantine file could not be written or read. The messages are the ones `cxltier ras`
/// gave for the same failures before the format had a crate of its own.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    /// Reading or writing the file failed (for want of privilege or otherwise).
    #[error(transparent)]
    Path(#[from] PathError),
    /// The path given for the file is a directory.
    #[error("--quarantine-file {} is a directory", path.display())]
    IsDirectory { path: PathBuf },
}

impl cxltier_error::Classify for QuarantineError {
    fn class(&self) -> cxltier_error::Class {
        match self {
            QuarantineError::Path(e) => e.class(),
            QuarantineError::IsDirectory { .. } => cxltier_error::Class::BadInput,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            QuarantineError::IsDirectory { .. } => {
                Some(format!("give a file, e.g. the default {DEFAULT_PATH}"))
            }
            _ => None,
        }
    }
}

/// Checks a path given for the quarantine file before anything runs: it must be a file (it may
/// not exist yet), not a directory.
pub fn check_path(path: &Path) -> Result<(), QuarantineError> {
    if path.is_dir() {
        return Err(QuarantineError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// One quarantined range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedRange {
    /// First byte (host physical address).
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    #[serde(default)]
    pub memdev: Option<String>,
    #[serde(default)]
    pub serial: Option<u64>,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub node: Option<u32>,
    /// The processes that mapped the range when it was quarantined, found before the pages were
    /// soft-offlined: after that, the same virtual pages are backed by other frames, and a
    /// process finds its data on the range only through these addresses.
    #[serde(default)]
    pub processes: Vec<Mapper>,
}

impl QuarantinedRange {
    /// Whether `[start, end)` overlaps this range.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start < end && start < self.end
    }

    /// Where process `pid` had the range in its address space when it was quarantined: the
    /// poisoned bytes at the same offset in the first page it mapped. Exact for a range within
    /// one page (poison comes in 64-byte lines); a longer range is assumed virtually contiguous
    /// from there.
    pub fn virtual_range(&self, pid: u32) -> Option<(u64, u64)> {
        let m = self.processes.iter().find(|m| m.pid == pid)?;
        let start = m.vaddr + self.start % PAGE;
        Some((start, start + (self.end - self.start)))
    }
}

/// Appends one range to the quarantine file, creating it and its directory.
pub fn append(path: &Path, range: &QuarantinedRange) -> Result<(), QuarantineError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| PathError::io("creating the quarantine file's directory", dir, e))?;
    }
    let mut line = serde_json::to_string(range).expect("a range serializes");
    line.push('\n');
    // One write of a whole line to a file opened for appending: readers never see half of it
    // from this writer.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| PathError::io("appending to the quarantine file", path, e).into())
}

/// What a poll found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    /// Ranges not seen before, in file order.
    pub added: Vec<QuarantinedRange>,
    /// One message per malformed line (`PATH:LINE: what is wrong`); the line is skipped.
    pub malformed: Vec<String>,
}

/// A reader that follows the quarantine file as it grows.
#[derive(Debug)]
pub struct QuarantineFile {
    path: PathBuf,
    /// (device, inode, size) at the last poll: a poll with the same identity and size reads
    /// nothing.
    seen: Option<(u64, u64, u64)>,
    /// Bytes consumed (whole lines) and lines counted so far.
    offset: u64,
    line: usize,
    ranges: Vec<QuarantinedRange>,
}

impl QuarantineFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        QuarantineFile {
            path: path.into(),
            seen: None,
            offset: 0,
            line: 0,
            ranges: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every range read so far (a file that was replaced or truncated keeps what it had: poison
    /// does not heal).
    pub fn ranges(&self) -> &[QuarantinedRange] {
        &self.ranges
    }

    /// Reads what changed since the last poll. A missing file is no update (nothing quarantined
    /// yet); a file that was replaced or truncated is read again from its start, and only ranges
    /// not seen before are reported.
    pub fn poll(&mut self) -> Result<Update, QuarantineError> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.seen = None;
                self.offset = 0;
                self.line = 0;
                return Ok(Update::default());
            }
            Err(e) => {
                return Err(PathError::io("reading the quarantine file", &self.path, e).into())
            }
        };
        let now = (meta.dev(), meta.ino(), meta.len());
        if self.seen == Some(now) {
            return Ok(Update::default());
        }
        if self
            .seen
            .is_some_and(|(dev, ino, _)| (dev, ino) != (now.0, now.1))
            || meta.len() < self.offset
        {
            self.offset = 0;
            self.line = 0;
        }
        let mut f = File::open(&self.path)
            .map_err(|e| PathError::io("reading the quarantine file", &self.path, e))?;
        let mut text = Vec::new();
        f.seek(SeekFrom::Start(self.offset))
            .and_then(|_| f.read_to_end(&mut text))
            .map_err(|e| PathError::io("reading the quarantine file", &self.path, e))?;
        // Only whole lines: a writer may be in the middle of one.
        let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.seen = Some((now.0, now.1, self.offset + whole as u64));
        self.offset += whole as u64;
        let mut update = Update::default();
        for raw in text[..whole]
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
        {
            self.line += 1;
            match parse_line(raw) {
                Ok(r) if self.ranges.contains(&r) => {}
                Ok(r) => {
                    self.ranges.push(r.clone());
                    update.added.push(r);
                }
                Err(what) => update.malformed.push(format!(
                    "{}:{}: {what}; the line is skipped (each line must be {{\"start\":N,\"end\":N,...}} with start < end)",
                    self.path.display(),
                    self.line
                )),
            }
        }
        Ok(update)
    }
}

fn parse_line(raw: &[u8]) -> Result<QuarantinedRange, String> {
    let r: QuarantinedRange = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    if r.start >= r.end {
        return Err(format!(
            "empty range: start {:#x} is not below end {:#x}",
            r.start, r.end
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64) -> QuarantinedRange {
        QuarantinedRange {
            start,
            end: start + 64,
            memdev: Some("mem0".into()),
            serial: Some(0xc0de0000),
            region: Some("region0".into()),
            node: Some(1),
            processes: Vec::new(),
        }
    }

    #[test]
    fn a_process_finds_the_range_at_its_virtual_address() {
        let mut r = range(0x4000_1040);
        r.processes.push(Mapper {
            pid: 42,
            comm: "cxltier".into(),
            vaddr: 0x7f00_0000_0000,
            pages: 1,
        });
        assert_eq!(
            r.virtual_range(42),
            Some((0x7f00_0000_0040, 0x7f00_0000_0080))
        );
        assert_eq!(r.virtual_range(43), None);
        // Older lines without processes still parse.
        let old = parse_line(br#"{"start":4096,"end":4160,"memdev":"mem0"}"#).unwrap();
        assert!(old.processes.is_empty());
    }

    #[test]
    fn follows_appends_skips_bad_lines_and_waits_for_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("follow.jsonl");
        let mut q = QuarantineFile::new(&p);
        assert_eq!(
            q.poll().unwrap(),
            Update::default(),
            "missing file: nothing"
        );
        append(&p, &range(0x1000)).unwrap();
        let u = q.poll().unwrap();
        assert_eq!(u.added, vec![range(0x1000)]);
        assert_eq!(q.poll().unwrap(), Update::default(), "unchanged");
        // A malformed line, an empty range, then half a line.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"not json\n{\"start\":5,\"end\":5}\n{\"start\":8192,")
            .unwrap();
        let u = q.poll().unwrap();
        assert!(u.added.is_empty());
        assert_eq!(u.malformed.len(), 2, "{:?}", u.malformed);
        assert!(u.malformed[0].contains(":2: "), "{}", u.malformed[0]);
        assert!(
            u.malformed[1].contains(":3: empty range"),
            "{}",
            u.malformed[1]
        );
        f.write_all(b"\"end\":8256}\n").unwrap();
        let u = q.poll().unwrap();
        assert_eq!(u.added.len(), 1);
        assert_eq!((u.added[0].start, u.added[0].end), (8192, 8256));
        assert_eq!(u.added[0].memdev, None);
        // Replaced by a file with one old and one new range: only the new one is added.
        let tmp = p.with_extension("new");
        append(&tmp, &range(0x1000)).unwrap();
        append(&tmp, &range(0x3000)).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        assert_eq!(q.poll().unwrap().added, vec![range(0x3000)]);
        assert_eq!(q.ranges().len(), 3);
        // Removed: nothing new, and what was read stays.
        std::fs::remove_file(&p).unwrap();
        assert_eq!(q.poll().unwrap(), Update::default());
        assert_eq!(q.ranges().len(), 3);
    }

    #[test]
    fn unreadable_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dir.jsonl");
        std::fs::create_dir_all(&p).unwrap();
        let err = QuarantineFile::new(&p).poll().unwrap_err();
        assert!(err.to_string().contains("dir.jsonl"), "{err}");
        std::fs::remove_dir(&p).unwrap();
    }
}
