//! Streams in Redis 7.0's RDB encoding: `RDB_TYPE_STREAM_LISTPACKS_2` written (by DUMP and the
//! snapshot) and read, `RDB_TYPE_STREAM_LISTPACKS` (Redis 5 and 6) read.
//!
//! The value: the number of listpack nodes, then each node as its master id (a 16-byte
//! big-endian string) and its listpack (t_stream.c's layout: the master entry's count of live
//! entries, of deleted ones, its fields and a 0; then each entry as flags, the id's deltas from
//! the master id, its fields unless it has the master's (`SAMEFIELDS`), its values and its
//! `lp-count`); the length, the last id, then (type 19) the first id, the largest deleted id and
//! the entries ever added; the consumer groups, each with its name, last id, entries read (type
//! 19), its pending entries (a raw 16-byte id, the delivery time in ms, the delivery count) and
//! its consumers (name, seen time, the raw ids of their pending entries).
//!
//! A node of the store's stream begins at an entry flagged `NODE_START` (where Redis's listpack
//! began when the entry was added, by `stream-node-max-entries` and `stream-node-max-bytes`), so
//! the nodes written are the stream's own; deleted entries are gone from the store, so a node
//! written has none. Read nodes give their first live entry that flag back, and the newest
//! node's count (live and deleted) and bytes become the stream's record, so that XADD and `~`
//! trimming go on as Redis's would.
//!
//! Reading checks what Redis 7.0 checks with `sanitize-dump-payload yes`
//! (`streamValidateListpackIntegrity`, no repeated group, consumer or pending entry, a
//! consumer's pending entry in its group's, every pending entry owned) and more: ids strictly
//! increasing within and across nodes and not below their node's master id, the master entry's
//! counts equal to what the node holds, no node without a live entry, the length equal to the
//! live entries, the last id not below the newest entry, entries added not below the length.
//! Every count is checked against the bytes left before anything is allocated for it, and a
//! node's walk is bounded by its listpack's entries.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};

use cxltier_store::{Store, StoreError, StreamEdit, StreamTree as T};

use super::load::{listpack, Entry, Input, LoadError, Strings};
use super::{RdbWriter, TYPE_STREAM_LISTPACKS_2};
use crate::stream_layout::{
    consumer_key, cpel_key, decode_entry, encode_entry, entry_bytes, gp, pel_key, Group, Id, Meta,
    Nack, GROUP_TAG, META_KEY, NODE_START,
};

/// A stream id: milliseconds, then sequence.
pub type StreamId = (u64, u64);

/// An entry's flags in a listpack node (t_stream.c).
const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;
/// Entries read from the store per call while a stream is written.
const PAGE: u64 = 512;
/// Edits handed to the store per call while a stream is built.
const BUILD_BATCH: usize = 1024;

/// A stream as an RDB value holds it, validated.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    /// The live entries, by increasing id.
    pub entries: Vec<StreamEntry>,
    /// The entries' fields and values ([`StreamEntry`] says where): a node's fields once for
    /// the entries that share them, so memory stays proportional to the payload.
    pub items: Strings,
    pub last_id: StreamId,
    pub first_id: StreamId,
    pub max_deleted: StreamId,
    pub entries_added: u64,
    /// The newest node's entries, live and deleted.
    pub tail_count: u64,
    pub groups: Vec<StreamGroup>,
}

/// One live entry: its id, its `pairs` fields (in [`Stream::items`] from `fields`: an entry
/// with its node's fields shares them) and values (from `values`), and whether a node begins
/// with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamEntry {
    pub id: StreamId,
    pub fields: usize,
    pub values: usize,
    pub pairs: usize,
    pub node_start: bool,
}

/// A consumer group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamGroup {
    pub name: Vec<u8>,
    pub last: StreamId,
    /// `None`: Redis's invalid counter (-1).
    pub entries_read: Option<u64>,
    /// By increasing id.
    pub pending: Vec<Pending>,
    pub consumers: Vec<Consumer>,
}

/// A pending entry, owned by `consumers[consumer]` of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub id: StreamId,
    pub delivered_ms: u64,
    pub deliveries: u64,
    pub consumer: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    pub name: Vec<u8>,
    pub seen_ms: u64,
}

impl Stream {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The fields and values of entry `i`, alternating.
    pub fn items_of(&self, i: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let e = self.entries[i];
        (0..2 * e.pairs).map(move |j| {
            let at = if j % 2 == 0 { e.fields } else { e.values };
            self.items.get(at + j / 2)
        })
    }
}

