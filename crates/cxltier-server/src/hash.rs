//! The encoding of a hash's fields inside one stored value:
//! `count u32 | (field_len u32 | field | value_len u32 | value) × count`, little-endian, fields in
//! insertion order. Small and flat: HGETALL is one pass, HSET of one field one decode and encode.

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
