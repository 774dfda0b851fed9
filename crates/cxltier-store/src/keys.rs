//! How the store spells its keys: the database byte before a user's key, the keys of collections'
//! parts, and the limits on key lengths. Every other module takes its keys from here.

/// Databases a store can keep apart (Redis's `SELECT`): a key's identity in the store is its
/// database and its bytes, kept as one byte of database number before the key's bytes
/// ([`db_key`]). Every key has that byte, so any byte string is a key in every database and
/// none can pass for another database's. Numbers stop below `0xff`: keys starting with it are
/// the store's own (the parts of collections).
pub const MAX_DATABASES: usize = 255;

/// The store's key for `key` in database `db` (below [`MAX_DATABASES`]). A log written before
/// databases existed holds keys without the byte; they are read back as keys of database 0.
pub fn db_key(db: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    push_db_key(&mut k, db, key);
    k
}

/// [`db_key`] appended to `out`: `1 + key.len()` bytes, for callers that keep many keys in one
/// buffer (one allocation for all of a command's keys).
pub fn push_db_key(out: &mut Vec<u8>, db: u8, key: &[u8]) {
    debug_assert!((db as usize) < MAX_DATABASES, "database {db}");
    out.push(db);
    out.extend_from_slice(key);
}

/// The database and the user's key of a store key made by [`db_key`]; `None` for a key of the
/// store's own (a collection's part) or an empty one.
pub fn split_db_key(key: &[u8]) -> Option<(u8, &[u8])> {
    match key.split_first() {
        Some((&db, rest)) if (db as usize) < MAX_DATABASES => Some((db, rest)),
        _ => None,
    }
}

/// Whether store key `key` belongs to database `db` (below [`MAX_DATABASES`]).
pub fn in_db(key: &[u8], db: u8) -> bool {
    key.first() == Some(&db)
}

/// The longest key accepted: 1 MiB (Redis's suite uses keys of 50,000 bytes; Redis's own limit
/// is its 512 MB bulk). A record holds it (see the log's `MAX_RECORD_KEY`); a value with a key
/// that long must still fit one record, so keys this long suit small values.
pub(crate) const MAX_KEY: usize = 1 << 20;
/// The longest key of a collection or big value: its parts' keys carry it, and a part with its
/// key must fit one record beside the largest value kept whole.
pub(crate) const MAX_PARTS_KEY: usize = u16::MAX as usize / 2;
/// The first bytes of every chunk key; users' keys may not start with them.
pub(crate) const CHUNK_PREFIX: &[u8] = b"\xff\x00\xffC";
/// What a chunk key adds to its collection's key: the prefix, the key's length, generation, id.
pub(crate) const CHUNK_KEY_OVERHEAD: usize = CHUNK_PREFIX.len() + 2 + 16;

/// Whether `key` is one of the store's own (a part of a collection), which users never see.
pub(crate) fn is_internal_key(key: &[u8]) -> bool {
    key.starts_with(CHUNK_PREFIX)
}

/// The prefix every chunk key of `root` (of any generation) starts with.
pub(crate) fn chunk_prefix(root: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(root.len() + CHUNK_KEY_OVERHEAD);
    k.extend_from_slice(CHUNK_PREFIX);
    k.extend_from_slice(&(root.len() as u16).to_be_bytes());
    k.extend_from_slice(root);
    k
}

pub(crate) fn chunk_key(root: &[u8], generation: u64, id: u64) -> Vec<u8> {
    let mut k = chunk_prefix(root);
    k.extend_from_slice(&generation.to_be_bytes());
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// A key of a log record written before databases existed, as the store keys it now: a user's
/// key gets database 0's byte, and a chunk key is rebuilt around its collection's new key.
/// (The first format refused user keys starting with [`CHUNK_PREFIX`], so a key that parses as
/// a chunk key is one.)
pub(crate) fn first_format_key(key: &[u8]) -> Vec<u8> {
    match parse_chunk_key(key) {
        Some((root, generation, id)) => chunk_key(&db_key(0, root), generation, id),
        None => db_key(0, key),
    }
}

/// (collection key, generation, id) of a chunk key.
pub(crate) fn parse_chunk_key(k: &[u8]) -> Option<(&[u8], u64, u64)> {
    let rest = k.strip_prefix(CHUNK_PREFIX)?;
    let len = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let rest = &rest[2..];
    if rest.len() != len + 16 {
        return None;
    }
    let generation = u64::from_be_bytes(rest[len..len + 8].try_into().ok()?);
    let id = u64::from_be_bytes(rest[len + 8..].try_into().ok()?);
    Some((&rest[..len], generation, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn db_keys_split_back() {
        let k = db_key(3, b"user");
        assert_eq!(k, b"\x03user");
        assert_eq!(split_db_key(&k), Some((3, &b"user"[..])));
        assert!(in_db(&k, 3) && !in_db(&k, 4));
        let mut buf = b"x".to_vec();
        push_db_key(&mut buf, 3, b"user");
        assert_eq!(&buf[1..], &k[..]);
        // The store's own keys belong to no database.
        assert_eq!(split_db_key(&chunk_key(&k, 1, 2)), None);
        assert_eq!(split_db_key(b""), None);
    }

    #[test]
    fn chunk_keys_parse_back() {
        let k = chunk_key(b"my\xffkey", 7, 42);
        assert!(is_internal_key(&k));
        assert!(k.starts_with(&chunk_prefix(b"my\xffkey")));
        assert_eq!(parse_chunk_key(&k), Some((&b"my\xffkey"[..], 7, 42)));
        assert_eq!(parse_chunk_key(&k[..k.len() - 1]), None);
    }
}