/// Two streams are equal when they hold the same: the same entries (ids, fields and values, node
/// starts), counters and groups. How their items are laid out, and how many deleted entries
/// their newest node held (a DUMP writes none), do not count.
impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.len() == other.len()
            && (0..self.len()).all(|i| {
                let (a, b) = (self.entries[i], other.entries[i]);
                a.id == b.id
                    && a.node_start == b.node_start
                    && self.items_of(i).eq(other.items_of(i))
            })
            && self.last_id == other.last_id
            && self.first_id == other.first_id
            && self.max_deleted == other.max_deleted
            && self.entries_added == other.entries_added
            && self.groups == other.groups
    }
}

fn corrupt(what: impl Into<String>) -> LoadError {
    LoadError::Corrupt(what.into())
}

fn id_of(raw: &[u8]) -> StreamId {
    let raw: &[u8; 16] = raw.try_into().expect("16 bytes");
    (
        u64::from_be_bytes(raw[..8].try_into().expect("8")),
        u64::from_be_bytes(raw[8..].try_into().expect("8")),
    )
}

fn raw_id((ms, seq): StreamId) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&ms.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn text((ms, seq): StreamId) -> String {
    format!("{ms}-{seq}")
}

fn id_pair(input: &mut Input<'_>) -> Result<StreamId, LoadError> {
    Ok((input.length()?, input.length()?))
}

fn millis(input: &mut Input<'_>) -> Result<u64, LoadError> {
    Ok(u64::from_le_bytes(
        input.take(8)?.try_into().expect("8 bytes"),
    ))
}

/// A listpack entry read as an integer (a string holding one is taken, as Redis's
/// `lpGetIntegerIfValid` does).
fn int(e: Option<&Entry<'_>>) -> Result<i64, LoadError> {
    match e {
        Some(Entry::Int(v)) => Ok(*v),
        Some(Entry::Str(s)) => std::str::from_utf8(s)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or_else(|| corrupt("a stream node with text where a number belongs")),
        None => Err(corrupt("a stream node that ends early")),
    }
}

fn push_item(items: &mut Strings, e: Option<&Entry<'_>>) -> Result<(), LoadError> {
    match e {
        Some(Entry::Str(s)) => items.push(s),
        Some(Entry::Int(v)) => items.push(itoa::Buffer::new().format(*v).as_bytes()),
        None => return Err(corrupt("a stream node that ends early")),
    }
    Ok(())
}

