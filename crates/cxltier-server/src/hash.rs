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
}
