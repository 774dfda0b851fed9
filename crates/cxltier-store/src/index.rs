//! The key index: every key, in byte order, with where its object is.
//!
//! The index is counted inside the DRAM budget, so every byte it takes is a byte of objects that
//! is not in DRAM; and every command looks keys up in it, often several times, so a lookup's
//! cache misses are the server's. A `BTreeMap<Box<[u8]>, _>` cost about 145 bytes per key and a
//! lookup followed a pointer per comparison. This index:
//!
//! - keeps keys of up to 31 bytes inline (YCSB's `user` + a 64-bit hash is 23 at most, 24 with
//!   the byte of its database before it; at 23 bytes inline most YCSB keys went to the heap, at
//!   72 bytes each instead of 32) and packs
//!   an entry into 32 bytes; each key/entry pair sits at a stable slot of a chunked slab;
//! - finds a key through a hash table of slot ids (hashbrown, seeded per process): a point
//!   lookup reads a group of control bytes, an id and the pair, about three cache misses
//!   whatever the index's size, where a binary search over leaves took a dozen or more;
//! - keeps the keys' order in leaves of up to [`LEAF_MAX`] slot ids under a small `BTreeMap` of
//!   leaf separators, for range scans and for inserts. A leaf that falls below a quarter full
//!   merges with a neighbour when the two fit in one, inserts at a leaf's ends split off one key
//!   (so keys arriving in order fill leaves), and a leaf's spare capacity is bounded;
//! - after many removals moves the slab's last pairs down and drops its tail chunks.
//!
//! The cost per key is ~70–80 bytes whatever the insert order, and [`Index::bytes`] computes it
//! from the allocations' actual sizes rather than assuming it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::num::NonZeroU8;
use std::ops::Bound;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::arena::SlotOffset;
use crate::log::NvLoc;
use crate::Kind;

/// Longest key kept inline.
const INLINE_MAX: usize = 31;

/// A lookup key as an inline [`IndexKey`] (compared by words), when it is short enough.
#[inline]
fn probe(key: &[u8]) -> Option<IndexKey> {
    (key.len() <= INLINE_MAX).then(|| IndexKey::new(key))
}

/// A key as the index stores it: inline up to 31 bytes, else on the heap. Ordered as bytes.
#[derive(Clone)]
pub(crate) enum IndexKey {
    /// `len1` is the length + 1, so that its zero is the niche that makes this enum 32 bytes.
    Inline {
        bytes: [u8; INLINE_MAX],
        len1: NonZeroU8,
    },
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<IndexKey>() == 32);

impl IndexKey {
    pub(crate) fn new(key: &[u8]) -> IndexKey {
        if key.len() <= INLINE_MAX {
            let mut bytes = [0u8; INLINE_MAX];
            bytes[..key.len()].copy_from_slice(key);
            IndexKey::Inline {
                bytes,
                len1: NonZeroU8::new(key.len() as u8 + 1).expect("len + 1 > 0"),
            }
        } else {
            IndexKey::Heap(key.into())
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            IndexKey::Inline { bytes, len1 } => &bytes[..len1.get() as usize - 1],
            IndexKey::Heap(b) => b,
        }
    }

    /// Equality with an inline key (a lookup's probe): two word-sized comparisons and the length,
    /// no call to `memcmp`.
    #[inline]
    fn eq_inline(&self, probe: &IndexKey) -> bool {
        match (self, probe) {
            (IndexKey::Inline { bytes: a, len1: la }, IndexKey::Inline { bytes: b, len1: lb }) => {
                la == lb && a == b
            }
            _ => self.as_slice() == probe.as_slice(),
        }
    }

    /// Heap bytes this key takes beyond its 32 bytes in a leaf (the allocator rounds up to 16
    /// and adds a 16-byte header).
    pub(crate) fn heap_bytes(&self) -> u64 {
        match self {
            IndexKey::Inline { .. } => 0,
            IndexKey::Heap(b) => (b.len() as u64).div_ceil(16) * 16 + 16,
        }
    }
}

impl Borrow<[u8]> for IndexKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for IndexKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for IndexKey {}
impl PartialOrd for IndexKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for IndexKey {
    /// Two inline keys compare as four big-endian words (zero-padded bytes, then the length),
    /// the first word alone deciding almost always: the same order as their bytes, without a
    /// call to `memcmp` per comparison (an index lookup makes about 30).
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (IndexKey::Inline { bytes: a, len1: la }, IndexKey::Inline { bytes: b, len1: lb }) => {
                let word = |x: &[u8; INLINE_MAX], i: usize| {
                    u64::from_be_bytes(x[i..i + 8].try_into().expect("8 bytes"))
                };
                word(a, 0)
                    .cmp(&word(b, 0))
                    .then_with(|| word(a, 8).cmp(&word(b, 8)))
                    .then_with(|| word(a, 16).cmp(&word(b, 16)))
                    .then_with(|| {
                        // Bytes 24..31 and the length: the last word, with the length (+1) as its
                        // low byte. Zero padding sorts a key before a longer key it is a prefix
                        // of, and the length breaks the tie with one that goes on with zeros.
                        let last = |x: &[u8; INLINE_MAX], l: NonZeroU8| {
                            let mut w = [0u8; 8];
                            w[..7].copy_from_slice(&x[24..31]);
                            w[7] = l.get();
                            u64::from_be_bytes(w)
                        };
                        last(a, *la).cmp(&last(b, *lb))
                    })
            }
            _ => self.as_slice().cmp(other.as_slice()),
        }
    }
}

/// Where an object's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Only on NVMe (the entry's log copy).
    Nvme,
    /// In a memory tier's arena.
    Mem(u8, SlotOffset),
}