/// Read a stream of RDB type `rdb_type` (15 or 19) at `input`'s position.
pub fn read(rdb_type: u8, input: &mut Input<'_>) -> Result<Stream, LoadError> {
    let mut s = Stream::default();
    // A node: a 17-byte key string and a listpack of 7 bytes at least.
    let nodes = input.count(24)?;
    let mut prev: Option<StreamId> = None;
    for _ in 0..nodes {
        let key = input.blob()?;
        if key.len() != 16 {
            return Err(corrupt(
                "a stream node key that is not the size of a stream ID",
            ));
        }
        let master = id_of(&key);
        if prev.is_some_and(|p| master <= p) {
            return Err(corrupt(format!(
                "a stream node at {} after an entry at or above it",
                text(master)
            )));
        }
        let lp = input.blob()?;
        let mut node_entries = Vec::new();
        listpack(&lp, |e| {
            node_entries.push(e);
            Ok(())
        })?;
        let es = &node_entries;
        let mut at = 0usize;
        let mut next = || {
            at += 1;
            es.get(at - 1)
        };
        let count = int(next())?;
        let deleted = int(next())?;
        let master_fields = int(next())?;
        if count < 0 || deleted < 0 || master_fields < 0 {
            return Err(corrupt(
                "a stream node whose master entry has a negative count",
            ));
        }
        if count == 0 {
            return Err(corrupt("a stream node without a live entry"));
        }
        let master_fields = master_fields as usize;
        let mut fields_at = Vec::with_capacity(master_fields.min(es.len()));
        for _ in 0..master_fields {
            at += 1;
            fields_at.push(at - 1);
            if at > es.len() {
                return Err(corrupt("a stream node that ends early"));
            }
        }
        // The node's fields, once, for the entries that share them.
        let shared = s.items.len();
        for &f in &fields_at {
            push_item(&mut s.items, es.get(f))?;
        }
        let mut next = || {
            at += 1;
            es.get(at - 1)
        };
        if int(next())? != 0 {
            return Err(corrupt(
                "a stream node whose master entry does not end with 0",
            ));
        }
        let (mut live, mut dead) = (0i64, 0i64);
        let mut node_start = true;
        let mut node_total = 0u64;
        while at < es.len() {
            let start = at;
            let mut next = || {
                at += 1;
                es.get(at - 1)
            };
            let flags = int(next())?;
            let ms = master.0.wrapping_add(int(next())? as u64);
            let seq = master.1.wrapping_add(int(next())? as u64);
            let id = (ms, seq);
            if id < master || prev.is_some_and(|p| id <= p) {
                return Err(corrupt(format!("a stream entry {} out of order", text(id))));
            }
            prev = Some(id);
            let is_live = flags & FLAG_DELETED == 0;
            let pairs;
            let (fields, values);
            if flags & FLAG_SAMEFIELDS != 0 {
                pairs = master_fields;
                if at + pairs > es.len() {
                    return Err(corrupt("a stream node that ends early"));
                }
                fields = shared;
                values = s.items.len();
                if is_live {
                    for j in 0..pairs {
                        push_item(&mut s.items, es.get(at + j))?;
                    }
                }
                at += pairs;
            } else {
                let n = int(es.get(at))?;
                at += 1;
                if n < 0 || n as u64 > ((es.len() - at) / 2) as u64 {
                    return Err(corrupt("a stream entry with a bad count of fields"));
                }
                pairs = n as usize;
                fields = s.items.len();
                values = fields + pairs;
                if is_live {
                    for j in 0..2 * pairs {
                        push_item(&mut s.items, es.get(at + 2 * (j % pairs) + j / pairs))?;
                    }
                }
                at += 2 * pairs;
            }
            let lp_count = int(es.get(at))?;
            at += 1;
            if lp_count < 0 || lp_count as usize != at - start - 1 {
                return Err(corrupt("a stream entry whose lp-count is wrong"));
            }
            node_total += 1;
            if is_live {
                live += 1;
                s.entries.push(StreamEntry {
                    id,
                    fields,
                    values,
                    pairs,
                    node_start,
                });
                node_start = false;
            } else {
                dead += 1;
            }
        }
        if live != count || dead != deleted {
            return Err(corrupt(format!(
                "a stream node of {live} live and {dead} deleted entries whose master entry says {count} and {deleted}"
            )));
        }
        s.tail_count = node_total;
    }
    let length = input.length()?;
    if length != s.entries.len() as u64 {
        return Err(corrupt(format!(
            "a stream of {} entries whose length says {length}",
            s.entries.len()
        )));
    }
    s.last_id = id_pair(input)?;
    if prev.is_some_and(|p| p > s.last_id) {
        return Err(corrupt(
            "a stream whose last id is below one of its entries",
        ));
    }
    let first = s.entries.first().map_or((0, 0), |e| e.id);
    if rdb_type == TYPE_STREAM_LISTPACKS_2 {
        s.first_id = id_pair(input)?;
        s.max_deleted = id_pair(input)?;
        s.entries_added = input.length()?;
        if s.entries_added < length {
            return Err(corrupt("a stream that added fewer entries than it holds"));
        }
        if s.max_deleted > s.last_id {
            return Err(corrupt(
                "a stream whose largest deleted id is above its last id",
            ));
        }
    } else {
        s.first_id = first;
        s.entries_added = length;
    }
    // Redis's first id is the first live entry's (0-0 when there is none).
    s.first_id = first;
    // A group: a name, an id, a read counter, a PEL count and a consumer count.
    let groups = input.count(5)?;
    let mut names = HashSet::new();
    for _ in 0..groups {
        let mut g = StreamGroup {
            name: input.string()?,
            last: id_pair(input)?,
            ..StreamGroup::default()
        };
        g.entries_read = if rdb_type == TYPE_STREAM_LISTPACKS_2 {
            let n = input.length()?;
            (n <= i64::MAX as u64).then_some(n)
        } else {
            estimate_read(&s, g.last)
        };
        if !names.insert(g.name.clone()) {
            return Err(corrupt(format!(
                "the consumer group {:?} twice",
                String::from_utf8_lossy(&g.name)
            )));
        }
        // A pending entry: 16 bytes of id, 8 of time, a count.
        let pel = input.count(25)?;
        g.pending.reserve(pel as usize);
        for _ in 0..pel {
            let id = id_of(input.take(16)?);
            let delivered_ms = millis(input)?;
            let deliveries = input.length()?;
            if g.pending.last().is_some_and(|p| p.id >= id) {
                return Err(corrupt(
                    "a group's pending entries out of order or repeated",
                ));
            }
            g.pending.push(Pending {
                id,
                delivered_ms,
                deliveries,
                consumer: usize::MAX,
            });
        }
        // A consumer: a name, 8 bytes of time, a count.
        let consumers = input.count(10)?;
        let mut seen = HashSet::new();
        for c in 0..consumers as usize {
            let name = input.string()?;
            if !seen.insert(name.clone()) {
                return Err(corrupt("a stream consumer twice in its group"));
            }
            let seen_ms = millis(input)?;
            g.consumers.push(Consumer { name, seen_ms });
            let owned = input.count(16)?;
            for _ in 0..owned {
                let id = id_of(input.take(16)?);
                let Ok(i) = g.pending.binary_search_by(|p| p.id.cmp(&id)) else {
                    return Err(corrupt("a consumer's entry not found in its group's PEL"));
                };
                if g.pending[i].consumer != usize::MAX {
                    return Err(corrupt("a pending entry owned twice"));
                }
                g.pending[i].consumer = c;
            }
        }
        if g.pending.iter().any(|p| p.consumer == usize::MAX) {
            return Err(corrupt("a group's pending entry without a consumer"));
        }
        s.groups.push(g);
    }
    Ok(s)
}

