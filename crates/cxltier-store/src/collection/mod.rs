//! Lists, sets, sorted sets and hashes kept as counted B+trees of the store's own objects, so that
//! a large collection is never read or rewritten whole and its parts tier like any object. The
//! layout, invariants, costs and recovery are in `docs/server.md` ("Collections").

mod bigstr;
pub(crate) use bigstr::WHOLE_MAX;
mod node;
mod tree;

use node::{leaf_entry_size, Entry, Leaf, Node, Root};
use tree::{check_kind, entry_bytes, Seek, Tx};

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

/// The most bytes of changed nodes the open collections keep before they are all written
/// back: a batch's changes to a few large collections fit, and a batch that changes many
/// leaves of one writes some of them early rather than holding a large part of it.
pub const OPEN_BYTES_MAX: usize = 4 << 20;
/// The most collections kept open at once (each holds its root's top nodes besides).
pub const OPEN_COLLECTIONS_MAX: usize = 64;

/// A collection changed in this batch and not yet written back: its root as it is now and the
/// nodes its changes made, as one change that goes on across commands ([`Tx`]).
pub(crate) struct OpenCollection {
    /// Its key (lent to each [`Tx`] and back: no copy per command).
    key: Vec<u8>,
    kind: Kind,
    root: Root,
    exp: Option<u64>,
    pending: hashbrown::HashMap<u64, (Node, usize)>,
    pending_bytes: usize,
    /// Chunks of the stored tree these changes replaced (deleted once the root is written).
    freed: Vec<u64>,
    /// The stored root's next id: ids from it on are this open change's.
    first_new_id: u64,
    /// The root as stored, without its freed ids (a batch that changed nothing writes
    /// nothing); `None` for a collection not stored yet.
    stored_root: Option<Vec<u8>>,
}

impl OpenCollection {
    // Boxed: an open collection moves out of the open set and back for every command, and the
    // struct is a few hundred bytes (copying it was most of a push's own time).
    fn stored(key: &[u8], kind: Kind, root: Root, exp: Option<u64>) -> Box<OpenCollection> {
        let mut r = root.clone();
        r.freed.clear();
        Box::new(OpenCollection {
            key: key.to_vec(),
            kind,
            first_new_id: root.next_id,
            stored_root: Some(r.encode()),
            root,
            exp,
            pending: Default::default(),
            pending_bytes: 0,
            freed: Vec::new(),
        })
    }

    fn created(key: &[u8], kind: Kind, root: Root) -> Box<OpenCollection> {
        Box::new(OpenCollection {
            key: key.to_vec(),
            kind,
            first_new_id: root.next_id,
            stored_root: None,
            root,
            exp: None,
            pending: Default::default(),
            pending_bytes: 0,
            freed: Vec::new(),
        })
    }

    /// The change this open collection goes on with (its pending nodes and freed ids moved in;
    /// the caller moves them back).
    fn tx<'s>(&mut self, store: &'s mut Store, chunk_bytes: usize) -> Tx<'s> {
        Tx {
            store,
            key: std::mem::take(&mut self.key),
            generation: self.root.generation,
            next_id: self.root.next_id,
            freed: std::mem::take(&mut self.freed),
            chunk_bytes,
            first_new_id: self.first_new_id,
            pending: std::mem::take(&mut self.pending),
            pending_bytes: self.pending_bytes,
            changed: false,
        }
    }

    /// Take back what [`OpenCollection::tx`] lent, and what the change made.
    fn untx(&mut self, tx: &mut Tx<'_>) {
        self.key = std::mem::take(&mut tx.key);
        self.root.next_id = tx.next_id;
        self.freed = std::mem::take(&mut tx.freed);
        self.pending = std::mem::take(&mut tx.pending);
        self.pending_bytes = tx.pending_bytes;
    }
}

/// The most encoded bytes of nodes a write-back keeps decoded ([`WrittenNodes`]): a list's end
/// path (its end leaf and the inner nodes above it), not a large change's many leaves.
const WRITTEN_NODES_MAX_CHUNKS: usize = 4;

/// The nodes the last collection write-back wrote, kept decoded for the next batch's first
/// change of the same collection: under redis-benchmark's pushes every batch starts by reading
/// the end leaf it wrote at the end of the last (hundreds of members: an allocation each to
/// decode, and a free each when dropped). A chunk's bytes never change once written (a change
/// writes new ids; ids are never reused within a generation, and generations never repeat), so
/// a node found here by the collection's key, generation and id is the stored chunk's.
#[derive(Default)]
pub(crate) struct WrittenNodes {
    key: Vec<u8>,
    generation: u64,
    nodes: hashbrown::HashMap<u64, (Node, usize)>,
}

impl WrittenNodes {
    /// The node of chunk `id` of the collection `key` of `generation`, taken out (its change
    /// makes it anew under another id).
    pub(crate) fn take(&mut self, key: &[u8], generation: u64, id: u64) -> Option<(Node, usize)> {
        if self.nodes.is_empty() || self.generation != generation || self.key != key {
            return None;
        }
        self.nodes.remove(&id)
    }

    /// Keep `nodes`, just written for `key`'s collection of `generation`, in place of those
    /// kept before.
    fn keep(&mut self, key: &[u8], generation: u64, nodes: hashbrown::HashMap<u64, (Node, usize)>) {
        self.key.clear();
        self.key.extend_from_slice(key);
        self.generation = generation;
        self.nodes = nodes;
    }

    pub(crate) fn clear(&mut self) {
        self.nodes.clear();
    }
}

/// The store's open collections (see [`Store::set_collection_write_back`]).
#[derive(Default)]
pub(crate) struct OpenCollections {
    map: hashbrown::HashMap<Vec<u8>, Box<OpenCollection>>,
    /// The pending bytes of the collections in `map`.
    bytes: usize,
}

impl OpenCollections {
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn take(&mut self, key: &[u8]) -> Option<Box<OpenCollection>> {
        let (k, mut oc) = self.map.remove_entry(key)?;
        self.bytes -= oc.pending_bytes;
        oc.key = k;
        Some(oc)
    }

    fn put(&mut self, mut oc: Box<OpenCollection>) {
        self.bytes += oc.pending_bytes;
        self.map.insert(std::mem::take(&mut oc.key), oc);
    }

    // Boxes as the map holds them, each handed on to `Store::write_back` as it is.
    #[allow(clippy::vec_box)]
    fn take_all(&mut self) -> Vec<Box<OpenCollection>> {
        self.bytes = 0;
        self.map
            .drain()
            .map(|(k, mut oc)| {
                oc.key = k;
                oc
            })
            .collect()
    }