/// One key's index entry, packed into 32 bytes (it is paid for out of the DRAM budget once per
/// key).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// `(tier + 1) << 56 | slot offset` when in memory. Top byte 0: only on NVMe; the low 48
    /// bits then hold the log sequence of the record while the log is replayed (see
    /// [`Entry::seq`]). Bits 48..56: the top 8 bits of the access clock ([`Entry::access`]).
    mem: u64,
    /// Milliseconds since the epoch; 0: never.
    expires: u64,
    /// The newest copy on the NVMe log: segment ([`NO_NV`]: none), offset, record length. A
    /// segment is at most 16 MiB ([`crate::log::MAX_SEGMENT_SIZE`]), so offset and length take
    /// 24 bits; the top byte of each holds 8 bits of the access clock.
    nv_segment: u32,
    nv_offset: u32,
    nv_len: u32,
    /// Value length, with [`DIRTY`] and the kind ([`KIND_SHIFT`]) in the top bits.
    len_flags: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 32);

const NO_NV: u32 = u32::MAX;
const TIER_SHIFT: u32 = 56;
/// Arena offsets and recovery sequences: 48 bits (256 TiB, 2^48 records).
const OFFSET_MASK: u64 = (1 << 48) - 1;
/// Bits 48..56 of `mem`: the access clock's bits 16..24.
const MEM_CLOCK_SHIFT: u32 = 48;
const MEM_CLOCK_MASK: u64 = 0xff << MEM_CLOCK_SHIFT;
/// The low 24 bits of `nv_offset` and `nv_len`: the log location; the top 8: the access clock.
const NV_MASK: u32 = (1 << 24) - 1;

/// Redis's LRU clock: seconds, 24 bits, wrapping after 194 days (`LRU_CLOCK_MAX`).
pub(crate) const CLOCK_MAX: u32 = (1 << 24) - 1;

/// The access clock at `now_ms` (milliseconds since the epoch).
pub(crate) fn access_clock(now_ms: u64) -> u32 {
    ((now_ms / 1000) & CLOCK_MAX as u64) as u32
}

/// Seconds between an entry's access clock and the clock now, as Redis's
/// `estimateObjectIdleTime` counts them (a clock that wrapped counts once).
pub(crate) fn idle_seconds(then: u32, now: u32) -> u64 {
    if now >= then {
        (now - then) as u64
    } else {
        now as u64 + (CLOCK_MAX - then) as u64
    }
}
/// The memory copy is newer than the log copy (write-back, durability none).
const DIRTY: u32 = 1 << 31;
/// The object's [`Kind`] in four bits below [`DIRTY`] (values are at most 64 MiB, 2^26).
const KIND_SHIFT: u32 = 27;
const KIND_MASK: u32 = 0b1111 << KIND_SHIFT;
const LEN_MASK: u32 = (1 << KIND_SHIFT) - 1;

impl Entry {
    /// `len` must be below 128 MiB (the store caps objects at 64 MiB) and memory offsets below
    /// 2^56.
    pub(crate) fn new(
        place: Place,
        nv: Option<NvLoc>,
        dirty: bool,
        len: u32,
        kind: Kind,
        expires: u64,
    ) -> Entry {
        let mut e = Entry {
            mem: 0,
            expires,
            nv_segment: NO_NV,
            nv_offset: 0,
            nv_len: 0,
            len_flags: 0,
        };
        e.set_place(place);
        e.set_nv(nv);
        e.set_len(len);
        e.set_kind(kind);
        e.set_dirty(dirty);
        e
    }

    pub(crate) fn place(&self) -> Place {
        match self.mem >> TIER_SHIFT {
            0 => Place::Nvme,
            t => Place::Mem(t as u8 - 1, self.mem & OFFSET_MASK),
        }
    }

    /// Move the entry (its access clock stays).
    pub(crate) fn set_place(&mut self, place: Place) {
        let clock = self.mem & MEM_CLOCK_MASK;
        self.mem = clock
            | match place {
                Place::Nvme => 0,
                Place::Mem(t, off) => {
                    assert!(off <= OFFSET_MASK && t < u8::MAX);
                    (u64::from(t) + 1) << TIER_SHIFT | (off & OFFSET_MASK)
                }
            };
    }

    pub(crate) fn nv(&self) -> Option<NvLoc> {
        (self.nv_segment != NO_NV).then_some(NvLoc {
            segment: self.nv_segment,
            offset: self.nv_offset & NV_MASK,
            len: self.nv_len & NV_MASK,
        })
    }

    /// Point the entry at a log copy, or at none (its access clock stays).
    pub(crate) fn set_nv(&mut self, nv: Option<NvLoc>) {
        match nv {
            Some(l) => {
                debug_assert!(l.segment != NO_NV);
                // The log refuses segments over 16 MiB, so these always fit in 24 bits.
                assert!(l.offset <= NV_MASK && l.len <= NV_MASK);
                self.nv_segment = l.segment;
                self.nv_offset = (self.nv_offset & !NV_MASK) | l.offset;
                self.nv_len = (self.nv_len & !NV_MASK) | l.len;
            }
            None => self.nv_segment = NO_NV,
        }
    }

    /// When the key was last read or written, on Redis's 24-bit clock of seconds
    /// ([`access_clock`]): `OBJECT IDLETIME`.
    pub(crate) fn access(&self) -> u32 {
        (((self.mem & MEM_CLOCK_MASK) >> MEM_CLOCK_SHIFT) as u32) << 16
            | (self.nv_offset >> 24) << 8
            | self.nv_len >> 24
    }

    pub(crate) fn set_access(&mut self, clock: u32) {
        let clock = clock & CLOCK_MAX;
        self.mem = (self.mem & !MEM_CLOCK_MASK) | (u64::from(clock >> 16) << MEM_CLOCK_SHIFT);
        self.nv_offset = (self.nv_offset & NV_MASK) | ((clock >> 8) & 0xff) << 24;
        self.nv_len = (self.nv_len & NV_MASK) | (clock & 0xff) << 24;
    }

