//! The NVMe tier: a log-structured store of records in fixed-size segments of one file or block
//! device, written and read with `O_DIRECT` through io_uring.
//!
//! Layout: segment `i` occupies bytes `[i * segment_size, (i + 1) * segment_size)`. A segment starts
//! with a [`SEGMENT_HEADER`]-byte header (magic, format, the segment's sequence number, checksum);
//! records follow, packed at 8-byte boundaries:
//!
//! ```text
//! crc32c u32 | total_len u32 | seq u64 | expires_at_ms u64 | key_len u16 | flags u8 | kind u8 | value_len u32 | key | value
//! ```
//!
//! `flags` holds the record's type in its low bits (tombstone, flush-all, and whether the key
//! carries its database byte: every record written now does, those of a log written before
//! databases existed are read as database 0's) and, in its top five, bits 16 to 20 of the key's
//! length: keys up to 2 MiB - 1 bytes, and a record written before keys could pass 64 KiB (those
//! bits zero) reads as it always did.
//!
//! The checksum covers the segment's sequence number, the rest of the header, the key and the
//! value. Salting with the segment sequence is what makes segment reuse safe: records left over from
//! a segment's previous life fail the checksum, so they are never taken for this life's. It also
//! lets recovery identify a segment whose header is damaged, from its records.
//!
//! Recovery ([`scan_segment_image`] for each segment) steps over a record that fails its checksum
//! to the next valid one, reports every range it could not read ([`OpenReport::damaged`]),
//! refuses to open a log with such damage unless told to go on ([`LogConfig::recover_anyway`]),
//! and never writes over bytes it could not read.
//!
//! Invariants:
//! - Records are appended in `seq` order; relocation by the cleaner keeps a record's `seq`, so
//!   recovery resolves duplicates by `seq`, not by position.
//! - A freed segment's header is overwritten with zeros (on disk) before the segment is reused and
//!   before any tombstone that shadowed one of its records is dropped: otherwise recovery could
//!   resurrect a deleted key.
//! - A tombstone lives as long as any segment whose life began at or before the delete (sequence
//!   number at most the one then open, which the tombstone carries in its `expires_at_ms` field):
//!   every older version of its key, dead or not, lies in such a segment. The newest version alone
//!   is not enough: an older one, superseded before the delete, can outlive it in a segment the
//!   cleaner has not reached, and would come back.
//! - The open segment's image lives in an aligned buffer; reads of records not yet on disk are
//!   served from it.

use hashbrown::HashMap;
use hdrhistogram::Histogram;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cxltier_sys::uring::{AlignedBuf, DirectFile, ReadDone, ReadQueue, Uring, ALIGN};

/// Reads the log keeps in flight at most for [`Log::start_read`].
pub const ASYNC_READS: u32 = 256;

/// How a read begun with [`Log::start_read`] stands.
#[derive(Debug)]
pub enum ReadStart {
    /// Already done (the record was in the open segment's buffer, or the location is bad).
    Done(Result<LogRecord>),
    /// In flight: its ticket comes back from [`Log::reap_reads`].
    Queued(u32),
    /// Too many reads in flight: reap some, then try again.
    Full,
}

/// A read begun with [`Log::start_read`] that has finished.
#[derive(Debug)]
pub struct ReadFinished {
    pub ticket: u32,
    pub loc: NvLoc,
    /// The record; `None` when the segment was cleaned and reused while the read was in flight
    /// (what came back is another life's data: read the key's current location again).
    pub record: Option<Result<LogRecord>>,
}

use crate::{Kind, Result, StoreError};

mod scan;
pub use scan::{
    scan_segment_image, DamageKind, DamagedRange, OpenReport, ScannedRecord, SegmentScan,
};

/// Bytes reserved at the start of every segment for its header.
pub const SEGMENT_HEADER: usize = 64;
const RECORD_HEADER: usize = 32;
const MAGIC: u64 = 0x4358_4c54_4c4f_4731; // "CXLTLOG1"
const FORMAT: u32 = 1;
const FLAG_TOMBSTONE: u8 = 1;
const FLAG_FLUSH_ALL: u8 = 2;
/// The key is the store's key with its database byte ([`crate::keys::db_key`]). Records written before
/// databases existed lack the flag: their keys are database 0's, converted as they are read
/// ([`Parsed::key`]), so an old log opens with every key in database 0 and the cleaner rewrites
/// its records in the new form as it moves them.
const FLAG_DB_KEY: u8 = 4;
/// Where a key length's bits from 16 up sit in `flags`.
const KEY_HIGH_SHIFT: u32 = 3;
const KEY_HIGH_MASK: u8 = 0b1111_1000;
/// The longest key a record holds (21 bits of length).
pub const MAX_RECORD_KEY: usize = (1 << 21) - 1;

/// A record's key length from its header bytes 24..27.
fn key_len_at(b: &[u8]) -> usize {
    u16::from_le_bytes([b[24], b[25]]) as usize
        | (((b[26] & KEY_HIGH_MASK) >> KEY_HIGH_SHIFT) as usize) << 16
}
/// Segments kept free for the cleaner: user appends stop before using them.
const RESERVED_SEGMENTS: usize = 2;
/// Default segment size.
pub const DEFAULT_SEGMENT_SIZE: u32 = 2 << 20;
/// The largest segment: offsets and lengths inside one fit in the 24 bits the key index keeps
/// for them (the index packs a key's access clock beside them).
pub const MAX_SEGMENT_SIZE: u32 = 16 << 20;

/// The largest value a record with a key of `key_len` bytes can hold in a segment of
/// `segment_size` bytes (a record never spans two segments).
pub const fn max_value_len(segment_size: u32, key_len: usize) -> usize {
    (segment_size as usize).saturating_sub(SEGMENT_HEADER + RECORD_HEADER + key_len)
}

/// Where and how big the log is.
#[derive(Debug, Clone)]
pub struct LogConfig {
    pub path: PathBuf,
    /// Bytes to use; `None`: the block device's size or the existing file's size.
    pub capacity: Option<u64>,
    /// Bytes per segment, a multiple of 4096.
    pub segment_size: u32,
    /// Open even when recovery finds damage that may have held acknowledged data (the damage is
    /// in the [`OpenReport`]); without it, such a log is refused with [`StoreError::Damaged`]
    /// before anything is written.
    pub recover_anyway: bool,
}

impl LogConfig {
    pub fn new(path: impl Into<PathBuf>, capacity: Option<u64>) -> LogConfig {
        LogConfig {
            path: path.into(),
            capacity,
            segment_size: DEFAULT_SEGMENT_SIZE,
            recover_anyway: false,
        }
    }
}

