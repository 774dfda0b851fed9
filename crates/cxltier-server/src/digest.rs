//! DEBUG DIGEST and DIGEST-VALUE: Redis 7.0's SHA1 digests of the dataset and of values
//! (`computeDatasetDigest`, `xorObjectDigest` in its debug.c), byte for byte, so that a
//! digest taken here equals redis-server's for the same data. Unordered things (keys, set
//! members, hash fields, sorted set members) are xor-ed together; ordered ones (a list's
//! elements, a key's type then its value) are mixed in order.

use cxltier_store::{Kind, Store, StoreError};

/// Members read a page at a time.
const PAGE: usize = 1024;

pub type Digest = [u8; 20];

fn sha1(bytes: &[u8]) -> Digest {
    sha1_smol::Sha1::from(bytes).digest().bytes()
}

/// Redis's `xorDigest`: `digest ^= SHA1(bytes)`.
fn xor(digest: &mut Digest, bytes: &[u8]) {
    for (d, h) in digest.iter_mut().zip(sha1(bytes)) {
        *d ^= h;
    }
}

/// Redis's `mixDigest`: `digest = SHA1(digest ^ SHA1(bytes))`.
fn mix(digest: &mut Digest, bytes: &[u8]) {
    xor(digest, bytes);
    *digest = sha1(digest);
}

/// Redis's object type numbers, which the digest mixes in before a value.
fn redis_type(kind: Kind) -> u32 {
    match kind {
        Kind::List => 1,
        Kind::Set => 2,
        Kind::ZSet => 3,
        Kind::Hash | Kind::ChunkedHash => 4,
        Kind::Stream => 6,
        _ => 0,
    }
}

/// The least key above `k` (for paging through a tree from just after it).
fn next_key(k: &[u8]) -> Vec<u8> {
    let mut n = k.to_vec();
    n.push(0);
    n
}

/// One sorted set member's digest: its member then its score as `%.17g`.
fn zset_member(member: &[u8], score: f64) -> Digest {
    let mut d = [0; 20];
    mix(&mut d, member);
    mix(&mut d, crate::resp::reply::g17(score).as_bytes());
    d
}

fn field_pair(field: &[u8], value: &[u8]) -> Digest {
    let mut d = [0; 20];
    mix(&mut d, field);
    mix(&mut d, value);
    d
}

/// Redis's `xorObjectDigest` of the value under `key` (the store's key) into `digest`:
/// `value` is what the store's scan or lookup gave for it, `expires` whether it has a TTL.
/// `false` for a kind that is no user value.
pub fn value_digest(
    store: &mut Store,
    key: &[u8],
    kind: Kind,
    value: &[u8],
    expires: bool,
    digest: &mut Digest,
) -> Result<bool, StoreError> {
    if matches!(kind, Kind::Chunk | Kind::BigString) {
        return Ok(false);
    }
    mix(digest, &redis_type(kind).to_be_bytes());
    match kind {
        Kind::String => mix(digest, value),
        Kind::List => {
            let n = store.list_len(key)?;
            let mut at = 0u64;
            while at < n {
                let end = (at + PAGE as u64).min(n) - 1;
                let page = store.list_range(key, at as i64, end as i64)?;
                if page.is_empty() {
                    break;
                }
                for e in &page {
                    mix(digest, e);
                }
                at += page.len() as u64;
            }
        }
        Kind::Set => {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (page, next) = store.sscan(key, after.as_deref(), PAGE)?;
                for m in &page {
                    xor(digest, m);
                }
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        Kind::ZSet => {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (page, next) = store.zscan(key, after.as_deref(), PAGE)?;
                for (m, score) in &page {
                    xor(digest, &zset_member(m, *score));
                }
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        Kind::Hash => {
            for (f, v) in crate::hash_layout::decode(value).unwrap_or_default() {
                xor(digest, &field_pair(f, v));
            }
        }
        Kind::ChunkedHash => {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (page, next) = store.hscan(key, after.as_deref(), PAGE)?;
                for (f, v) in &page {
                    xor(digest, &field_pair(f, v));
                }
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        Kind::Stream => {
            // Redis mixes each entry's id as "ms.seq", then its fields and values, in order;
            // consumer groups are not part of the digest.
            let mut from = vec![0u8; 16];
            loop {
                let page = store.stream_range(
                    key,
                    cxltier_store::StreamTree::Entries,
                    &from,
                    None,
                    false,
                    PAGE as u64,
                )?;
                let Some((last, _)) = page.last() else {
                    break;
                };
                from = next_key(last);
                for (k, v) in &page {
                    let damaged = || {
                        StoreError::Corrupt(format!(
                            "stream entry of {}",
                            String::from_utf8_lossy(key)
                        ))
                    };
                    let (ms, seq) = crate::stream_layout::entry_id(k).ok_or_else(damaged)?;
                    let (_, items) = crate::stream_layout::decode_entry(v).ok_or_else(damaged)?;
                    mix(digest, format!("{ms}.{seq}").as_bytes());
                    for item in items {
                        mix(digest, item);
                    }
                }
            }
        }
        Kind::Chunk | Kind::BigString => {}
    }
    if expires {
        xor(digest, b"!!expire!!");
    }
    Ok(true)
}

/// Redis's `computeDatasetDigest` over the databases `dbs` (logical number, physical byte),
/// in logical order: all zeros for an empty dataset.
pub fn dataset_digest(store: &mut Store, dbs: &[(u32, u8)]) -> Result<Digest, StoreError> {
    let mut fin = [0u8; 20];
    for &(logical, physical) in dbs {
        if store.db_len(physical) == 0 {
            continue;
        }
        mix(&mut fin, &logical.to_be_bytes());
        let mut start: Vec<u8> = Vec::new();
        loop {
            let items = store.scan_db(physical, &start, PAGE)?;
            let Some(last) = items.last() else { break };
            start = crate::cursors::successor(&last.key);
            for item in items {
                let mut d = [0u8; 20];
                mix(&mut d, &item.key);
                let store_key = crate::db::store_key(physical, &item.key);
                let expires = item.expires_at_ms.is_some();
                if value_digest(store, &store_key, item.kind, &item.value, expires, &mut d)? {
                    xor(&mut fin, &d);
                }
            }
        }
    }
    Ok(fin)
}

/// A digest as DEBUG DIGEST writes it: 40 lower-case hex digits.
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixing_is_ordered_and_xor_is_not() {
        let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
        mix(&mut a, b"x");
        mix(&mut a, b"y");
        mix(&mut b, b"y");
        mix(&mut b, b"x");
        assert_ne!(a, b);
        let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
        xor(&mut a, b"x");
        xor(&mut a, b"y");
        xor(&mut b, b"y");
        xor(&mut b, b"x");
        assert_eq!(a, b);
        assert_eq!(hex(&[0; 20]), "0".repeat(40));
    }
}