/// `streamEstimateDistanceFromFirstEverEntry` for a type-15 stream (no deleted id known, every
/// entry counted as added).
fn estimate_read(s: &Stream, id: StreamId) -> Option<u64> {
    let len = s.entries.len() as u64;
    if s.entries_added == 0 {
        return Some(0);
    }
    if (len == 0 && id <= s.last_id) || id == s.last_id {
        return Some(s.entries_added);
    }
    if id > s.last_id {
        return None;
    }
    if id < s.first_id {
        return Some(s.entries_added - len);
    }
    if id == s.first_id {
        return Some(s.entries_added - len + 1);
    }
    None
}

/// Write `s` (the type byte already written) as `RDB_TYPE_STREAM_LISTPACKS_2`.
pub fn write<W: Write>(w: &mut RdbWriter<W>, s: &Stream) -> io::Result<()> {
    let starts: Vec<usize> = (0..s.len())
        .filter(|&i| i == 0 || s.entries[i].node_start)
        .collect();
    w.len(starts.len() as u64)?;
    for (n, &from) in starts.iter().enumerate() {
        let to = starts.get(n + 1).copied().unwrap_or(s.len());
        let master = s.entries[from].id;
        let master_fields: Vec<&[u8]> = s.items_of(from).step_by(2).collect();
        let mut lp: Vec<Entry<'_>> = vec![
            Entry::Int((to - from) as i64),
            Entry::Int(0),
            Entry::Int(master_fields.len() as i64),
        ];
        lp.extend(master_fields.iter().map(|f| Entry::Str(f)));
        lp.push(Entry::Int(0));
        for i in from..to {
            let e = s.entries[i];
            let same = e.pairs == master_fields.len()
                && s.items_of(i).step_by(2).eq(master_fields.iter().copied());
            lp.push(Entry::Int(if same { FLAG_SAMEFIELDS } else { 0 }));
            lp.push(Entry::Int(e.id.0.wrapping_sub(master.0) as i64));
            lp.push(Entry::Int(e.id.1.wrapping_sub(master.1) as i64));
            if same {
                lp.extend(s.items_of(i).skip(1).step_by(2).map(Entry::Str));
                lp.push(Entry::Int(e.pairs as i64 + 3));
            } else {
                lp.push(Entry::Int(e.pairs as i64));
                lp.extend(s.items_of(i).map(Entry::Str));
                lp.push(Entry::Int(2 * e.pairs as i64 + 4));
            }
        }
        w.string(&raw_id(master))?;
        w.string(&super::encode::listpack(&lp))?;
    }
    w.len(s.len() as u64)?;
    for id in [s.last_id, s.first_id, s.max_deleted] {
        w.len(id.0)?;
        w.len(id.1)?;
    }
    w.len(s.entries_added)?;
    w.len(s.groups.len() as u64)?;
    for g in &s.groups {
        w.string(&g.name)?;
        w.len(g.last.0)?;
        w.len(g.last.1)?;
        // Redis writes its invalid counter (-1) as the length 2^64 - 1.
        w.len(g.entries_read.unwrap_or(u64::MAX))?;
        w.len(g.pending.len() as u64)?;
        for p in &g.pending {
            w.raw(&raw_id(p.id))?;
            w.raw(&p.delivered_ms.to_le_bytes())?;
            w.len(p.deliveries)?;
        }
        let mut owned: Vec<Vec<StreamId>> = vec![Vec::new(); g.consumers.len()];
        for p in &g.pending {
            if let Some(o) = owned.get_mut(p.consumer) {
                o.push(p.id);
            }
        }
        w.len(g.consumers.len() as u64)?;
        for (c, ids) in g.consumers.iter().zip(&owned) {
            w.string(&c.name)?;
            w.raw(&c.seen_ms.to_le_bytes())?;
            w.len(ids.len() as u64)?;
            for id in ids {
                w.raw(&raw_id(*id))?;
            }
        }
    }
    Ok(())
}