    pub(crate) fn dirty(&self) -> bool {
        self.len_flags & DIRTY != 0
    }

    pub(crate) fn set_dirty(&mut self, dirty: bool) {
        self.len_flags = if dirty {
            self.len_flags | DIRTY
        } else {
            self.len_flags & !DIRTY
        };
    }

    /// The value's length.
    pub(crate) fn len(&self) -> u32 {
        self.len_flags & LEN_MASK
    }

    pub(crate) fn set_len(&mut self, len: u32) {
        debug_assert!(len <= LEN_MASK);
        self.len_flags = (self.len_flags & !LEN_MASK) | (len & LEN_MASK);
    }

    pub(crate) fn kind(&self) -> Kind {
        Kind::from_u8(((self.len_flags & KIND_MASK) >> KIND_SHIFT) as u8).unwrap_or(Kind::String)
    }

    pub(crate) fn set_kind(&mut self, kind: Kind) {
        self.len_flags = (self.len_flags & !KIND_MASK) | ((kind as u32) << KIND_SHIFT);
    }

    /// Absolute expiry in milliseconds since the epoch; 0: never.
    pub(crate) fn expires(&self) -> u64 {
        self.expires
    }

    pub(crate) fn set_expires(&mut self, expires: u64) {
        self.expires = expires;
    }

    pub(crate) fn is_expired(&self, now_ms: u64) -> bool {
        self.expires != 0 && self.expires <= now_ms
    }

    /// The log sequence of the record this NVMe-only entry was replayed from (recovery only: it
    /// orders records that segment cleaning relocated). Entries made at run time say 0.
    pub(crate) fn seq(&self) -> u64 {
        match self.place() {
            Place::Nvme => self.mem & OFFSET_MASK,
            Place::Mem(..) => 0,
        }
    }

    /// Record the replayed sequence (recovery; the entry must be NVMe-only). Sequences count
    /// records, so 2^48 is out of reach; a larger one is clamped, which only loses the ordering
    /// of duplicates beyond it.
    pub(crate) fn set_recovery_seq(&mut self, seq: u64) {
        debug_assert_eq!(self.place(), Place::Nvme);
        self.mem = (self.mem & MEM_CLOCK_MASK) | seq.min(OFFSET_MASK);
    }
}

/// Most keys in one leaf; a full leaf splits in two halves.
const LEAF_MAX: usize = 64;
/// A leaf this small merges with its right neighbour when both fit in one.
const LEAF_MIN: usize = LEAF_MAX / 4;
/// Spare capacity a leaf grows by (and keeps at most, plus this, after shrinking).
const LEAF_SLACK: usize = 8;
/// What a leaf costs beyond its ids: its allocation's header, and its separator key and `Vec`
/// in the separator map (48 bytes in nodes of 11 slots, counted at half full).
const LEAF_OVERHEAD: u64 = 16 + 48 * 2;
/// A slot id in a leaf.
const ID_BYTES: u64 = std::mem::size_of::<SlotId>() as u64;

type Pair = (IndexKey, Entry);
const PAIR_BYTES: u64 = std::mem::size_of::<Pair>() as u64;
/// Pairs per slab chunk: the slab grows by 14 KiB at a time rather than doubling.
const CHUNK_SHIFT: u32 = 8;
const CHUNK: usize = 1 << CHUNK_SHIFT;

/// Where a pair lives in the [`Slab`]; it does not change while the key is in the index (except
/// when the slab is compacted, which rewrites the ids that point at it).
pub(crate) type SlotId = u32;

/// The leaves: ids of pairs in key order.
type Leaf = Vec<SlotId>;

/// Every key/entry pair, at a stable id, in chunks of [`CHUNK`]. A free slot holds
/// [`Slab::vacant`] and its id is on the free list.
#[derive(Clone, Default)]
struct Slab {
    chunks: Vec<Box<[Pair]>>,
    free: Vec<SlotId>,
    /// Ids below this have been handed out at least once.
    high: usize,
}

impl Slab {
    /// What a free slot holds: the empty key and an entry whose length no object can have.
    fn vacant() -> Pair {
        let mut e = Entry::new(Place::Nvme, None, false, 0, Kind::String, 0);
        e.len_flags = VACANT_LEN;
        (IndexKey::new(b""), e)
    }

    fn is_vacant(pair: &Pair) -> bool {
        pair.1.len_flags == VACANT_LEN
    }

    #[inline]
    fn get(&self, id: SlotId) -> &Pair {
        &self.chunks[(id >> CHUNK_SHIFT) as usize][id as usize & (CHUNK - 1)]
    }

    #[inline]
    fn get_mut(&mut self, id: SlotId) -> &mut Pair {
        &mut self.chunks[(id >> CHUNK_SHIFT) as usize][id as usize & (CHUNK - 1)]
    }

    #[inline]
    fn key(&self, id: SlotId) -> &IndexKey {
        &self.get(id).0
    }

    /// Whether the next [`Slab::alloc`] adds a chunk.
    fn full(&self) -> bool {
        self.free.is_empty() && self.high == self.chunks.len() * CHUNK
    }

    fn alloc(&mut self, pair: Pair) -> SlotId {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                if self.full() {
                    self.chunks
                        .push(vec![Slab::vacant(); CHUNK].into_boxed_slice());
                }
                self.high += 1;
                SlotId::try_from(self.high - 1).expect("fewer than 2^32 keys")
            }
        };
        *self.get_mut(id) = pair;
        id
    }

    fn release(&mut self, id: SlotId) -> Pair {
        self.free.push(id);
        std::mem::replace(self.get_mut(id), Slab::vacant())
    }

    fn bytes(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK as u64 * PAIR_BYTES
            + self.chunks.capacity() as u64 * 16
            + self.free.capacity() as u64 * ID_BYTES
    }
}

/// A length no object has (the store caps objects at 64 MiB): marks a free slab slot.
const VACANT_LEN: u32 = LEN_MASK;

