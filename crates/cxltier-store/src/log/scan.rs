//! Reading a log without trusting it: the record scan of one segment image (pure, on a byte
//! slice, shared by recovery, the cleaner, `cxltier store check` and the fuzzers) and the scan
//! of a whole log file that recovery and the offline check run.
//!
//! What the scan can tell apart, and what it cannot:
//! - A range that holds no valid record but is followed by a valid record of the same segment
//!   life is damage: records are written in order, so bytes before a valid one were written too.
//! - Non-zero bytes right after the last valid record, in the block holding its end, are a torn
//!   write or a damaged last record. A write always ends with zeros to the end of its block, so in
//!   a sound segment that block is zeros after the last record. In the newest segment this is
//!   what a crash in the middle of a write leaves (never acknowledged with `--durability always`,
//!   lost within the sync interval with `everysec`), so it does not count as damage; in any older
//!   segment it does.
//! - When the last valid record ends exactly on a block boundary, what follows may be a former
//!   life's records (a reused segment is not erased past its header), so damage to a record that
//!   starts on a block boundary and is the last of its segment is taken for the segment's end.
//!   Recovery never writes over such bytes: it appends in a fresh segment instead.

use std::collections::HashSet;
use std::ops::Range;

use super::{
    align8, key_len_at, kind_from, next_record, parse, parse_header, Kind, Parsed, Recovered,
    BLOCK, FLAG_FLUSH_ALL, FLAG_TOMBSTONE, RECORD_HEADER, SEGMENT_HEADER,
};
use crate::{Result, StoreError};
use cxltier_sys::uring::{AlignedBuf, ALIGN};

/// A record found in a segment image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedRecord<'a> {
    /// Where it starts in the image.
    pub offset: usize,
    /// Its whole length (header, key and value).
    pub total: usize,
    pub seq: u64,
    pub expires_at_ms: Option<u64>,
    pub kind: Kind,
    pub tombstone: bool,
    pub flush_all: bool,
    /// The key with its database byte: a record of the first format (none) is database 0's.
    pub key: std::borrow::Cow<'a, [u8]>,
    pub value: &'a [u8],
}

impl<'a> ScannedRecord<'a> {
    fn new(offset: usize, p: &Parsed<'a>) -> Self {
        ScannedRecord {
            offset,
            total: p.total,
            seq: p.seq,
            expires_at_ms: (p.expires != 0).then_some(p.expires),
            kind: p.kind,
            tombstone: p.flags & FLAG_TOMBSTONE != 0,
            flush_all: p.flags & FLAG_FLUSH_ALL != 0,
            key: p.key(),
            value: p.value,
        }
    }
}

/// What [`scan_segment_image`] found in one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentScan<'a> {
    /// The valid records, in write order.
    pub records: Vec<ScannedRecord<'a>>,
    /// Ranges (offsets in the image) that hold no valid record and are followed by one: damage.
    pub damaged: Vec<Range<usize>>,
    /// Where the last valid record ends (8-byte aligned; the header's end when there is none):
    /// where appends would continue.
    pub end: usize,
    /// Non-zero bytes after `end` in the block holding it that are no record: a torn write or a
    /// damaged last record (which one depends on where the segment stands; see the module doc).
    pub tail: Option<Range<usize>>,
    /// Whether the bytes from `end` to the end of its block (the whole next block when `end` is
    /// on a boundary) are zeros: only then may appends continue at `end` without writing over
    /// anything recovery could not read.
    pub end_is_clean: bool,
}

/// Whether `b` could start a record: a length that adds up and fits, and a known kind
/// (cheap: the checksum is only computed for offsets that pass).
fn looks_like_record(b: &[u8]) -> Option<usize> {
    if b.len() < RECORD_HEADER {
        return None;
    }
    let total = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    let key_len = key_len_at(b);
    let value_len = u32::from_le_bytes(b[28..32].try_into().unwrap()) as usize;
    let ok = total >= RECORD_HEADER
        && total == RECORD_HEADER + key_len + value_len
        && total <= b.len()
        // (Every bit of the flags byte has a meaning since the database flag: no value of it
        // is impossible.)
        && kind_from(b[27]).is_some();
    ok.then_some(total)
}

/// The first offset from `from` (8-byte steps) that holds a valid record of this segment life.
fn find_next_valid(image: &[u8], from: usize, segment_seq: u64) -> Option<usize> {
    let mut at = from;
    while at + RECORD_HEADER <= image.len() {
        if looks_like_record(&image[at..]).is_some() && parse(&image[at..], segment_seq).is_some() {
            return Some(at);
        }
        at += 8;
    }
    None
}

