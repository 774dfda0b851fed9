//! A Redis RDB file (version 10, what Redis 7.0 writes) of the whole store: what a replica
//! loads at `SYNC`/`PSYNC` before it follows the write stream.
//!
//! Plain encodings only, each of which Redis 7.0 loads: strings as length-prefixed bytes
//! (`RDB_TYPE_STRING`), lists as `RDB_TYPE_LIST` (a count, then the members), sets as
//! `RDB_TYPE_SET`, sorted sets as `RDB_TYPE_ZSET_2` (member, then the score as a binary
//! double), hashes as `RDB_TYPE_HASH`, streams as `RDB_TYPE_STREAM_LISTPACKS_2` ([`stream`]:
//! listpack nodes, groups, pending entries, consumers; a stream is read whole). A collection is written a page of members at a time,
//! read from the store as it goes (values on NVMe are read), so memory stays bounded by a page
//! whatever the data set. The file ends with `EOF` and the CRC64 (Jones polynomial, reflected,
//! as Redis's `crc64.c`) of every byte before it.
//!
//! - [`load`]: one value of a given RDB type decoded and validated (every encoding Redis 7.0
//!   loads), for RESTORE and for a loader of whole files;
//! - [`dump`]: DUMP/RESTORE payloads, Redis's format (a value's RDB type and serialization,
//!   the RDB version, the CRC64);
//! - [`lzf`]: the LZF decompressor of RDB's compressed strings;
//! - [`stream`]: streams in RDB (types 15 and 19 read and validated, 19 written), and a
//!   stream read from the store or built into it;
//! - [`encode`]: ziplists, listpacks, intsets and zipmaps written (for tests and fuzzing).

pub mod dump;
pub mod encode;
pub mod load;
pub mod lzf;
pub mod stream;

use std::io::{self, Write};

use cxltier_store::{Kind, ScanPage, Store, StoreError};

const RDB_VERSION: &[u8] = b"REDIS0010";
/// The RDB version written, and the newest read: Redis 7.0's.
pub const VERSION: u16 = 10;
const OP_AUX: u8 = 0xFA;
const OP_RESIZEDB: u8 = 0xFB;
const OP_EXPIRETIME_MS: u8 = 0xFC;
const OP_SELECTDB: u8 = 0xFE;
const OP_EOF: u8 = 0xFF;

// The RDB types of values (Redis's `rdb.h`, version 10).
pub const TYPE_STRING: u8 = 0;
pub const TYPE_LIST: u8 = 1;
pub const TYPE_SET: u8 = 2;
pub const TYPE_ZSET: u8 = 3;
pub const TYPE_HASH: u8 = 4;
pub const TYPE_ZSET_2: u8 = 5;
pub const TYPE_MODULE: u8 = 6;
pub const TYPE_MODULE_2: u8 = 7;
pub const TYPE_HASH_ZIPMAP: u8 = 9;
pub const TYPE_LIST_ZIPLIST: u8 = 10;
pub const TYPE_SET_INTSET: u8 = 11;
pub const TYPE_ZSET_ZIPLIST: u8 = 12;
pub const TYPE_HASH_ZIPLIST: u8 = 13;
pub const TYPE_LIST_QUICKLIST: u8 = 14;
pub const TYPE_STREAM_LISTPACKS: u8 = 15;
pub const TYPE_HASH_LISTPACK: u8 = 16;
pub const TYPE_ZSET_LISTPACK: u8 = 17;
pub const TYPE_LIST_QUICKLIST_2: u8 = 18;
pub const TYPE_STREAM_LISTPACKS_2: u8 = 19;
/// Redis 7.2's (RDB version 11): a small set as a listpack.
pub const TYPE_SET_LISTPACK: u8 = 20;
/// Types from here on belong to RDB versions after 10.
const LATER_TYPES_FROM: u8 = 21;
/// Members read from the store per call while a collection is written.
const PAGE: usize = 512;
/// Keys read from the store per scan while the snapshot walks it.
const KEYS_PER_SCAN: usize = 256;