/// The index (see the module doc).
#[derive(Clone)]
pub(crate) struct Index {
    slab: Slab,
    /// Point lookups: slot ids by their key's hash.
    by_hash: HashTable<SlotId>,
    /// Seeded per process, so that no one can pick keys that all land in one probe sequence.
    hasher: DefaultHashBuilder,
    /// Leaves by separator: every key of a leaf is >= its separator and < the next one's. The
    /// first leaf's separator is the empty key, so every key has a leaf; there is always one.
    leaves: BTreeMap<IndexKey, Leaf>,
    /// Sum of the leaves' capacities, in ids.
    leaf_capacity: usize,
    /// Heap bytes of the keys in the slab and of the separators.
    heap_key_bytes: u64,
    /// Keys of collection chunks ([`crate::keys::is_internal_key`]), which users never see.
    internal: usize,
    /// Keys per database ([`crate::keys::split_db_key`]): `DBSIZE` and `INFO keyspace` without a walk.
    db_keys: Box<[u64; crate::keys::MAX_DATABASES]>,
}

impl Default for Index {
    fn default() -> Self {
        Index::new()
    }
}

/// The leaf a key belongs to: (separator, leaf). `probe` is the key as an inline [`IndexKey`]
/// when it is short enough (word comparisons), else the bytes are compared.
fn leaf_entry<'a>(
    leaves: &'a BTreeMap<IndexKey, Leaf>,
    key: &[u8],
    probe: Option<&IndexKey>,
) -> (&'a IndexKey, &'a Leaf) {
    match probe {
        Some(p) => leaves
            .range::<IndexKey, _>((Bound::Unbounded, Bound::Included(p)))
            .next_back(),
        None => leaves
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back(),
    }
    .expect("the first leaf's separator is the empty key")
}

fn leaf_mut<'a>(
    leaves: &'a mut BTreeMap<IndexKey, Leaf>,
    key: &[u8],
    probe: Option<&IndexKey>,
) -> &'a mut Leaf {
    match probe {
        Some(p) => leaves
            .range_mut::<IndexKey, _>((Bound::Unbounded, Bound::Included(p)))
            .next_back(),
        None => leaves
            .range_mut::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back(),
    }
    .map(|(_, l)| l)
    .expect("the first leaf's separator is the empty key")
}

/// Position of `key` in a leaf (or where it would go).
fn search(slab: &Slab, leaf: &Leaf, key: &[u8], probe: Option<&IndexKey>) -> Result<usize, usize> {
    match probe {
        Some(p) => leaf.binary_search_by(|&id| slab.key(id).cmp(p)),
        None => leaf.binary_search_by(|&id| slab.key(id).as_slice().cmp(key)),
    }
}

