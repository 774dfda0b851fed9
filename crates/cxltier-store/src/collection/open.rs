//! Collections kept open across a batch (write-back): a collection a batch changes keeps its
//! changed nodes and root in memory and is written once, children first and root last, when
//! the batch ends, at a commit, or when another path reads or writes its key; the nodes the
//! last write-back wrote stay decoded for the next batch's first change.

use super::node::{Node, Root};
use super::tree::Tx;
use crate::keys::chunk_key;
use crate::{Kind, Result, Store};

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
    pub(super) key: Vec<u8>,
    pub(super) kind: Kind,
    pub(super) root: Root,
    pub(super) exp: Option<u64>,
    pub(super) pending: hashbrown::HashMap<u64, (Node, usize)>,
    pub(super) pending_bytes: usize,
    /// Chunks of the stored tree these changes replaced (deleted once the root is written).
    pub(super) freed: Vec<u64>,
    /// The stored root's next id: ids from it on are this open change's.
    pub(super) first_new_id: u64,
    /// The root as stored, without its freed ids (a batch that changed nothing writes
    /// nothing); `None` for a collection not stored yet.
    pub(super) stored_root: Option<Vec<u8>>,
}

impl OpenCollection {
    // Boxed: an open collection moves out of the open set and back for every command, and the
    // struct is a few hundred bytes (copying it was most of a push's own time).
    pub(super) fn stored(
        key: &[u8],
        kind: Kind,
        root: Root,
        exp: Option<u64>,
    ) -> Box<OpenCollection> {
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

    pub(super) fn created(key: &[u8], kind: Kind, root: Root) -> Box<OpenCollection> {
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
    pub(super) fn tx<'s>(&mut self, store: &'s mut Store, chunk_bytes: usize) -> Tx<'s> {
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
    pub(super) fn untx(&mut self, tx: &mut Tx<'_>) {
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
    pub(super) nodes: hashbrown::HashMap<u64, (Node, usize)>,
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
    pub(super) map: hashbrown::HashMap<Vec<u8>, Box<OpenCollection>>,
    /// The pending bytes of the collections in `map`.
    pub(super) bytes: usize,
}

impl OpenCollections {
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn take(&mut self, key: &[u8]) -> Option<Box<OpenCollection>> {
        let (k, mut oc) = self.map.remove_entry(key)?;
        self.bytes -= oc.pending_bytes;
        oc.key = k;
        Some(oc)
    }

    pub(super) fn put(&mut self, mut oc: Box<OpenCollection>) {
        self.bytes += oc.pending_bytes;
        self.map.insert(std::mem::take(&mut oc.key), oc);
    }

    // Boxes as the map holds them, each handed on to `Store::write_back` as it is.
    #[allow(clippy::vec_box)]
    pub(super) fn take_all(&mut self) -> Vec<Box<OpenCollection>> {
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

    pub(super) fn over_bound(&self) -> bool {
        self.bytes > OPEN_BYTES_MAX || self.map.len() > OPEN_COLLECTIONS_MAX
    }
}

impl Store {
    /// The open collection under `key` if it is one of `kind` and its TTL has not passed,
    /// taken out of the open set (the caller puts it back). Any other open one under `key` is
    /// written back first, so that the stored root answers (a wrong type, an expiry).
    pub(super) fn take_open(
        &mut self,
        key: &[u8],
        kind: Kind,
    ) -> Result<Option<Box<OpenCollection>>> {
        let Some(oc) = self.open.take(key) else {
            return Ok(None);
        };
        if oc.kind == kind && oc.exp.is_none_or(|t| t > self.now_ms()) {
            return Ok(Some(oc));
        }
        self.write_back(key, oc)?;
        Ok(None)
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
        self.put_raw(key, oc.kind, &bytes, oc.exp, 0)?;
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
}
