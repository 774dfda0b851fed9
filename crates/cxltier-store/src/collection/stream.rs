//! Streams: one root of five ordered trees (see [`StreamTree`]). The store keeps bytes in order
//! and knows nothing of ids or groups: the server encodes its entries, metadata, pending
//! entries and consumers as keys and values of these trees, so every part of a stream is a
//! chunk object that tiers, is written back per batch and recovers like any collection's.
//! Unlike the other kinds a stream stays when its entries are gone (Redis keeps an empty
//! stream, with its last id and groups); only a delete of the key removes it.

use super::tree::{entry_bytes, Seek, Tx};
use crate::{Kind, Result, Store};

/// The trees of a stream's root.
pub(crate) const STREAM_TREES: usize = 5;

/// Which of a stream's trees an operation addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamTree {
    /// Its entries, by id (the server's 16-byte big-endian (ms, seq)): counted, so the length
    /// is the top's count.
    Entries = 0,
    /// The stream's own record and one per consumer group.
    Meta = 1,
    /// Pending entries, by group then id.
    Pending = 2,
    /// Consumers, by group then name.
    Consumers = 3,
    /// Pending entries by group, consumer and id: each consumer's own list.
    ConsumerPending = 4,
}

/// One change of [`Store::stream_edit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEdit {
    /// Set `key` to `value` in the tree (added or replaced).
    Put(StreamTree, Vec<u8>, Vec<u8>),
    /// Remove `key` from the tree (nothing when absent).
    Delete(StreamTree, Vec<u8>),
}

fn put(tx: &mut Tx<'_>, top: &mut super::node::Node, k: &[u8], v: &[u8]) -> Result<bool> {
    tx.modify(top, Seek::Key(k), &mut |e, pos, ch| match pos {
        Ok(p) => {
            let old = entry_bytes(&e[p].0, &e[p].1);
            e[p].1 = v.to_vec();
            ch.grew = Some(entry_bytes(k, v) - old);
            true
        }
        Err(p) => {
            e.insert(p, (k.to_vec(), v.to_vec()));
            ch.grew = Some(entry_bytes(k, v));
            false
        }
    })
}

fn delete(tx: &mut Tx<'_>, top: &mut super::node::Node, k: &[u8]) -> Result<bool> {
    tx.modify(top, Seek::Key(k), &mut |e, pos, ch| {
        ch.changed = pos.is_ok();
        match pos {
            Ok(p) => {
                let (k, v) = e.remove(p).expect("the entry found");
                ch.grew = Some(-entry_bytes(&k, &v));
                true
            }
            Err(_) => false,
        }
    })
}

