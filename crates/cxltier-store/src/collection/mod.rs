//! Lists, sets, sorted sets and hashes kept as counted B+trees of the store's own objects, so that
//! a large collection is never read or rewritten whole and its parts tier like any object. The
//! layout, invariants, costs and recovery are in `docs/server.md` ("Collections").
//!
//! Here: the types of the collection API, a collection's root read, and the read and change
//! paths every kind goes through (`coll_read`, `coll_write`), with checks and read plans. Each
//! kind's commands are an `impl Store` of their own: `list`, `zset` (sorted sets), `keyed`
//! (sets and chunked hashes), `bigstr` (values longer than a slot, in pieces). Below them:
//! `node` (a node's encoding), `tree` (the copy-on-write counted B+tree, `Tx`), `open` (the
//! collections a batch keeps open until it ends: write-back).

mod bigstr;
pub(crate) use bigstr::WHOLE_MAX;
mod keyed;
mod list;
mod node;
mod stream;
pub use stream::{StreamEdit, StreamTree};
pub(crate) mod open;
mod tree;
mod zset;
use open::OpenCollection;
pub use open::{OPEN_BYTES_MAX, OPEN_COLLECTIONS_MAX};

use node::{Entry, Node, Root};
use tree::{check_kind, Seek, Tx};

use crate::keys::{chunk_key, is_internal_key, CHUNK_KEY_OVERHEAD, CHUNK_PREFIX, MAX_PARTS_KEY};
use crate::{Kind, Result, Store, StoreError};

pub(crate) const DEFAULT_CHUNK_BYTES: usize = 4096;
/// The smallest chunk size accepted (a node must hold a few entries to split at all).
pub(crate) const MIN_CHUNK_BYTES: usize = 64;

/// A root's (generation, next chunk id, freed ids), for recovery.
pub(crate) fn root_header(bytes: &[u8], key: &[u8]) -> Result<(u64, u64, Vec<u64>)> {
    Root::decode_header(bytes, key)
}

/// A piece of a SCAN-family iteration: the items, and the cursor to pass to get the next piece
/// (`None`: the scan is complete).
pub type ScanPage<T> = (Vec<T>, Option<Vec<u8>>);

/// Where in a collection an operation will go, for [`Store::collection_reads`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CollectionProbe<'a> {
    /// A member of a set or sorted set, a field of a hash.
    Member(&'a [u8]),
    /// A list position (negative from the end).
    Index(i64),
    /// A score of a sorted set (its range commands start there).
    Score(f64),
    /// A sorted set's rank (negative from the end).
    Rank(i64),
}

/// One end of a member range (`ZRANGEBYLEX`): `[a` is `Inclusive(a)`, `(a` `Exclusive(a)`, `-`
/// `Min` and `+` `Max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LexBound<'a> {
    Min,
    Max,
    Inclusive(&'a [u8]),
    Exclusive(&'a [u8]),
}

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListEnd {
    Left,
    Right,
}

/// One end of a score range (`ZRANGEBYSCORE`): `(1.5` is `Exclusive(1.5)`; infinities are
/// inclusive bounds of `f64::INFINITY` and `f64::NEG_INFINITY`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScoreBound {
    Inclusive(f64),
    Exclusive(f64),
}

/// `ZADD`'s conditions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZAddFlags {
    /// Only add new members.
    pub nx: bool,
    /// Only update members that exist.
    pub xx: bool,
    /// Only update to a greater score.
    pub gt: bool,
    /// Only update to a smaller score.
    pub lt: bool,
}

/// What `ZADD` did: members added, and members whose score changed (for `CH`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZAddOutcome {
    pub added: u64,
    pub changed: u64,
}

/// A score as 8 bytes whose byte order is the numeric order (-0 is 0).
fn score_bytes(s: f64) -> [u8; 8] {
    let s = if s == 0.0 { 0.0 } else { s };
    let b = s.to_bits();
    let b = if b >> 63 == 1 { !b } else { b | 1 << 63 };
    b.to_be_bytes()
}

fn score_from_bytes(b: &[u8]) -> f64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    let b = u64::from_be_bytes(a);
    f64::from_bits(if b >> 63 == 1 { b & !(1 << 63) } else { !b })
}