impl Index {
    pub(crate) fn new() -> Index {
        let mut leaves = BTreeMap::new();
        leaves.insert(IndexKey::new(b""), Vec::new());
        Index {
            slab: Slab::default(),
            by_hash: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            leaves,
            leaf_capacity: 0,
            heap_key_bytes: 0,
            internal: 0,
            db_keys: Box::new([0; crate::keys::MAX_DATABASES]),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Keys users see: all but collection chunks.
    pub(crate) fn user_len(&self) -> usize {
        self.by_hash.len() - self.internal
    }

    /// Keys of database `db`.
    pub(crate) fn db_len(&self, db: u8) -> u64 {
        self.db_keys.get(db as usize).copied().unwrap_or(0)
    }

    /// Bytes the index takes: the slab's chunks and free list, the hash table's allocation,
    /// every leaf's capacity and overhead, and the keys (and separators) kept on the heap.
    pub(crate) fn bytes(&self) -> u64 {
        self.slab.bytes()
            + self.by_hash.allocation_size() as u64
            + self.leaf_capacity as u64 * ID_BYTES
            + self.leaves.len() as u64 * LEAF_OVERHEAD
            + self.heap_key_bytes
            + std::mem::size_of_val(&*self.db_keys) as u64
    }

    /// Bytes inserting `key` (absent) would add at most: a slab chunk when the slab is full, a
    /// larger hash table when it is full (the old one is freed once moved), a leaf's growth step
    /// and a split's overhead, and the key's heap bytes (twice if it may become a separator).
    pub(crate) fn growth_for(&self, key: &[u8]) -> u64 {
        let heap = IndexKey::new(key).heap_bytes();
        let mut grow = heap;
        if self.slab.full() {
            grow += CHUNK as u64 * PAIR_BYTES;
        }
        if self.by_hash.len() == self.by_hash.capacity() {
            // The table doubles (or is first allocated: a few dozen bytes).
            grow += (self.by_hash.allocation_size() as u64).max(64);
        }
        let probe = probe(key);
        let (_, leaf) = leaf_entry(&self.leaves, key, probe.as_ref());
        if leaf.len() == leaf.capacity() {
            grow += LEAF_SLACK as u64 * ID_BYTES;
            if leaf.len() >= LEAF_MAX {
                grow += LEAF_OVERHEAD + heap;
            }
        }
        grow
    }

    #[inline]
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The slot of `key`, through the hash table: a point lookup touches the table's control
    /// bytes, its id and the pair, whatever the index's size.
    #[inline]
    fn find(&self, key: &[u8]) -> Option<SlotId> {
        let hash = self.hash(key);
        let slab = &self.slab;
        match probe(key) {
            Some(p) => self.by_hash.find(hash, |&id| slab.key(id).eq_inline(&p)),
            None => self
                .by_hash
                .find(hash, |&id| slab.key(id).as_slice() == key),
        }
        .copied()
    }

    /// Slot ids handed out so far: a random sample of keys is drawn below it
    /// ([`Index::pair_at`]), as Redis samples its dictionary's buckets.
    pub(crate) fn slot_span(&self) -> usize {
        self.slab.high
    }

    /// The key and entry at slot `id`, unless the slot is free (or beyond the span).
    pub(crate) fn pair_at(&self, id: SlotId) -> Option<(&[u8], &Entry)> {
        if id as usize >= self.slab.high {
            return None;
        }
        let pair = self.slab.get(id);
        (!Slab::is_vacant(pair)).then(|| (pair.0.as_slice(), &pair.1))
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.find(key).map(|id| &self.slab.get(id).1)
    }

    /// The slot of `key`, for a caller that looks it up once and then reads or changes its
    /// entry by slot ([`Index::entry_at`]) while nothing inserts or removes keys meanwhile.
    pub(crate) fn slot_of(&self, key: &[u8]) -> Option<SlotId> {
        self.find(key)
    }

    pub(crate) fn entry_at(&self, id: SlotId) -> &Entry {
        &self.slab.get(id).1
    }

    pub(crate) fn entry_at_mut(&mut self, id: SlotId) -> &mut Entry {
        &mut self.slab.get_mut(id).1
    }

    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.find(key).map(|id| &mut self.slab.get_mut(id).1)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.find(key).is_some()
    }

    /// Insert or replace; returns the entry replaced.
    pub(crate) fn insert(&mut self, key: &[u8], entry: Entry) -> Option<Entry> {
        if let Some(id) = self.find(key) {
            return Some(std::mem::replace(&mut self.slab.get_mut(id).1, entry));
        }
        let k = IndexKey::new(key);
        self.heap_key_bytes += k.heap_bytes();
        if crate::keys::is_internal_key(key) {
            self.internal += 1;
        }
        if let Some((db, _)) = crate::keys::split_db_key(key) {
            self.db_keys[db as usize] += 1;
        }
        let id = self.slab.alloc((k, entry));
        let hash = self.hash(key);
        let (slab, hasher) = (&self.slab, &self.hasher);
        self.by_hash
            .insert_unique(hash, id, |&i| hasher.hash_one(slab.key(i).as_slice()));

        let probe = probe(key);
        let leaf = leaf_mut(&mut self.leaves, key, probe.as_ref());
        let at = search(slab, leaf, key, probe.as_ref())
            .expect_err("a key absent from the hash table is absent from its leaf");
        let mut capacity = self.leaf_capacity;
        if leaf.len() == leaf.capacity() {
            capacity -= leaf.capacity();
            leaf.reserve_exact(LEAF_SLACK);
            capacity += leaf.capacity();
        }
        leaf.insert(at, id);
        let split = (leaf.len() > LEAF_MAX).then(|| {
            // Keys arriving in order would leave every leaf half full: an insert at either end
            // splits off just that key, so runs of ordered inserts fill leaves.
            let mid = if at == leaf.len() - 1 {
                leaf.len() - 1
            } else if at == 0 {
                1
            } else {
                leaf.len() / 2
            };
            let right = leaf.split_off(mid);
            capacity -= leaf.capacity();
            leaf.shrink_to(leaf.len() + LEAF_SLACK);
            capacity += leaf.capacity() + right.capacity();
            right
        });
        self.leaf_capacity = capacity;
        if let Some(right) = split {
            // The separator is a copy of the right leaf's first key.
            let sep = slab.key(right[0]).clone();
            self.heap_key_bytes += sep.heap_bytes();
            self.leaves.insert(sep, right);
        }
        None
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let id = self.find(key)?;
        let hash = self.hash(key);
        match self.by_hash.find_entry(hash, |&i| i == id) {
            Ok(slot) => {
                slot.remove();
            }
            Err(_) => unreachable!("found by this hash just above"),
        }
        let probe = probe(key);
        let sep = leaf_entry(&self.leaves, key, probe.as_ref()).0.clone();
        let leaf = self.leaves.get_mut(sep.as_slice()).expect("found above");
        let i = search(&self.slab, leaf, key, probe.as_ref())
            .expect("a key in the hash table is in its leaf");
        leaf.remove(i);
        let cap = leaf.capacity();
        if leaf.capacity() > leaf.len() + 2 * LEAF_SLACK {
            leaf.shrink_to(leaf.len() + LEAF_SLACK);
        }
        self.leaf_capacity = self.leaf_capacity - cap + leaf.capacity();
        let small = leaf.len() < LEAF_MIN;
        let (k, e) = self.slab.release(id);
        self.heap_key_bytes -= k.heap_bytes();
        if crate::keys::is_internal_key(key) {
            self.internal -= 1;
        }
        if let Some((db, _)) = crate::keys::split_db_key(key) {
            self.db_keys[db as usize] -= 1;
        }
        if small {
            self.merge_small(&sep);
        }
        self.compact_if_sparse();
        Some(e)
    }

    /// After many removals, move the pairs of the slab's last chunks into free slots below and
    /// drop those chunks, and rebuild the hash table, so that the index's bytes follow its keys
    /// down. Runs when the free slots reach a quarter of the keys (and a chunk): its cost,
    /// proportional to the slab, is paid once per that many removals.
    fn compact_if_sparse(&mut self) {
        let len = self.len();
        let free = self.slab.free.len();
        if free < CHUNK || free < len / 4 {
            return;
        }
        let keep_chunks = len.div_ceil(CHUNK);
        let boundary = keep_chunks * CHUNK;
        if boundary < self.slab.high {
            let mut below: Vec<SlotId> = self
                .slab
                .free
                .iter()
                .copied()
                .filter(|&id| (id as usize) < boundary)
                .collect();
            for old in boundary..self.slab.high {
                let old = old as SlotId;
                if Slab::is_vacant(self.slab.get(old)) {
                    continue;
                }
                let new = below
                    .pop()
                    .expect("the kept chunks have room for every key");
                let pair = std::mem::replace(self.slab.get_mut(old), Slab::vacant());
                let key = pair.0.clone();
                *self.slab.get_mut(new) = pair;
                let hash = self.hash(key.as_slice());
                *self
                    .by_hash
                    .find_mut(hash, |&i| i == old)
                    .expect("every key is in the hash table") = new;
                let probe = probe(key.as_slice());
                let slab = &self.slab;
                let leaf = leaf_mut(&mut self.leaves, key.as_slice(), probe.as_ref());
                let at = leaf
                    .iter()
                    .position(|&i| i == old)
                    .expect("every key is in its leaf");
                debug_assert!(slab.key(new) == &key);
                leaf[at] = new;
            }
            self.slab.chunks.truncate(keep_chunks);
            self.slab.chunks.shrink_to_fit();
            self.slab.high = boundary;
            self.slab.free = below;
            self.slab.free.shrink_to_fit();
        }
        // Rebuild the hash table for the keys left: removals leave tombstones that count
        // against its capacity until a rehash, so without this, deleting keys from a full table
        // would give no room back (and a large one would not shrink).
        let (slab, hasher) = (&self.slab, &self.hasher);
        let mut table = HashTable::with_capacity(len);
        for id in self.by_hash.drain() {
            table.insert_unique(hasher.hash_one(slab.key(id).as_slice()), id, |&i| {
                hasher.hash_one(slab.key(i).as_slice())
            });
        }
        self.by_hash = table;
    }

    /// Merge the leaf at `sep` (just shrunk below a quarter) into its left neighbour, or its
    /// right neighbour into it, when the two fit in one leaf; drop an empty leaf that is not the
    /// first.
    fn merge_small(&mut self, sep: &IndexKey) {
        let this_len = self.leaves[sep.as_slice()].len();
        let left = self
            .leaves
            .range::<IndexKey, _>((Bound::Unbounded, Bound::Excluded(sep)))
            .next_back()
            .map(|(s, l)| (s.clone(), l.len()));
        let right = self
            .leaves
            .range::<IndexKey, _>((Bound::Excluded(sep), Bound::Unbounded))
            .next()
            .map(|(s, l)| (s.clone(), l.len()));
        let (into, from) = match (left, right) {
            (Some((l, n)), _) if n + this_len <= LEAF_MAX => (l, sep.clone()),
            (_, Some((r, n))) if n + this_len <= LEAF_MAX => (sep.clone(), r),
            _ => {
                if this_len == 0 && !sep.as_slice().is_empty() {
                    let gone = self.leaves.remove(sep.as_slice()).expect("present");
                    self.leaf_capacity -= gone.capacity();
                    self.heap_key_bytes -= sep.heap_bytes();
                }
                return;
            }
        };
        let moved = self.leaves.remove(from.as_slice()).expect("listed");
        self.leaf_capacity -= moved.capacity();
        self.heap_key_bytes -= from.heap_bytes();
        let leaf = self.leaves.get_mut(into.as_slice()).expect("listed");
        self.leaf_capacity -= leaf.capacity();
        leaf.reserve_exact(moved.len());
        leaf.extend(moved);
        leaf.shrink_to(leaf.len() + LEAF_SLACK);
        self.leaf_capacity += leaf.capacity();
    }

    pub(crate) fn clear(&mut self) {
        *self = Index::new();
    }

    /// Pairs with keys from `start` on, in byte order.
    pub(crate) fn range_from<'a>(
        &'a self,
        start: Bound<&[u8]>,
    ) -> impl Iterator<Item = (&'a [u8], &'a Entry)> + 'a {
        let slab = &self.slab;
        let (sep, leaf) = match start {
            Bound::Included(k) | Bound::Excluded(k) => {
                leaf_entry(&self.leaves, k, probe(k).as_ref())
            }
            Bound::Unbounded => self.leaves.first_key_value().expect("one leaf at least"),
        };
        let pos = match start {
            Bound::Included(k) => leaf.partition_point(|&id| slab.key(id).as_slice() < k),
            Bound::Excluded(k) => leaf.partition_point(|&id| slab.key(id).as_slice() <= k),
            Bound::Unbounded => 0,
        };
        let rest = self
            .leaves
            .range::<IndexKey, _>((Bound::Excluded(sep), Bound::Unbounded))
            .flat_map(|(_, l)| l.iter());
        leaf[pos..].iter().chain(rest).map(move |&id| {
            let (k, e) = slab.get(id);
            (k.as_slice(), e)
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.range_from(Bound::Unbounded)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Entry> {
        self.iter().map(|(_, e)| e)
    }

    /// Check the structure (tests): order within and across leaves, separators, sizes, counts,
    /// and that the hash table and the leaves hold the same slots.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut prev: Option<&[u8]> = None;
        let (mut n, mut cap, mut heap, mut internal) = (0, 0, 0, 0);
        let mut db_keys = [0u64; crate::keys::MAX_DATABASES];
        let mut first = true;
        let mut seen = std::collections::HashSet::new();
        for (sep, leaf) in &self.leaves {
            heap += sep.heap_bytes();
            if first && !sep.as_slice().is_empty() {
                return Err("the first leaf's separator is not the empty key".into());
            }
            if !first && leaf.is_empty() {
                return Err("an empty leaf that is not the first".into());
            }
            first = false;
            if leaf.len() > LEAF_MAX {
                return Err(format!("a leaf of {} keys", leaf.len()));
            }
            for &id in leaf {
                let pair = self.slab.get(id);
                if Slab::is_vacant(pair) {
                    return Err(format!("a leaf holds the free slot {id}"));
                }
                if !seen.insert(id) {
                    return Err(format!("slot {id} is in the leaves twice"));
                }
                let k = pair.0.as_slice();
                if k < sep.as_slice() {
                    return Err("a key below its leaf's separator".into());
                }
                if prev.is_some_and(|p| p >= k) {
                    return Err("keys out of order".into());
                }
                if self.find(k) != Some(id) {
                    return Err(format!("the hash table does not find {k:?} at slot {id}"));
                }
                prev = Some(k);
                heap += pair.0.heap_bytes();
                internal += usize::from(crate::keys::is_internal_key(k));
                if let Some((db, _)) = crate::keys::split_db_key(k) {
                    db_keys[db as usize] += 1;
                }
            }
            n += leaf.len();
            cap += leaf.capacity();
        }
        if db_keys != *self.db_keys {
            return Err("the keys counted per database differ from the keys held".into());
        }
        let free: std::collections::HashSet<SlotId> = self.slab.free.iter().copied().collect();
        if free.len() != self.slab.free.len()
            || free
                .iter()
                .any(|&id| seen.contains(&id) || !Slab::is_vacant(self.slab.get(id)))
            || n + free.len() != self.slab.high
        {
            return Err(format!(
                "slab off: {n} keys + {} free slots != {} slots handed out, or a free slot in use",
                free.len(),
                self.slab.high
            ));
        }
        if internal != self.internal {
            return Err(format!(
                "{internal} collection chunk keys, counted {}",
                self.internal
            ));
        }
        if n != self.len() || cap != self.leaf_capacity || heap != self.heap_key_bytes {
            return Err(format!(
                "counts off: {n}/{} keys, {cap}/{} capacity, {heap}/{} heap bytes",
                self.len(),
                self.leaf_capacity,
                self.heap_key_bytes
            ));
        }
        Ok(())
    }
}

impl std::ops::Index<&[u8]> for Index {
    type Output = Entry;
    fn index(&self, key: &[u8]) -> &Entry {
        self.get(key).expect("key present in the index")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(n: u64) -> Entry {
        Entry::new(Place::Mem(1, n), None, false, n as u32, Kind::String, 0)
    }

    #[test]
    fn entry_fields_round_trip_through_the_packing() {
        let nv = NvLoc {
            segment: 7,
            offset: 4096,
            len: 1130,
        };
        let mut e = Entry::new(
            Place::Mem(1, (1 << 47) + 24),
            Some(nv),
            true,
            (64 << 20) + 5,
            Kind::Hash,
            1_700_000_000_123,
        );
        assert_eq!(e.place(), Place::Mem(1, (1 << 47) + 24));
        assert_eq!(e.nv(), Some(nv));
        assert!(e.dirty());
        assert_eq!(e.len(), (64 << 20) + 5);
        assert_eq!(e.kind(), Kind::Hash);
        assert_eq!(e.expires(), 1_700_000_000_123);
        assert!(e.is_expired(1_700_000_000_123) && !e.is_expired(1_700_000_000_122));
        assert_eq!(e.seq(), 0);
        e.set_dirty(false);
        e.set_kind(Kind::String);
        e.set_len(3);
        assert!(!e.dirty());
        assert_eq!((e.kind(), e.len()), (Kind::String, 3));
        e.set_place(Place::Nvme);
        e.set_recovery_seq(99);
        assert_eq!((e.place(), e.seq()), (Place::Nvme, 99));
        e.set_nv(None);
        assert_eq!(e.nv(), None);
        e.set_place(Place::Mem(0, 0));
        assert_eq!(e.place(), Place::Mem(0, 0));
    }

    #[test]
    fn the_access_clock_shares_the_entry_without_disturbing_it() {
        let nv = NvLoc {
            segment: 3,
            offset: (16 << 20) - 4096,
            len: (16 << 20) - 1,
        };
        let off = (1 << 48) - 8;
        let mut e = Entry::new(Place::Mem(1, off), Some(nv), false, 5, Kind::ZSet, 42);
        assert_eq!(e.access(), 0);
        for clock in [CLOCK_MAX, 0x00ab_cdef, 1, 0x0080_8080] {
            e.set_access(clock);
            assert_eq!(e.access(), clock);
            assert_eq!(e.place(), Place::Mem(1, off));
            assert_eq!(e.nv(), Some(nv));
            assert_eq!((e.len(), e.kind(), e.expires()), (5, Kind::ZSet, 42));
        }
        // Moves, new log copies and recovery keep the clock.
        e.set_place(Place::Nvme);
        e.set_recovery_seq(OFFSET_MASK + 5);
        assert_eq!(e.seq(), OFFSET_MASK);
        e.set_nv(Some(NvLoc {
            segment: 9,
            offset: 0,
            len: 1,
        }));
        e.set_place(Place::Mem(0, 64));
        assert_eq!(e.access(), 0x0080_8080);
        assert_eq!(e.place(), Place::Mem(0, 64));
        assert_eq!(
            e.nv().map(|l| (l.segment, l.offset, l.len)),
            Some((9, 0, 1))
        );
        // Seconds on a 24-bit clock; a wrap counts once, as Redis's estimateObjectIdleTime.
        assert_eq!(
            access_clock(1_700_000_000_999),
            (1_700_000_000 & CLOCK_MAX as u64) as u32
        );
        assert_eq!(idle_seconds(10, 13), 3);
        assert_eq!(idle_seconds(CLOCK_MAX - 1, 2), 3);
    }

    #[test]
    fn keys_order_as_bytes_inline_or_not() {
        let long = [b'a'; 40];
        let keys: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"a\0",
            b"ab",
            &long,
            b"b",
            &[0xff; 23],
            &[0xff; 24],
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(
                    IndexKey::new(a).cmp(&IndexKey::new(b)),
                    a.cmp(b),
                    "{a:?} {b:?}"
                );
            }
        }
        assert_eq!(IndexKey::new(&long).as_slice(), &long[..]);
        assert_eq!(IndexKey::new(&long).heap_bytes(), 48 + 16);
        assert_eq!(IndexKey::new(b"user123").heap_bytes(), 0);
    }

