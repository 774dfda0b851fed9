use super::*;
use crate::testing::{temp_file, TempFile};
use std::collections::BTreeMap;

pub(crate) fn temp_path(name: &str) -> TempFile {
    temp_file("cxltier-log-", name)
}

fn cfg(path: &Path, segments: u64) -> LogConfig {
    LogConfig {
        path: path.to_path_buf(),
        capacity: Some(segments * 64 * 1024),
        segment_size: 64 * 1024,
        recover_anyway: false,
    }
}

/// A new log of `segments` segments: its file, its configuration and the log.
fn fresh(segments: u64) -> (TempFile, LogConfig, Log) {
    let p = temp_path("log");
    let c = cfg(&p, segments);
    let (log, _) = Log::open(&c, &mut |_| {}).unwrap();
    (p, c, log)
}

/// Appends `value` under `key`, marking the record it replaces (`last`) dead: the new record's
/// location, kept in `last` too.
fn rewrite(log: &mut Log, key: &[u8], value: &[u8], last: &mut Option<NvLoc>) -> NvLoc {
    let l = log.append(key, Kind::String, value, None).unwrap();
    if let Some(o) = last.replace(l) {
        log.mark_dead(o);
    }
    l
}

/// Replay into a key → location model the way the store does.
fn open_model(c: &LogConfig) -> (Log, BTreeMap<Vec<u8>, NvLoc>) {
    // key → (seq, its value's location, or its tombstone's location and what it shields)
    type Latest = (u64, Result<NvLoc, (NvLoc, u64)>);
    let mut latest: BTreeMap<Vec<u8>, Latest> = BTreeMap::new();
    let mut flush_seq = 0;
    let mut dead = Vec::new();
    let (mut log, _) = Log::open(c, &mut |r| {
        if r.flush_all {
            flush_seq = r.seq;
            for (_, (_, l)) in std::mem::take(&mut latest) {
                dead.push(l.unwrap_or_else(|t| t.0));
            }
            return;
        }
        if r.seq < flush_seq {
            dead.push(r.loc);
            return;
        }
        match latest.get(r.key) {
            Some(&(s, _)) if s > r.seq => dead.push(r.loc),
            prev => {
                if let Some(&(_, l)) = prev {
                    dead.push(l.unwrap_or_else(|t| t.0));
                }
                let now = if r.tombstone {
                    Err((r.loc, r.tombstone_before()))
                } else {
                    Ok(r.loc)
                };
                latest.insert(r.key.to_vec(), (r.seq, now));
            }
        }
    })
    .unwrap();
    for l in dead {
        log.mark_dead(l);
    }
    for (_, l) in latest.values() {
        if let Err((t, before)) = l {
            log.note_tombstone(*t, *before);
        }
    }
    log.release_tombstones();
    let map = latest
        .into_iter()
        .filter_map(|(k, (_, l))| l.ok().map(|l| (k, l)))
        .collect();
    (log, map)
}

#[test]
fn append_read_and_reopen() {
    let p = temp_path("log");
    let c = cfg(&p, 16);
    let mut locs = Vec::new();
    {
        let (mut log, report) = Log::open(&c, &mut |_| panic!("a new log has no records")).unwrap();
        assert_eq!(report.records, 0);
        for i in 0..200u32 {
            let v = vec![i as u8; 700];
            locs.push(
                log.append(format!("k{i}").as_bytes(), Kind::String, &v, None)
                    .unwrap(),
            );
        }
        let got = log.read_many(&locs);
        for (i, r) in got.into_iter().enumerate() {
            assert_eq!(r.unwrap().value, vec![i as u8; 700]);
        }
        // A record that fits in a device block never straddles two (one block per read): some
        // were moved past the end of a block, and recovery below steps over those gaps.
        for l in &locs {
            let (first, last) = (l.offset / 4096, (l.offset + l.len - 1) / 4096);
            assert_eq!(first, last, "{l:?} straddles a block");
        }
        assert!(locs.windows(2).any(|w| w[0].segment == w[1].segment
            && w[1].offset > (w[0].offset + w[0].len).next_multiple_of(8)));
        log.sync(true).unwrap();
    }
    let (mut log, map) = open_model(&c);
    assert_eq!(map.len(), 200);
    for i in 0..200u32 {
        let r = log.read(map[format!("k{i}").as_bytes()]).unwrap();
        assert_eq!(r.value, vec![i as u8; 700]);
    }
}