/// Redis's crc64 (`src/crc64.c`): the Jones polynomial 0xad93d23594c935a9, reflected in and
/// out, initial value as given (0 for a new checksum), no final xor.
pub fn crc64(mut crc: u64, bytes: &[u8]) -> u64 {
    let table = crc64_table();
    for &b in bytes {
        crc = table[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

fn crc64_table() -> &'static [u64; 256] {
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        // 0xad93d23594c935a9 with its bits reversed: the reflected form of the polynomial.
        const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
        let mut t = [0u64; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            }
            *slot = c;
        }
        t
    })
}

/// Why a snapshot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RdbError {
    #[error("writing the snapshot: {0}")]
    Io(#[from] io::Error),
    #[error("reading the store for the snapshot: {0}")]
    Store(#[from] StoreError),
}

/// Writes RDB records to `W`, keeping the CRC64 of every byte written.
pub struct RdbWriter<W: Write> {
    out: W,
    crc: u64,
    written: u64,
}

impl<W: Write> RdbWriter<W> {
    /// Starts the file: the magic and version.
    pub fn new(out: W) -> io::Result<Self> {
        let mut w = RdbWriter::bare(out);
        w.raw(RDB_VERSION)?;
        Ok(w)
    }

    /// A writer of values alone, without the file's header: a DUMP payload.
    pub fn bare(out: W) -> Self {
        RdbWriter {
            out,
            crc: 0,
            written: 0,
        }
    }

    /// A value's RDB type, alone: how a DUMP payload starts.
    pub fn value_type(&mut self, rdb_type: u8) -> io::Result<()> {
        self.raw(&[rdb_type])
    }

    /// Ends a DUMP payload: the RDB version (2 bytes), then the CRC64 of every byte before it
    /// (8 bytes), both little-endian. Returns the writer.
    pub fn finish_dump(mut self) -> io::Result<W> {
        self.raw(&VERSION.to_le_bytes())?;
        let crc = self.crc.to_le_bytes();
        self.out.write_all(&crc)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.crc = crc64(self.crc, bytes);
        self.written += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// RDB's length encoding: 6, 14, 32 or 64 bits, big-endian past 6.
    pub fn len(&mut self, n: u64) -> io::Result<()> {
        if n < 1 << 6 {
            self.raw(&[n as u8])
        } else if n < 1 << 14 {
            self.raw(&[0x40 | (n >> 8) as u8, n as u8])
        } else if n <= u64::from(u32::MAX) {
            self.raw(&[0x80])?;
            self.raw(&(n as u32).to_be_bytes())
        } else {
            self.raw(&[0x81])?;
            self.raw(&n.to_be_bytes())
        }
    }

    /// A string: its length, then its bytes (no integer or LZF encoding: Redis loads both).
    pub fn string(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.len(bytes.len() as u64)?;
        self.raw(bytes)
    }

    /// An auxiliary field (`redis-ver`, `ctime`, ...).
    pub fn aux(&mut self, name: &str, value: &str) -> io::Result<()> {
        self.raw(&[OP_AUX])?;
        self.string(name.as_bytes())?;
        self.string(value.as_bytes())
    }

    /// SELECTDB then RESIZEDB (the database's key count and how many of them expire: sizing
    /// hints for the loader).
    pub fn select_db(&mut self, db: u32, keys: u64, expires: u64) -> io::Result<()> {
        self.raw(&[OP_SELECTDB])?;
        self.len(u64::from(db))?;
        self.raw(&[OP_RESIZEDB])?;
        self.len(keys)?;
        self.len(expires)
    }

    /// A key's header: its expiry (ms since the epoch) if any, its type and its name.
    pub fn key(&mut self, expires_at_ms: Option<u64>, rdb_type: u8, key: &[u8]) -> io::Result<()> {
        if let Some(at) = expires_at_ms {
            self.raw(&[OP_EXPIRETIME_MS])?;
            self.raw(&at.to_le_bytes())?;
        }
        self.raw(&[rdb_type])?;
        self.string(key)
    }

    /// A sorted set member's score, as `RDB_TYPE_ZSET_2` keeps it: an 8-byte little-endian
    /// double.
    pub fn binary_double(&mut self, score: f64) -> io::Result<()> {
        self.raw(&score.to_le_bytes())
    }

    /// Ends the file: EOF and the CRC64 of everything before it (EOF included), little-endian.
    /// Returns the writer and the file's length.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.raw(&[OP_EOF])?;
        let crc = self.crc.to_le_bytes();
        self.out.write_all(&crc)?;
        self.out.flush()?;
        Ok((self.out, self.written + 8))
    }
}

/// What the snapshot says of the server in its auxiliary fields.
#[derive(Debug, Clone)]
pub struct SnapshotInfo {
    pub replid: String,
    pub offset: u64,
    pub used_memory: u64,
    /// The code of each functions' library (FUNCTION LOAD), written before the databases as
    /// Redis does (`RDB_OPCODE_FUNCTION2`).
    pub functions: Vec<Vec<u8>>,
}

/// Counts of what a snapshot holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotCounts {
    pub keys: u64,
    pub expires: u64,
    pub bytes: u64,
}

