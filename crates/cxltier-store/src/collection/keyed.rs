//! Sets and chunked hashes: one counted tree of members (with a hash field's value), in member
//! order.

use super::node::Root;
use super::tree::{entry_bytes, Seek, Tx};
use super::ScanPage;
use crate::keys::{chunk_key, CHUNK_KEY_OVERHEAD, MAX_PARTS_KEY};
use crate::{Kind, Result, Store, StoreError};

impl Store {
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
        self.coll_len(key, Kind::Set)
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
        self.coll_len(key, Kind::ChunkedHash)
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
        let mut tx = Tx::begin(self, key, &root);
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
        self.put_raw(key, Kind::ChunkedHash, &bytes, exp, 0)?;
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
}