#[test]
fn a_torn_tail_is_dropped_and_earlier_records_survive() {
    let p = temp_path("log");
    let c = cfg(&p, 8);
    let last;
    {
        let (mut log, _) = Log::open(&c, &mut |_| {}).unwrap();
        log.append(b"a", Kind::String, b"first", None).unwrap();
        last = log.append(b"b", Kind::String, &[7u8; 300], None).unwrap();
        log.sync(true).unwrap();
    }
    // Tear the second record: flip a byte in its value on disk.
    let mut bytes = std::fs::read(&p).unwrap();
    let at = last.segment as usize * 64 * 1024 + last.offset as usize + 100;
    bytes[at] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();
    let mut torn = 0;
    let (log, map) = {
        let (l, m) = open_model(&c);
        torn += 1;
        (l, m)
    };
    assert_eq!(torn, 1);
    assert_eq!(map.len(), 1);
    assert!(map.contains_key(&b"a"[..]));
    drop(log);
}

#[test]
fn cleaning_frees_segments_and_keeps_values() {
    let (_p, c, mut log) = fresh(12);
    let mut live: BTreeMap<Vec<u8>, NvLoc> = BTreeMap::new();
    // Overwrite 20 keys many times: most of the log becomes dead.
    for round in 0..60u32 {
        for k in 0..20u32 {
            let key = format!("key{k}").into_bytes();
            let loc = match log.append(&key, Kind::String, &[round as u8; 900], None) {
                Ok(l) => l,
                Err(StoreError::Full { .. }) => {
                    let mut moved = Vec::new();
                    log.clean(4, &mut |k, l| live.get(k) == Some(&l), &mut |k, _, n| {
                        moved.push((k.to_vec(), n))
                    })
                    .unwrap();
                    for (k, n) in moved {
                        live.insert(k, n);
                    }
                    log.append(&key, Kind::String, &[round as u8; 900], None)
                        .unwrap()
                }
                Err(e) => panic!("{e}"),
            };
            if let Some(old) = live.insert(key, loc) {
                log.mark_dead(old);
            }
        }
    }
    assert!(log.stats().segments_cleaned > 0);
    for (k, l) in &live {
        assert_eq!(log.read(*l).unwrap().key, *k);
        assert_eq!(log.read(*l).unwrap().value, vec![59u8; 900]);
    }
    log.sync(true).unwrap();
    drop(log);
    let (mut log, map) = open_model(&c);
    assert_eq!(map.len(), 20);
    for l in map.values() {
        assert_eq!(log.read(*l).unwrap().value, vec![59u8; 900]);
    }
}

#[test]
fn deleted_keys_stay_deleted_through_cleaning_and_reopen() {
    let (_p, c, mut log) = fresh(12);
    let old = log.append(b"gone", Kind::String, b"v", None).unwrap();
    // Fill some segments with a key that is rewritten, so there is something to clean.
    let mut live: Option<NvLoc> = None;
    for i in 0..150u32 {
        rewrite(&mut log, b"churn", &[i as u8; 1000], &mut live);
        if i == 10 {
            log.mark_dead(old);
            log.append_tombstone(b"gone").unwrap();
        }
    }
    let mut moved = None;
    log.clean(
        10,
        &mut |k, l| k == b"churn" && Some(l) == live,
        &mut |_, _, n| moved = Some(n),
    )
    .unwrap();
    if let Some(n) = moved {
        live = Some(n);
    }
    log.sync(true).unwrap();
    drop(log);
    let (_, map) = open_model(&c);
    assert!(!map.contains_key(&b"gone"[..]), "a deleted key came back");
    assert!(map.contains_key(&b"churn"[..]));
    let _ = live;
}