/// Write the databases `dbs` (each a logical number, as clients select it, and the physical
/// byte its keys carry in the store) of the store as an RDB file to `out`: a SELECTDB of each
/// database that holds keys, then its keys (the user's, without the byte). Keys are walked in
/// the index's order with the store's scan (which reads values on NVMe); collections are
/// written a page of members at a time. Runs in the caller's thread: the store does not change
/// meanwhile, so the file is one consistent point in time.
pub fn write_snapshot<W: Write>(
    store: &mut Store,
    info: &SnapshotInfo,
    dbs: &[(u32, u8)],
    out: W,
) -> Result<(W, SnapshotCounts), RdbError> {
    let mut w = RdbWriter::new(out)?;
    let ctime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    w.aux("redis-ver", crate::version::REDIS_VERSION)?;
    w.aux("redis-bits", &(usize::BITS).to_string())?;
    w.aux("ctime", &ctime.to_string())?;
    w.aux("used-mem", &info.used_memory.to_string())?;
    w.aux("repl-stream-db", "0")?;
    w.aux("repl-id", &info.replid)?;
    w.aux("repl-offset", &info.offset.to_string())?;
    w.aux("aof-base", "0")?;
    for code in &info.functions {
        w.value_type(crate::functions::OPCODE_FUNCTION2)?;
        w.string(code)?;
    }
    let mut counts = SnapshotCounts::default();
    for &(logical, physical) in dbs {
        let keys = store.db_len(physical);
        if keys == 0 {
            continue;
        }
        // The key count is exact; how many expire is not known before the walk (0: the loader
        // only sizes its table of expiries from it).
        w.select_db(logical, keys, 0)?;
        let mut start: Vec<u8> = Vec::new();
        loop {
            let items = store.scan_db(physical, &start, KEYS_PER_SCAN)?;
            let Some(last) = items.last() else { break };
            start = crate::cursors::successor(&last.key);
            for item in items {
                let exp = item.expires_at_ms;
                let store_key = crate::db::store_key(physical, &item.key);
                let value = (&item.kind, item.value.as_slice());
                if write_key(store, &mut w, &store_key, &item.key, value, exp)? {
                    counts.keys += 1;
                    counts.expires += u64::from(exp.is_some());
                }
            }
        }
    }
    let (out, bytes) = w.finish()?;
    counts.bytes = bytes;
    Ok((out, counts))
}

/// One key and its value, read under `key` (the store's key) and written as `name` (the
/// user's); false when it has nothing to write (a kind that is no user value, or a collection
/// emptied meanwhile).
fn write_key<W: Write>(
    store: &mut Store,
    w: &mut RdbWriter<W>,
    key: &[u8],
    name: &[u8],
    value: (&Kind, &[u8]),
    exp: Option<u64>,
) -> Result<bool, RdbError> {
    write_value(store, w, key, name, value, |w, t| w.key(exp, t, name))
}