impl Store {
    /// Whether a stream is at `key` (WRONGTYPE for a key of another kind).
    pub fn stream_exists(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.coll_read(key, Kind::Stream, |_, _| Ok(()))?.is_some())
    }

    /// The entries in `tree` of the stream at `key`; `None` when there is no stream.
    pub fn stream_len(&mut self, key: &[u8], tree: StreamTree) -> Result<Option<u64>> {
        self.coll_read(key, Kind::Stream, |_, r| Ok(r.tops[tree as usize].count()))
    }

    /// The value of `k` in `tree` (`None` when absent, or when there is no stream).
    pub fn stream_get(
        &mut self,
        key: &[u8],
        tree: StreamTree,
        k: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        Ok(self
            .coll_read(key, Kind::Stream, |tx, r| {
                Ok(tx.find(&r.tops[tree as usize], Seek::Key(k))?.map(|e| e.1))
            })?
            .flatten())
    }

    /// Up to `limit` entries of `tree` with keys from `lo` (inclusive) below `hi` (exclusive;
    /// `None`: to the end), lowest first, or highest first with `rev`. Empty when there is no
    /// stream.
    pub fn stream_range(
        &mut self,
        key: &[u8],
        tree: StreamTree,
        lo: &[u8],
        hi: Option<&[u8]>,
        rev: bool,
        limit: u64,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .coll_read(key, Kind::Stream, |tx, r| {
                let top = &r.tops[tree as usize];
                let a = tx.count_below(top, lo, false)?;
                let b = match hi {
                    Some(h) => tx.count_below(top, h, false)?,
                    None => top.count(),
                };
                let n = b.saturating_sub(a).min(limit);
                let mut out = Vec::with_capacity(n.min(1024) as usize);
                if n == 0 {
                    return Ok(out);
                }
                let from = if rev { b - 1 } else { a };
                tx.walk(top, from, rev, &mut |k, v| {
                    out.push((k.to_vec(), v.to_vec()));
                    (out.len() as u64) < n
                })?;
                Ok(out)
            })?
            .unwrap_or_default())
    }

    /// How many keys of `tree` lie from `lo` (inclusive) below `hi` (exclusive; `None`: to the
    /// end), from two paths (no entry is read).
    pub fn stream_count(
        &mut self,
        key: &[u8],
        tree: StreamTree,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Result<u64> {
        Ok(self
            .coll_read(key, Kind::Stream, |tx, r| {
                let top = &r.tops[tree as usize];
                let a = tx.count_below(top, lo, false)?;
                let b = match hi {
                    Some(h) => tx.count_below(top, h, false)?,
                    None => top.count(),
                };
                Ok(b.saturating_sub(a))
            })?
            .unwrap_or(0))
    }

    /// The entry at position `at` of `tree` (negative from the end).
    pub fn stream_at(
        &mut self,
        key: &[u8],
        tree: StreamTree,
        at: i64,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .coll_read(key, Kind::Stream, |tx, r| {
                let top = &r.tops[tree as usize];
                match super::norm_index(at, top.count()) {
                    Some(i) => tx.find(top, Seek::At(i)),
                    None => Ok(None),
                }
            })?
            .flatten())
    }

    /// Apply `edits` in order to the stream at `key`, in one change (one root written). The
    /// stream is created when absent and `create`; `None` when absent and not created. Returns
    /// for each edit whether its key was there before.
    pub fn stream_edit(
        &mut self,
        key: &[u8],
        create: bool,
        edits: &[StreamEdit],
    ) -> Result<Option<Vec<bool>>> {
        self.coll_write(key, Kind::Stream, create, |tx, root| {
            let mut was = Vec::with_capacity(edits.len());
            for e in edits {
                was.push(match e {
                    StreamEdit::Put(t, k, v) => put(tx, &mut root.tops[*t as usize], k, v)?,
                    StreamEdit::Delete(t, k) => delete(tx, &mut root.tops[*t as usize], k)?,
                });
            }
            // Creating an empty stream (XGROUP CREATE MKSTREAM) must still write its root.
            tx.changed |= !edits.is_empty();
            Ok(was)
        })
    }

    /// Remove the entries of `tree` whose keys start with `prefix`, at most `limit`; how many
    /// went. Each goes by one walk to the first key at or above `prefix`.
    pub fn stream_delete_prefix(
        &mut self,
        key: &[u8],
        tree: StreamTree,
        prefix: &[u8],
        limit: u64,
    ) -> Result<u64> {
        Ok(self
            .coll_write(key, Kind::Stream, false, |tx, root| {
                let top = &mut root.tops[tree as usize];
                let mut n = 0;
                while n < limit {
                    let at = tx.count_below(top, prefix, false)?;
                    if at >= top.count() {
                        break;
                    }
                    let gone = tx.modify(top, Seek::At(at), &mut |e, pos, ch| {
                        let p = pos.ok().filter(|&p| e[p].0.starts_with(prefix));
                        ch.changed = p.is_some();
                        let (k, v) = e.remove(p?)?;
                        ch.grew = Some(-entry_bytes(&k, &v));
                        Some(())
                    })?;
                    if gone.is_none() {
                        break;
                    }
                    n += 1;
                }
                Ok(n)
            })?
            .unwrap_or(0))
    }

    /// Remove the first `n` entries of `tree` (a trim); how many went.
    pub fn stream_trim_front(&mut self, key: &[u8], tree: StreamTree, n: u64) -> Result<u64> {
        if n == 0 {
            return Ok(0);
        }
        Ok(self
            .coll_write(key, Kind::Stream, false, |tx, root| {
                let top = &mut root.tops[tree as usize];
                let mut gone = 0;
                while gone < n && top.count() > 0 {
                    tx.modify(top, Seek::At(0), &mut |e, pos, ch| {
                        if let Some((k, v)) = pos.ok().and_then(|p| e.remove(p)) {
                            ch.grew = Some(-entry_bytes(&k, &v));
                        }
                    })?;
                    gone += 1;
                }
                Ok(gone)
            })?
            .unwrap_or(0))
    }
}
