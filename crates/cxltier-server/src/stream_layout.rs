//! How a stream is kept in the store: the value of an entry of the stream's `Entries` tree (its
//! key is the id, 16 bytes of big-endian milliseconds then sequence), the stream's record and
//! its groups' in the `Meta` tree, pending entries and consumers in theirs. Shared by the
//! stream commands and by what reads or writes whole values beside them (DEBUG DIGEST, the RDB
//! snapshot, DUMP and RESTORE), as `hash_layout` is for hashes.

use cxltier_store::{StreamEdit, StreamTree as T};

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

// ---- the stream's record, its groups, pending entries and consumers, as the trees hold them ----

/// A stream entry's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Id {
    pub ms: u64,
    pub seq: u64,
}

pub(crate) const ZERO_ID: Id = Id { ms: 0, seq: 0 };
impl Id {
    pub(crate) fn key(self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.ms.to_be_bytes());
        k[8..].copy_from_slice(&self.seq.to_be_bytes());
        k
    }

    pub(crate) fn from_key(k: &[u8]) -> Option<Id> {
        let k: &[u8; 16] = k.get(k.len().checked_sub(16)?..)?.try_into().ok()?;
        Some(Id {
            ms: u64::from_be_bytes(k[..8].try_into().ok()?),
            seq: u64::from_be_bytes(k[8..].try_into().ok()?),
        })
    }
}

pub(crate) const META_KEY: &[u8] = b"s";
pub(crate) const GROUP_TAG: u8 = b'g';

/// The stream's own record (Redis's `stream` struct, and the newest node's fill).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) last: Id,
    pub(crate) added: u64,
    pub(crate) max_deleted: Id,
    /// The id that opened the newest node; the node exists while entries at or above it do.
    pub(crate) tail_start: Id,
    /// The newest node's entries, live and deleted (Redis counts both).
    pub(crate) tail_count: u64,
    /// The newest node's estimated bytes.
    pub(crate) tail_bytes: u64,
    /// Nodes (XINFO's `radix-tree-keys`).
    pub(crate) nodes: u64,
}

impl Meta {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(80);
        v.extend_from_slice(&self.last.key());
        v.extend_from_slice(&self.added.to_le_bytes());
        v.extend_from_slice(&self.max_deleted.key());
        v.extend_from_slice(&self.tail_start.key());
        v.extend_from_slice(&self.tail_count.to_le_bytes());
        v.extend_from_slice(&self.tail_bytes.to_le_bytes());
        v.extend_from_slice(&self.nodes.to_le_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Meta> {
        if b.len() != 80 {
            return None;
        }
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(Meta {
            last: Id::from_key(&b[0..16])?,
            added: u(16),
            max_deleted: Id::from_key(&b[24..40])?,
            tail_start: Id::from_key(&b[40..56])?,
            tail_count: u(56),
            tail_bytes: u(64),
            nodes: u(72),
        })
    }

    pub(crate) fn put(&self) -> StreamEdit {
        StreamEdit::Put(T::Meta, META_KEY.to_vec(), self.encode())
    }
}

/// A consumer group: the last id delivered and its read counter (`None`: Redis's invalid -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) last: Id,
    pub(crate) entries_read: Option<u64>,
}

pub(crate) fn group_key(name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(GROUP_TAG);
    k.extend_from_slice(name);
    k
}

impl Group {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = self.last.key().to_vec();
        v.extend_from_slice(&self.entries_read.map_or(-1i64, |n| n as i64).to_le_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Group> {
        if b.len() != 24 {
            return None;
        }
        let n = i64::from_le_bytes(b[16..24].try_into().ok()?);
        Some(Group {
            last: Id::from_key(&b[..16])?,
            entries_read: (n >= 0).then_some(n as u64),
        })
    }

    pub(crate) fn put(&self, name: &[u8]) -> StreamEdit {
        StreamEdit::Put(T::Meta, group_key(name), self.encode())
    }
}

/// The prefix of a group's keys in the pending, consumer and consumer-pending trees.
pub(crate) fn gp(group: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + group.len() + 16);
    k.extend_from_slice(&(group.len() as u32).to_be_bytes());
    k.extend_from_slice(group);
    k
}

pub(crate) fn pel_key(group: &[u8], id: Id) -> Vec<u8> {
    let mut k = gp(group);
    k.extend_from_slice(&id.key());
    k
}

pub(crate) fn consumer_key(group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut k = gp(group);
    k.extend_from_slice(consumer);
    k
}

pub(crate) fn cpel_prefix(group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut k = gp(group);
    k.extend_from_slice(&(consumer.len() as u32).to_be_bytes());
    k.extend_from_slice(consumer);
    k
}

pub(crate) fn cpel_key(group: &[u8], consumer: &[u8], id: Id) -> Vec<u8> {
    let mut k = cpel_prefix(group, consumer);
    k.extend_from_slice(&id.key());
    k
}

/// A pending entry: when it was last delivered, how often, and to whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Nack {
    pub(crate) time: u64,
    pub(crate) count: u64,
    pub(crate) consumer: Vec<u8>,
}

impl Nack {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16 + self.consumer.len());
        v.extend_from_slice(&self.time.to_le_bytes());
        v.extend_from_slice(&self.count.to_le_bytes());
        v.extend_from_slice(&self.consumer);
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Nack> {
        if b.len() < 16 {
            return None;
        }
        Some(Nack {
            time: u64::from_le_bytes(b[..8].try_into().ok()?),
            count: u64::from_le_bytes(b[8..16].try_into().ok()?),
            consumer: b[16..].to_vec(),
        })
    }
}

/// A node's estimated bytes for an entry of `items` (Redis's listpack spends a few bytes of
/// header per element and per entry).
pub(crate) fn entry_bytes(items: &[&[u8]]) -> u64 {
    items.iter().map(|i| i.len() as u64 + 2).sum::<u64>() + 8
}