fn damaged(name: &[u8], what: &str) -> StoreError {
    StoreError::Corrupt(format!(
        "the stream {:?} has an unreadable {what}",
        String::from_utf8_lossy(name)
    ))
}

/// A key and its value in one of a stream's trees.
type Pair = (Vec<u8>, Vec<u8>);

/// Every key and value of `tree` whose key starts with `prefix`, read a page at a time.
fn all_with_prefix(
    store: &mut Store,
    key: &[u8],
    tree: T,
    prefix: &[u8],
) -> Result<Vec<Pair>, StoreError> {
    let mut out = Vec::new();
    let mut lo = prefix.to_vec();
    loop {
        let page = store.stream_range(key, tree, &lo, None, false, PAGE)?;
        let full = page.len() as u64 == PAGE;
        let mut done = !full;
        for (k, v) in page {
            if !k.starts_with(prefix) {
                done = true;
                break;
            }
            lo = k.clone();
            lo.push(0);
            out.push((k, v));
        }
        if done {
            return Ok(out);
        }
    }
}

/// The stream under `key` (the store's key; `name` the user's, for messages), read whole.
pub fn from_store(store: &mut Store, key: &[u8], name: &[u8]) -> Result<Stream, StoreError> {
    let meta = store
        .stream_get(key, T::Meta, META_KEY)?
        .and_then(|b| Meta::decode(&b))
        .ok_or_else(|| damaged(name, "record"))?;
    let mut s = Stream {
        last_id: (meta.last.ms, meta.last.seq),
        max_deleted: (meta.max_deleted.ms, meta.max_deleted.seq),
        entries_added: meta.added,
        ..Stream::default()
    };
    for (k, v) in all_with_prefix(store, key, T::Entries, &[])? {
        let id = Id::from_key(&k)
            .filter(|_| k.len() == 16)
            .ok_or_else(|| damaged(name, "entry"))?;
        let (flags, items) = decode_entry(&v).ok_or_else(|| damaged(name, "entry"))?;
        if items.len() % 2 != 0 {
            return Err(damaged(name, "entry"));
        }
        let fields = s.items.len();
        let pairs = items.len() / 2;
        items.iter().step_by(2).for_each(|i| s.items.push(i));
        items
            .iter()
            .skip(1)
            .step_by(2)
            .for_each(|i| s.items.push(i));
        s.entries.push(StreamEntry {
            id: (id.ms, id.seq),
            fields,
            values: fields + pairs,
            pairs,
            node_start: flags & NODE_START != 0,
        });
    }
    s.first_id = s.entries.first().map_or((0, 0), |e| e.id);
    for (k, v) in all_with_prefix(store, key, T::Meta, &[GROUP_TAG])? {
        let g = Group::decode(&v).ok_or_else(|| damaged(name, "group"))?;
        let gname = k[1..].to_vec();
        let prefix = gp(&gname);
        let mut group = StreamGroup {
            last: (g.last.ms, g.last.seq),
            entries_read: g.entries_read,
            ..StreamGroup::default()
        };
        for (ck, cv) in all_with_prefix(store, key, T::Consumers, &prefix)? {
            let seen = cv
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
                .ok_or_else(|| damaged(name, "consumer"))?;
            group.consumers.push(Consumer {
                name: ck[prefix.len()..].to_vec(),
                seen_ms: seen,
            });
        }
        let by_name: HashMap<&[u8], usize> = group
            .consumers
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_slice(), i))
            .collect();
        for (pk, pv) in all_with_prefix(store, key, T::Pending, &prefix)? {
            let id = Id::from_key(&pk).ok_or_else(|| damaged(name, "pending entry"))?;
            let n = Nack::decode(&pv).ok_or_else(|| damaged(name, "pending entry"))?;
            let consumer = *by_name
                .get(n.consumer.as_slice())
                .ok_or_else(|| damaged(name, "pending entry's consumer"))?;
            group.pending.push(Pending {
                id: (id.ms, id.seq),
                delivered_ms: n.time,
                deliveries: n.count,
                consumer,
            });
        }
        group.name = gname;
        s.groups.push(group);
    }
    Ok(s)
}

fn id((ms, seq): StreamId) -> Id {
    Id { ms, seq }
}

