//! Recovery of the store's NVMe log from a damaged or forged device image: `Log::open` replays a
//! file written from the input, with a tiny log (four segments of 64 KiB).
//!
//! Input: one flags byte, then up to four pieces of `PIECE` bytes; piece `i` is the start of
//! segment `i` (the rest of the file is zeros). With flag bit 0 set, the harness first recomputes
//! the CRC32C of every segment header that has the log's magic, and of every record it can frame
//! after it, so that the fuzzer gets past the checksums to the replay itself (this mirrors the
//! on-disk format of `cxltier_store::log`: keep the two in step).
//!
//! Checks: every replayed record lies inside its segment, after the header, with a length that
//! adds up; it reads back (`Log::read`) with the key, kind, expiry and sequence number replay
//! gave; and the log takes one more append that reads back.
#![no_main]

use cxltier_store::log::{Log, LogConfig};
use cxltier_store::Kind;
use libfuzzer_sys::fuzz_target;
use std::io::Write;
use std::path::PathBuf;

const SEGMENT: usize = 64 << 10;
const SEGMENTS: usize = 4;
/// Bytes of input per segment: its first two 4 KiB blocks, so that the fuzzer can place a record
/// after the block gap recovery skips.
const PIECE: usize = 8 << 10;
const SEGMENT_HEADER: usize = 64;
const RECORD_HEADER: usize = 32;
const BLOCK: usize = 4096;
const MAGIC: u64 = 0x4358_4c54_4c4f_4731;

/// The file the log lives in: under the fuzz project's `target/` (a disk-backed file system, as
/// `O_DIRECT` needs; tmpfs refuses it), one per process so that parallel jobs do not collide.
fn log_path() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-tmp");
    std::fs::create_dir_all(&dir).expect("create fuzz/target/fuzz-tmp");
    dir.join(format!("log_recovery-{}.log", std::process::id()))
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// Recompute the checksums of a segment image's header and of the records that follow it.
fn fix_checksums(seg: &mut [u8]) {
    if seg.len() < SEGMENT_HEADER || u64::from_le_bytes(seg[0..8].try_into().unwrap()) != MAGIC {
        return;
    }
    let crc = crc32c::crc32c(&seg[0..24]);
    seg[24..28].copy_from_slice(&crc.to_le_bytes());
    let segment_seq = u64::from_le_bytes(seg[16..24].try_into().unwrap());
    let mut at = SEGMENT_HEADER;
    loop {
        let framed = |at: usize| -> Option<usize> {
            let b = seg.get(at..)?;
            if b.len() < RECORD_HEADER {
                return None;
            }
            let total = u32_at(b, 4) as usize;
            let key_len = u16::from_le_bytes([b[24], b[25]]) as usize;
            let value_len = u32_at(b, 28) as usize;
            (total >= RECORD_HEADER
                && total == RECORD_HEADER + key_len + value_len
                && total <= b.len())
            .then_some(total)
        };
        let (start, total) = match framed(at) {
            Some(t) => (at, t),
            None => {
                let next = at.next_multiple_of(BLOCK);
                match framed(next) {
                    Some(t)
                        if !at.is_multiple_of(BLOCK) && seg[at..next].iter().all(|&b| b == 0) =>
                    {
                        (next, t)
                    }
                    _ => return,
                }
            }
        };
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&segment_seq.to_le_bytes()),
            &seg[start + 4..start + total],
        );
        seg[start..start + 4].copy_from_slice(&crc.to_le_bytes());
        at = start + total.div_ceil(8) * 8;
    }
}

/// A record as replay reported it.
struct Seen {
    loc: cxltier_store::log::NvLoc,
    key: Vec<u8>,
    kind: Kind,
    expires_at_ms: Option<u64>,
    seq: u64,
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let mut image = vec![0u8; SEGMENT * SEGMENTS];
    for (i, piece) in body.chunks(PIECE).take(SEGMENTS).enumerate() {
        let seg = &mut image[i * SEGMENT..(i + 1) * SEGMENT];
        seg[..piece.len()].copy_from_slice(piece);
        if flags & 1 != 0 {
            fix_checksums(seg);
        }
    }
    let path = log_path();
    {
        let mut f = std::fs::File::create(&path).expect("create the log file");
        f.write_all(&image).expect("write the log image");
    }
    let mut cfg = LogConfig {
        segment_size: SEGMENT as u32,
        ..LogConfig::new(&path, Some((SEGMENT * SEGMENTS) as u64))
    };
    // A damaged image is refused without a byte written; the operator's override then opens it
    // and serves what is readable, which is what the checks below look at.
    match Log::open(&cfg, &mut |_| {}) {
        Err(cxltier_store::StoreError::Damaged(_)) => {
            let after = std::fs::read(&path).expect("read the log file back");
            assert!(after == image, "a refused open wrote to the log");
            cfg.recover_anyway = true;
        }
        Err(cxltier_store::StoreError::Full { .. }) => return,
        Err(e) => panic!("opening a log image failed: {e}"),
        Ok(_) => {}
    }
    let mut seen: Vec<Seen> = Vec::new();
    let opened = Log::open(&cfg, &mut |r| {
        let loc = r.loc;
        assert!(
            (loc.segment as usize) < SEGMENTS,
            "record in segment {}",
            loc.segment
        );
        assert!(
            loc.offset as usize >= SEGMENT_HEADER,
            "record at {loc:?} inside the header"
        );
        assert!(
            loc.offset as usize + loc.len as usize <= SEGMENT,
            "record at {loc:?} runs past its segment"
        );
        // A record of the first format (no database byte in its key) is read back as
        // database 0's: its key one byte longer than the record holds.
        let stored_key = (loc.len as usize).checked_sub(RECORD_HEADER + r.value_len as usize);
        assert!(
            stored_key.is_some_and(|k| r.key.len() == k || r.key.len() == k + 1),
            "record at {loc:?}: header, key and value do not add up to its length"
        );
        if !r.tombstone && !r.flush_all {
            seen.push(Seen {
                loc,
                key: r.key.to_vec(),
                kind: r.kind,
                expires_at_ms: r.expires_at_ms,
                seq: r.seq,
            });
        }
    });
    let (mut log, report) = match opened {
        Ok(x) => x,
        // A full log (every segment sealed with no room) is a valid outcome of a forged image.
        Err(cxltier_store::StoreError::Full { .. }) => return,
        Err(e) => panic!("opening a log image failed: {e}"),
    };
    assert!(report.segments_replayed as usize <= SEGMENTS);
    for s in &seen {
        let r = log.read(s.loc).unwrap_or_else(|e| {
            panic!("the record replayed at {:?} does not read back: {e}", s.loc)
        });
        assert_eq!(r.key, s.key, "key at {:?}", s.loc);
        assert_eq!(r.kind, s.kind, "kind at {:?}", s.loc);
        assert_eq!(r.expires_at_ms, s.expires_at_ms, "expiry at {:?}", s.loc);
        assert_eq!(r.seq, s.seq, "sequence number at {:?}", s.loc);
    }
    match log.append(b"after-recovery", Kind::String, b"value", None) {
        Ok(loc) => {
            let r = log
                .read(loc)
                .expect("the record appended after recovery reads back");
            assert_eq!(r.key, b"after-recovery");
            assert_eq!(r.value, b"value");
        }
        Err(cxltier_store::StoreError::Full { .. }) => {}
        Err(e) => panic!("appending after recovery failed: {e}"),
    }
});