/// The key of a member in a sorted set's score tree.
fn score_key(s: f64, member: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + member.len());
    k.extend_from_slice(&score_bytes(s));
    k.extend_from_slice(member);
    k
}

/// The smallest score key above every key of score `s` (8 bytes: no member needed).
fn above_score(s: f64) -> Vec<u8> {
    let b = u64::from_be_bytes(score_bytes(s));
    match b.checked_add(1) {
        Some(n) => n.to_be_bytes().to_vec(),
        // Above the largest encoding: nine bytes sort after every 8-byte prefix of it.
        None => vec![0xff; 9],
    }
}

fn value_score(v: &[u8]) -> f64 {
    f64::from_le_bytes(v[..8].try_into().expect("8-byte score"))
}

/// Redis's normalisation of a `start..=stop` range over `len` items (negative from the end).
fn norm_range(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = len as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len && stop >= 0).then_some((start as u64, stop as u64))
}

fn norm_index(i: i64, len: u64) -> Option<u64> {
    let i = if i < 0 { i + len as i64 } else { i };
    (i >= 0 && (i as u64) < len).then_some(i as u64)
}

impl Store {
    /// The root of the collection under `key`, checked to be of `kind`, and its expiry.
    fn coll_root(&mut self, key: &[u8], kind: Kind) -> Result<Option<(Root, Option<u64>)>> {
        let Some(o) = self.get_root(key)? else {
            return Ok(None);
        };
        if o.kind == Kind::BigString && kind != Kind::BigString {
            // A big value is a string or a hash to its users: WRONGTYPE names that.
            let held = Root::decode(o.value, key)
                .and_then(|r| bigstr::meta_of(&r, key))
                .map_or(Kind::String, |m| m.2);
            return Err(StoreError::WrongType {
                held: held.type_name(),
            });
        }
        check_kind(o.kind, kind)?;
        let exp = o.expires_at_ms;
        let root = Root::decode(o.value, key)?;
        if root.kind != kind {
            return Err(StoreError::Corrupt(format!(
                "the root of {:?} says it is a {}, its entry a {}",
                String::from_utf8_lossy(key),
                root.kind.type_name(),
                kind.type_name()
            )));
        }
        Ok(Some((root, exp)))
    }

    /// The members (fields, elements) of the collection of `kind` under `key`; 0 when absent.
    fn coll_len(&mut self, key: &[u8], kind: Kind) -> Result<u64> {
        Ok(self
            .coll_read(key, kind, |_, r| Ok(r.tops[0].count()))?
            .unwrap_or(0))
    }

