//! The scan recovery runs over every segment image (`cxltier_store::log::scan_segment_image`) on
//! arbitrary bytes: the first eight bytes are the segment's sequence number, the rest its image.
//! Pure and fast (no file, no `O_DIRECT`), so it reaches far more inputs a second than
//! `log_recovery`, which replays whole images through `Log::open`. Whatever the bytes: every
//! record and damaged range lies inside the image, after the segment header, in order and
//! without overlap, and a record's parts add up to its length.
#![no_main]

use cxltier_store::log::{scan_segment_image, SEGMENT_HEADER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let seq = u64::from_le_bytes(data[..8].try_into().unwrap());
    let image = &data[8..];
    let scan = scan_segment_image(image, seq);
    let mut last_end = SEGMENT_HEADER.min(image.len());
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for r in &scan.records {
        assert!(
            r.offset >= SEGMENT_HEADER,
            "record inside the header at {}",
            r.offset
        );
        assert!(
            r.offset + r.total <= image.len(),
            "record past the image at {}",
            r.offset
        );
        assert!(
            r.total >= r.key.len() + r.value.len(),
            "record parts exceed its length"
        );
        assert!(
            r.offset >= last_end,
            "records overlap or are out of order at {}",
            r.offset
        );
        last_end = r.offset + r.total;
        spans.push((r.offset, r.offset + r.total));
    }
    for d in &scan.damaged {
        assert!(
            d.start < d.end && d.end <= image.len(),
            "damaged range {d:?} out of the image"
        );
        assert!(
            d.start >= SEGMENT_HEADER.min(image.len()),
            "damaged range {d:?} in the header"
        );
        for &(s, e) in &spans {
            assert!(
                d.end <= s || d.start >= e,
                "damaged range {d:?} overlaps a record {s}..{e}"
            );
        }
    }
    assert!(
        scan.end <= image.len().max(SEGMENT_HEADER),
        "end {} past the image",
        scan.end
    );
    if let Some(t) = &scan.tail {
        assert!(
            t.start >= scan.end && t.end <= image.len(),
            "tail {t:?} out of place"
        );
    }
});