/// Scan the image of one segment (its first byte is the segment's first byte; a shorter slice is
/// a segment cut short) for the records of the life `segment_seq`: every valid record, the damaged
/// ranges between them (a bad record is stepped over to the next offset that holds a valid one),
/// and how the segment ends. Never panics, whatever the bytes; the work is bounded by one pass
/// over the image plus one checksum per offset that looks like a record header.
pub fn scan_segment_image(image: &[u8], segment_seq: u64) -> SegmentScan<'_> {
    let mut scan = SegmentScan {
        end: SEGMENT_HEADER.min(image.len()),
        ..SegmentScan::default()
    };
    let mut at = SEGMENT_HEADER;
    while at + RECORD_HEADER <= image.len() {
        if let Some((start, p)) = next_record(image, at, segment_seq) {
            scan.records.push(ScannedRecord::new(start, &p));
            at = (start + align8(p.total)).min(image.len());
            scan.end = at;
            continue;
        }
        let Some(next) = find_next_valid(image, at + 8, segment_seq) else {
            break;
        };
        // Leading zeros are a gap before a record moved to the next block, not data.
        let first = (at..next)
            .step_by(8)
            .find(|&o| image[o..(o + 8).min(next)].iter().any(|&b| b != 0))
            .unwrap_or(at);
        scan.damaged.push(first..next);
        at = next;
    }
    let end = scan.end;
    let block_end = if end % BLOCK == 0 {
        end + BLOCK
    } else {
        end.next_multiple_of(BLOCK)
    }
    .min(image.len());
    let window = &image[end.min(block_end)..block_end];
    scan.end_is_clean = window.iter().all(|&b| b == 0);
    if end % BLOCK != 0 && !scan.end_is_clean {
        let last = window.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let claimed = looks_like_record(&image[end..]).unwrap_or(0);
        scan.tail = Some(end..end + last.max(claimed));
    }
    scan
}

/// What kind of bytes a [`DamagedRange`] covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DamageKind {
    /// Bytes between valid records that are no valid record.
    Records,
    /// Bytes after the last valid record of a segment older than the newest.
    Tail,
    /// A segment whose header is damaged and whose records could not tell its sequence number.
    Segment,
    /// Bytes the log had that the file no longer has (it was truncated).
    Missing,
    /// The end of the newest segment: a write torn by a crash (not counted as damage).
    TornWrite,
}

impl std::fmt::Display for DamageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DamageKind::Records => "bytes between records that are no valid record",
            DamageKind::Tail => "bytes after the segment's last valid record that are no record",
            DamageKind::Segment => {
                "a segment whose header is damaged and whose records could not be identified"
            }
            DamageKind::Missing => "bytes missing from the end of the file (truncated)",
            DamageKind::TornWrite => "a write torn by a crash at the end of the newest segment",
        })
    }
}

/// Bytes of the log that recovery could not read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DamagedRange {
    pub segment: u32,
    /// The segment's sequence number (its place in write order); `None` when it is unknown.
    pub segment_seq: Option<u64>,
    /// Offset inside the segment.
    pub offset: u64,
    pub bytes: u64,
    /// Offset in the file or device.
    pub file_offset: u64,
    pub kind: DamageKind,
}

impl DamagedRange {
    /// Where the range lies in write order: (segment sequence, offset); unknown segments last.
    pub fn position(&self) -> (u64, u64) {
        match self.segment_seq {
            Some(s) => (s, self.offset),
            None => (u64::MAX, 0),
        }
    }
}

impl std::fmt::Display for DamagedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seq = self
            .segment_seq
            .map(|s| format!(" (seq {s})"))
            .unwrap_or_default();
        write!(
            f,
            "segment {}{seq} bytes {}..{} ({} bytes at file offset {}): {}",
            self.segment,
            self.offset,
            self.offset + self.bytes,
            self.bytes,
            self.file_offset,
            self.kind
        )
    }
}

/// What opening (or checking) a log found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpenReport {
    pub segments_replayed: u32,
    pub records: u64,
    /// Newest segments whose end held a torn write (0 or 1): not damage, and not written over.
    pub torn_tails: u32,
    /// That torn write.
    pub torn_tail: Option<DamagedRange>,
    /// Every range that could not be read and may have held acknowledged data.
    pub damaged: Vec<DamagedRange>,
    /// Segments whose header was damaged but whose records told their sequence number (all
    /// their records were read; the segment is never appended to again).
    pub headers_repaired: u32,
    /// Bytes of the file, and of the log as its segment headers record it.
    pub file_bytes: u64,
    pub log_bytes: u64,
}