/// Write `s` under `key` (absent), as the stream commands keep it.
pub fn build(store: &mut Store, key: &[u8], s: &Stream) -> Result<(), StoreError> {
    let mut edits: Vec<StreamEdit> = Vec::new();
    let flush = |store: &mut Store, edits: &mut Vec<StreamEdit>, all: bool| {
        if edits.len() >= BUILD_BATCH || (all && !edits.is_empty()) {
            store.stream_edit(key, true, edits)?;
            edits.clear();
        }
        Ok::<(), StoreError>(())
    };
    let mut nodes = 0u64;
    let (mut tail_start, mut tail_bytes) = ((0, 0), 0u64);
    for i in 0..s.len() {
        let e = s.entries[i];
        let items: Vec<&[u8]> = s.items_of(i).collect();
        let start = i == 0 || e.node_start;
        if start {
            nodes += 1;
            tail_start = e.id;
            tail_bytes = 16;
        }
        tail_bytes += entry_bytes(&items);
        let flags = if start { NODE_START } else { 0 };
        edits.push(StreamEdit::Put(
            T::Entries,
            id(e.id).key().to_vec(),
            encode_entry(flags, &items),
        ));
        flush(store, &mut edits, false)?;
    }
    let meta = Meta {
        last: id(s.last_id),
        added: s.entries_added,
        max_deleted: id(s.max_deleted),
        tail_start: id(tail_start),
        tail_count: if nodes == 0 { 0 } else { s.tail_count },
        tail_bytes: if nodes == 0 { 0 } else { tail_bytes },
        nodes,
    };
    edits.push(meta.put());
    for g in &s.groups {
        let group = Group {
            last: id(g.last),
            entries_read: g.entries_read,
        };
        edits.push(group.put(&g.name));
        for c in &g.consumers {
            edits.push(StreamEdit::Put(
                T::Consumers,
                consumer_key(&g.name, &c.name),
                c.seen_ms.to_le_bytes().to_vec(),
            ));
            flush(store, &mut edits, false)?;
        }
        for p in &g.pending {
            let owner = &g.consumers[p.consumer].name;
            let n = Nack {
                time: p.delivered_ms,
                count: p.deliveries,
                consumer: owner.clone(),
            };
            edits.push(StreamEdit::Put(
                T::Pending,
                pel_key(&g.name, id(p.id)),
                n.encode(),
            ));
            edits.push(StreamEdit::Put(
                T::ConsumerPending,
                cpel_key(&g.name, owner, id(p.id)),
                Vec::new(),
            ));
            flush(store, &mut edits, false)?;
        }
    }
    flush(store, &mut edits, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdb::dump;
    use crate::rdb::load::{read_object, Value};
    use crate::testdb::Db;

    /// The bulk payload of a reply.
    fn bulk(out: &[u8]) -> Vec<u8> {
        let nl = out.iter().position(|&b| b == b'\n').unwrap();
        out[nl + 1..out.len() - 2].to_vec()
    }

    fn dump_of(db: &mut Db, key: &str) -> Vec<u8> {
        bulk(&db.run(&[b"DUMP", key.as_bytes()]))
    }

    fn restore(db: &mut Db, key: &str, payload: &[u8]) -> String {
        String::from_utf8_lossy(&db.run(&[b"RESTORE", key.as_bytes(), b"0", payload])).into_owned()
    }

    /// What must read the same of two streams: entries, XINFO (full and not), pending entries.
    fn views(db: &mut Db, key: &str) -> Vec<String> {
        [
            format!("XRANGE {key} - +"),
            format!("XLEN {key}"),
            format!("XINFO STREAM {key}"),
            format!("XINFO STREAM {key} FULL"),
            format!("XINFO GROUPS {key}"),
            format!("XPENDING {key} g1"),
            format!("XPENDING {key} g1 - + 1000"),
            format!("XPENDING {key} g2 - + 1000"),
            format!("XINFO CONSUMERS {key} g1"),
        ]
        .iter()
        .map(|c| without_idle(&db.cmd(c).replace(&format!("'{key}'"), "'KEY'")))
        .collect()
    }

    /// A reply with its idle times (which move with the clock) blanked: XINFO CONSUMERS's
    /// `idle` values and XPENDING's extended form's third elements.
    fn without_idle(reply: &str) -> String {
        let mut lines: Vec<&str> = reply.split("\r\n").collect();
        for i in 0..lines.len() {
            if lines[i] == "idle" && i + 1 < lines.len() {
                lines[i + 1] = ":_";
            }
            if lines[i] == "*4" && i + 5 < lines.len() && lines[i + 5].starts_with(':') {
                lines[i + 5] = ":_";
            }
        }
        lines.join("\r\n")
    }

    fn filled(db: &mut Db) {
        for i in 1..=250 {
            if i % 7 == 0 {
                db.cmd(&format!("XADD s {i}-1 other {i} more x"));
            } else {
                db.cmd(&format!("XADD s {i}-1 a {i} b value{i}"));
            }
        }
        db.cmd("XDEL s 1-1 5-1 120-1 249-1");
        db.cmd("XGROUP CREATE s g1 0");
        db.cmd("XGROUP CREATE s g2 $");
        db.cmd("XREADGROUP GROUP g1 alice COUNT 10 STREAMS s >");
        db.cmd("XREADGROUP GROUP g1 bob COUNT 5 STREAMS s >");
        db.cmd("XACK s g1 3-1 4-1");
        db.cmd("XCLAIM s g1 bob 0 6-1");
        db.cmd("XGROUP CREATECONSUMER s g1 carol");
        db.cmd("XDEL s 7-1");
    }

    #[test]
    fn a_stream_round_trips_through_dump_and_restore() {
        let mut db = Db::new();
        filled(&mut db);
        let payload = dump_of(&mut db, "s");
        assert_eq!(payload[0], TYPE_STREAM_LISTPACKS_2);
        assert_eq!(restore(&mut db, "t", &payload), "+OK\r\n");
        assert_eq!(views(&mut db, "s"), views(&mut db, "t"));
        assert!(db.cmd("XINFO STREAM t").contains("radix-tree-keys\r\n:3"));
        // A restored stream goes on as its original would: new entries join the newest node or
        // open one, `~` trimming drops the same nodes. (A node written holds no deleted entry,
        // so the restored newest node counts the live ones alone, as Redis would load it: the
        // copy of the copy is the one to compare with.)
        let payload = dump_of(&mut db, "t");
        assert_eq!(restore(&mut db, "u", &payload), "+OK\r\n");
        for i in 0..120 {
            db.cmd(&format!("XADD t 300-{i} a b"));
            db.cmd(&format!("XADD u 300-{i} a b"));
        }
        db.cmd("XTRIM t MAXLEN ~ 100");
        db.cmd("XTRIM u MAXLEN ~ 100");
        assert_eq!(views(&mut db, "t"), views(&mut db, "u"));
        assert!(db.cmd("XLEN t").starts_with(":1"));
        // The DUMP of the restored stream is the original's byte for byte.
        assert_eq!(dump_of(&mut db, "t"), dump_of(&mut db, "u"));
    }

    #[test]
    fn an_empty_stream_with_groups_round_trips() {
        let mut db = Db::new();
        db.cmd("XGROUP CREATE e g1 $ MKSTREAM");
        db.cmd("XADD e 5-5 a b");
        db.cmd("XDEL e 5-5");
        let payload = dump_of(&mut db, "e");
        assert_eq!(restore(&mut db, "f", &payload), "+OK\r\n");
        assert_eq!(views(&mut db, "e"), views(&mut db, "f"));
        assert_eq!(db.cmd("XADD f 5-5 a b"), db.cmd("XADD e 5-5 a b"));
    }

    fn body_of(db: &mut Db, key: &str) -> Vec<u8> {
        let p = dump_of(db, key);
        p[..p.len() - dump::FOOTER_LEN].to_vec()
    }

    fn read_body(body: &[u8]) -> Result<Value, LoadError> {
        let mut input = Input::new(body);
        let v = read_object(&mut input)?;
        if input.remaining() > 0 {
            return Err(corrupt("bytes after"));
        }
        Ok(v)
    }

    #[test]
    fn every_truncation_and_bit_flip_is_refused_or_read_without_panic() {
        let mut db = Db::new();
        for i in 1..=30 {
            db.cmd(&format!("XADD s {i}-0 f {i}"));
        }
        db.cmd("XDEL s 2-0");
        db.cmd("XGROUP CREATE s g 0");
        db.cmd("XREADGROUP GROUP g c COUNT 3 STREAMS s >");
        let body = body_of(&mut db, "s");
        assert!(read_body(&body).is_ok());
        for n in 0..body.len() {
            assert!(read_body(&body[..n]).is_err(), "truncated at {n}");
        }
        for at in 0..body.len() {
            for bit in 0..8 {
                let mut b = body.clone();
                b[at] ^= 1 << bit;
                // What is accepted is written back as DUMP writes it and reads the same.
                if let Ok(v) = read_body(&b) {
                    let again = dump::payload(&v);
                    assert_eq!(read_body(&again[..again.len() - dump::FOOTER_LEN]), Ok(v));
                }
            }
        }
        // Truncated or flipped payloads are refused by RESTORE with Redis's message.
        let payload = dump_of(&mut db, "s");
        let cut = restore(&mut db, "x", &payload[..payload.len() - 3]);
        assert!(
            cut.starts_with("-ERR DUMP payload version or checksum are wrong"),
            "{cut}"
        );
    }

    #[test]
    fn inconsistent_groups_are_refused() {
        let mut db = Db::new();
        db.cmd("XADD s 1-0 f v");
        db.cmd("XGROUP CREATE s g 0");
        db.cmd("XREADGROUP GROUP g c STREAMS s >");
        let body = body_of(&mut db, "s");
        // The consumer's pending id (the body's last 16 bytes) not in the group's PEL.
        let mut b = body.clone();
        *b.last_mut().unwrap() ^= 1;
        let e = read_body(&b).unwrap_err().to_string();
        assert!(e.contains("not found in its group's PEL"), "{e}");
        // A pending entry nobody owns.
        let Value::Stream(mut s) = read_body(&body).unwrap() else {
            panic!()
        };
        s.groups[0].pending[0].consumer = 9;
        let p = dump::payload(&Value::Stream(s.clone()));
        let e = read_body(&p[..p.len() - dump::FOOTER_LEN])
            .unwrap_err()
            .to_string();
        assert!(e.contains("without a consumer"), "{e}");
        // The length must be the live entries'.
        let payload = dump::seal(&body);
        assert!(dump::parse(&payload, usize::MAX).is_ok());
        s.groups.clear();
        s.entries_added = 0;
        let p = dump::payload(&Value::Stream(s));
        let e = read_body(&p[..p.len() - dump::FOOTER_LEN])
            .unwrap_err()
            .to_string();
        assert!(e.contains("fewer entries"), "{e}");
    }

    /// Redis's own test payload ("Loading from legacy (Redis <= v6.2.x, rdb_ver < 10)
    /// persistence", stream-cgroups.tcl): a type-15 stream DUMPed by Redis 5 after XADDs of
    /// 1-0 to 6-0, XDEL 3-0, two groups, an XREADGROUP of 4 and XTRIM MAXLEN = 2 (its node keeps
    /// four deleted entries, its listpack LZF-compressed).
    #[test]
    fn a_legacy_stream_loads_with_its_counters_estimated() {
        const PAYLOAD: &[u8] = &[
            0x0f, 0x01, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0xc3, 0x40, 0x4a, 0x40, 0x57, 0x16, 0x57, 0x00, 0x00,
            0x00, 0x23, 0x00, 0x02, 0x01, 0x04, 0x01, 0x01, 0x01, 0x84, 0x64, 0x61, 0x74, 0x61,
            0x05, 0x00, 0x01, 0x03, 0x01, 0x00, 0x20, 0x01, 0x03, 0x81, 0x61, 0x02, 0x04, 0x20,
            0x0a, 0x00, 0x01, 0x40, 0x0a, 0x00, 0x62, 0x60, 0x0a, 0x00, 0x02, 0x40, 0x0a, 0x00,
            0x63, 0x60, 0x0a, 0x40, 0x22, 0x01, 0x81, 0x64, 0x20, 0x0a, 0x40, 0x39, 0x20, 0x0a,
            0x00, 0x65, 0x60, 0x0a, 0x00, 0x05, 0x40, 0x0a, 0x00, 0x66, 0x20, 0x0a, 0x00, 0xff,
            0x02, 0x06, 0x00, 0x02, 0x02, 0x67, 0x31, 0x05, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3e, 0xf7,
            0x83, 0x43, 0x7a, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3e, 0xf7, 0x83, 0x43, 0x7a,
            0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3e, 0xf7, 0x83, 0x43, 0x7a, 0x01, 0x00, 0x00,
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x3e, 0xf7, 0x83, 0x43, 0x7a, 0x01, 0x00, 0x00, 0x01, 0x01, 0x03,
            0x63, 0x31, 0x31, 0x3e, 0xf7, 0x83, 0x43, 0x7a, 0x01, 0x00, 0x00, 0x04, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x67, 0x32, 0x00, 0x00, 0x00, 0x00, 0x09,
            0x00, 0x3d, 0x52, 0xef, 0x68, 0x67, 0x52, 0x1d, 0xfa,
        ];
        let mut db = Db::new();
        assert_eq!(restore(&mut db, "x", PAYLOAD), "+OK\r\n");
        let full = db.cmd("XINFO STREAM x FULL");
        for want in [
            "max-deleted-entry-id\r\n$3\r\n0-0\r\n",
            "entries-added\r\n:2\r\n",
            "$2\r\ng1\r\n$17\r\nlast-delivered-id\r\n$3\r\n5-0\r\n$12\r\nentries-read\r\n:1\r\n$3\r\nlag\r\n:1\r\n",
            "$2\r\ng2\r\n$17\r\nlast-delivered-id\r\n$3\r\n0-0\r\n$12\r\nentries-read\r\n:0\r\n$3\r\nlag\r\n:2\r\n",
        ] {
            assert!(full.contains(want), "{want} in {full}");
        }
        assert_eq!(db.cmd("XLEN x"), ":2\r\n");
        assert!(db.cmd("XPENDING x g1").starts_with("*4\r\n:4\r\n"));
    }
}