    #[test]
    fn ycsb_keys_with_their_database_byte_are_inline() {
        let mut ix = Index::new();
        // The longest YCSB key (`user` + 19 digits) with a database's byte before it: 24 bytes.
        let longest = crate::keys::db_key(0, format!("user{}", i64::MAX as u64).as_bytes());
        assert_eq!(longest.len(), 24);
        ix.insert(&longest, entry(1));
        let at_bound = vec![7u8; INLINE_MAX];
        ix.insert(&at_bound, entry(2));
        assert_eq!(ix.heap_key_bytes, 0, "both inline");
        let over = vec![7u8; INLINE_MAX + 1];
        ix.insert(&over, entry(3));
        assert!(
            ix.heap_key_bytes > 0,
            "one byte over the bound goes to the heap"
        );
        // Inline and heap keys keep one byte order, prefixes first.
        let mut keys = [
            longest,
            at_bound,
            over,
            vec![7u8; 30],
            vec![7u8; 31],
            vec![8u8],
        ];
        for (i, k) in keys.iter().enumerate().skip(3) {
            ix.insert(k, entry(i as u64 + 1));
        }
        keys.sort();
        let mut sorted: Vec<IndexKey> = keys.iter().map(|k| IndexKey::new(k)).collect();
        sorted.sort();
        let back: Vec<&[u8]> = sorted.iter().map(IndexKey::as_slice).collect();
        assert_eq!(back, keys.iter().map(Vec::as_slice).collect::<Vec<_>>());
        ix.check().unwrap();
    }