impl OpenReport {
    /// Whether acknowledged data may have been lost.
    pub fn is_damaged(&self) -> bool {
        !self.damaged.is_empty()
    }

    pub fn damaged_bytes(&self) -> u64 {
        self.damaged.iter().map(|d| d.bytes).sum()
    }

    /// The latest damaged position in write order: a key whose newest readable record lies before
    /// it may have had a newer version, or a delete, in the damaged bytes.
    pub fn last_damage(&self) -> Option<(u64, u64)> {
        self.damaged.iter().map(DamagedRange::position).max()
    }
}

/// How a segment's header block stands.
enum Header {
    Valid {
        seq: u64,
        log_bytes: Option<u64>,
    },
    /// The whole first block is zeros: never used, or freed.
    Zero,
    /// Neither: damaged. The sequence field as it reads, a hint for identifying the segment.
    Damaged {
        seq_field: u64,
    },
}

fn classify_header(block: &[u8]) -> Header {
    if let Some((seq, log_bytes)) = parse_header(block) {
        return Header::Valid { seq, log_bytes };
    }
    // Freeing a segment zeroes its whole first block, and a segment in use always has its header
    // written with that block: a zero header with data after it in the block is a damaged header
    // (a zeroed sector, say), not a free segment.
    if block.iter().all(|&b| b == 0) {
        return Header::Zero;
    }
    Header::Damaged {
        seq_field: u64::from_le_bytes(block[16..24].try_into().unwrap()),
    }
}

/// How many sequence numbers identification tries below the newest known one.
const IDENTIFY_SPAN: u64 = 1 << 20;

/// The multiplication by x^(8·len) mod the CRC polynomial, as the images of the 32 basis bits:
/// `crc32c(prefix ++ rest)` is that map of `crc32c(prefix)` xor a value of `rest` alone.
fn shift_basis(len: usize) -> [u32; 32] {
    let zero = crc32c::crc32c_combine(0, 0, len);
    std::array::from_fn(|i| crc32c::crc32c_combine(1 << i, 0, len) ^ zero)
}

fn apply_basis(basis: &[u32; 32], v: u32) -> u32 {
    (0..32)
        .filter(|i| v >> i & 1 != 0)
        .fold(0, |acc, i| acc ^ basis[i])
}

/// The inverse of a linear map given by its basis images (Gaussian elimination over GF(2));
/// `None` when it is singular. (The shift by x^(8·len) never is: x is invertible modulo the
/// CRC polynomial.)
fn invert_basis(basis: &[u32; 32]) -> Option<[u32; 32]> {
    // Rows: (image, preimage) pairs, reduced until the images are the unit vectors.
    let mut rows: Vec<(u32, u32)> = (0..32).map(|i| (basis[i], 1u32 << i)).collect();
    for bit in 0..32 {
        let pivot = (bit..32).find(|&r| rows[r].0 >> bit & 1 != 0)?;
        rows.swap(bit, pivot);
        let (pv, pp) = rows[bit];
        for (r, row) in rows.iter_mut().enumerate() {
            if r != bit && row.0 >> bit & 1 != 0 {
                row.0 ^= pv;
                row.1 ^= pp;
            }
        }
    }
    Some(std::array::from_fn(|i| rows[i].1))
}

/// The candidate sequence numbers of identification, indexed by their own checksum
/// (`crc32c(seq)`), built once per recovery: a damaged header then costs a lookup per record
/// tried, not [`IDENTIFY_SPAN`] checksums (that was about a second per damaged segment, so a log
/// of thousands of segments with zeroed headers took hours to open).
struct SeqWindow {
    by_crc: std::collections::HashMap<u32, u64>,
    /// Checksums two numbers of the window share (possible only across a 2^32 boundary): those
    /// fall back to trying the window in order.
    shared: HashSet<u32>,
    lo: u64,
    hi: u64,
}

impl SeqWindow {
    fn new(newest: u64) -> SeqWindow {
        let hi = newest.saturating_add(1);
        let lo = hi.saturating_sub(IDENTIFY_SPAN);
        let mut by_crc = std::collections::HashMap::with_capacity((hi - lo + 1) as usize);
        let mut shared = HashSet::new();
        for s in lo..=hi {
            let c = crc32c::crc32c(&s.to_le_bytes());
            if by_crc.insert(c, s).is_some() {
                shared.insert(c);
            }
        }
        SeqWindow {
            by_crc,
            shared,
            lo,
            hi,
        }
    }
}