/// The value under `key` (the store's key; `name` the user's, for messages): `header` is called
/// with its RDB type, then the value's serialization follows. False when there is nothing to
/// write (a kind that is no user value, or a collection emptied meanwhile), and then `header`
/// was not called.
pub(crate) fn write_value<W: Write>(
    store: &mut Store,
    w: &mut RdbWriter<W>,
    key: &[u8],
    name: &[u8],
    (kind, value): (&Kind, &[u8]),
    header: impl FnOnce(&mut RdbWriter<W>, u8) -> io::Result<()>,
) -> Result<bool, RdbError> {
    match *kind {
        Kind::String => {
            header(w, TYPE_STRING)?;
            w.string(value)?;
        }
        Kind::Hash => {
            let Some(fields) = crate::hash_layout::decode(value) else {
                return Err(RdbError::Store(StoreError::Config(format!(
                    "the hash under {:?} is corrupt (DEL the key)",
                    String::from_utf8_lossy(name)
                ))));
            };
            if fields.is_empty() {
                return Ok(false);
            }
            header(w, TYPE_HASH)?;
            w.len(fields.len() as u64)?;
            for (f, v) in fields {
                w.string(f)?;
                w.string(v)?;
            }
        }
        Kind::List => {
            let n = store.list_len(key)?;
            if n == 0 {
                return Ok(false);
            }
            header(w, TYPE_LIST)?;
            w.len(n)?;
            let mut at = 0u64;
            while at < n {
                let end = (at + PAGE as u64).min(n) - 1;
                let page = store.list_range(key, at as i64, end as i64)?;
                if page.len() as u64 != end - at + 1 {
                    return Err(short_collection(name));
                }
                for m in &page {
                    w.string(m)?;
                }
                at = end + 1;
            }
        }
        Kind::Set => {
            let n = store.scard(key)?;
            if n == 0 {
                return Ok(false);
            }
            header(w, TYPE_SET)?;
            write_pages(
                store,
                w,
                name,
                n,
                |store, after| store.sscan(key, after, PAGE),
                |w, m| w.string(m),
            )?;
        }
        Kind::ZSet => {
            let n = store.zcard(key)?;
            if n == 0 {
                return Ok(false);
            }
            header(w, TYPE_ZSET_2)?;
            write_pages(
                store,
                w,
                name,
                n,
                |store, after| store.zscan(key, after, PAGE),
                |w, (m, score)| {
                    w.string(m)?;
                    w.binary_double(*score)
                },
            )?;
        }
        Kind::ChunkedHash => {
            let n = store.hlen(key)?;
            if n == 0 {
                return Ok(false);
            }
            header(w, TYPE_HASH)?;
            write_pages(
                store,
                w,
                name,
                n,
                |store, after| store.hscan(key, after, PAGE),
                |w, (f, v)| {
                    w.string(f)?;
                    w.string(v)
                },
            )?;
        }
        // Read whole, then written as RDB_TYPE_STREAM_LISTPACKS_2 (an empty stream too: Redis
        // keeps one).
        Kind::Stream => {
            let s = stream::from_store(store, key, name)?;
            header(w, TYPE_STREAM_LISTPACKS_2)?;
            stream::write(w, &s)?;
        }
        // Not user values: the scan never returns them.
        Kind::Chunk | Kind::BigString => return Ok(false),
    }
    Ok(true)
}