#[test]
fn a_full_log_refuses_writes_and_keeps_reads() {
    let (_p, c, mut log) = fresh(6);
    let mut locs = Vec::new();
    let err = loop {
        match log.append(
            format!("k{}", locs.len()).as_bytes(),
            Kind::String,
            &[1u8; 2000],
            None,
        ) {
            Ok(l) => locs.push(l),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, StoreError::Full { .. }), "{err}");
    assert!(err.to_string().contains("--ssd"));
    for l in &locs {
        assert_eq!(log.read(*l).unwrap().value.len(), 2000);
    }
    log.sync(true).unwrap();
    drop(log);
    let (_, map) = open_model(&c);
    assert_eq!(map.len(), locs.len());
}

#[test]
fn flush_all_forgets_everything_before_it() {
    let (_p, c, mut log) = fresh(8);
    for i in 0..100u32 {
        log.append(format!("a{i}").as_bytes(), Kind::String, &[0u8; 800], None)
            .unwrap();
    }
    log.flush_all().unwrap();
    log.append(b"after", Kind::Hash, b"x", Some(42)).unwrap();
    log.sync(true).unwrap();
    drop(log);
    let (mut log, map) = open_model(&c);
    assert_eq!(
        map.keys().cloned().collect::<Vec<_>>(),
        vec![b"after".to_vec()]
    );
    let r = log.read(map[&b"after"[..]]).unwrap();
    assert_eq!((r.kind, r.expires_at_ms), (Kind::Hash, Some(42)));
}

#[test]
fn a_new_file_needs_a_size() {
    let p = temp_path("nosize");
    let e = Log::open(&LogConfig::new(&*p, None), &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains(":SIZE"), "{e}");
}

/// Writing ahead writes only whole blocks, once enough wait; the records in them survive a crash
/// (nothing synced, the log never closed), and none comes back damaged.
#[test]
fn write_ahead_writes_whole_blocks_that_survive_a_crash() {
    let p = temp_path("log");
    let c = cfg(&p, 16);
    {
        let (mut log, _) = Log::open(&c, &mut |_| {}).unwrap();
        for i in 0..20u8 {
            log.append(format!("k{i}").as_bytes(), Kind::String, &[i; 700], None)
                .unwrap();
        }
        // About 15 KB wait: under a 32 KiB threshold nothing is written.
        let before = log.stats();
        log.write_ahead(32 << 10).unwrap();
        assert_eq!(log.stats().writes, before.writes);
        log.write_ahead(4096).unwrap();
        let after = log.stats();
        assert_eq!(after.writes, before.writes + 1);
        let written = after.write_bytes - before.write_bytes;
        assert!(written > 0 && written % 4096 == 0, "{written} bytes");
        assert!(log.has_unflushed(), "the partial last block waits for more");
        // A crash: no sync, no close.
        std::mem::forget(log);
    }
    let (mut log, map) = open_model(&c);
    assert!((10..20).contains(&map.len()), "{} records back", map.len());
    for (k, l) in &map {
        let i: u8 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
        assert_eq!(log.read(*l).unwrap().value, vec![i; 700]);
    }
}

const SEG: usize = 64 * 1024;

/// Write `n` keys `k{i}` of 700 bytes each (about 80 per segment), synced; their locations.
fn fill(c: &LogConfig, n: u32) -> Vec<NvLoc> {
    let (mut log, _) = Log::open(c, &mut |_| {}).unwrap();
    let locs = (0..n)
        .map(|i| {
            log.append(
                format!("k{i}").as_bytes(),
                Kind::String,
                &[i as u8; 700],
                None,
            )
            .unwrap()
        })
        .collect();
    log.sync(true).unwrap();
    locs
}