/// The sequence number of a segment whose header is damaged, from its records: each record's
/// checksum is salted with it. Tries the header's own sequence field, then the numbers below
/// `newest + 1` not `taken` by another segment (at most [`IDENTIFY_SPAN`], the newest first),
/// against up to eight records found in the image.
fn identify_seq(
    image: &[u8],
    seq_field: u64,
    window: &SeqWindow,
    taken: &HashSet<u64>,
) -> Option<u64> {
    let mut candidates = Vec::new();
    let mut at = SEGMENT_HEADER;
    while at + RECORD_HEADER <= image.len() && candidates.len() < 8 {
        if let Some(total) = looks_like_record(&image[at..]) {
            candidates.push((at, total));
            at += align8(total);
        } else {
            at += 8;
        }
    }
    for (at, total) in candidates {
        let rec = &image[at..at + total];
        let want = u32::from_le_bytes(rec[0..4].try_into().unwrap());
        let rest = &rec[4..];
        // record_crc(seq, rest) = shift(crc32c(seq)) ^ crc32c_combine(0, crc32c(rest), len).
        let basis = shift_basis(rest.len());
        let target = want ^ crc32c::crc32c_combine(0, crc32c::crc32c(rest), rest.len());
        let matches = |s: u64| {
            s != 0
                && s <= super::MAX_SEQ
                && !taken.contains(&s)
                && apply_basis(&basis, crc32c::crc32c(&s.to_le_bytes())) == target
        };
        if matches(seq_field) {
            return Some(seq_field);
        }
        // The checksum the sequence number must have: the shift undone.
        let seq_crc = invert_basis(&basis).map(|inv| apply_basis(&inv, target));
        match seq_crc {
            Some(c) if !window.shared.contains(&c) => {
                if let Some(&s) = window.by_crc.get(&c) {
                    if matches(s) {
                        return Some(s);
                    }
                }
            }
            _ => {
                if let Some(s) = (window.lo..=window.hi).rev().find(|&s| matches(s)) {
                    return Some(s);
                }
            }
        }
    }
    None
}

/// A segment recovery found and replayed.
#[derive(Debug, Clone, Copy)]
pub(super) struct FoundSegment {
    pub index: u32,
    pub seq: u64,
    /// Where its last valid record ends.
    pub end: usize,
    pub live: u64,
    pub end_is_clean: bool,
    /// Its header was damaged (identified from its records), or it holds damaged ranges: never
    /// append to it (its bytes stay as they are, for repair).
    pub damaged: bool,
}

/// What [`scan_log`] found.
pub(super) struct LogScan {
    pub report: OpenReport,
    /// In write order.
    pub found: Vec<FoundSegment>,
    /// Segments whose header is damaged and that could not be identified.
    pub unreadable: Vec<u32>,
    /// The newest segment's image (for appends to go on in it).
    pub newest_image: Option<AlignedBuf>,
    /// The largest record sequence number met.
    pub max_record_seq: u64,
}

/// Reads each `(offset, buffer)`, filling every buffer whole; bytes past the end of the file
/// read as zeros.
pub(super) type ReadBatch<'r> = dyn FnMut(&mut [(u64, &mut AlignedBuf)]) -> Result<()> + 'r;