    #[test]
    fn cost_per_key_does_not_depend_on_insert_order() {
        let n = 20_000u64;
        let mut ascending = Index::new();
        let mut scattered = Index::new();
        for i in 0..n {
            ascending.insert(format!("user{i:012}").as_bytes(), entry(i));
            // YCSB's keys: `user` and a non-negative 64-bit hash (at most 23 bytes: inline).
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1;
            scattered.insert(format!("user{h}").as_bytes(), entry(i));
        }
        ascending.check().unwrap();
        scattered.check().unwrap();
        let full = ascending.bytes() as f64 / n as f64;
        for ix in [&ascending, &scattered] {
            let per_key = ix.bytes() as f64 / n as f64;
            assert!((56.0..85.0).contains(&per_key), "{per_key} bytes per key");
        }
        // Deleting most keys shrinks the index with them.
        for i in 0..n {
            if i % 10 != 0 {
                assert!(ascending
                    .remove(format!("user{i:012}").as_bytes())
                    .is_some());
            }
        }
        ascending.check().unwrap();
        let per_key = ascending.bytes() as f64 / ascending.len() as f64;
        assert!(
            per_key < 1.5 * full,
            "{per_key} bytes per key after deletes, {full} before"
        );
    }

    #[test]
    fn compaction_keeps_every_key_findable() {
        // Waves of inserts and removals with long keys too (on the heap): the slab compacts
        // and the hash table shrinks several times; every key stays findable, in order.
        let mut ix = Index::new();
        let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        let key = |i: u64| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            if i % 7 == 0 {
                format!("a-long-key-kept-on-the-heap-{h}").into_bytes()
            } else {
                format!("user{}", h >> 1).into_bytes()
            }
        };
        let mut next = 0u64;
        for wave in 0..4u64 {
            for _ in 0..3000 {
                ix.insert(&key(next), entry(next % 1000));
                model.insert(key(next), next % 1000);
                next += 1;
            }
            let doomed: Vec<Vec<u8>> = model
                .keys()
                .enumerate()
                .filter(|(i, _)| (*i as u64 + wave) % 5 != 0)
                .map(|(_, k)| k.clone())
                .collect();
            for k in doomed {
                assert_eq!(ix.remove(&k).map(|e| e.len() as u64), model.remove(&k));
            }
            ix.check().unwrap();
            assert!(ix.slab.chunks.len() * CHUNK <= model.len() * 5 / 4 + 2 * CHUNK);
        }
        let got: Vec<(Vec<u8>, u32)> = ix.iter().map(|(k, e)| (k.to_vec(), e.len())).collect();
        let want: Vec<(Vec<u8>, u32)> = model.iter().map(|(k, v)| (k.clone(), *v as u32)).collect();
        assert_eq!(got, want);
        for (k, v) in &model {
            assert_eq!(ix.get(k).map(|e| e.len()), Some(*v as u32));
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Vec<u8>, u64),
        Remove(Vec<u8>),
        Range(Vec<u8>, bool),
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(0u8..4, 1..4),
            proptest::collection::vec(any::<u8>(), 20..30),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (key(), 0u64..(1 << 27) - 1).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => key().prop_map(Op::Remove),
            1 => (key(), any::<bool>()).prop_map(|(k, i)| Op::Range(k, i)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn behaves_like_an_ordered_map(ops in proptest::collection::vec(op(), 1..600)) {
            let mut ix = Index::new();
            let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let old = ix.insert(&k, entry(v)).map(|e| e.len() as u64);
                        prop_assert_eq!(old, model.insert(k, v));
                    }
                    Op::Remove(k) => {
                        let old = ix.remove(&k).map(|e| e.len() as u64);
                        prop_assert_eq!(old, model.remove(&k));
                    }
                    Op::Range(k, incl) => {
                        let b = if incl { Bound::Included(&k[..]) } else { Bound::Excluded(&k[..]) };
                        let got: Vec<(Vec<u8>, u32)> =
                            ix.range_from(b).take(20).map(|(k, e)| (k.to_vec(), e.len())).collect();
                        let want: Vec<(Vec<u8>, u32)> = model
                            .range::<[u8], _>((b, Bound::Unbounded))
                            .take(20)
                            .map(|(k, v)| (k.clone(), *v as u32))
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                }
                ix.check().map_err(TestCaseError::fail)?;
                prop_assert_eq!(ix.len(), model.len());
            }
            for (k, v) in &model {
                prop_assert_eq!(ix.get(k).map(|e| e.len()), Some(*v as u32));
            }
            prop_assert_eq!(ix.iter().count(), model.len());
        }
    }
}