/// A fresh log of 16 segments [`fill`]ed with `n` keys: its file, its configuration and the
/// keys' locations.
fn filled(n: u32) -> (TempFile, LogConfig, Vec<NvLoc>) {
    let p = temp_path("log");
    let c = cfg(&p, 16);
    let locs = fill(&c, n);
    (p, c, locs)
}

/// The damage a plain open of `c` is refused for, and the refusal's text.
fn refused(c: &LogConfig) -> (Box<crate::Damage>, String) {
    let err = Log::open(c, &mut |_| {}).unwrap_err();
    let text = err.to_string();
    match err {
        StoreError::Damaged(d) => (d, text),
        other => panic!("{other}"),
    }
}

fn flip(path: &Path, at: usize, len: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    for b in &mut bytes[at..at + len] {
        *b ^= 0x5a;
    }
    std::fs::write(path, &bytes).unwrap();
}

fn file_at(loc: NvLoc) -> usize {
    loc.segment as usize * SEG + loc.offset as usize
}

fn anyway(c: &LogConfig) -> LogConfig {
    LogConfig {
        recover_anyway: true,
        ..c.clone()
    }
}

/// Replay with the override; the report and the keys back with their values checked.
fn open_anyway(c: &LogConfig) -> (Log, OpenReport, BTreeMap<Vec<u8>, NvLoc>) {
    let mut latest = BTreeMap::new();
    let (mut log, report) = Log::open(&anyway(c), &mut |r| {
        latest.insert(r.key.to_vec(), r.loc);
    })
    .unwrap();
    for (k, l) in &latest {
        let i: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
        assert_eq!(log.read(*l).unwrap().value, vec![i as u8; 700]);
    }
    (log, report, latest)
}

#[test]
fn flipped_bytes_in_a_sealed_segment_refuse_the_open_and_the_override_keeps_every_other_record() {
    let (p, c, locs) = filled(300);
    // A record in the middle of the first (sealed) segment, with records after it there.
    let victim = locs[40];
    assert_eq!(victim.segment, locs[0].segment);
    assert_eq!(locs[41].segment, victim.segment);
    flip(&p, file_at(victim) + 200, 16);
    let before = std::fs::read(&p).unwrap();
    let (d, err) = refused(&c);
    assert_eq!(d.report.damaged.len(), 1, "{err}");
    let r = &d.report.damaged[0];
    assert_eq!(r.kind, DamageKind::Records);
    assert_eq!(r.segment, victim.segment);
    // The range covers the damaged bytes and stops at the next valid record.
    assert!(r.offset <= victim.offset as u64 + 200, "{r}");
    assert_eq!(r.offset + r.bytes, locs[41].offset as u64, "{r}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("segment {} ", victim.segment)),
        "{text}"
    );
    assert!(text.contains("--recover-anyway"), "{text}");
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a refused open wrote to the file"
    );

    let (_log, report, map) = open_anyway(&c);
    assert_eq!(map.len(), 299, "every record but the damaged one");
    assert!(!map.contains_key(&b"k40"[..]));
    assert!(map.contains_key(&b"k41"[..]), "the record after the damage");
    assert_eq!(report.damaged_bytes(), r.bytes);
    assert_eq!(report.records, 299);
}

#[test]
fn a_damaged_tail_of_an_older_segment_is_damage() {
    let (p, c, locs) = filled(300);
    let last_of_first = locs
        .iter()
        .rev()
        .find(|l| l.segment == locs[0].segment)
        .copied()
        .unwrap();
    flip(&p, file_at(last_of_first) + 40, 16);
    let (d, err) = refused(&c);
    assert_eq!(d.report.damaged[0].kind, DamageKind::Tail, "{err}");
    assert_eq!(d.report.damaged[0].offset, last_of_first.offset as u64);
}