/// A collection's length `count`, then its members page by page from `scan` (given the cursor
/// to continue after), each written by `member`: the members written must add up to `count`,
/// the length already written, or the file would not load.
fn write_pages<W: Write, T>(
    store: &mut Store,
    w: &mut RdbWriter<W>,
    name: &[u8],
    count: u64,
    mut scan: impl FnMut(&mut Store, Option<&[u8]>) -> Result<ScanPage<T>, StoreError>,
    mut member: impl FnMut(&mut RdbWriter<W>, &T) -> io::Result<()>,
) -> Result<(), RdbError> {
    w.len(count)?;
    let mut after: Option<Vec<u8>> = None;
    let mut written = 0u64;
    loop {
        let (page, next) = scan(store, after.as_deref())?;
        for m in &page {
            member(w, m)?;
        }
        written += page.len() as u64;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    if written != count {
        return Err(short_collection(name));
    }
    Ok(())
}

/// A collection whose members did not add up to its count: the file would not load.
fn short_collection(key: &[u8]) -> RdbError {
    RdbError::Store(StoreError::Config(format!(
        "the collection under {:?} returned fewer members than it counts (check the store with `cxltier store check`)",
        String::from_utf8_lossy(key)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_matches_redis_test_vector() {
        // Redis's crc64.c self-test: crc64(0, "123456789") == 0xe9c6d914c4b8d9ca.
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        // Chained calls give the checksum of the concatenation.
        assert_eq!(crc64(crc64(0, b"1234"), b"56789"), 0xe9c6_d914_c4b8_d9ca);
        // And Redis's second vector (a longer text).
        let li = b"This is a test of the emergency broadcast system.";
        assert_ne!(crc64(0, li), crc64(0, &li[1..]));
    }

    #[test]
    fn lengths_use_the_smallest_encoding() {
        let mut w = RdbWriter::new(Vec::new()).unwrap();
        w.len(63).unwrap();
        w.len(64).unwrap();
        w.len(16383).unwrap();
        w.len(16384).unwrap();
        w.len(1 << 33).unwrap();
        let (bytes, len) = w.finish().unwrap();
        assert_eq!(len as usize, bytes.len());
        let body = &bytes[RDB_VERSION.len()..bytes.len() - 9];
        assert_eq!(
            body,
            [
                &[63u8][..],
                &[0x40, 64],
                &[0x7f, 0xff],
                &[0x80, 0, 0, 0x40, 0],
                &[0x81, 0, 0, 0, 2, 0, 0, 0, 0],
            ]
            .concat()
        );
    }

    #[test]
    fn file_ends_with_eof_and_the_crc_of_all_before() {
        let mut w = RdbWriter::new(Vec::new()).unwrap();
        w.aux("redis-ver", "7.0.15").unwrap();
        w.select_db(0, 1, 1).unwrap();
        w.key(Some(1_700_000_000_000), TYPE_STRING, b"k").unwrap();
        w.string(b"v").unwrap();
        let (bytes, _) = w.finish().unwrap();
        assert!(bytes.starts_with(b"REDIS0010\xfa\x09redis-ver\x067.0.15\xfe\x00\xfb\x01\x01\xfc"));
        let (data, crc) = bytes.split_at(bytes.len() - 8);
        assert_eq!(*data.last().unwrap(), OP_EOF);
        assert_eq!(crc, crc64(0, data).to_le_bytes());
        // The key: expiry (LE ms), type 0, name, value.
        let at = 1_700_000_000_000u64.to_le_bytes();
        let tail = [&at[..], &[TYPE_STRING, 1, b'k', 1, b'v', OP_EOF]].concat();
        assert!(data.ends_with(&tail));
    }

    #[test]
    fn a_snapshot_holds_every_type_with_its_ttl() {
        let mut db = crate::testdb::Db::new();
        db.cmd("SET s hello");
        db.cmd("SET t 1 PX 100000");
        db.cmd("RPUSH l a b c");
        db.cmd("SADD st x y");
        db.cmd("ZADD z 1.5 m 2 n");
        db.cmd("HSET h f v g w");
        let info = SnapshotInfo {
            replid: "0".repeat(40),
            offset: 0,
            used_memory: 0,
            functions: Vec::new(),
        };
        let dbs = [(0, db.info.dbs.physical(0))];
        let (bytes, counts) = write_snapshot(&mut db.store, &info, &dbs, Vec::new()).unwrap();
        assert_eq!(counts.keys, 6);
        assert_eq!(counts.expires, 1);
        assert_eq!(counts.bytes as usize, bytes.len());
        let (data, crc) = bytes.split_at(bytes.len() - 8);
        assert_eq!(crc, crc64(0, data).to_le_bytes());
        let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        assert!(has(&[
            TYPE_STRING,
            1,
            b's',
            5,
            b'h',
            b'e',
            b'l',
            b'l',
            b'o'
        ]));
        assert!(has(&[TYPE_LIST, 1, b'l', 3, 1, b'a', 1, b'b', 1, b'c']));
        assert!(has(&[TYPE_SET, 2, b's', b't', 2]));
        let zset = [
            &[TYPE_ZSET_2, 1, b'z', 2, 1, b'm'][..],
            &1.5f64.to_le_bytes(),
        ]
        .concat();
        assert!(has(&zset));
        assert!(has(&[TYPE_HASH, 1, b'h', 2]));
        assert!(has(&[OP_EXPIRETIME_MS]));
    }
}
