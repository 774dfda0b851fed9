//! The parts of collections and big values as the store's own objects: their reads, writes and
//! deletes for `collection`, and recovery's clean-up of parts a crash left behind.

use std::ops::Bound;

use super::Store;
use crate::index::{Entry, Place};
use crate::keys::{chunk_prefix, is_internal_key, parse_chunk_key, CHUNK_PREFIX};
use crate::{Kind, Result, StoreError};

/// The store's side of collections: their parts' reads, writes and deletes, and recovery's
/// clean-up of parts a crash left behind.
impl Store {
    /// The kind and value of any key (chunks too) where it is now: in memory or staged.
    pub(crate) fn peek_any(&self, key: &[u8]) -> Option<(Kind, &[u8])> {
        self.peek_raw(key).map(|o| (o.kind, o.value))
    }

    /// The kind of `key`'s entry, without counting an access.
    pub(crate) fn peek_kind(&self, key: &[u8]) -> Option<Kind> {
        self.index.get(key).map(|e| e.kind())
    }

    /// Where the value under `key` lives, from the index alone (nothing is read, no access
    /// counted): the tier holding it ("dram", "cxl" or "nvme"), or "mixed" for a collection
    /// whose root and parts are in more than one (O(parts)). `None` when absent.
    pub fn tier_of(&self, key: &[u8]) -> Option<&'static str> {
        if is_internal_key(key) {
            return None;
        }
        let name = |e: &Entry| match e.place() {
            Place::Nvme => "nvme",
            Place::Mem(t, _) => self.arenas[t as usize].tier,
        };
        let e = self.index.get(key)?;
        let root = name(e);
        if !e.kind().is_collection() {
            return Some(root);
        }
        let prefix = chunk_prefix(key);
        let mixed = self
            .index
            .range_from(Bound::Included(prefix.as_slice()))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .any(|(_, e)| name(e) != root);
        Some(if mixed { "mixed" } else { root })
    }

    /// Every chunk key stored for the collection under `root` (any generation).
    pub(crate) fn chunk_keys_of(&self, root: &[u8]) -> Vec<Vec<u8>> {
        let prefix = chunk_prefix(root);
        self.index
            .range_from(Bound::Included(prefix.as_slice()))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.to_vec())
            .collect()
    }

    /// Count a change made to the store's contents (a collection's, counted when made rather
    /// than when written back).
    pub(crate) fn count_change(&mut self) {
        self.changes += 1;
    }

    /// Put the change count back (a write-back writes changes already counted).
    pub(crate) fn set_changes(&mut self, changes: u64) {
        self.changes = changes;
    }

    /// Write back the collection under `key` if this batch changed it and it waits in memory:
    /// for a caller about to look at the key's stored object with [`Store::peek`] (which cannot
    /// write). The store's own paths do this themselves.
    pub fn settle(&mut self, key: &[u8]) -> Result<()> {
        self.settle_collection(key)
    }

    pub(crate) fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    pub(crate) fn chunk_writes(&self) -> u64 {
        self.chunk_writes
    }

    pub(crate) fn new_generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    /// A chunk's bytes (an access like any read: it counts for admission and may promote).
    pub(crate) fn chunk_read(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get_raw(key)?.map(|o| o.value.to_vec()))
    }

    /// [`Store::chunk_read`] lent in place, for a read that parses it without a copy.
    pub(crate) fn chunk_ref(&mut self, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(self.get_raw(key)?.map(|o| o.value))
    }

    /// Write a chunk (a collection's node), into a slot with `room` bytes to spare where a
    /// tier has one (see [`Store::put_raw`]).
    pub(crate) fn chunk_write_with_room(
        &mut self,
        key: &[u8],
        value: &[u8],
        room: usize,
    ) -> Result<()> {
        Self::injected(&mut self.chunk_faults.0, "chunk write")?;
        self.chunk_writes += 1;
        self.put_raw(key, Kind::Chunk, value, None, room)
    }

    pub(crate) fn chunk_delete(&mut self, key: &[u8]) -> Result<bool> {
        self.delete_raw(key)
    }

    /// Delete a chunk that a change replaced, after its new root was written.
    pub(crate) fn chunk_delete_replaced(&mut self, key: &[u8]) -> Result<bool> {
        Self::injected(&mut self.chunk_faults.1, "chunk delete")?;
        self.delete_raw(key)
    }

    fn injected(left: &mut Option<u64>, what: &str) -> Result<()> {
        match left {
            Some(0) => Err(StoreError::Io {
                context: format!("{what} (a failure injected by a test)"),
                source: std::io::Error::other("injected"),
            }),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Make collection changes fail (tests of what a crash mid-change leaves): after `writes`
    /// more chunk writes, or `deletes` more deletes of replaced chunks; `None`: never.
    #[cfg(feature = "test-util")]
    pub fn fail_chunk_io_after(&mut self, writes: Option<u64>, deletes: Option<u64>) {
        self.chunk_faults = (writes, deletes);
    }

    /// Delete every chunk of the collection under `root` (any generation): its root is gone.
    /// Best effort like expiry: a tombstone the log has no room for leaves the chunk to
    /// recovery, which drops chunks without a root.
    pub(super) fn drop_chunks_of(&mut self, root: &[u8]) {
        for k in self.chunk_keys_of(root) {
            let on_log = self.index.get(&k).is_some_and(|e| e.nv().is_some());
            if let (true, Some(log)) = (on_log, self.log.as_mut()) {
                let _ = log.append_tombstone(&k);
            }
            self.drop_entry(&k);
        }
    }

    /// After replay: delete the chunks no root reaches (see "Collections" in `docs/server.md`):
    /// those whose root is gone or of another generation, ids at or past the root's next id, and
    /// ids its last change freed. Returns how many.
    pub(super) fn drop_orphan_chunks(&mut self) -> Result<u64> {
        let chunks: Vec<Vec<u8>> = self
            .index
            .range_from(Bound::Included(CHUNK_PREFIX))
            .take_while(|(k, _)| k.starts_with(CHUNK_PREFIX))
            .map(|(k, _)| k.to_vec())
            .collect();
        type Header = Option<(u64, u64, Vec<u64>)>;
        let mut orphans = Vec::new();
        // The collection last looked at and its root's header: chunk keys come grouped by root.
        let mut current: Option<(Vec<u8>, Header)> = None;
        for ck in chunks {
            let Some((root, generation, id)) = parse_chunk_key(&ck) else {
                orphans.push(ck);
                continue;
            };
            self.next_generation = self.next_generation.max(generation);
            if current.as_ref().is_none_or(|c| c.0 != root) {
                let header = self.root_header(root)?;
                current = Some((root.to_vec(), header));
            }
            let live = match current.as_ref().map(|c| &c.1) {
                Some(Some((g, next, freed))) => {
                    *g == generation && id < *next && !freed.contains(&id)
                }
                _ => false,
            };
            if !live {
                orphans.push(ck);
            }
        }
        let n = orphans.len() as u64;
        for k in orphans {
            self.delete_raw(&k)?;
        }
        Ok(n)
    }

    /// A collection root's (generation, next id, freed ids), read without admitting it to memory;
    /// `None` when `key` is no live collection root.
    fn root_header(&mut self, key: &[u8]) -> Result<Option<(u64, u64, Vec<u64>)>> {
        let Some(e) = self.index.get(key).copied() else {
            return Ok(None);
        };
        if !e.kind().is_collection() || e.is_expired(self.now_ms()) {
            return Ok(None);
        }
        let value = match e.place() {
            Place::Mem(t, off) => self.arenas[t as usize]
                .value(off, key.len(), e.len() as usize)
                .to_vec(),
            Place::Nvme => {
                let nv = e.nv().expect("an NVMe-only entry has a log copy");
                self.log.as_mut().expect("log").read(nv)?.value
            }
        };
        crate::collection::root_header(&value, key).map(Some)
    }
}