#[test]
fn a_damaged_header_of_the_newest_segment_is_identified_from_its_records() {
    let (p, c, locs) = filled(300);
    let newest = locs.last().unwrap().segment;
    flip(&p, newest as usize * SEG + 8, 16);
    let (mut log, report, map) = open_anyway(&c);
    assert_eq!(map.len(), 300, "{report:?}");
    assert_eq!(report.headers_repaired, 1);
    assert!(!report.is_damaged(), "{:?}", report.damaged);
    // Appends go to another segment: the damaged one is never written again.
    let l = log.append(b"new", Kind::String, b"v", None).unwrap();
    assert_ne!(l.segment, newest);
    log.sync(true).unwrap();
    drop(log);
    let (_, map) = open_model(&c);
    assert_eq!(map.len(), 301);
}

#[test]
fn a_segment_whose_header_and_records_are_gone_is_damage() {
    let (p, c, locs) = filled(300);
    let seg0 = locs[0].segment as usize;
    // Header and every record start of the first block: no record tells the segment's seq.
    let mut bytes = std::fs::read(&p).unwrap();
    for b in &mut bytes[seg0 * SEG..(seg0 + 1) * SEG] {
        *b = !*b;
    }
    std::fs::write(&p, &bytes).unwrap();
    let (d, err) = refused(&c);
    assert_eq!(d.report.damaged[0].kind, DamageKind::Segment, "{err}");
    assert_eq!(d.report.damaged[0].bytes, SEG as u64);
}

#[test]
fn a_truncated_file_is_refused_and_names_the_missing_bytes() {
    let (p, c, _) = filled(300);
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(3 * SEG as u64 + 1000).unwrap();
    drop(f);
    for c in [
        c.clone(),
        LogConfig {
            capacity: None,
            ..c.clone()
        },
    ] {
        let (d, err) = refused(&c);
        let m = d
            .report
            .damaged
            .iter()
            .find(|d| d.kind == DamageKind::Missing)
            .unwrap();
        assert_eq!(m.file_offset, 3 * SEG as u64 + 1000, "{err}");
        assert_eq!(m.bytes, 16 * SEG as u64 - m.file_offset, "{err}");
    }
    // With the override the log gets its size back and serves the readable records.
    let (log, _, map) = open_anyway(&c);
    assert!(!map.is_empty());
    assert_eq!(log.stats().capacity, 16 * SEG as u64);
}

#[test]
fn a_damaged_open_segment_is_not_zeroed_and_repairing_it_brings_everything_back() {
    let (p, c, locs) = filled(300);
    let newest = locs.last().unwrap().segment;
    let in_newest: Vec<NvLoc> = locs
        .iter()
        .filter(|l| l.segment == newest)
        .copied()
        .collect();
    assert!(in_newest.len() > 3);
    let victim = in_newest[1];
    let pristine = std::fs::read(&p).unwrap();
    flip(&p, file_at(victim) + 100, 16);
    {
        let (mut log, report, map) = open_anyway(&c);
        assert_eq!(map.len(), 299);
        assert_eq!(report.damaged.len(), 1);
        // Writes go on elsewhere and reach the disk.
        for i in 300..400u32 {
            let key = format!("k{i}");
            log.append(key.as_bytes(), Kind::String, &[i as u8; 700], None)
                .unwrap();
        }
        log.sync(true).unwrap();
    }
    let now = std::fs::read(&p).unwrap();
    let seg = newest as usize * SEG..(newest as usize + 1) * SEG;
    let mut damaged = pristine[seg.clone()].to_vec();
    for b in &mut damaged[victim.offset as usize + 100..victim.offset as usize + 116] {
        *b ^= 0x5a;
    }
    assert!(
        now[seg.clone()] == damaged[..],
        "the damaged segment was written to"
    );
    // Repair the 16 bytes: everything is back, and the open is no longer refused.
    flip(&p, file_at(victim) + 100, 16);
    let (_, map) = open_model(&c);
    assert_eq!(map.len(), 400);
}