/// Where a record is on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvLoc {
    pub segment: u32,
    /// Offset of the record inside its segment.
    pub offset: u32,
    /// The record's whole length (header, key and value).
    pub len: u32,
}

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub key: Vec<u8>,
    pub kind: Kind,
    pub value: Vec<u8>,
    pub expires_at_ms: Option<u64>,
    pub seq: u64,
}

/// A record met during recovery, in write order.
#[derive(Debug)]
pub struct Recovered<'a> {
    /// With its database byte (see [`crate::db_key`]).
    pub key: &'a [u8],
    pub loc: NvLoc,
    pub seq: u64,
    /// The sequence number of the segment holding it: (segment_seq, loc.offset) is its place in
    /// write order.
    pub segment_seq: u64,
    pub kind: Kind,
    pub expires_at_ms: Option<u64>,
    pub tombstone: bool,
    /// Everything written before this record is gone (FLUSHALL).
    pub flush_all: bool,
    pub value_len: u32,
}

impl Recovered<'_> {
    /// For a tombstone: the sequence number of the segment open when the delete was written, which
    /// it carries in its `expires_at_ms` field (see the module's invariants). A tombstone written
    /// before it carried one is taken as written in the segment holding it: later than the truth
    /// if the cleaner moved it, so it is kept longer, never too short.
    pub fn tombstone_before(&self) -> u64 {
        self.expires_at_ms
            .filter(|&b| b <= self.segment_seq)
            .unwrap_or(self.segment_seq)
    }
}

/// Device counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LogStats {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    /// Bytes written to the device (aligned blocks, tail rewrites and cleaning included).
    pub write_bytes: u64,
    /// Bytes of records appended for users (not by the cleaner).
    pub appended_bytes: u64,
    pub segments: u32,
    pub free_segments: u32,
    pub live_bytes: u64,
    pub segments_cleaned: u64,
    pub capacity: u64,
}

/// Latency of the log's device reads, in microseconds (see [`Log::read_latency`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReadLatency {
    /// Reads timed.
    pub reads: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

fn new_latency_histogram() -> Histogram<u64> {
    // 1 µs to an hour, three significant digits: a few tens of KiB.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// What one call of [`Log::clean`] did.
#[derive(Debug, Clone, Default)]
pub struct CleanReport {
    pub segments_freed: u32,
    pub records_moved: u64,
    pub bytes_moved: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SegState {
    Free,
    Open,
    Sealed,
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    state: SegState,
    seq: u64,
    live_bytes: u64,
    used: u32,
}

/// What a tombstone shields: every segment whose life began at or before `before` (the sequence
/// number of the segment open when the delete was written) may hold an older version of its key,
/// so the tombstone is needed while one of them, other than its own, lives.
#[derive(Debug, Clone, Copy)]
struct Shadow {
    before: u64,
}

/// Who may use the segments kept free for the cleaner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reserve {
    /// User writes leave the reserve alone.
    Keep,
    /// Deletes (tiny records) may dip into it, so a full log can always be emptied by deleting.
    TombstonesMayUse,
    /// The cleaner may use all of it.
    Cleaner,
}

/// The log.
pub struct Log {
    /// Reads in flight while the caller goes on ([`Log::start_read`]). First field: it is dropped
    /// (waiting for its reads) before the file.
    reads: ReadQueue,
    /// What each ticket in flight reads: the location, the bytes to skip in the aligned buffer,
    /// the segment's sequence number when the read began, and when it began.
    read_meta: HashMap<u32, (NvLoc, usize, u64, Instant)>,
    /// Microseconds from a read's start to its collection (the device's time plus the caller's
    /// delay in collecting it: what a request waiting for the read sees).
    read_latency: Histogram<u64>,
    /// Finished reads between the ring and [`Log::reap_reads`], kept to save an allocation per
    /// call.
    reaped: Vec<ReadDone>,
    file: DirectFile,
    ring: Uring,
    path: PathBuf,
    segment_size: u32,
    segments: Vec<Segment>,
    /// Index of the open segment and its image.
    open: u32,
    buf: AlignedBuf,
    /// Bytes of the open segment used so far, and how far the disk has them.
    used: usize,
    flushed: usize,
    next_seq: u64,
    next_segment_seq: u64,
    tombstones: HashMap<NvLoc, Shadow>,
    stats: LogStats,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Log({}, {} segments)",
            self.path.display(),
            self.segments.len()
        )
    }
}

/// An I/O error with its context, the context made only when there is an error (reads of the
/// NVMe tier pass here several times per command).
fn io_err(context: impl FnOnce() -> String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io {
        context: context(),
        source,
    }
}

fn kind_from(b: u8) -> Option<Kind> {
    Kind::from_u8(b)
}

fn record_crc(segment_seq: u64, rest: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&segment_seq.to_le_bytes()), rest)
}

/// A record parsed from bytes (borrowing them).
struct Parsed<'a> {
    total: usize,
    seq: u64,
    expires: u64,
    flags: u8,
    kind: Kind,
    raw_key: &'a [u8],
    value: &'a [u8],
}

impl<'a> Parsed<'a> {
    /// The record's key as the store knows it: with its database byte (a record of the first
    /// format is database 0's).
    fn key(&self) -> std::borrow::Cow<'a, [u8]> {
        if self.flags & FLAG_DB_KEY != 0 || self.flags & FLAG_FLUSH_ALL != 0 {
            std::borrow::Cow::Borrowed(self.raw_key)
        } else {
            std::borrow::Cow::Owned(crate::keys::first_format_key(self.raw_key))
        }
    }
}

/// Parse the record at the start of `bytes`, checking its checksum against `segment_seq`.
/// The largest sequence number a segment or a record can carry. Both count up by one from 1 (a
/// billion appends a second would take 292 years to get here); a larger one that passes its
/// checksum was crafted, and taking it would overflow the next number handed out (or, wrapped,
/// replay new segments before old ones at the next recovery). It reads as damage.
pub const MAX_SEQ: u64 = 1 << 63;