/// Scan a log of `count` segments of `seg` bytes in a file of `file_bytes` bytes: headers first
/// (damaged ones identified from their records), then every segment in write order, each valid
/// record handed to `on_record`. Reads only.
pub(super) fn scan_log(
    count: usize,
    seg: usize,
    file_bytes: u64,
    read: &mut ReadBatch<'_>,
    on_record: &mut dyn FnMut(Recovered<'_>),
) -> Result<LogScan> {
    let mut report = OpenReport {
        file_bytes,
        ..OpenReport::default()
    };
    let mut valid: Vec<(u64, u32)> = Vec::new();
    let mut damaged_headers: Vec<(u32, u64)> = Vec::new();
    for start in (0..count).step_by(64) {
        let end = (start + 64).min(count);
        let mut bufs: Vec<AlignedBuf> = (start..end).map(|_| AlignedBuf::new(ALIGN)).collect();
        let mut reqs: Vec<(u64, &mut AlignedBuf)> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| ((start + i) as u64 * seg as u64, b))
            .collect();
        read(&mut reqs)?;
        for (i, b) in bufs.iter().enumerate() {
            let index = (start + i) as u32;
            match classify_header(b) {
                Header::Valid { seq, log_bytes } => {
                    valid.push((seq, index));
                    report.log_bytes = report.log_bytes.max(log_bytes.unwrap_or(0));
                }
                Header::Zero => {}
                Header::Damaged { seq_field } => damaged_headers.push((index, seq_field)),
            }
        }
    }
    let mut image = AlignedBuf::new(seg);
    let mut read_segment = |index: u32, image: &mut AlignedBuf| -> Result<()> {
        let mut reqs = [(index as u64 * seg as u64, image)];
        read(&mut reqs)
    };
    // Segments whose header is damaged: their records carry the sequence number in their salt.
    let mut taken: HashSet<u64> = valid.iter().map(|&(s, _)| s).collect();
    let newest = valid.iter().map(|&(s, _)| s).max().unwrap_or(0);
    let mut repaired: HashSet<u32> = HashSet::new();
    let mut unreadable = Vec::new();
    let mut window: Option<SeqWindow> = None;
    for &(index, seq_field) in &damaged_headers {
        read_segment(index, &mut image)?;
        if image[SEGMENT_HEADER..].iter().all(|&b| b == 0) {
            // Nothing was ever written after the header: nothing to lose.
            continue;
        }
        let window = window.get_or_insert_with(|| SeqWindow::new(newest));
        match identify_seq(&image, seq_field, window, &taken) {
            Some(seq) => {
                taken.insert(seq);
                valid.push((seq, index));
                repaired.insert(index);
                report.headers_repaired += 1;
            }
            None => {
                unreadable.push(index);
                report.damaged.push(DamagedRange {
                    segment: index,
                    segment_seq: None,
                    offset: 0,
                    bytes: seg as u64,
                    file_offset: index as u64 * seg as u64,
                    kind: DamageKind::Segment,
                });
            }
        }
    }
    valid.sort_unstable();
    let mut found = Vec::with_capacity(valid.len());
    let mut max_record_seq = 0;
    let mut newest_image = None;
    for (nth, &(segment_seq, index)) in valid.iter().enumerate() {
        read_segment(index, &mut image)?;
        let scan = scan_segment_image(&image, segment_seq);
        let mut live = 0u64;
        for r in &scan.records {
            max_record_seq = max_record_seq.max(r.seq);
            live += r.total as u64;
            on_record(Recovered {
                key: &r.key,
                loc: super::NvLoc {
                    segment: index,
                    offset: r.offset as u32,
                    len: r.total as u32,
                },
                seq: r.seq,
                segment_seq,
                kind: r.kind,
                expires_at_ms: r.expires_at_ms,
                tombstone: r.tombstone,
                flush_all: r.flush_all,
                value_len: r.value.len() as u32,
            });
        }
        report.records += scan.records.len() as u64;
        report.segments_replayed += 1;
        let base = index as u64 * seg as u64;
        let range = |r: &Range<usize>, kind| DamagedRange {
            segment: index,
            segment_seq: Some(segment_seq),
            offset: r.start as u64,
            bytes: (r.end - r.start) as u64,
            file_offset: base + r.start as u64,
            kind,
        };
        for d in &scan.damaged {
            report.damaged.push(range(d, DamageKind::Records));
        }
        let is_newest = nth + 1 == valid.len();
        if let Some(t) = &scan.tail {
            if is_newest {
                report.torn_tails += 1;
                report.torn_tail = Some(range(t, DamageKind::TornWrite));
            } else {
                report.damaged.push(range(t, DamageKind::Tail));
            }
        }
        found.push(FoundSegment {
            index,
            seq: segment_seq,
            end: scan.end,
            live,
            end_is_clean: scan.end_is_clean,
            damaged: repaired.contains(&index) || !scan.damaged.is_empty(),
        });
        if is_newest {
            let mut keep = AlignedBuf::new(seg);
            keep.copy_from_slice(&image);
            newest_image = Some(keep);
        }
    }
    if report.log_bytes > file_bytes {
        let seg = seg as u64;
        report.damaged.push(DamagedRange {
            segment: (file_bytes / seg) as u32,
            segment_seq: None,
            offset: file_bytes % seg,
            bytes: report.log_bytes - file_bytes,
            file_offset: file_bytes,
            kind: DamageKind::Missing,
        });
    }
    Ok(LogScan {
        report,
        found,
        unreadable,
        newest_image,
        max_record_seq,
    })
}