#[test]
fn a_torn_write_at_the_end_of_the_newest_segment_is_not_damage_and_stays_on_disk() {
    let (p, c, locs) = filled(300);
    let last = *locs.last().unwrap();
    flip(&p, file_at(last) + 300, 16);
    let torn = std::fs::read(&p).unwrap();
    let (mut log, report) = Log::open(&c, &mut |_| {}).unwrap();
    assert!(!report.is_damaged());
    let t = report.torn_tail.clone().unwrap();
    assert_eq!((t.segment, t.offset), (last.segment, last.offset as u64));
    let l = log.append(b"after", Kind::String, b"v", None).unwrap();
    assert_ne!(l.segment, last.segment, "appends moved to a fresh segment");
    log.sync(true).unwrap();
    drop(log);
    let seg = last.segment as usize * SEG..(last.segment as usize + 1) * SEG;
    assert!(
        std::fs::read(&p).unwrap()[seg.clone()] == torn[seg],
        "the torn write was written over"
    );
}

#[test]
fn the_image_scan_steps_over_a_bad_record() {
    let (p, _, locs) = filled(60);
    let bytes = std::fs::read(&p).unwrap();
    let seg = locs[0].segment as usize;
    let mut image = bytes[seg * SEG..(seg + 1) * SEG].to_vec();
    let seq = parse_header(&image).unwrap().0;
    let clean = scan_segment_image(&image, seq);
    assert_eq!(clean.records.len(), 60);
    assert!(clean.damaged.is_empty() && clean.tail.is_none() && clean.end_is_clean);
    image[locs[10].offset as usize + 50] ^= 1;
    let s = scan_segment_image(&image, seq);
    assert_eq!(s.records.len(), 59);
    assert_eq!(
        s.damaged,
        vec![locs[10].offset as usize..locs[11].offset as usize]
    );
    // The wrong segment life reads nothing.
    assert!(scan_segment_image(&image, seq + 1).records.is_empty());
}

/// A segment that comes back short from the device (here: a file cut under the log) is an error
/// for the cleaner and for a record's read, never a shorter segment whose missing records are
/// silently dropped with it.
#[test]
fn a_short_read_is_an_error_not_a_shorter_segment() {
    let (p, _, mut log) = fresh(16);
    let mut churn: Option<NvLoc> = None;
    let mut live = None;
    for i in 0..400u32 {
        let l = rewrite(&mut log, b"churn", &[i as u8; 700], &mut churn);
        if l.segment == 2 && live.is_none() && l.offset > 32 * 1024 {
            live = Some(
                log.append(b"live", Kind::String, &[9u8; 700], None)
                    .unwrap(),
            );
        }
    }
    let live = live.unwrap();
    assert!(
        churn.unwrap().segment > live.segment,
        "the live record is sealed"
    );
    log.sync(true).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len((live.segment as usize * SEG + 4096) as u64)
        .unwrap();
    drop(f);
    assert!(
        log.read(live).is_err(),
        "a record past the end read as garbage"
    );
    let err = log
        .clean(
            16,
            &mut |k, l| (k == b"live" && l == live) || (k == b"churn" && Some(l) == churn),
            &mut |_, _, _| {},
        )
        .unwrap_err();
    assert!(err.to_string().contains("bytes came back"), "{err}");
}

mod image_scan_properties {
    use super::*;
    use proptest::prelude::*;