    pub(crate) fn clear(&mut self) {
        self.bytes = 0;
        self.map.clear();
    }

    fn over_bound(&self) -> bool {
        self.bytes > OPEN_BYTES_MAX || self.map.len() > OPEN_COLLECTIONS_MAX
    }
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

    /// The open collection under `key` if it is one of `kind` and its TTL has not passed,
    /// taken out of the open set (the caller puts it back). Any other open one under `key` is
    /// written back first, so that the stored root answers (a wrong type, an expiry).
    fn take_open(&mut self, key: &[u8], kind: Kind) -> Result<Option<Box<OpenCollection>>> {
        let Some(oc) = self.open.take(key) else {
            return Ok(None);
        };
        if oc.kind == kind && oc.exp.is_none_or(|t| t > self.now_ms()) {
            return Ok(Some(oc));
        }
        self.write_back(key, oc)?;
        Ok(None)
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
        let chunk_bytes = self.chunk_bytes();
        let mut tx = Tx {
            store: self,
            key: key.to_vec(),
            generation: root.generation,
            next_id: root.next_id,
            freed: Vec::new(),
            chunk_bytes,
            first_new_id: root.next_id,
            pending: Default::default(),
            pending_bytes: 0,
            changed: false,
        };
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
        if oc.root.tops[0].count() == 0 {
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

    /// Write an open collection out: the nodes its changes made (children first), then its
    /// root, then delete the chunks those changes replaced. Nothing is written when it is as
    /// stored. Not a change of the store's contents (those were counted as they were made).
    pub(crate) fn write_back(&mut self, key: &[u8], oc: Box<OpenCollection>) -> Result<()> {
        let changes = self.changes();
        let r = self.write_back_inner(key, oc);
        self.set_changes(changes);
        r
    }

    fn write_back_inner(&mut self, key: &[u8], mut oc: Box<OpenCollection>) -> Result<()> {
        let chunk_bytes = self.chunk_bytes();
        let keep = oc.pending_bytes <= WRITTEN_NODES_MAX_CHUNKS * chunk_bytes;
        let (freed, written) = {
            let mut tx = oc.tx(self, chunk_bytes);
            let written = tx.flush_keeping(keep)?;
            (std::mem::take(&mut tx.freed), written)
        };
        if keep {
            self.written_nodes.keep(key, oc.root.generation, written);
        }
        let mut root = oc.root;
        root.freed = freed;
        let bytes = root.encode();
        // An old root's freed ids were deleted by its own change: `stored_root` leaves them out.
        if root.freed.is_empty() && oc.stored_root.as_deref() == Some(bytes.as_slice()) {
            return Ok(());
        }
        self.put_raw(key, oc.kind, &bytes, oc.exp)?;
        for &id in &root.freed {
            self.chunk_delete_replaced(&chunk_key(key, root.generation, id))?;
        }
        Ok(())
    }

    /// Write back the open collection under `key`, if there is one: before any other path
    /// reads or writes the key.
    pub(crate) fn settle_collection(&mut self, key: &[u8]) -> Result<()> {
        if self.open.is_empty() {
            return Ok(());
        }
        match self.open.take(key) {
            Some(oc) => self.write_back(key, oc),
            None => Ok(()),
        }
    }

    /// Write back every open collection (the end of a batch, a commit, a path over all keys).
    /// Each is tried; the first failure is returned.
    pub(crate) fn settle_collections(&mut self) -> Result<()> {
        let mut first_err = None;
        for oc in self.open.take_all() {
            let key = oc.key.clone();
            if let Err(e) = self.write_back(&key, oc) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Forget the open collection under `key` (its key is being deleted or expired: the
    /// chunks it made were never written, and the stored ones go with the key).
    pub(crate) fn forget_open_collection(&mut self, key: &[u8]) {
        if !self.open.is_empty() {
            self.open.take(key);
        }
    }

    /// Keep changed collections in memory across the commands of a batch and write each
    /// once, when the batch ends or its commit comes (see [`Store::end_batch`],
    /// [`Store::commit`]): the server's mode. Off (the default), every change is written
    /// before its call returns. Turning it off writes back what is open.
    pub fn set_collection_write_back(&mut self, on: bool) -> Result<()> {
        if !on {
            self.settle_collections()?;
        }
        self.collection_write_back = on;
        Ok(())
    }

    /// Bytes of changed collection nodes waiting to be written back (bounded by
    /// [`OPEN_BYTES_MAX`]), and how many collections hold them.
    pub fn collection_write_back_bytes(&self) -> (usize, usize) {
        (self.open.bytes, self.open.map.len())
    }

    // ---- lists ----

    /// `LPUSH`/`RPUSH`: add `members` at `end` (creating the list), in the order Redis does
    /// (`LPUSH k a b` makes `b a`). Returns the list's length.
    pub fn list_push(&mut self, key: &[u8], end: ListEnd, members: &[&[u8]]) -> Result<u64> {
        self.list_push_inner(key, end, members, true)
            .map(|n| n.unwrap_or(0))
    }

    /// `LPUSHX`/`RPUSHX`: as [`Store::list_push`] only when the list exists; 0 when it does not.
    pub fn list_push_existing(
        &mut self,
        key: &[u8],
        end: ListEnd,
        members: &[&[u8]],
    ) -> Result<u64> {
        self.list_push_inner(key, end, members, false)
            .map(|n| n.unwrap_or(0))
    }

    fn list_push_inner(
        &mut self,
        key: &[u8],
        end: ListEnd,
        members: &[&[u8]],
        create: bool,
    ) -> Result<Option<u64>> {
        if members.is_empty() {
            return Ok(Some(self.list_len(key)?));
        }
        self.coll_write(key, Kind::List, create, |tx, root| {
            let top = &mut root.tops[0];
            let at = match end {
                ListEnd::Left => 0,
                ListEnd::Right => top.count(),
            };
            let grew: isize = members.iter().map(|m| entry_bytes(&[], m)).sum();
            // The gap is at the leaf's front or back (the list's end): the double-ended leaf
            // takes the members there without moving its other entries.
            let push = |e: &mut Leaf, pos: std::result::Result<usize, usize>| {
                let i = pos.unwrap_or_else(|i| i);
                for (k, m) in members.iter().enumerate() {
                    let entry = (Vec::new(), m.to_vec());
                    match end {
                        // Each member goes before the one pushed before it (`b a`).
                        ListEnd::Left if i == 0 => e.push_front(entry),
                        ListEnd::Left => e.insert(i, entry),
                        ListEnd::Right if i + k == e.len() => e.push_back(entry),
                        ListEnd::Right => e.insert(i + k, entry),
                    }
                }
            };
            // The end leaf changed earlier in this batch takes the members where it is, when
            // they fit; else the path is written anew (and the leaf split when it is full).
            let in_place = tx.modify_in_place(top, Seek::Before(at), |e, pos, room| {
                (grew.unsigned_abs() <= room.grow).then(|| (push(e, pos), grew))
            });
            if in_place.is_none() {
                tx.modify(top, Seek::Before(at), &mut |e, pos, edit| {
                    edit.grew = Some(grew);
                    push(e, pos);
                    // This is the list's end leaf: when full it stays as it is, and what was
                    // pushed starts the new end leaf.
                    edit.split_at = Some(match end {
                        ListEnd::Left => members.len(),
                        ListEnd::Right => e.len() - members.len(),
                    });
                })?;
            }
            Ok(top.count())
        })
    }

    /// `LPOP`/`RPOP` with a count: up to `count` members from `end`; `None` when the key is absent.
    pub fn list_pop(
        &mut self,
        key: &[u8],
        end: ListEnd,
        count: u64,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        self.coll_write(key, Kind::List, false, |tx, root| {
            let top = &mut root.tops[0];
            // Sized for what it will hold (one member for a plain pop), and the members moved
            // straight into it from the leaf: one allocation besides the members themselves.
            let mut out = Vec::with_capacity(count.min(top.count()).min(1024) as usize);
            while (out.len() as u64) < count && top.count() > 0 {
                let want = count as usize - out.len();
                let seek = match end {
                    ListEnd::Left => Seek::At(0),
                    ListEnd::Right => Seek::At(top.count() - 1),
                };
                let take = |e: &mut Leaf, n: usize, out: &mut Vec<Vec<u8>>| match end {
                    ListEnd::Left => out.extend(e.drain(..n).map(|x| x.1)),
                    ListEnd::Right => out.extend(e.drain(e.len() - n..).rev().map(|x| x.1)),
                };
                // From the end leaf where it is when it keeps enough not to merge.
                let in_place = tx.modify_in_place(top, seek, |e, _, room| {
                    let n = want.min(e.len());
                    let gone = match end {
                        ListEnd::Left => e.range(..n),
                        ListEnd::Right => e.range(e.len() - n..),
                    };
                    let bytes: usize = gone.map(leaf_entry_size).sum();
                    if n == e.len() || bytes > room.shrink {
                        return None;
                    }
                    take(e, n, &mut out);
                    Some(((), -(bytes as isize)))
                });
                if in_place.is_some() {
                    continue;
                }
                // Everything the leaf can give at once: one path written per leaf emptied.
                tx.modify(top, seek, &mut |e, _, edit| {
                    let before = out.len();
                    take(e, want.min(e.len()), &mut out);
                    edit.grew = Some(
                        -out[before..]
                            .iter()
                            .map(|m| entry_bytes(&[], m))
                            .sum::<isize>(),
                    );
                })?;
            }
            Ok(out)
        })
    }

    /// `LLEN` (0 when absent).
    pub fn list_len(&mut self, key: &[u8]) -> Result<u64> {
        Ok(self
            .coll_read(key, Kind::List, |_, r| Ok(r.tops[0].count()))?
            .unwrap_or(0))
    }

    /// `LINDEX` (negative from the end).
    pub fn list_index(&mut self, key: &[u8], index: i64) -> Result<Option<Vec<u8>>> {
        Ok(self
            .coll_read(key, Kind::List, |tx, r| {
                let Some(i) = norm_index(index, r.tops[0].count()) else {
                    return Ok(None);
                };
                Ok(tx.find(&r.tops[0], Seek::At(i))?.map(|e| e.1))
            })?
            .flatten())
    }

    /// `LSET`: `None` when the key is absent (Redis: "no such key"), `Some(false)` when the index
    /// is out of range.
    pub fn list_set(&mut self, key: &[u8], index: i64, value: &[u8]) -> Result<Option<bool>> {
        self.coll_write(key, Kind::List, false, |tx, root| {
            let Some(i) = norm_index(index, root.tops[0].count()) else {
                return Ok(false);
            };
            tx.modify(&mut root.tops[0], Seek::At(i), &mut |e, pos, _| {
                if let Ok(p) = pos {
                    e[p].1 = value.to_vec();
                }
            })?;
            Ok(true)
        })
    }

    /// `LRANGE` (Redis's index rules); reads only the leaves it returns.
    pub fn list_range(&mut self, key: &[u8], start: i64, stop: i64) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.list_range_into(
            key,
            start,
            stop,
            &mut out,
            |out, n| out.reserve(n as usize),
            |out, m| out.push(m.to_vec()),
        )?;
        Ok(out)
    }

    /// `LRANGE` written into `sink` as the chunks are read, nothing collected: `len` first with
    /// the number of members (0 when the key is absent or the range empty), then `member` with
    /// each in order. On an error `sink` may hold part of the range: the caller drops it.
    pub fn list_range_into<W>(
        &mut self,
        key: &[u8],
        start: i64,
        stop: i64,
        sink: &mut W,
        len: impl FnOnce(&mut W, u64),
        mut member: impl FnMut(&mut W, &[u8]),
    ) -> Result<()> {
        let mut len = Some(len);
        self.coll_read(key, Kind::List, |tx, r| {
            let Some((a, b)) = norm_range(start, stop, r.tops[0].count()) else {
                return Ok(());
            };
            let n = b - a + 1;
            (len.take().expect("called once"))(sink, n);
            let mut left = n;
            tx.walk(&r.tops[0], a, false, &mut |_, v| {
                member(sink, v);
                left -= 1;
                left > 0
            })
        })?;
        if let Some(len) = len {
            len(sink, 0);
        }
        Ok(())
    }

    /// `LINSERT`: the new length; 0 when the key is absent, -1 when `pivot` is not in the list.
    /// Finding the pivot reads the list up to it (as in Redis, O(n)); the insert is O(log n).
    pub fn list_insert(
        &mut self,
        key: &[u8],
        before: bool,
        pivot: &[u8],
        value: &[u8],
    ) -> Result<i64> {
        Ok(self
            .coll_write(key, Kind::List, false, |tx, root| {
                let mut at = None;
                let mut i = 0u64;
                tx.walk(&root.tops[0], 0, false, &mut |k, v| {
                    let e = (k, v);
                    if e.1 == pivot {
                        at = Some(i);
                        return false;
                    }
                    i += 1;
                    true
                })?;
                let Some(at) = at else { return Ok(-1) };
                let at = if before { at } else { at + 1 };
                tx.modify(&mut root.tops[0], Seek::Before(at), &mut |e, pos, _| {
                    let p = pos.unwrap_or_else(|p| p);
                    e.insert(p, (Vec::new(), value.to_vec()));
                })?;
                Ok(root.tops[0].count() as i64)
            })?
            .unwrap_or(0))
    }

    /// `LREM`: remove up to `count` (0: all; negative: from the tail) members equal to `value`.
    pub fn list_remove(&mut self, key: &[u8], count: i64, value: &[u8]) -> Result<u64> {
        Ok(self
            .coll_write(key, Kind::List, false, |tx, root| {
                let len = root.tops[0].count();
                if len == 0 {
                    return Ok(0);
                }
                let limit = if count == 0 {
                    u64::MAX
                } else {
                    count.unsigned_abs()
                };
                let rev = count < 0;
                let mut hits = Vec::new();
                let mut i = if rev { len - 1 } else { 0 };
                tx.walk(&root.tops[0], i, rev, &mut |k, v| {
                    let e = (k, v);
                    if e.1 == value {
                        hits.push(i);
                    }
                    if rev {
                        i = i.wrapping_sub(1);
                    } else {
                        i += 1;
                    }
                    (hits.len() as u64) < limit
                })?;
                // From the highest position down, so earlier positions stay where they were.
                hits.sort_unstable_by(|a, b| b.cmp(a));
                for &p in &hits {
                    tx.modify(&mut root.tops[0], Seek::At(p), &mut |e, pos, _| {
                        if let Ok(p) = pos {
                            e.remove(p);
                        }
                    })?;
                }
                Ok(hits.len() as u64)
            })?
            .unwrap_or(0))
    }

    /// `LTRIM`: keep `start..=stop`; a cost in the members removed, not the list's length.
    pub fn list_trim(&mut self, key: &[u8], start: i64, stop: i64) -> Result<()> {
        self.coll_write(key, Kind::List, false, |tx, root| {
            let len = root.tops[0].count();
            let (head, tail) = match norm_range(start, stop, len) {
                Some((a, b)) => (a, len - 1 - b),
                None => (len, 0),
            };
            for (end, mut n) in [(ListEnd::Left, head), (ListEnd::Right, tail)] {
                while n > 0 && root.tops[0].count() > 0 {
                    let top = &mut root.tops[0];
                    let seek = match end {
                        ListEnd::Left => Seek::At(0),
                        ListEnd::Right => Seek::At(top.count() - 1),
                    };
                    let took = tx.modify(top, seek, &mut |e, _, _| {
                        let k = (n as usize).min(e.len());
                        match end {
                            ListEnd::Left => drop(e.drain(..k)),
                            ListEnd::Right => drop(e.drain(e.len() - k..)),
                        }
                        k as u64
                    })?;
                    n -= took;
                }
            }
            Ok(())
        })
        .map(|_| ())
    }

    // ---- sorted sets ----

    /// `ZADD` (with `NX`/`XX`/`GT`/`LT`); a NaN score is refused before anything changes.
    pub fn zadd(
        &mut self,
        key: &[u8],
        flags: ZAddFlags,
        members: &[(f64, &[u8])],
    ) -> Result<ZAddOutcome> {
        if members.iter().any(|m| m.0.is_nan()) {
            return Err(StoreError::Config("a score is not a number (NaN)".into()));
        }
        if members.is_empty() {
            return Ok(ZAddOutcome::default());
        }
        let mut out = ZAddOutcome::default();
        self.coll_write(key, Kind::ZSet, !flags.xx, |tx, root| {
            for &(s, m) in members {
                match zadd_one(tx, root, m, s, flags)? {
                    Some(None) => out.added += 1,
                    Some(Some(_)) => out.changed += 1,
                    None => {}
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// `ZINCRBY` / `ZADD INCR`: the new score, or `None` when the flags stopped it.
    pub fn zincrby(
        &mut self,
        key: &[u8],
        flags: ZAddFlags,
        by: f64,
        member: &[u8],
    ) -> Result<Option<f64>> {
        if by.is_nan() {
            return Err(StoreError::Config(
                "the increment is not a number (NaN)".into(),
            ));
        }
        Ok(self
            .coll_write(key, Kind::ZSet, !flags.xx, |tx, root| {
                let old = zscore_in(tx, root, member)?;
                if (old.is_none() && flags.xx) || (old.is_some() && flags.nx) {
                    return Ok(None);
                }
                let s = old.unwrap_or(0.0) + by;
                if s.is_nan() {
                    return Err(StoreError::Config(
                        "resulting score is not a number (NaN)".into(),
                    ));
                }
                if let Some(o) = old {
                    if (flags.gt && s <= o) || (flags.lt && s >= o) {
                        return Ok(None);
                    }
                }
                zset_score(tx, root, member, s, old)?;
                Ok(Some(s))
            })?
            .flatten())
    }

    /// `ZREM`: members removed.
    pub fn zrem(&mut self, key: &[u8], members: &[&[u8]]) -> Result<u64> {
        Ok(self
            .coll_write(key, Kind::ZSet, false, |tx, root| {
                let mut n = 0;
                for &m in members {
                    let old = tx.modify(&mut root.tops[0], Seek::Key(m), &mut |e, pos, ch| {
                        ch.changed = pos.is_ok();
                        pos.ok()
                            .and_then(|p| e.remove(p))
                            .map(|x| value_score(&x.1))
                    })?;
                    if let Some(o) = old {
                        let sk = score_key(o, m);
                        tx.modify(&mut root.tops[1], Seek::Key(&sk), &mut |e, pos, _| {
                            if let Ok(p) = pos {
                                e.remove(p);
                            }
                        })?;
                        n += 1;
                    }
                }
                Ok(n)
            })?
            .unwrap_or(0))
    }

    /// `ZSCORE`.
    pub fn zscore(&mut self, key: &[u8], member: &[u8]) -> Result<Option<f64>> {
        Ok(self
            .coll_read(key, Kind::ZSet, |tx, r| {
                Ok(tx
                    .find(&r.tops[0], Seek::Key(member))?
                    .map(|e| value_score(&e.1)))
            })?
            .flatten())
    }

    /// `ZCARD` (0 when absent).
    pub fn zcard(&mut self, key: &[u8]) -> Result<u64> {
        Ok(self
            .coll_read(key, Kind::ZSet, |_, r| Ok(r.tops[0].count()))?
            .unwrap_or(0))
    }

    /// `ZRANK` / `ZREVRANK`.
    pub fn zrank(&mut self, key: &[u8], member: &[u8], rev: bool) -> Result<Option<u64>> {
        Ok(self
            .coll_read(key, Kind::ZSet, |tx, r| {
                let Some(e) = tx.find(&r.tops[0], Seek::Key(member))? else {
                    return Ok(None);
                };
                let below =
                    tx.count_below(&r.tops[1], &score_key(value_score(&e.1), member), false)?;
                let len = r.tops[1].count();
                Ok(Some(if rev { len - 1 - below } else { below }))
            })?
            .flatten())
    }

    /// `ZRANGE start stop [REV]` by rank: members with their scores.
    pub fn zrange_by_rank(
        &mut self,
        key: &[u8],
        start: i64,
        stop: i64,
        rev: bool,
    ) -> Result<Vec<(Vec<u8>, f64)>> {
        Ok(self
            .coll_read(key, Kind::ZSet, |tx, r| {
                let len = r.tops[1].count();
                let Some((a, b)) = norm_range(start, stop, len) else {
                    return Ok(Vec::new());
                };
                let n = b - a + 1;
                let from = if rev { len - 1 - a } else { a };
                zwalk(tx, &r.tops[1], from, rev, n)
            })?
            .unwrap_or_default())
    }

    /// Positions `[lo, hi)` of the score tree that lie within `min..max`.
    fn zspan(tx: &mut Tx<'_>, top: &Node, min: ScoreBound, max: ScoreBound) -> Result<(u64, u64)> {
        let lo = match min {
            ScoreBound::Inclusive(s) => tx.count_below(top, &score_bytes(s), false)?,
            ScoreBound::Exclusive(s) => tx.count_below(top, &above_score(s), false)?,
        };
        let hi = match max {
            ScoreBound::Inclusive(s) => tx.count_below(top, &above_score(s), false)?,
            ScoreBound::Exclusive(s) => tx.count_below(top, &score_bytes(s), false)?,
        };
        Ok((lo, hi.max(lo)))
    }

    /// `ZRANGEBYSCORE` (and `ZRANGE ... BYSCORE [REV] [LIMIT offset count]`): members with scores
    /// within `min..max`, lowest first (highest first with `rev`), skipping `offset`, at most
    /// `limit`. Reads the paths to the range's ends and the leaves it returns.
    pub fn zrange_by_score(
        &mut self,
        key: &[u8],
        min: ScoreBound,
        max: ScoreBound,
        rev: bool,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Vec<(Vec<u8>, f64)>> {
        Ok(self
            .coll_read(key, Kind::ZSet, |tx, r| {
                let (lo, hi) = Self::zspan(tx, &r.tops[1], min, max)?;
                let avail = (hi - lo).saturating_sub(offset);
                let n = limit.map_or(avail, |l| l.min(avail));
                if n == 0 {
                    return Ok(Vec::new());
                }
                let from = if rev { hi - 1 - offset } else { lo + offset };
                zwalk(tx, &r.tops[1], from, rev, n)
            })?
            .unwrap_or_default())
    }

    /// Positions `[lo, hi)` of the member tree within `min..max`.
    fn lexspan(
        tx: &mut Tx<'_>,
        top: &Node,
        min: LexBound<'_>,
        max: LexBound<'_>,
    ) -> Result<(u64, u64)> {
        let at = |tx: &mut Tx<'_>, b: LexBound<'_>, upper: bool| -> Result<u64> {
            Ok(match b {
                LexBound::Min => 0,
                LexBound::Max => top.count(),
                LexBound::Inclusive(m) => tx.count_below(top, m, upper)?,
                LexBound::Exclusive(m) => tx.count_below(top, m, !upper)?,
            })
        };
        let lo = at(tx, min, false)?;
        let hi = at(tx, max, true)?;
        Ok((lo, hi.max(lo)))
    }

    /// `ZRANGEBYLEX` (and `ZRANGE ... BYLEX [REV] [LIMIT]`): members within `min..max` in member
    /// order (Redis defines it for members of one score, where the two orders agree), with their
    /// scores.
    pub fn zrange_by_lex(
        &mut self,
        key: &[u8],
        min: LexBound<'_>,
        max: LexBound<'_>,
        rev: bool,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Vec<(Vec<u8>, f64)>> {
        Ok(self
            .coll_read(key, Kind::ZSet, |tx, r| {
                let (lo, hi) = Self::lexspan(tx, &r.tops[0], min, max)?;
                let avail = (hi - lo).saturating_sub(offset);
                let n = limit.map_or(avail, |l| l.min(avail));
                if n == 0 {
                    return Ok(Vec::new());
                }
                let from = if rev { hi - 1 - offset } else { lo + offset };
                let mut out = Vec::with_capacity(n.min(1024) as usize);
                tx.walk(&r.tops[0], from, rev, &mut |k, v| {
                    let e = (k, v);
                    out.push((e.0.to_vec(), value_score(e.1)));
                    (out.len() as u64) < n
                })?;
                Ok(out)
            })?
            .unwrap_or_default())
    }

    /// `ZLEXCOUNT`.
    pub fn zlexcount(&mut self, key: &[u8], min: LexBound<'_>, max: LexBound<'_>) -> Result<u64> {
        Ok(self
            .coll_read(key, Kind::ZSet, |tx, r| {
                let (lo, hi) = Self::lexspan(tx, &r.tops[0], min, max)?;
                Ok(hi - lo)
            })?
            .unwrap_or(0))
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

    /// `ZCOUNT`: members with scores within `min..max`, from two paths (no member is read).
    pub fn zcount(&mut self, key: &[u8], min: ScoreBound, max: ScoreBound) -> Result<u64> {
        Ok(self
            .coll_read(key, Kind::ZSet, |tx, r| {
                let (lo, hi) = Self::zspan(tx, &r.tops[1], min, max)?;
                Ok(hi - lo)
            })?
            .unwrap_or(0))
    }

    /// `ZPOPMIN` / `ZPOPMAX` (`max`): up to `count` members with their scores.
    pub fn zpop(&mut self, key: &[u8], max: bool, count: u64) -> Result<Vec<(Vec<u8>, f64)>> {
        Ok(self
            .coll_write(key, Kind::ZSet, false, |tx, root| {
                let mut out = Vec::new();
                while (out.len() as u64) < count && root.tops[1].count() > 0 {
                    let at = if max { root.tops[1].count() - 1 } else { 0 };
                    let sk = tx
                        .modify(&mut root.tops[1], Seek::At(at), &mut |e, pos, ch| {
                            let (k, v) = e.remove(pos.ok()?)?;
                            ch.grew = Some(-entry_bytes(&k, &v));
                            Some(k)
                        })?
                        .expect("a position within the count");
                    let member = sk[8..].to_vec();
                    tx.modify(&mut root.tops[0], Seek::Key(&member), &mut |e, pos, ch| {
                        if let Ok(p) = pos {
                            let (k, v) = e.remove(p).expect("the entry found");
                            ch.grew = Some(-entry_bytes(&k, &v));
                        }
                    })?;
                    out.push((member, score_from_bytes(&sk)));
                }
                Ok(out)
            })?
            .unwrap_or_default())
    }

    /// `ZSCAN`: up to `count` members after the cursor `after` (member order) with their scores,
    /// and the cursor to continue from (`None`: done). Every member present for the whole scan
    /// is returned once, whatever changes meanwhile.
    pub fn zscan(
        &mut self,
        key: &[u8],
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<ScanPage<(Vec<u8>, f64)>> {
        let (items, next) = self.coll_scan(key, Kind::ZSet, after, count)?;
        Ok((
            items
                .into_iter()
                .map(|(m, v)| {
                    let s = value_score(&v);
                    (m, s)
                })
                .collect(),
            next,
        ))
    }

    // ---- sets ----

    /// `SADD`: members added.
    pub fn sadd(&mut self, key: &[u8], members: &[&[u8]]) -> Result<u64> {
        let pairs: Vec<(&[u8], &[u8])> = members.iter().map(|m| (*m, &[][..])).collect();
        Ok(self.keyed_set(key, Kind::Set, &pairs)?.unwrap_or(0))
    }

    /// `SREM`: members removed.
    pub fn srem(&mut self, key: &[u8], members: &[&[u8]]) -> Result<u64> {
        self.keyed_remove(key, Kind::Set, members)
    }

    /// `SISMEMBER`.
    pub fn sismember(&mut self, key: &[u8], member: &[u8]) -> Result<bool> {
        Ok(self.keyed_get(key, Kind::Set, member)?.is_some())
    }

    /// `SCARD` (0 when absent).
    pub fn scard(&mut self, key: &[u8]) -> Result<u64> {
        Ok(self
            .coll_read(key, Kind::Set, |_, r| Ok(r.tops[0].count()))?
            .unwrap_or(0))
    }

    /// `SSCAN` / `SMEMBERS` in pieces: up to `count` members after `after`, and the cursor to
    /// continue from (`None`: done).
    pub fn sscan(
        &mut self,
        key: &[u8],
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<ScanPage<Vec<u8>>> {
        let (items, next) = self.coll_scan(key, Kind::Set, after, count)?;
        Ok((items.into_iter().map(|e| e.0).collect(), next))
    }

    // ---- hashes ----

    /// `HSET` on a chunked hash: fields added (not those overwritten).
    pub fn hset(&mut self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<u64> {
        Ok(self.keyed_set(key, Kind::ChunkedHash, pairs)?.unwrap_or(0))
    }

    /// `HGET`.
    pub fn hget(&mut self, key: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>> {
        self.keyed_get(key, Kind::ChunkedHash, field)
    }

    /// `HDEL`: fields removed.
    pub fn hdel(&mut self, key: &[u8], fields: &[&[u8]]) -> Result<u64> {
        self.keyed_remove(key, Kind::ChunkedHash, fields)
    }

    /// `HLEN` (0 when absent).
    pub fn hlen(&mut self, key: &[u8]) -> Result<u64> {
        Ok(self
            .coll_read(key, Kind::ChunkedHash, |_, r| Ok(r.tops[0].count()))?
            .unwrap_or(0))
    }

    /// `HSCAN` / `HGETALL` in pieces: up to `count` fields after `after` with their values, and
    /// the cursor to continue from (`None`: done).
    pub fn hscan(
        &mut self,
        key: &[u8],
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<ScanPage<(Vec<u8>, Vec<u8>)>> {
        self.coll_scan(key, Kind::ChunkedHash, after, count)
    }

    /// Turn the one-value hash under `key` (kind [`Kind::Hash`], as the server keeps small
    /// hashes) into a chunked hash of `pairs`, keeping its expiry. The chunks are written first
    /// and the root last, over the old value in one put: a crash leaves the old value or the
    /// new collection, whole (chunks whose root is not a collection are orphans to recovery).
    /// `Ok(false)`, nothing done, when the key holds no such value or `pairs` is empty.
    pub fn hash_to_chunked(&mut self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<bool> {
        let exp = match self.get_root(key)? {
            Some(o) if o.kind == Kind::Hash => o.expires_at_ms,
            _ => return Ok(false),
        };
        if pairs.is_empty() {
            return Ok(false);
        }
        let max = MAX_PARTS_KEY - CHUNK_KEY_OVERHEAD;
        if key.len() > max {
            return Err(StoreError::Config(format!(
                "a collection's key may be at most {max} bytes (its parts' keys add {CHUNK_KEY_OVERHEAD}), not {}",
                key.len()
            )));
        }
        let mut root = Root::new(Kind::ChunkedHash, self.new_generation());
        let chunk_bytes = self.chunk_bytes();
        let mut tx = Tx {
            store: self,
            key: key.to_vec(),
            generation: root.generation,
            next_id: root.next_id,
            freed: Vec::new(),
            chunk_bytes,
            first_new_id: root.next_id,
            pending: Default::default(),
            pending_bytes: 0,
            changed: false,
        };
        for &(k, v) in pairs {
            tx.modify(
                &mut root.tops[0],
                Seek::Key(k),
                &mut |e, pos, ch| match pos {
                    Ok(p) => {
                        ch.changed = e[p].1 != v;
                        e[p].1 = v.to_vec();
                        false
                    }
                    Err(p) => {
                        e.insert(p, (k.to_vec(), v.to_vec()));
                        true
                    }
                },
            )?;
        }
        tx.flush()?;
        root.next_id = tx.next_id;
        root.freed = std::mem::take(&mut tx.freed);
        let bytes = root.encode();
        self.put_raw(key, Kind::ChunkedHash, &bytes, exp)?;
        for &id in &root.freed {
            self.chunk_delete_replaced(&chunk_key(key, root.generation, id))?;
        }
        Ok(true)
    }

    fn keyed_set(
        &mut self,
        key: &[u8],
        kind: Kind,
        pairs: &[(&[u8], &[u8])],
    ) -> Result<Option<u64>> {
        if pairs.is_empty() {
            return Ok(Some(0));
        }
        self.coll_write(key, kind, true, |tx, root| {
            let mut added = 0;
            for &(k, v) in pairs {
                let new = tx.modify(
                    &mut root.tops[0],
                    Seek::Key(k),
                    &mut |e, pos, ch| match pos {
                        Ok(p) => {
                            // Lengths first: a set's values are all empty, and glibc's
                            // memcmp of two empty slices (dangling pointers) under AVX-512 took
                            // 13% of SADD's time, in a masked load's microcode assist.
                            ch.changed = e[p].1.len() != v.len() || (!v.is_empty() && e[p].1 != v);
                            if ch.changed {
                                ch.grew = Some(v.len() as isize - e[p].1.len() as isize);
                                e[p].1 = v.to_vec();
                            }
                            false
                        }
                        Err(p) => {
                            ch.grew = Some(entry_bytes(k, v));
                            e.insert(p, (k.to_vec(), v.to_vec()));
                            true
                        }
                    },
                )?;
                added += u64::from(new);
            }
            Ok(added)
        })
    }

    fn keyed_get(&mut self, key: &[u8], kind: Kind, k: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .coll_read(key, kind, |tx, r| {
                Ok(tx.find(&r.tops[0], Seek::Key(k))?.map(|e| e.1))
            })?
            .flatten())
    }

    fn keyed_remove(&mut self, key: &[u8], kind: Kind, keys: &[&[u8]]) -> Result<u64> {
        Ok(self
            .coll_write(key, kind, false, |tx, root| {
                let mut n = 0;
                for &k in keys {
                    let gone = tx.modify(&mut root.tops[0], Seek::Key(k), &mut |e, pos, ch| {
                        ch.changed = pos.is_ok();
                        let gone = pos.ok().and_then(|p| e.remove(p));
                        ch.grew = gone.as_ref().map(|(k, v)| -entry_bytes(k, v));
                        gone.is_some()
                    })?;
                    n += u64::from(gone);
                }
                Ok(n)
            })?
            .unwrap_or(0))
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
fn zscore_in(tx: &mut Tx<'_>, root: &Root, member: &[u8]) -> Result<Option<f64>> {
    Ok(tx
        .find(&root.tops[0], Seek::Key(member))?
        .map(|e| value_score(&e.1)))
}

/// Set `member`'s score to `s` (its current score `old`) in both trees; false when unchanged.
fn zset_score(
    tx: &mut Tx<'_>,
    root: &mut Root,
    member: &[u8],
    s: f64,
    old: Option<f64>,
) -> Result<bool> {
    let s = if s == 0.0 { 0.0 } else { s };
    if old == Some(s) {
        return Ok(false);
    }
    let sv = s.to_le_bytes().to_vec();
    tx.modify(
        &mut root.tops[0],
        Seek::Key(member),
        &mut |e, pos, _| match pos {
            Ok(p) => e[p].1 = sv.clone(),
            Err(p) => e.insert(p, (member.to_vec(), sv.clone())),
        },
    )?;
    if let Some(o) = old {
        let ok = score_key(o, member);
        tx.modify(&mut root.tops[1], Seek::Key(&ok), &mut |e, pos, _| {
            if let Ok(p) = pos {
                e.remove(p);
            }
        })?;
    }
    let nk = score_key(s, member);
    tx.modify(&mut root.tops[1], Seek::Key(&nk), &mut |e, pos, _| {
        if let Err(p) = pos {
            e.insert(p, (nk.clone(), Vec::new()));
        }
    })?;
    Ok(true)
}

/// `ZADD` of one member under `flags`, deciding in the one walk to its leaf in the member tree:
/// `Some(old score)` when it was added (`None`) or its score changed; `None` when nothing did.
fn zadd_one(
    tx: &mut Tx<'_>,
    root: &mut Root,
    member: &[u8],
    s: f64,
    flags: ZAddFlags,
) -> Result<Option<Option<f64>>> {
    let s = if s == 0.0 { 0.0 } else { s };
    let sv = s.to_le_bytes();
    let done = tx.modify(&mut root.tops[0], Seek::Key(member), &mut |e, pos, ch| {
        let old = pos.ok().map(|p| value_score(&e[p].1));
        let apply = match old {
            None => !flags.xx,
            Some(o) => !(flags.nx || o == s || (flags.gt && s <= o) || (flags.lt && s >= o)),
        };
        ch.changed = apply;
        if !apply {
            return None;
        }
        match pos {
            // A score is 8 bytes: replacing one keeps the leaf's size.
            Ok(p) => {
                e[p].1 = sv.to_vec();
                ch.grew = Some(0);
            }
            Err(p) => {
                e.insert(p, (member.to_vec(), sv.to_vec()));
                ch.grew = Some(entry_bytes(member, &sv));
            }
        }
        Some(old)
    })?;
    let Some(old) = done else { return Ok(None) };
    if let Some(o) = old {
        let ok = score_key(o, member);
        tx.modify(&mut root.tops[1], Seek::Key(&ok), &mut |e, pos, ch| {
            ch.grew = Some(0);
            if let Ok(p) = pos {
                let (k, v) = e.remove(p).expect("the entry found");
                ch.grew = Some(-entry_bytes(&k, &v));
            }
        })?;
    }
    let nk = score_key(s, member);
    tx.modify(&mut root.tops[1], Seek::Key(&nk), &mut |e, pos, ch| {
        ch.grew = Some(0);
        if let Err(p) = pos {
            e.insert(p, (nk.clone(), Vec::new()));
            ch.grew = Some(entry_bytes(&nk, &[]));
        }
    })?;
    Ok(Some(old))
}

/// `n` entries of a score tree from position `from`, as (member, score).
fn zwalk(tx: &mut Tx<'_>, top: &Node, from: u64, rev: bool, n: u64) -> Result<Vec<(Vec<u8>, f64)>> {
    let mut out = Vec::with_capacity(n.min(1024) as usize);
    tx.walk(top, from, rev, &mut |k, v| {
        let e = (k, v);
        out.push((e.0[8..].to_vec(), score_from_bytes(e.0)));
        (out.len() as u64) < n
    })?;
    Ok(out)
}

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

    /// A store with collection write-back and 512-byte chunks, holding list `l` of `n` members
    /// (`m0000`, `m0001`, ...) pushed and written back in one batch.
    fn write_back_store_with_list(n: usize) -> (Store, Vec<Vec<u8>>) {
        let mut s = crate::StoreBuilder::new()
            .dram(64 << 20)
            .max_object(64 << 10)
            .durability(crate::Durability::None)
            .collection_chunk_bytes(512)
            .collection_write_back(true)
            .build()
            .unwrap();
        let members: Vec<Vec<u8>> = (0..n).map(|i| format!("m{i:04}").into_bytes()).collect();
        let refs: Vec<&[u8]> = members.iter().map(|m| m.as_slice()).collect();
        s.list_push(b"l", ListEnd::Right, &refs).unwrap();
        s.end_batch();
        (s, members)
    }

    /// The chunk ids an open list has handed out (each a node its changes made anew).
    fn ids_handed_out(s: &Store, key: &[u8]) -> u64 {
        let oc = s.open.map.get(key).expect("the list is open");
        oc.root.next_id - oc.first_new_id
    }

    #[test]
    fn pushes_and_pops_at_a_list_end_in_one_batch_change_its_end_leaf_in_place() {
        // Four levels: a top, inner chunks, inner chunks, leaves of about 40 members.
        let (mut s, members) = write_back_store_with_list(20_000);
        let mut want: std::collections::VecDeque<Vec<u8>> = members.into_iter().collect();
        // 200 pushes at each end, then 300 pops from each: a path is made anew only when an
        // end leaf fills (a split, every 20 pushes or so) or thins (a merge, every 20 pops or
        // so), not per command (3 nodes each: 1,200 for the pushes, 1,800 for the pops).
        for i in 0..200 {
            let m = format!("p{i}").into_bytes();
            s.list_push(b"l", ListEnd::Left, &[&m]).unwrap();
            s.list_push(b"l", ListEnd::Right, &[&m]).unwrap();
            want.push_front(m.clone());
            want.push_back(m);
        }
        let pushed = ids_handed_out(&s, b"l");
        assert!(pushed < 200, "{pushed} nodes made for 400 pushes");
        for _ in 0..300 {
            let l = s.list_pop(b"l", ListEnd::Left, 1).unwrap().unwrap();
            let r = s.list_pop(b"l", ListEnd::Right, 1).unwrap().unwrap();
            assert_eq!(l, vec![want.pop_front().unwrap()]);
            assert_eq!(r, vec![want.pop_back().unwrap()]);
        }
        let popped = ids_handed_out(&s, b"l") - pushed;
        assert!(popped < 300, "{popped} nodes made for 600 pops");
        assert_eq!(s.list_len(b"l").unwrap(), want.len() as u64);
        s.end_batch();
        s.check_collection(b"l").unwrap();
        let got = s.list_range(b"l", 0, -1).unwrap();
        assert!(got.iter().eq(want.iter()), "the list after the batch");
    }

    #[test]
    fn a_batchs_first_push_takes_the_end_path_the_last_write_back_kept_decoded() {
        let (mut s, members) = write_back_store_with_list(5_000);
        assert!(
            s.written_nodes.nodes.is_empty(),
            "a write-back of many leaves keeps none of them"
        );
        let mut want: std::collections::VecDeque<Vec<u8>> = members.into_iter().collect();
        s.list_push(b"l", ListEnd::Right, &[b"first"]).unwrap();
        want.push_back(b"first".to_vec());
        s.end_batch();
        // Batches of pushes and pops at either end: each write-back keeps the end path it
        // wrote, and the next batch's first change takes its nodes from there, not from the
        // chunks.
        for round in 0..40u32 {
            let m = format!("r{round}").into_bytes();
            // Five rounds at one end, then five at the other.
            let left = round / 5 % 2 == 1;
            let same_end = round % 5 != 0;
            let kept = s.written_nodes.nodes.len();
            assert!(kept > 0, "round {round}: the write-back kept its nodes");
            if round % 3 == 2 {
                let got = s.list_pop(b"l", end_of(left), 1).unwrap().unwrap();
                let w = if left {
                    want.pop_front()
                } else {
                    want.pop_back()
                };
                assert_eq!(got, vec![w.unwrap()]);
            } else {
                s.list_push(b"l", end_of(left), &[&m]).unwrap();
                if left {
                    want.push_front(m);
                } else {
                    want.push_back(m);
                }
            }
            // The kept path is the end the last batch changed (the list's right end at
            // first).
            assert!(
                (!same_end && round > 0) || s.written_nodes.nodes.len() < kept,
                "round {round}: the change took its path from the kept nodes"
            );
            s.end_batch();
            s.check_collection(b"l").unwrap();
        }
        assert!(s.list_range(b"l", 0, -1).unwrap().iter().eq(want.iter()));
        // Deleted and made again under the same key (another generation): nothing kept for
        // the old one is taken for the new one.
        assert!(s.delete(b"l").unwrap());
        s.list_push(b"l", ListEnd::Right, &[b"x", b"y"]).unwrap();
        s.end_batch();
        s.list_push(b"l", ListEnd::Left, &[b"w"]).unwrap();
        s.end_batch();
        assert_eq!(
            s.list_range(b"l", 0, -1).unwrap(),
            vec![b"w".to_vec(), b"x".to_vec(), b"y".to_vec()]
        );
        s.check_collection(b"l").unwrap();
    }

    fn end_of(left: bool) -> ListEnd {
        if left {
            ListEnd::Left
        } else {
            ListEnd::Right
        }
    }

    #[test]
    fn a_list_pushed_at_one_end_fills_its_leaves() {
        for end in [ListEnd::Left, ListEnd::Right] {
            for write_back in [false, true] {
                let mut s = crate::StoreBuilder::new()
                    .dram(64 << 20)
                    .max_object(64 << 10)
                    .durability(crate::Durability::None)
                    .collection_chunk_bytes(512)
                    .collection_write_back(write_back)
                    .build()
                    .unwrap();
                let n = 5_000;
                for i in 0..n {
                    let m = format!("m{i:04}");
                    s.list_push(b"l", end, &[m.as_bytes()]).unwrap();
                    if i % 100 == 99 {
                        s.end_batch();
                    }
                }
                s.end_batch();
                s.check_collection(b"l").unwrap();
                // A full leaf stays full when the end leaf splits: the chunks are about as
                // many as the members' bytes fill (halves, as before, made about twice as
                // many), besides a few inner chunks.
                let bytes = n * tree::entry_bytes(&[], b"m0000") as usize;
                let full = bytes.div_ceil(512 - node::NODE_HEADER);
                let chunks = s.chunk_keys_of(b"l").len();
                assert!(
                    chunks <= full + full / 5 + 8,
                    "{chunks} chunks for {full} full leaves ({end:?}, write-back {write_back})"
                );
            }
        }
    }
}