fn parse(bytes: &[u8], segment_seq: u64) -> Option<Parsed<'_>> {
    if bytes.len() < RECORD_HEADER {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let crc = u32_at(0);
    let total = u32_at(4) as usize;
    let key_len = key_len_at(bytes);
    let value_len = u32_at(28) as usize;
    if total < RECORD_HEADER || total != RECORD_HEADER + key_len + value_len || total > bytes.len()
    {
        return None;
    }
    if record_crc(segment_seq, &bytes[4..total]) != crc {
        return None;
    }
    let seq = u64_at(8);
    if seq > MAX_SEQ {
        return None;
    }
    Some(Parsed {
        total,
        seq,
        expires: u64_at(16),
        flags: bytes[26] & !KEY_HIGH_MASK,
        kind: kind_from(bytes[27])?,
        raw_key: &bytes[RECORD_HEADER..RECORD_HEADER + key_len],
        value: &bytes[RECORD_HEADER + key_len..total],
    })
}

/// A segment header: magic, format, the segment's sequence number and their checksum; then the
/// log's size in bytes when the segment was opened, with its own checksum (so that recovery can
/// tell a file that was cut short).
fn header_bytes(segment_seq: u64, log_bytes: u64) -> [u8; SEGMENT_HEADER] {
    let mut h = [0u8; SEGMENT_HEADER];
    h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    h[16..24].copy_from_slice(&segment_seq.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h[32..40].copy_from_slice(&log_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&h[32..40]);
    h[40..44].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The sequence number, and the log's size when it is recorded.
fn parse_header(block: &[u8]) -> Option<(u64, Option<u64>)> {
    let magic = u64::from_le_bytes(block[0..8].try_into().unwrap());
    let format = u32::from_le_bytes(block[8..12].try_into().unwrap());
    let crc = u32::from_le_bytes(block[24..28].try_into().unwrap());
    if magic != MAGIC || format != FORMAT || crc32c::crc32c(&block[0..24]) != crc {
        return None;
    }
    if u64::from_le_bytes(block[16..24].try_into().unwrap()) > MAX_SEQ {
        return None;
    }
    let size_crc = u32::from_le_bytes(block[40..44].try_into().unwrap());
    let log_bytes = (crc32c::crc32c(&block[32..40]) == size_crc)
        .then(|| u64::from_le_bytes(block[32..40].try_into().unwrap()));
    Some((
        u64::from_le_bytes(block[16..24].try_into().unwrap()),
        log_bytes,
    ))
}

/// The device block a read covers: a record that fits in one block is placed so that it does not
/// straddle two (the gap before it is zeros), so reading it takes one block, not two.
const BLOCK: usize = 4096;

/// Where a record of `total` bytes goes when the segment is used up to `used`: at `used`, or at
/// the next block when it fits in a block but would straddle two from `used`.
const fn placement(used: usize, total: usize) -> usize {
    if total <= BLOCK && used % BLOCK + total > BLOCK {
        used.next_multiple_of(BLOCK)
    } else {
        used
    }
}

/// The record at `at`, or, when the bytes from `at` to the next block are all zeros (the gap a
/// record was moved past, see [`placement`]), the record at that block. With its start.
fn next_record(image: &[u8], at: usize, segment_seq: u64) -> Option<(usize, Parsed<'_>)> {
    if let Some(p) = parse(image.get(at..)?, segment_seq) {
        return Some((at, p));
    }
    let next = at.next_multiple_of(BLOCK);
    if at % BLOCK == 0 || next >= image.len() || image[at..next].iter().any(|&b| b != 0) {
        return None;
    }
    parse(&image[next..], segment_seq).map(|p| (next, p))
}

const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Read each `(offset, buffer)` of the log whole: bytes past `file_bytes` (a file cut short) read
/// as zeros, and a read that comes back short before the end is an error, never taken as whole.
fn read_whole(
    ring: &mut Uring,
    file: &DirectFile,
    file_bytes: u64,
    reqs: &mut [(u64, &mut AlignedBuf)],
    shown: &dyn std::fmt::Display,
) -> Result<()> {
    let wants: Vec<usize> = reqs
        .iter()
        .map(|(o, b)| file_bytes.saturating_sub(*o).min(b.len() as u64) as usize)
        .collect();
    for (r, want) in ring.read_batch(file, reqs).into_iter().zip(&wants) {
        let n = r.map_err(io_err(|| format!("reading {shown}")))?;
        if n < *want {
            return Err(StoreError::Io {
                context: format!("reading {shown}: {n} of {want} bytes came back"),
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            });
        }
    }
    for ((_, b), want) in reqs.iter_mut().zip(wants) {
        b[want..].fill(0);
    }
    Ok(())
}

impl Log {
    /// Open (creating if needed) and replay every valid record in write order through `on_record`.
    ///
    /// Recovery reads everything before it writes anything: when it finds damage that may have
    /// held acknowledged data (see [`OpenReport::damaged`]) it returns [`StoreError::Damaged`]
    /// with the file untouched, unless `cfg.recover_anyway`. It never writes over bytes it could
    /// not read: appends go on in the newest segment only when nothing but zeros follows its last
    /// record there, and in a fresh segment otherwise.
    pub fn open(
        cfg: &LogConfig,
        on_record: &mut dyn FnMut(Recovered<'_>),
    ) -> Result<(Log, OpenReport)> {
        let seg = cfg.segment_size as usize;
        if seg < 16 * ALIGN || seg % ALIGN != 0 || seg > MAX_SEGMENT_SIZE as usize {
            return Err(StoreError::Config(format!(
                "segment size {seg} must be a multiple of 4096, at least 64 KiB and at most 16 MiB"
            )));
        }
        let path = &cfg.path;
        let exists = path.exists();
        if !exists && cfg.capacity.is_none() {
            return Err(StoreError::Config(format!(
                "{} does not exist and no size was given: write --ssd {}:SIZE (e.g. :8G) to create it",
                path.display(),
                path.display()
            )));
        }
        let file = DirectFile::open(path, !exists).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EINVAL) {
                " (this file system does not support O_DIRECT; put the NVMe tier on ext4, xfs or a block device)"
            } else if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (no permission: run as a user that may write it, or pick another path)"
            } else {
                ""
            };
            StoreError::Io {
                context: format!("cannot open {} with O_DIRECT{hint}", path.display()),
                source: e,
            }
        })?;
        let current = file.size().map_err(io_err(|| {
            format!("cannot get the size of {}", path.display())
        }))?;
        let seg64 = seg as u64;
        let capacity = match cfg.capacity {
            Some(c) if file.is_block_device() && c > current => {
                return Err(StoreError::Config(format!(
                    "{} is a {} byte device; --ssd asks for {c} bytes: give a smaller size or none",
                    path.display(),
                    current
                )))
            }
            // Segments past the given size would be neither read nor kept: their records lost.
            Some(c) if !file.is_block_device() && c / seg64 < current.div_ceil(seg64) => {
                return Err(StoreError::Config(format!(
                    "{} is {current} bytes; --ssd asks for {c}: a log cannot shrink (its last segments would be lost): give a size of at least {current}, or none",
                    path.display()
                )))
            }
            Some(c) => c,
            // A file cut inside a segment still has that segment read (the rest as zeros).
            None if !file.is_block_device() => current.next_multiple_of(seg64),
            None => current,
        };
        let count = capacity / seg64;
        if count < (RESERVED_SEGMENTS + 2) as u64 {
            return Err(StoreError::Config(format!(
                "{}: {capacity} bytes hold fewer than {} segments of {seg} bytes: give --ssd PATH:SIZE of at least {}",
                path.display(),
                RESERVED_SEGMENTS + 2,
                (RESERVED_SEGMENTS + 2) * seg
            )));
        }
        let ring =
            Uring::new(64).map_err(io_err(|| "cannot set up io_uring for the NVMe tier".into()))?;
        let reads = ReadQueue::new(ASYNC_READS)
            .map_err(io_err(|| "cannot set up io_uring for the NVMe tier".into()))?;
        let mut log = Log {
            reads,
            read_meta: HashMap::new(),
            read_latency: new_latency_histogram(),
            reaped: Vec::new(),
            file,
            ring,
            path: path.clone(),
            segment_size: cfg.segment_size,
            segments: vec![
                Segment {
                    state: SegState::Free,
                    seq: 0,
                    live_bytes: 0,
                    used: 0,
                };
                count as usize
            ],
            open: u32::MAX,
            buf: AlignedBuf::new(seg),
            used: 0,
            flushed: 0,
            next_seq: 1,
            next_segment_seq: 1,
            tombstones: HashMap::new(),
            stats: LogStats {
                capacity: count * seg64,
                segments: count as u32,
                ..LogStats::default()
            },
        };
        let scanned = {
            let (ring, file) = (&mut log.ring, &log.file);
            let shown = path.display();
            let mut read =
                |reqs: &mut [(u64, &mut AlignedBuf)]| read_whole(ring, file, current, reqs, &shown);
            scan::scan_log(count as usize, seg, current, &mut read, on_record)?
        };
        let report = scanned.report.clone();
        if report.is_damaged() && !cfg.recover_anyway {
            return Err(StoreError::Damaged(Box::new(crate::Damage {
                path: path.clone(),
                report,
                keys_possibly_stale: None,
            })));
        }
        log.adopt(scanned, cfg.recover_anyway)?;
        let capacity = log.stats.capacity;
        if !log.file.is_block_device() && current < capacity {
            log.file.preallocate(capacity).map_err(|e| {
                let context = if e.raw_os_error() == Some(libc::ENOSPC) {
                    let free =
                        fs_free(path).map(|f| format!(", {f} bytes are free")).unwrap_or_default();
                    format!(
                        "cannot reserve {capacity} bytes for {}{free}: the disk is too full; free space or give a smaller --ssd size",
                        path.display()
                    )
                } else {
                    format!(
                        "cannot reserve {capacity} bytes for {}: put it on a local file system (ext4, xfs) or a block device",
                        path.display()
                    )
                };
                StoreError::Io { context, source: e }
            })?;
        }
        if !log.open_is_set() {
            log.open_new_segment()?;
        }
        Ok((log, report))
    }

    /// Read a log file offline: every segment scanned as recovery would, every valid record
    /// handed to `on_record`, the damage reported. Opens the file read-only, without `O_DIRECT`
    /// (so it works on any file system), and never writes.
    pub fn check_file(
        path: &Path,
        segment_size: u32,
        on_record: &mut dyn FnMut(Recovered<'_>),
    ) -> Result<OpenReport> {
        use std::io::{Seek, SeekFrom};
        let seg = segment_size as usize;
        let mut file = std::fs::File::open(path).map_err(io_err(|| {
            format!("cannot open {} to read it", path.display())
        }))?;
        // The end, not the metadata's length: a block device's length is 0 in its metadata.
        let bytes = file.seek(SeekFrom::End(0)).map_err(io_err(|| {
            format!("cannot get the size of {}", path.display())
        }))?;
        let count = bytes.div_ceil(seg as u64) as usize;
        let mut read = |reqs: &mut [(u64, &mut AlignedBuf)]| scan::read_plain(&file, bytes, reqs);
        Ok(scan::scan_log(count, seg, bytes, &mut read, on_record)?.report)
    }

    /// Take over what recovery found: the segments' states, the sequence numbers, and where
    /// appends go on.
    fn adopt(&mut self, scanned: scan::LogScan, recover_anyway: bool) -> Result<()> {
        let seg = self.segment_size as usize;
        if scanned.report.log_bytes > self.stats.capacity {
            // A truncated file accepted with the override: it gets back its size.
            let count = scanned.report.log_bytes / seg as u64;
            self.segments.resize(
                count as usize,
                Segment {
                    state: SegState::Free,
                    seq: 0,
                    live_bytes: 0,
                    used: 0,
                },
            );
            self.stats.capacity = count * seg as u64;
            self.stats.segments = count as u32;
        }
        self.next_seq = self.next_seq.max(scanned.max_record_seq + 1);
        for f in &scanned.found {
            // The replay counted every record live; the store's mark_dead calls during the same
            // replay (superseded and deleted records) took theirs off again.
            let s = &mut self.segments[f.index as usize];
            s.state = SegState::Sealed;
            s.seq = f.seq;
            s.live_bytes += f.live;
            s.used = f.end as u32;
            self.stats.live_bytes += f.live;
            self.next_segment_seq = self.next_segment_seq.max(f.seq + 1);
        }
        // Segments nothing could be read from: the operator accepted their loss. They hold no
        // live record, so the cleaner frees them in time.
        debug_assert!(scanned.unreadable.is_empty() || recover_anyway);
        for &i in &scanned.unreadable {
            self.segments[i as usize] = Segment {
                state: SegState::Sealed,
                seq: 0,
                live_bytes: 0,
                used: seg as u32,
            };
        }
        self.stats.reads += scanned.report.segments_replayed as u64;
        self.stats.read_bytes += scanned.report.segments_replayed as u64 * seg as u64;
        let (Some(newest), Some(image)) = (scanned.found.last(), scanned.newest_image) else {
            return Ok(());
        };
        // Appends go on in the newest segment only when that writes over nothing but zeros
        // (a torn write stays on disk as it is) and when the segment holds no damage (a damaged
        // segment is left untouched, for repair).
        let room = newest.end + ALIGN < seg || self.free_count() == 0;
        if newest.end_is_clean && !newest.damaged && room {
            self.segments[newest.index as usize].state = SegState::Open;
            self.open = newest.index;
            self.buf.copy_from_slice(&image);
            self.buf[newest.end..].fill(0);
            self.used = newest.end;
            // The disk holds this segment up to `end`, and zeros after it to its block's end:
            // the next write rewrites that block from the buffer, which has the same bytes.
            self.flushed = newest.end;
        }
        Ok(())
    }

    fn open_is_set(&self) -> bool {
        self.open != u32::MAX
    }

    fn free_count(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| s.state == SegState::Free)
            .count()
    }

    /// Start a new open segment in a free one (the header goes to disk with the first sync).
    fn open_new_segment(&mut self) -> Result<()> {
        let Some(index) = self.segments.iter().position(|s| s.state == SegState::Free) else {
            return Err(self.full());
        };
        let seq = self.next_segment_seq;
        self.next_segment_seq += 1;
        self.segments[index] = Segment {
            state: SegState::Open,
            seq,
            live_bytes: 0,
            used: SEGMENT_HEADER as u32,
        };
        self.open = index as u32;
        self.buf.fill(0);
        self.buf[..SEGMENT_HEADER].copy_from_slice(&header_bytes(seq, self.stats.capacity));
        self.used = SEGMENT_HEADER;
        self.flushed = 0;
        Ok(())
    }

    fn full(&self) -> StoreError {
        StoreError::Full {
            detail: format!(
                "the NVMe tier {} ({} bytes) is full of live data; delete keys or restart with a larger --ssd {}:SIZE",
                self.path.display(),
                self.stats.capacity,
                self.path.display()
            ),
        }
    }

    /// Write the open segment's unflushed bytes (whole aligned blocks; the last one may be written
    /// again later) and seal-free state stays as is.
    fn write_tail(&mut self) -> Result<()> {
        if self.flushed >= self.used {
            return Ok(());
        }
        let end = self.used.next_multiple_of(ALIGN);
        self.write_blocks(end)?;
        self.flushed = self.used;
        Ok(())
    }

    /// Write the open segment's whole blocks that wait, once at least `threshold` bytes of them
    /// do, leaving the partial last block for later. Called after every batch, so that a segment
    /// goes to the device in small writes, each a short wait, rather than in one write of the
    /// whole segment when it fills: the event loop waits for that write, and every request in
    /// flight with it (at 5x its memory on YCSB-B, 2 MiB segment writes put the p99 at 38 ms).
    pub fn write_ahead(&mut self, threshold: usize) -> Result<()> {
        let end = self.used / ALIGN * ALIGN;
        if end <= self.flushed || end - self.flushed < threshold.max(1) {
            return Ok(());
        }
        self.write_blocks(end)?;
        self.flushed = end;
        Ok(())
    }

    /// Write the open segment's buffer from the block holding the first unflushed byte up to
    /// `end` (a multiple of [`ALIGN`]).
    fn write_blocks(&mut self, end: usize) -> Result<()> {
        let start = self.flushed / ALIGN * ALIGN;
        let offset = self.open as u64 * self.segment_size as u64 + start as u64;
        let n = self
            .ring
            .write_at(&self.file, offset, &self.buf[start..end])
            .map_err(|e| self.write_error(e))?;
        if n != end - start {
            return Err(StoreError::Io {
                context: format!(
                    "short write to {} ({n} of {} bytes)",
                    self.path.display(),
                    end - start
                ),
                source: std::io::Error::from(std::io::ErrorKind::WriteZero),
            });
        }
        self.stats.writes += 1;
        self.stats.write_bytes += (end - start) as u64;
        Ok(())
    }

    fn write_error(&self, e: std::io::Error) -> StoreError {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            return StoreError::Full {
                detail: format!(
                    "the disk holding {} is full (ENOSPC): free space on it; reads go on",
                    self.path.display()
                ),
            };
        }
        StoreError::Io {
            context: format!("writing the NVMe tier {}", self.path.display()),
            source: e,
        }
    }

    // One private call site per record type; a parameter struct would only rename the arguments.
    #[allow(clippy::too_many_arguments)]
    fn append_raw(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        expires: u64,
        flags: u8,
        seq: u64,
        reserve: Reserve,
    ) -> Result<NvLoc> {
        if key.len() > MAX_RECORD_KEY {
            return Err(StoreError::TooLarge {
                len: key.len(),
                max: MAX_RECORD_KEY,
            });
        }
        let total = RECORD_HEADER + key.len() + value.len();
        if SEGMENT_HEADER + total > self.segment_size as usize {
            return Err(StoreError::TooLarge {
                len: value.len(),
                max: self.segment_size as usize - SEGMENT_HEADER - RECORD_HEADER - key.len(),
            });
        }
        if placement(self.used, total) + total > self.segment_size as usize {
            // Seal the open segment and move on; user appends leave the reserve to the cleaner.
            let keep = match reserve {
                Reserve::Keep => RESERVED_SEGMENTS,
                Reserve::TombstonesMayUse => 1,
                Reserve::Cleaner => 0,
            };
            if self.free_count() <= keep {
                return Err(self.full());
            }
            self.write_tail()?;
            let s = &mut self.segments[self.open as usize];
            s.state = SegState::Sealed;
            s.used = self.used as u32;
            self.open_new_segment()?;
        }
        let at = placement(self.used, total);
        // The gap a record moves past is zeros: recovery and the cleaner step over it.
        self.buf[self.used..at].fill(0);
        let b = &mut self.buf[at..at + total];
        b[4..8].copy_from_slice(&(total as u32).to_le_bytes());
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        b[16..24].copy_from_slice(&expires.to_le_bytes());
        b[24..26].copy_from_slice(&(key.len() as u16).to_le_bytes());
        b[26] = flags | FLAG_DB_KEY | (((key.len() >> 16) as u8) << KEY_HIGH_SHIFT);
        b[27] = kind as u8;
        b[28..32].copy_from_slice(&(value.len() as u32).to_le_bytes());
        b[RECORD_HEADER..RECORD_HEADER + key.len()].copy_from_slice(key);
        b[RECORD_HEADER + key.len()..].copy_from_slice(value);
        let crc = record_crc(self.segments[self.open as usize].seq, &b[4..]);
        b[0..4].copy_from_slice(&crc.to_le_bytes());
        // Zero the padding so a torn-tail check never mistakes it for data.
        let padded = align8(total).min(self.segment_size as usize - at);
        self.buf[at + total..at + padded].fill(0);
        self.used = at + padded;
        let seg = &mut self.segments[self.open as usize];
        seg.live_bytes += total as u64;
        seg.used = self.used as u32;
        self.stats.live_bytes += total as u64;
        if reserve != Reserve::Cleaner {
            self.stats.appended_bytes += total as u64;
        }
        Ok(NvLoc {
            segment: self.open,
            offset: at as u32,
            len: total as u32,
        })
    }

    /// Append a value. `Err(Full)` when the log holds only live data (after the caller cleaned).
    pub fn append(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<NvLoc> {
        let seq = self.next_seq;
        let loc = self.append_raw(
            key,
            kind,
            value,
            expires_at_ms.unwrap_or(0),
            0,
            seq,
            Reserve::Keep,
        )?;
        self.next_seq += 1;
        Ok(loc)
    }

    /// Append a tombstone for `key` (a delete of a key with a record on the log).
    pub fn append_tombstone(&mut self, key: &[u8]) -> Result<()> {
        let seq = self.next_seq;
        // Every version of the key so far lies in a segment that began at or before this one.
        let before = self.segments[self.open as usize].seq;
        let loc = self.append_raw(
            key,
            Kind::String,
            &[],
            before,
            FLAG_TOMBSTONE,
            seq,
            Reserve::TombstonesMayUse,
        )?;
        self.next_seq += 1;
        self.note_tombstone(loc, before);
        Ok(())
    }

    /// Record that the tombstone at `tombstone` is needed while a segment that began at or before
    /// segment sequence `before` lives (used by recovery: see [`Recovered::tombstone_before`]).
    pub fn note_tombstone(&mut self, tombstone: NvLoc, before: u64) {
        self.tombstones.insert(tombstone, Shadow { before });
    }

    /// The two oldest segments in use (sequence number, index), oldest first.
    fn two_oldest_segments(&self) -> [Option<(u64, u32)>; 2] {
        let mut oldest: [Option<(u64, u32)>; 2] = [None, None];
        for (i, s) in self.segments.iter().enumerate() {
            if s.state == SegState::Free {
                continue;
            }
            let this = Some((s.seq, i as u32));
            if oldest[0].is_none_or(|o| (s.seq, i as u32) < o) {
                oldest[1] = oldest[0];
                oldest[0] = this;
            } else if oldest[1].is_none_or(|o| (s.seq, i as u32) < o) {
                oldest[1] = this;
            }
        }
        oldest
    }

    /// Whether a tombstone in segment `at` still shields something: a segment in use, other than
    /// `at`, that began at or before `before`.
    fn tombstone_needed(&self, at: u32, before: u64) -> bool {
        self.segments
            .iter()
            .enumerate()
            .any(|(i, s)| s.state != SegState::Free && i as u32 != at && s.seq <= before)
    }

    /// Mark dead the tombstones that shield nothing any more (after a segment is freed, and after
    /// recovery), so that cleaning drops them.
    pub fn release_tombstones(&mut self) {
        let oldest = self.two_oldest_segments();
        let released: Vec<NvLoc> = self
            .tombstones
            .iter()
            .filter(|(loc, sh)| {
                // The oldest segment in use other than the tombstone's own.
                let other = match oldest {
                    [Some((_, i)), second] if i == loc.segment => second,
                    [first, _] => first,
                };
                other.is_none_or(|(seq, _)| seq > sh.before)
            })
            .map(|(loc, _)| *loc)
            .collect();
        for loc in released {
            self.tombstones.remove(&loc);
            self.mark_dead(loc);
        }
    }

    /// Bytes of tombstones still needed.
    fn tombstone_bytes(&self) -> u64 {
        self.tombstones.keys().map(|l| l.len as u64).sum()
    }

    /// Forget everything: a flush-all record first (durably), then every older segment is wiped.
    pub fn flush_all(&mut self) -> Result<()> {
        let seq = self.next_seq;
        let marker = self.append_raw(
            b"",
            Kind::String,
            &[],
            0,
            FLAG_FLUSH_ALL,
            seq,
            Reserve::TombstonesMayUse,
        )?;
        self.next_seq += 1;
        self.sync(true)?;
        let older: Vec<u32> = (0..self.segments.len() as u32)
            .filter(|&i| i != self.open && self.segments[i as usize].state == SegState::Sealed)
            .collect();
        for i in older {
            self.wipe_segment(i)?;
        }
        self.sync(true)?;
        // Nothing older is left for the marker to cancel, and every record of the open segment
        // before it is dead too.
        let open = &mut self.segments[self.open as usize];
        self.stats.live_bytes -= open.live_bytes;
        open.live_bytes = 0;
        self.tombstones.clear();
        let _ = marker;
        Ok(())
    }

    /// Zero a sealed segment's header on disk and mark it free.
    fn wipe_segment(&mut self, index: u32) -> Result<()> {
        let zero = AlignedBuf::new(ALIGN);
        let offset = index as u64 * self.segment_size as u64;
        self.ring
            .write_at(&self.file, offset, &zero)
            .map_err(|e| self.write_error(e))?;
        self.stats.writes += 1;
        self.stats.write_bytes += ALIGN as u64;
        let s = &mut self.segments[index as usize];
        self.stats.live_bytes -= s.live_bytes;
        *s = Segment {
            state: SegState::Free,
            seq: 0,
            live_bytes: 0,
            used: 0,
        };
        Ok(())
    }

    /// The record at `loc` is superseded or deleted.
    pub fn mark_dead(&mut self, loc: NvLoc) {
        let s = &mut self.segments[loc.segment as usize];
        let n = (loc.len as u64).min(s.live_bytes);
        s.live_bytes -= n;
        self.stats.live_bytes -= n;
    }

    fn loc_offset(&self, loc: NvLoc) -> u64 {
        loc.segment as u64 * self.segment_size as u64 + loc.offset as u64
    }

    fn check_loc(&self, loc: NvLoc) -> Result<u64> {
        let s = self
            .segments
            .get(loc.segment as usize)
            .ok_or_else(|| StoreError::Corrupt(format!("location {loc:?} is outside the log")))?;
        if s.state == SegState::Free {
            return Err(StoreError::Corrupt(format!(
                "location {loc:?} is in a free segment"
            )));
        }
        Ok(s.seq)
    }

    fn decode(bytes: &[u8], segment_seq: u64, loc: NvLoc) -> Result<LogRecord> {
        let p = parse(bytes, segment_seq).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "the record at segment {} offset {} fails its checksum",
                loc.segment, loc.offset
            ))
        })?;
        Ok(LogRecord {
            key: p.key().into_owned(),
            kind: p.kind,
            value: p.value.to_vec(),
            expires_at_ms: (p.expires != 0).then_some(p.expires),
            seq: p.seq,
        })
    }

    /// Begin reading the record at `loc` without waiting for it (see [`ReadStart`]); the read
    /// goes to the device at the next [`Log::submit_reads`] or [`Log::reap_reads`].
    pub fn start_read(&mut self, loc: NvLoc) -> ReadStart {
        let seq = match self.check_loc(loc) {
            Ok(s) => s,
            Err(e) => return ReadStart::Done(Err(e)),
        };
        if loc.segment == self.open {
            let at = loc.offset as usize;
            return ReadStart::Done(Self::decode(&self.buf[at..at + loc.len as usize], seq, loc));
        }
        let start = self.loc_offset(loc);
        let aligned = start / ALIGN as u64 * ALIGN as u64;
        let skip = (start - aligned) as usize;
        match self
            .reads
            .push(&self.file, aligned, skip + loc.len as usize)
        {
            Some(ticket) => {
                self.read_meta
                    .insert(ticket, (loc, skip, seq, Instant::now()));
                self.stats.reads += 1;
                ReadStart::Queued(ticket)
            }
            None => ReadStart::Full,
        }
    }

    /// Hand the begun reads to the device.
    pub fn submit_reads(&mut self) -> Result<()> {
        self.reads.submit().map_err(io_err(|| {
            format!("reading the NVMe tier {}", self.path.display())
        }))
    }

    /// Reads begun and not yet reaped.
    pub fn reads_in_flight(&self) -> usize {
        self.reads.in_flight()
    }

    /// An eventfd that becomes readable when a begun read completes (see
    /// [`ReadQueue::completion_fd`]).
    pub fn read_completion_fd(&self) -> std::os::fd::RawFd {
        self.reads.completion_fd()
    }

    /// Reset that eventfd after it fired.
    pub fn clear_read_signal(&mut self) {
        self.reads.clear_completion_signal();
    }

    /// Collect finished reads; with `wait`, block until at least one has finished (when any is in
    /// flight).
    pub fn reap_reads(&mut self, wait: bool, out: &mut Vec<ReadFinished>) -> Result<()> {
        let mut done = std::mem::take(&mut self.reaped);
        let reaped = self.reads.reap_into(usize::from(wait), &mut done);
        let result = reaped
            .map_err(io_err(|| {
                format!("reading the NVMe tier {}", self.path.display())
            }))
            .map(|()| {
                for d in done.drain(..) {
                    self.finish_read(d, out);
                }
            });
        done.clear();
        self.reaped = done;
        result
    }

    /// The record a finished read of `loc` brought (at `skip` in `buf`), or why there is none.
    fn record_read(
        &mut self,
        result: std::io::Result<usize>,
        buf: &[u8],
        skip: usize,
        seq: u64,
        loc: NvLoc,
    ) -> Result<LogRecord> {
        match result {
            Ok(n) if n >= skip + loc.len as usize => {
                self.stats.read_bytes += n as u64;
                Self::decode(&buf[skip..skip + loc.len as usize], seq, loc)
            }
            Ok(n) => Err(StoreError::Corrupt(format!(
                "short read at segment {} offset {}: {n} bytes",
                loc.segment, loc.offset
            ))),
            Err(e) => Err(StoreError::Io {
                context: format!("reading the NVMe tier {}", self.path.display()),
                source: e,
            }),
        }
    }

    fn finish_read(&mut self, d: ReadDone, out: &mut Vec<ReadFinished>) {
        let Some((loc, skip, seq, began)) = self.read_meta.remove(&d.ticket) else {
            return;
        };
        self.record_latency(began);
        // The segment was freed (and maybe reused) while the read was in flight.
        if self.check_loc(loc).ok() != Some(seq) {
            out.push(ReadFinished {
                ticket: d.ticket,
                loc,
                record: None,
            });
            return;
        }
        let record = self.record_read(d.result, &d.buf, skip, seq, loc);
        self.reads.recycle(d.buf);
        out.push(ReadFinished {
            ticket: d.ticket,
            loc,
            record: Some(record),
        });
    }

    /// Read one record.
    pub fn read(&mut self, loc: NvLoc) -> Result<LogRecord> {
        self.read_many(&[loc]).pop().expect("one result")
    }

    /// Read records with one io_uring submission (records still in the open segment's buffer come
    /// from memory).
    pub fn read_many(&mut self, locs: &[NvLoc]) -> Vec<Result<LogRecord>> {
        let mut out: Vec<Option<Result<LogRecord>>> = (0..locs.len()).map(|_| None).collect();
        let mut pending: Vec<(usize, u64, usize, u64)> = Vec::new(); // (i, aligned start, skip, seg seq)
        let mut bufs: Vec<AlignedBuf> = Vec::new();
        for (i, &loc) in locs.iter().enumerate() {
            let seq = match self.check_loc(loc) {
                Ok(s) => s,
                Err(e) => {
                    out[i] = Some(Err(e));
                    continue;
                }
            };
            if loc.segment == self.open {
                let at = loc.offset as usize;
                out[i] = Some(Self::decode(&self.buf[at..at + loc.len as usize], seq, loc));
                continue;
            }
            let start = self.loc_offset(loc);
            let aligned = start / ALIGN as u64 * ALIGN as u64;
            let skip = (start - aligned) as usize;
            bufs.push(AlignedBuf::new(skip + loc.len as usize));
            pending.push((i, aligned, skip, seq));
        }
        if !pending.is_empty() {
            let mut reqs: Vec<(u64, &mut AlignedBuf)> = pending
                .iter()
                .zip(bufs.iter_mut())
                .map(|(p, b)| (p.1, b))
                .collect();
            let began = Instant::now();
            let results = self.ring.read_batch(&self.file, &mut reqs);
            self.stats.reads += pending.len() as u64;
            for _ in &pending {
                self.record_latency(began);
            }
            for ((&(i, _, skip, seq), res), buf) in pending.iter().zip(results).zip(&bufs) {
                out[i] = Some(self.record_read(res, buf, skip, seq, locs[i]));
            }
        }
        out.into_iter()
            .map(|r| r.expect("every slot is filled"))
            .collect()
    }

    /// Write the open segment's unflushed tail, and `fdatasync` if asked.
    pub fn sync(&mut self, fdatasync: bool) -> Result<()> {
        self.write_tail()?;
        if fdatasync {
            self.file
                .sync_data()
                .map_err(io_err(|| format!("fdatasync of {}", self.path.display())))?;
        }
        Ok(())
    }

    /// Whether there are records not yet written to the device.
    pub fn has_unflushed(&self) -> bool {
        self.flushed < self.used
    }

    /// Whether free segments are running low (below 10% of the log or the reserve plus two).
    pub fn needs_cleaning(&self) -> bool {
        let low = (self.segments.len() / 10).max(RESERVED_SEGMENTS + 2);
        self.free_count() < low && self.dead_bytes() > self.segment_size as u64
    }

    fn dead_bytes(&self) -> u64 {
        self.segments
            .iter()
            .filter(|s| s.state == SegState::Sealed)
            .map(|s| s.used as u64 - SEGMENT_HEADER as u64 - s.live_bytes.min(s.used as u64))
            .sum()
    }

    /// Clean up to `max_segments` of the sealed segments with the fewest live bytes: live records
    /// (`is_live`; tombstones while a segment as old as their delete lives) are appended again, keeping their
    /// sequence numbers, reported through `relocated(key, old, new)`, and the segment is freed.
    pub fn clean(
        &mut self,
        max_segments: usize,
        is_live: &mut dyn FnMut(&[u8], NvLoc) -> bool,
        relocated: &mut dyn FnMut(&[u8], NvLoc, NvLoc),
    ) -> Result<CleanReport> {
        let mut victims: Vec<(u64, u32)> = self
            .segments
            .iter()
            .enumerate()
            .filter(|(i, s)| s.state == SegState::Sealed && *i as u32 != self.open)
            .map(|(i, s)| (s.live_bytes, i as u32))
            .collect();
        victims.sort_unstable();
        let seg_size = self.segment_size as u64;
        // Tombstones are kept while the oldest segment lives; when they add up to a quarter of a
        // segment, that segment is cleaned however live it is (its records move to the head,
        // into a young segment), so that a cold segment cannot keep every delete on the log.
        let oldest = self.two_oldest_segments()[0].filter(|&(_, i)| {
            i != self.open && self.segments[i as usize].state == SegState::Sealed
        });
        let oldest_first = oldest.filter(|_| self.tombstone_bytes() >= seg_size / 4);
        victims.retain(|&(live, i)| live < seg_size * 9 / 10 && Some(i) != oldest.map(|o| o.1));
        if let Some((_, i)) = oldest {
            let live = self.segments[i as usize].live_bytes;
            if oldest_first.is_some() {
                victims.insert(0, (live, i));
            } else if live < seg_size * 9 / 10 {
                victims.push((live, i));
                victims.sort_unstable();
            }
        }
        victims.truncate(max_segments);
        let mut report = CleanReport::default();
        let mut image = AlignedBuf::new(seg_size as usize);
        for (_, index) in victims {
            let seq = self.segments[index as usize].seq;
            let mut reqs = [(index as u64 * seg_size, &mut image)];
            let n = self
                .ring
                .read_batch(&self.file, &mut reqs)
                .pop()
                .expect("one")
                .map_err(io_err(|| format!("reading segment {index} to clean it")))?;
            if n as u64 != seg_size {
                return Err(StoreError::Io {
                    context: format!(
                        "reading segment {index} of {} to clean it: {n} of {seg_size} bytes came back",
                        self.path.display()
                    ),
                    source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                });
            }
            self.stats.reads += 1;
            self.stats.read_bytes += seg_size;
            let used = self.segments[index as usize].used as usize;
            // The same scan as recovery: records after a damaged range (kept with the override)
            // are moved too, not dropped at the first bad one.
            let scan = scan_segment_image(&image[..used.max(SEGMENT_HEADER)], seq);
            for p in scan.records {
                let old = NvLoc {
                    segment: index,
                    offset: p.offset as u32,
                    len: p.total as u32,
                };
                let live = if p.tombstone {
                    self.tombstones
                        .get(&old)
                        .is_some_and(|sh| self.tombstone_needed(index, sh.before))
                } else if p.flush_all {
                    false
                } else {
                    is_live(&p.key, old)
                };
                if !live {
                    self.tombstones.remove(&old);
                    continue;
                }
                let flags = if p.tombstone { FLAG_TOMBSTONE } else { 0 };
                let new = self.append_raw(
                    &p.key,
                    p.kind,
                    p.value,
                    p.expires_at_ms.unwrap_or(0),
                    flags,
                    p.seq,
                    Reserve::Cleaner,
                )?;
                if let Some(sh) = self.tombstones.remove(&old) {
                    self.tombstones.insert(new, sh);
                } else {
                    relocated(&p.key, old, new);
                }
                report.records_moved += 1;
                report.bytes_moved += p.total as u64;
            }
            // The moved records must be on disk before the only other copy goes.
            self.sync(true)?;
            self.wipe_segment(index)?;
            // Tombstones that only this segment still needed are not needed any more.
            self.release_tombstones();
            report.segments_freed += 1;
            self.stats.segments_cleaned += 1;
        }
        Ok(report)
    }

    fn record_latency(&mut self, began: Instant) {
        let us = began.elapsed().as_micros().clamp(1, u64::MAX as u128) as u64;
        // Beyond the histogram's range (an hour): counted at its top.
        self.read_latency.saturating_record(us);
    }

    /// Percentiles of the reads' latency (from each read's start to its collection) since the
    /// log was opened or [`Log::reset_stats`]; `None` before any read.
    pub fn read_latency(&self) -> Option<ReadLatency> {
        let h = &self.read_latency;
        (!h.is_empty()).then(|| ReadLatency {
            reads: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        })
    }

    /// Zero the counters of [`Log::stats`] (reads, writes, bytes, segments cleaned; not the
    /// space figures) and the read latencies.
    pub fn reset_stats(&mut self) {
        let s = &self.stats;
        self.stats = LogStats {
            segments: s.segments,
            free_segments: s.free_segments,
            live_bytes: s.live_bytes,
            capacity: s.capacity,
            ..LogStats::default()
        };
        self.read_latency.reset();
    }

    pub fn stats(&self) -> LogStats {
        LogStats {
            free_segments: self.free_count() as u32,
            ..self.stats.clone()
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Free bytes on the file system holding `path` (for error messages).
fn fs_free(path: &Path) -> Option<u64> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let out = std::process::Command::new("df")
        .arg("-B1")
        .arg("--output=avail")
        .arg(dir)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests;