    /// One real segment image (records of several sizes, some moved to the next block) and its
    /// records' (offset, length).
    fn image() -> (Vec<u8>, u64, Vec<(usize, usize)>) {
        let (p, _, mut log) = fresh(8);
        let mut locs = Vec::new();
        for i in 0..60u32 {
            let l = log
                .append(
                    format!("k{i}").as_bytes(),
                    Kind::String,
                    &vec![i as u8; 100 + (i as usize * 97) % 1500],
                    None,
                )
                .unwrap();
            locs.push(l);
        }
        log.sync(true).unwrap();
        drop(log);
        let bytes = std::fs::read(&p).unwrap();
        let seg = locs[0].segment as usize;
        let image = bytes[seg * SEG..(seg + 1) * SEG].to_vec();
        let seq = parse_header(&image).unwrap().0;
        let recs = locs
            .iter()
            .filter(|l| l.segment as usize == seg)
            .map(|l| (l.offset as usize, l.len as usize))
            .collect();
        (image, seq, recs)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Whatever bytes are changed, the scan returns only records that were written, and
        /// every record whose bytes were not touched.
        #[test]
        fn damage_never_hides_an_intact_record_nor_yields_a_changed_one(
            flips in proptest::collection::vec((0usize..SEG, 1u8..=255), 1..24)
        ) {
            let (mut image, seq, recs) = image();
            let original = image.clone();
            for &(at, x) in &flips {
                image[at] ^= x;
            }
            let s = scan_segment_image(&image, seq);
            for r in &s.records {
                prop_assert!(recs.contains(&(r.offset, r.total)), "a record at {} that was never written", r.offset);
                prop_assert!(image[r.offset..r.offset + r.total] == original[r.offset..r.offset + r.total]);
            }
            for &(o, len) in &recs {
                let touched = flips.iter().any(|&(at, _)| (o..o + len).contains(&at));
                if !touched {
                    prop_assert!(s.records.iter().any(|r| r.offset == o), "the intact record at {o} was lost");
                }
            }
        }
    }
}

#[test]
fn a_zeroed_header_is_not_taken_for_a_free_segment() {
    let (p, c, locs) = filled(300);
    let seg0 = locs[0].segment as usize;
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[seg0 * SEG..seg0 * SEG + SEGMENT_HEADER].fill(0);
    std::fs::write(&p, &bytes).unwrap();
    let (mut log, report) = Log::open(&c, &mut |_| {}).unwrap();
    assert_eq!(report.headers_repaired, 1);
    assert_eq!(report.records, 300);
    // The segment is not handed out again for appends.
    for i in 0..200u32 {
        let l = log
            .append(format!("n{i}").as_bytes(), Kind::String, &[1u8; 700], None)
            .unwrap();
        assert_ne!(l.segment as usize, seg0);
    }
}

/// Rewrite bytes of the log file at `at`.
fn overwrite(path: &Path, at: usize, with: &[u8]) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at..at + with.len()].copy_from_slice(with);
    std::fs::write(path, &bytes).unwrap();
}

/// A segment header or a record whose sequence number is near `u64::MAX` but whose checksum is
/// right (crafted: nothing counts that high) reads as damage. Taken at its word, the next
/// number handed out overflowed (found by the `log_recovery` fuzzer).
#[test]
fn sequence_numbers_beyond_any_real_count_are_damage_not_an_overflow() {
    let (p, c, locs) = filled(300);
    let first = locs[0].segment as usize;
    overwrite(&p, first * SEG, &header_bytes(u64::MAX, 16 * SEG as u64));
    // The header is identified again from its records, so nothing is lost.
    let (mut log, report, map) = open_anyway(&c);
    assert_eq!(map.len(), 300, "{report:?}");
    assert_eq!(report.headers_repaired, 1);
    log.append(b"after", Kind::String, b"v", None).unwrap();
    drop(log);

    // A record rewritten with the highest sequence number and its checksum made to match.
    let (p, c, locs) = filled(300);
    let victim = locs[10];
    let at = file_at(victim);
    let mut rec = std::fs::read(&*p).unwrap()[at..at + victim.len as usize].to_vec();
    rec[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let (_, report) = Log::open(&anyway(&c), &mut |_| {}).unwrap();
    let segment_seq = report_segment_seq(&c, victim.segment);
    let crc = record_crc(segment_seq, &rec[4..]);
    rec[0..4].copy_from_slice(&crc.to_le_bytes());
    overwrite(&p, at, &rec);
    let err = Log::open(&c, &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, StoreError::Damaged { .. }),
        "{err} ({report:?})"
    );
    let (mut log, report, map) = open_anyway(&c);
    assert_eq!(map.len(), 299, "{report:?}");
    let l = log.append(b"after", Kind::String, b"v", None).unwrap();
    assert!(log.read(l).unwrap().seq < MAX_SEQ);
}