    /// Run a read-only `f` over the collection; `None` when the key is absent. An open
    /// collection is read as it is now, its unwritten nodes included.
    fn coll_read<R>(
        &mut self,
        key: &[u8],
        kind: Kind,
        f: impl FnOnce(&mut Tx<'_>, &Root) -> Result<R>,
    ) -> Result<Option<R>> {
        if !self.open.is_empty() {
            if let Some(mut oc) = self.take_open(key, kind)? {
                let chunk_bytes = self.chunk_bytes();
                let mut tx = oc.tx(self, chunk_bytes);
                let r = f(&mut tx, &oc.root);
                oc.untx(&mut tx);
                self.open.put(oc);
                return r.map(Some);
            }
        }
        let Some((root, _)) = self.coll_root(key, kind)? else {
            return Ok(None);
        };
        let mut tx = Tx::begin(self, key, &root);
        f(&mut tx, &root).map(Some)
    }

    /// Run a change `f` over the collection (created empty when absent and `create`), then write
    /// its root (after the chunks `f` wrote) and delete the chunks it replaced; an emptied
    /// collection is deleted. `None` when the key is absent and not created.
    fn coll_write<R>(
        &mut self,
        key: &[u8],
        kind: Kind,
        create: bool,
        f: impl FnOnce(&mut Tx<'_>, &mut Root) -> Result<R>,
    ) -> Result<Option<R>> {
        self.coll_write_root(key, kind, create, |_| {}, f)
    }

    /// [`Store::coll_write`], with `init` run on a root it creates (before `f`).
    ///
    /// With write-back on ([`Store::set_collection_write_back`]) a changed collection that
    /// existed before stays open: its changed nodes and root wait in memory for the next
    /// change of it, and are written (children first, root last, as always) when the batch
    /// ends, at a commit, when another path reads or writes the key, or when the open set
    /// outgrows its bound. A collection this change created, emptied or holds as a big string
    /// is written at once, so that which keys exist is always what the index says.
    fn coll_write_root<R>(
        &mut self,
        key: &[u8],
        kind: Kind,
        create: bool,
        init: impl FnOnce(&mut Root),
        f: impl FnOnce(&mut Tx<'_>, &mut Root) -> Result<R>,
    ) -> Result<Option<R>> {
        let open = if self.open.is_empty() {
            None
        } else {
            self.take_open(key, kind)?
        };
        let mut oc = match open {
            Some(oc) => oc,
            None => match self.coll_root(key, kind)? {
                Some((root, exp)) => OpenCollection::stored(key, kind, root, exp),
                None if create => {
                    if is_internal_key(key) || key.is_empty() {
                        return Err(StoreError::Config(format!(
                            "keys must not be empty or start with the bytes {CHUNK_PREFIX:?}, which the store keeps for its own objects"
                        )));
                    }
                    let max = MAX_PARTS_KEY - CHUNK_KEY_OVERHEAD;
                    if key.len() > max {
                        return Err(StoreError::Config(format!(
                            "a collection's key may be at most {max} bytes (its parts' keys add {CHUNK_KEY_OVERHEAD}), not {}",
                            key.len()
                        )));
                    }
                    let mut root = Root::new(kind, self.new_generation());
                    init(&mut root);
                    OpenCollection::created(key, kind, root)
                }
                None => return Ok(None),
            },
        };
        let flags = oc.root.flags;
        let chunk_bytes = self.chunk_bytes();
        let mut tx = oc.tx(self, chunk_bytes);
        let r = f(&mut tx, &mut oc.root);
        let changed = tx.changed || oc.root.flags != flags;
        oc.untx(&mut tx);
        // A change that failed (a chunk it could not read) leaves its tree half changed: what
        // the collection had in memory goes, and the key stays as last written.
        let r = r?;
        if changed {
            // Counted when made, not when written: the server tells a command that changed
            // the store by this count.
            self.count_change();
        }
        // A stream stays when its entries are gone (Redis keeps an empty stream with its id
        // and groups); only DEL removes it.
        if oc.root.tops[0].count() == 0 && kind != Kind::Stream {
            // Redis has no empty collections; deleting the root deletes any chunks left (the
            // ones never written just go).
            self.delete_collection(key)?;
            return Ok(Some(r));
        }
        if oc.stored_root.is_none() || kind == Kind::BigString || !self.collection_write_back {
            self.write_back(key, oc)?;
        } else {
            self.open.put(oc);
            if self.open.over_bound() {
                self.settle_collections()?;
            }
        }
        Ok(Some(r))
    }

    /// The member at `index` in member order of a set, sorted set or chunked hash (with its
    /// value: a hash field's value, a sorted set member's score as 8 little-endian bytes), in
    /// O(log n): `SRANDMEMBER`, `SPOP`, `HRANDFIELD`, `ZRANDMEMBER` draw indexes below the
    /// collection's length and fetch them with this. `None` when absent or out of range.
    pub fn member_at(&mut self, key: &[u8], index: u64) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let kind = match self.peek_kind(key) {
            Some(k @ (Kind::Set | Kind::ZSet | Kind::ChunkedHash)) => k,
            Some(Kind::List) => return Err(StoreError::WrongType { held: "list" }),
            _ => return Ok(None),
        };
        Ok(self
            .coll_read(key, kind, |tx, r| tx.find(&r.tops[0], Seek::At(index)))?
            .flatten())
    }

    /// The flags kept in the root of the collection of `kind` at `key` (0 when absent): see
    /// [`Store::add_collection_flags`].
    pub fn collection_flags(&mut self, key: &[u8], kind: Kind) -> Result<u8> {
        Ok(self.coll_read(key, kind, |_, r| Ok(r.flags))?.unwrap_or(0))
    }

    /// Set `flags` in the root of the collection of `kind` at `key` (kept until the
    /// collection is deleted; the server's use: a set Redis would have converted to a
    /// hashtable, which it never converts back). Writes the root only when they change it;
    /// false when the key is absent.
    pub fn add_collection_flags(&mut self, key: &[u8], kind: Kind, flags: u8) -> Result<bool> {
        Ok(self
            .coll_write(key, kind, false, |_, root| {
                root.flags |= flags;
                Ok(())
            })?
            .is_some())
    }

    fn coll_scan(
        &mut self,
        key: &[u8],
        kind: Kind,
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<(Vec<Entry>, Option<Vec<u8>>)> {
        let count = count.max(1);
        Ok(self
            .coll_read(key, kind, |tx, r| {
                let top = &r.tops[0];
                let from = match after {
                    Some(a) => tx.count_below(top, a, true)?,
                    None => 0,
                };
                let mut out = Vec::with_capacity(count.min(1024));
                tx.walk(top, from, false, &mut |k, v| {
                    let e = (k, v);
                    out.push((e.0.to_vec(), e.1.to_vec()));
                    out.len() < count
                })?;
                let more = from + (out.len() as u64) < top.count();
                let next = if more {
                    out.last().map(|e| e.0.clone())
                } else {
                    None
                };
                Ok((out, next))
            })?
            .unwrap_or_default())
    }

    /// Check a collection's structure (tests): every count and first key its parent keeps, keys
    /// in order, chunks within their size, a sorted set's two trees agreeing, and its chunks in
    /// the store exactly those its root reaches (none leaked, none missing).
    pub fn check_collection(&mut self, key: &[u8]) -> std::result::Result<(), String> {
        // The chunks stored are compared with those the root reaches: as written back.
        self.settle_collection(key).map_err(|e| e.to_string())?;
        let kind = match self.peek_kind(key) {
            Some(k) if k.is_collection() => k,
            // No collection here: none of its parts may be left either.
            _ => {
                return match self.chunk_keys_of(key).len() {
                    0 => Ok(()),
                    n => Err(format!("{n} chunks of a missing collection")),
                }
            }
        };
        let mut reached = std::collections::BTreeSet::new();
        let r = self
            .coll_read(key, kind, |tx, root| {
                let mut entries = Vec::new();
                for top in &root.tops {
                    let mut all = Vec::new();
                    check_node(tx, top, true, &mut all, &mut reached)
                        .map_err(StoreError::Corrupt)?;
                    if !matches!(kind, Kind::List | Kind::BigString)
                        && all.windows(2).any(|w| w[0].0 >= w[1].0)
                    {
                        return Err(StoreError::Corrupt("keys out of order".into()));
                    }
                    entries.push(all);
                }
                if kind == Kind::ZSet {
                    let mut by_score: Vec<Vec<u8>> = entries[0]
                        .iter()
                        .map(|(m, v)| score_key(value_score(v), m))
                        .collect();
                    by_score.sort();
                    let keys: Vec<Vec<u8>> = entries[1].iter().map(|e| e.0.clone()).collect();
                    if by_score != keys {
                        return Err(StoreError::Corrupt("the two trees disagree".into()));
                    }
                }
                Ok(root.generation)
            })
            .map_err(|e| e.to_string())?;
        let generation = r.ok_or("no root")?;
        let stored: std::collections::BTreeSet<Vec<u8>> =
            self.chunk_keys_of(key).into_iter().collect();
        let want: std::collections::BTreeSet<Vec<u8>> = reached
            .iter()
            .map(|&id| chunk_key(key, generation, id))
            .collect();
        if stored != want {
            return Err(format!(
                "{} chunks stored, {} reached ({} stored but unreached)",
                stored.len(),
                want.len(),
                stored.difference(&want).count()
            ));
        }
        Ok(())
    }

    /// The objects of the path an operation at `probe` will walk in the collection under `key`
    /// that need a device read: for [`Store::start_reads`] before the command runs, so that it
    /// never waits for the device itself. The walk stops at the first object that is only on
    /// NVMe (what lies below it is known once it is read): call again after the reads finish
    /// until it returns nothing. Empty when the key is absent or not a collection.
    pub fn collection_reads(&self, key: &[u8], probe: CollectionProbe<'_>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if self.read_unstarted(key) {
            out.push(key.to_vec());
            return out;
        }
        let Some((kind, bytes)) = self.peek_any(key) else {
            return out;
        };
        if !kind.is_collection() {
            return out;
        }
        let Ok(root) = Root::decode(bytes, key) else {
            return out;
        };
        let (tree, seek_key, index) = match probe {
            CollectionProbe::Member(m) => (0, Some(m.to_vec()), None),
            CollectionProbe::Index(i) => (0, None, Some(i)),
            CollectionProbe::Score(s) => (1, Some(score_bytes(s).to_vec()), None),
            CollectionProbe::Rank(r) => (1, None, Some(r)),
        };
        let Some(top) = root.tops.get(tree) else {
            return out;
        };
        let mut index = index.and_then(|i| norm_index(i, top.count()));
        if index.is_none() && seek_key.is_none() {
            return out;
        }
        let mut node = top.clone();
        loop {
            let Node::Inner(c) = &node else {
                return out;
            };
            let seek = match (&seek_key, index) {
                (Some(k), _) => Seek::Key(k),
                (None, Some(i)) => Seek::At(i),
                (None, None) => return out,
            };
            let (j, s) = tree::child_for(c, seek);
            if let Seek::At(i) = s {
                index = Some(i);
            }
            let ck = chunk_key(key, root.generation, c[j].id);
            if self.read_unstarted(&ck) {
                out.push(ck);
                return out;
            }
            let Some((_, bytes)) = self.peek_any(&ck) else {
                return out;
            };
            match Node::decode(&mut node::Reader::new(bytes, key)) {
                Ok(n) => node = n,
                Err(_) => return out,
            }
        }
    }

    /// Chunk writes made by collection changes since the store was built (a cost measure:
    /// a point change writes one chunk per tree level).
    pub fn collection_chunk_writes(&self) -> u64 {
        self.chunk_writes()
    }
}

/// Walk a node for [`Store::check_collection`], collecting its entries and the chunk ids reached.
fn check_node(
    tx: &mut Tx<'_>,
    node: &Node,
    top: bool,
    out: &mut Vec<Entry>,
    reached: &mut std::collections::BTreeSet<u64>,
) -> std::result::Result<(), String> {
    if !top && node.size() > tx.chunk_bytes && tree::may_split(node) {
        return Err(format!(
            "a chunk of {} bytes, over {}",
            node.size(),
            tx.chunk_bytes
        ));
    }
    if !top && node.slots() == 0 {
        return Err("an empty chunk".into());
    }
    if !top && matches!(node, Node::Inner(c) if c.len() < 2) {
        return Err("an inner chunk with one child".into());
    }
    match node {
        Node::Leaf(e) => out.extend(e.iter().cloned()),
        Node::Inner(c) => {
            for c in c {
                if !reached.insert(c.id) {
                    return Err(format!("chunk {} reached twice", c.id));
                }
                let child = tx.load(c.id).map_err(|e| e.to_string())?;
                if child.count() != c.count {
                    return Err(format!(
                        "chunk {} holds {}, its parent says {}",
                        c.id,
                        child.count(),
                        c.count
                    ));
                }
                if child.first_key() != c.first.as_slice() {
                    return Err(format!(
                        "chunk {}'s first key is not the one its parent keeps",
                        c.id
                    ));
                }
                check_node(tx, &child, false, out, reached)?;
            }
        }
    }
    Ok(())
}

/// The member's score in a sorted set's member tree.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_bytes_sort_like_scores() {
        let mut v = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            3.5,
            1e300,
            f64::INFINITY,
        ];
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for w in v.windows(2) {
            assert!(score_bytes(w[0]) < score_bytes(w[1]), "{} {}", w[0], w[1]);
            assert!(above_score(w[0]).as_slice() <= &score_bytes(w[1])[..]);
        }
        for s in v {
            assert_eq!(score_from_bytes(&score_bytes(s)), s);
        }
        assert_eq!(score_bytes(-0.0), score_bytes(0.0));
    }
}
