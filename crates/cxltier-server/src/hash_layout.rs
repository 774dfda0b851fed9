//! Hashes, in two layouts. A small hash is one stored value (kind `Hash`):
//! `count u32 | (field_len u32 | field | value_len u32 | value) × count`, little-endian, fields in
//! insertion order. Small and flat: HGETALL is one pass, HSET of one field one decode and encode,
//! and YCSB's update of one field at the same length is written in place. A hash whose encoding
//! outgrows [`FLAT_MAX_BYTES`] becomes a chunked collection (kind `ChunkedHash`, a counted B+tree
//! of fields in the store), so that a change to a large hash writes the path to one leaf, not the
//! whole hash: Redis's listpack→hashtable conversion, decided by size. Like Redis's, the
//! conversion is one way.
//!
//! The hash commands are in `hash`; OBJECT ENCODING's name for a hash is in `encoding`.

use cxltier_store::{Kind, Store, StoreError};

/// Decode; `None` when the bytes are not a valid encoding (a corrupt value).
pub fn decode(bytes: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut at: usize = 0;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = bytes.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let fl = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let f = take(fl)?;
        let vl = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let v = take(vl)?;
        out.push((f, v));
    }
    (at == bytes.len()).then_some(out)
}

/// Where the value of `field` is in an encoding: `Some(Some(range))`, `Some(None)` when the
/// field is absent, `None` when the bytes are not a valid encoding. One pass over the lengths,
/// no allocation: lets a one-field update of the same length be written in place.
pub fn value_span(bytes: &[u8], field: &[u8]) -> Option<Option<std::ops::Range<usize>>> {
    let mut at: usize = 0;
    let mut take = |n: usize| -> Option<std::ops::Range<usize>> {
        let end = at.checked_add(n)?;
        bytes.get(at..end)?;
        let r = at..end;
        at = end;
        Some(r)
    };
    let le = |r: std::ops::Range<usize>| {
        u32::from_le_bytes(bytes[r].try_into().expect("4 bytes")) as usize
    };
    let count = le(take(4)?);
    let mut found = None;
    for _ in 0..count {
        let fl = le(take(4)?);
        let f = take(fl)?;
        let vl = le(take(4)?);
        let v = take(vl)?;
        if found.is_none() && &bytes[f] == field {
            found = Some(v);
        }
    }
    (at == bytes.len()).then_some(found)
}

/// Encode fields (in the order given).
pub fn encode<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut n: u32 = 0;
    for (f, v) in fields {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
        n += 1;
    }
    out[0..4].copy_from_slice(&n.to_le_bytes());
    out
}

/// The largest encoding kept as one value: every change of a one-value hash rewrites it, so
/// this bounds that cost; a larger hash is chunked. 32 KiB holds any hash Redis's default
/// thresholds keep as a listpack (128 fields and values of up to 64 bytes: about 17 KiB).
pub(crate) const FLAT_MAX_BYTES: usize = 32 * 1024;

/// A field and value longer than this together keep their hash one value: a chunk holds each
/// member whole, and a member must fit in one object.
const CHUNK_MEMBER_MAX: usize = 256 * 1024;

/// Keep the new fields of a one-value hash under `key` (`encoded` is their encoding): one value
/// while the encoding is at most [`FLAT_MAX_BYTES`] or Redis would keep it a listpack
/// (`listpack`, from [`redis_keeps_listpack`]), else a chunked hash. `was_flat`: the key holds a
/// one-value hash now (else nothing). The conversion is one write of the root over the old
/// value (`Store::hash_to_chunked`): a crash leaves one or the other, whole.
pub(crate) fn store_fields(
    store: &mut Store,
    key: &[u8],
    fields: &[(&[u8], &[u8])],
    listpack: bool,
    encoded: &[u8],
    expires: Option<u64>,
    was_flat: bool,
) -> Result<(), StoreError> {
    let chunkable = encoded.len() > FLAT_MAX_BYTES
        && !listpack
        && fields
            .iter()
            .all(|(f, v)| f.len() + v.len() <= CHUNK_MEMBER_MAX);
    if chunkable {
        if !was_flat {
            store.hset(key, fields)?;
            if expires.is_some() {
                store.set_expiry(key, expires)?;
            }
            return Ok(());
        }
        if store.hash_to_chunked(key, fields)? {
            return Ok(());
        }
    }
    store.put(key, Kind::Hash, encoded, expires)
}

/// A hash's fields with their values, owned.
pub(crate) type OwnedFields = Vec<(Vec<u8>, Vec<u8>)>;

/// Every field of the chunked hash at `key` with its value, in field order (empty when absent).
pub(crate) fn chunked_fields(store: &mut Store, key: &[u8]) -> Result<OwnedFields, StoreError> {
    let mut all = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, next) = store.hscan(key, after.as_deref(), 1024)?;
        all.extend(page);
        match next {
            Some(n) => after = Some(n),
            None => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects_garbage() {
        let e = encode([(&b"f1"[..], &b"v1"[..]), (b"", b"")]);
        assert_eq!(
            decode(&e).unwrap(),
            vec![(&b"f1"[..], &b"v1"[..]), (&b""[..], &b""[..])]
        );
        assert!(decode(&e[..e.len() - 1]).is_none());
        assert!(decode(b"\xff\xff\xff\xff").is_none());
        assert!(decode(&encode([])).unwrap().is_empty());
    }

    #[test]
    fn value_span_finds_a_field_or_says_why_not() {
        let e = encode([(&b"f1"[..], &b"v1"[..]), (b"field2", b"value2"), (b"", b"")]);
        let r = value_span(&e, b"field2").unwrap().unwrap();
        assert_eq!(&e[r], b"value2");
        assert_eq!(&e[value_span(&e, b"").unwrap().unwrap()], b"");
        assert_eq!(value_span(&e, b"f3"), Some(None));
        assert_eq!(value_span(&e[..e.len() - 1], b"f1"), None);
        assert_eq!(value_span(b"\xff\xff\xff\xff", b"f1"), None);
    }
}