/// The sequence number of segment `index` as its header says.
fn report_segment_seq(c: &LogConfig, index: u32) -> u64 {
    let bytes = std::fs::read(&c.path).unwrap();
    let at = index as usize * SEG;
    parse_header(&bytes[at..at + SEGMENT_HEADER]).unwrap().0
}

#[test]
fn a_delete_stays_deleted_when_an_older_dead_version_outlives_the_shadowed_one() {
    // "gone" is written twice: P0 in a segment that stays almost all live (never cleaned), P1
    // (superseding P0) in a segment that churn empties. Its delete's tombstone shadows P1 only.
    // Cleaning frees P1's segment, then the tombstone's own: the tombstone must survive as long
    // as P0's segment does, or recovery brings P0 back.
    let (_p, c, mut log) = fresh(16);
    let p0 = log.append(b"gone", Kind::String, b"v0", None).unwrap();
    let mut keep: Vec<(Vec<u8>, NvLoc)> = Vec::new();
    for i in 0..70u32 {
        let k = format!("keep{i}").into_bytes();
        let l = log.append(&k, Kind::String, &[1u8; 1000], None).unwrap();
        keep.push((k, l));
    }
    let p1 = log.append(b"gone", Kind::String, b"v1", None).unwrap();
    log.mark_dead(p0);
    let mut churn: Option<NvLoc> = None;
    let write_churn = |log: &mut Log, n: u32, churn: &mut Option<NvLoc>| {
        for i in 0..n {
            rewrite(log, b"churn", &[i as u8; 1000], churn);
        }
    };
    write_churn(&mut log, 100, &mut churn);
    log.mark_dead(p1);
    log.append_tombstone(b"gone").unwrap();
    write_churn(&mut log, 150, &mut churn);
    // Clean one segment at a time (the fewest live bytes first: P0's segment, the most live,
    // comes last), reopening after each: the deleted key never comes back, before or after
    // the segments holding P1 and the tombstone are freed.
    let p1_life = log.segments[p1.segment as usize].seq;
    let mut exercised = false;
    for _ in 0..40 {
        let mut moved: Vec<(Vec<u8>, NvLoc, NvLoc)> = Vec::new();
        log.clean(
            1,
            &mut |k, l| {
                (k == b"churn" && Some(l) == churn)
                    || keep.iter().any(|(kk, kl)| kk == k && *kl == l)
            },
            &mut |k, o, n| moved.push((k.to_vec(), o, n)),
        )
        .unwrap();
        for (k, o, n) in moved {
            if k == b"churn" {
                churn = Some(n);
            } else if let Some(e) = keep.iter_mut().find(|(kk, kl)| *kk == k && *kl == o) {
                e.1 = n;
            }
        }
        write_churn(&mut log, 10, &mut churn);
        exercised |= log.segments[p1.segment as usize].seq != p1_life
            && log.segments[p0.segment as usize].seq == 1;
        log.sync(true).unwrap();
        drop(log);
        let (reopened, map) = open_model(&c);
        log = reopened;
        assert!(!map.contains_key(&b"gone"[..]), "a deleted key came back");
        assert_eq!(map.len(), 71);
        churn = map.get(&b"churn"[..]).copied();
        for (k, l) in keep.iter_mut() {
            *l = map[k];
        }
    }
    assert!(exercised, "P1's segment was freed while P0's lived");
}
