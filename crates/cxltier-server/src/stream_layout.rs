//! How a stream entry is kept in the store: the value of an entry of the stream's `Entries`
//! tree (its key is the id, 16 bytes of big-endian milliseconds then sequence). Shared by the
//! stream commands and by what reads whole values beside them (DEBUG DIGEST), as
//! `hash_layout` is for hashes.

/// The flag of an entry that opened a node (where Redis's listpack node would begin).
pub(crate) const NODE_START: u8 = 1;

/// An entry's value: its flags, then its fields and values (a count, then each with its
/// length).
pub(crate) fn encode_entry(flags: u8, items: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + items.iter().map(|i| 4 + i.len()).sum::<usize>());
    v.push(flags);
    v.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for i in items {
        v.extend_from_slice(&(i.len() as u32).to_le_bytes());
        v.extend_from_slice(i);
    }
    v
}

/// The fields and values of an entry's value (`None`: damaged).
pub(crate) fn decode_entry(v: &[u8]) -> Option<(u8, Vec<&[u8]>)> {
    let flags = *v.first()?;
    let n = u32::from_le_bytes(v.get(1..5)?.try_into().ok()?) as usize;
    // Each item takes at least its 4-byte length: a larger count is damage, not an allocation.
    if n > v.len() / 4 {
        return None;
    }
    let mut items = Vec::with_capacity(n);
    let mut at = 5;
    for _ in 0..n {
        let len = u32::from_le_bytes(v.get(at..at + 4)?.try_into().ok()?) as usize;
        at += 4;
        items.push(v.get(at..at.checked_add(len)?)?);
        at += len;
    }
    (at == v.len()).then_some((flags, items))
}

/// An entry's id from its key in the `Entries` tree (`None`: not 16 bytes).
pub(crate) fn entry_id(k: &[u8]) -> Option<(u64, u64)> {
    let k: &[u8; 16] = k.try_into().ok()?;
    Some((
        u64::from_be_bytes(k[..8].try_into().ok()?),
        u64::from_be_bytes(k[8..].try_into().ok()?),
    ))
}