/// Read `reqs` from a plain file (the offline check: no `O_DIRECT`, no writes). Bytes past the
/// end read as zeros; interrupted reads are retried and short ones continued by `read_exact_at`.
pub(super) fn read_plain(
    file: &std::fs::File,
    file_bytes: u64,
    reqs: &mut [(u64, &mut AlignedBuf)],
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    for (offset, buf) in reqs.iter_mut() {
        let have = file_bytes.saturating_sub(*offset).min(buf.len() as u64) as usize;
        buf[have..].fill(0);
        file.read_exact_at(&mut buf[..have], *offset)
            .map_err(|source| StoreError::Io {
                context: format!("reading {have} bytes at offset {offset} of the log"),
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shift_basis_reproduces_the_salted_checksum() {
        let rest = b"some record bytes after the checksum field";
        for seq in [1u64, 7, 123_456_789] {
            let direct = super::super::record_crc(seq, rest);
            let basis = shift_basis(rest.len());
            let via = apply_basis(&basis, crc32c::crc32c(&seq.to_le_bytes()))
                ^ crc32c::crc32c_combine(0, crc32c::crc32c(rest), rest.len());
            assert_eq!(direct, via);
        }
    }

    #[test]
    fn the_inverse_basis_undoes_the_shift() {
        for len in [1usize, 28, 60, 4096, 2 << 20] {
            let basis = shift_basis(len);
            let inv = invert_basis(&basis).expect("the shift is invertible");
            for v in [1u32, 0x8000_0000, 0xdead_beef, 0x1234_5678, u32::MAX] {
                assert_eq!(apply_basis(&inv, apply_basis(&basis, v)), v, "len {len}");
            }
        }
        let mut singular = shift_basis(8);
        singular[3] = singular[5];
        assert!(invert_basis(&singular).is_none());
    }

    /// A segment image with its header zeroed and records salted with `seq`.
    fn salted_image(seq: u64) -> Vec<u8> {
        let mut image = vec![0u8; 16 << 10];
        let mut at = SEGMENT_HEADER;
        for i in 0..3u8 {
            let key = [b'k', i];
            let value = vec![i; 40];
            let total = RECORD_HEADER + key.len() + value.len();
            let rec = &mut image[at..at + total];
            rec[4..8].copy_from_slice(&(total as u32).to_le_bytes());
            rec[24..26].copy_from_slice(&(key.len() as u16).to_le_bytes());
            rec[28..32].copy_from_slice(&(value.len() as u32).to_le_bytes());
            rec[RECORD_HEADER..RECORD_HEADER + 2].copy_from_slice(&key);
            rec[RECORD_HEADER + 2..].copy_from_slice(&value);
            let crc = super::super::record_crc(seq, &rec[4..]);
            rec[0..4].copy_from_slice(&crc.to_le_bytes());
            at += align8(total);
        }
        image
    }

    /// Identification finds the number salted into the records by one lookup in the window
    /// (before: up to 2^20 checksums per record tried), anywhere in the window, never one another
    /// segment holds, and nothing outside the window.
    #[test]
    fn a_damaged_header_is_identified_by_a_lookup_in_the_window() {
        let newest = 5_000_000u64;
        let window = SeqWindow::new(newest);
        let none = HashSet::new();
        for seq in [
            newest + 1,
            newest,
            newest - 1,
            newest + 1 - IDENTIFY_SPAN,
            4_321_987,
        ] {
            let image = salted_image(seq);
            if looks_like_record(&image[SEGMENT_HEADER..]).is_none() {
                panic!("the test's record is not framed as the log frames one");
            }
            assert_eq!(identify_seq(&image, 0, &window, &none), Some(seq), "{seq}");
            let taken: HashSet<u64> = [seq].into();
            assert_eq!(
                identify_seq(&image, 0, &window, &taken),
                None,
                "{seq} taken"
            );
        }
        // Its own (damaged) header field, when right, wins even outside the window.
        assert_eq!(identify_seq(&salted_image(7), 7, &window, &none), Some(7));
        assert_eq!(identify_seq(&salted_image(7), 0, &window, &none), None);
        assert_eq!(
            identify_seq(&salted_image(newest - IDENTIFY_SPAN - 5), 0, &window, &none),
            None
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in [0usize, 1, 31, 64, 65, 100, 4096, 8192 + 5] {
            let image: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let s = scan_segment_image(&image, 3);
            assert!(s.records.is_empty());
            assert!(s.end <= len);
        }
    }
}
