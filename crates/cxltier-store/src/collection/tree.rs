//! Counted B+trees whose nodes below the top are chunk objects of the store, changed copy-on-write.
//!
//! A change walks from the top (kept in the root) to one leaf, changes it, and writes every node
//! on the way back up under a fresh chunk id: children before their parent, the root last (by
//! the caller), so a crash leaves either the old tree, untouched, or the new one whole. The
//! chunks replaced go on the transaction's `freed` list, deleted once the root is written.

use super::node::{
    inner_entry_size, leaf_entry_size, Child, ChildRef, Entry, Leaf, Node, NodeRef, Reader, Root,
};
use crate::arena::SLOT_HEADER;
use crate::{Kind, Result, Store, StoreError};
use hashbrown::HashMap;

/// Where in a tree an operation goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seek<'a> {
    /// The entry with this key, or where it would go (ordered trees).
    Key(&'a [u8]),
    /// The entry at this position.
    At(u64),
    /// The gap before position `n` (`n` up to the count: an insert).
    Before(u64),
}

/// What a change does to the leaf it reaches: given its entries, the position found there
/// (`Ok`: an entry; `Err`: where one would go) and a [`LeafEdit`] to fill in.
pub(crate) type LeafFn<'f, R> =
    dyn FnMut(&mut Leaf, std::result::Result<usize, usize>, &mut LeafEdit) -> R + 'f;

/// What a [`LeafFn`] tells of its change.
pub(crate) struct LeafEdit {
    /// Cleared when it changed nothing (then nothing is written).
    pub changed: bool,
    /// By how many encoded bytes the leaf grew (negative: shrank), when the change knows: the
    /// leaf is then not measured again (a walk over all its entries, per command).
    pub grew: Option<isize>,
    /// Where the leaf is cut when it outgrows its chunk, instead of in two halves, when both
    /// sides then fit: a push at a list's end cuts off what it pushed, so the full leaf stays
    /// full and the end leaf starts small (fewer splits, fewer entries moved per push at the
    /// front; Redis's quicklist likewise starts a new node at a full end).
    pub split_at: Option<usize>,
}

/// How far a leaf may change in place ([`Tx::modify_in_place`]): the bytes it may grow before
/// it would split, and shrink before it would merge with a neighbour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    pub grow: usize,
    pub shrink: usize,
}

/// The encoded bytes an entry of `key` and `value` adds to a leaf.
pub(crate) fn entry_bytes(key: &[u8], value: &[u8]) -> isize {
    (super::node::LEAF_ENTRY + key.len() + value.len()) as isize
}

/// What became of a node a change went through.
enum Outcome {
    /// Nothing changed below it: it stays, unwritten.
    Same(Node),
    /// Its replacements (none when it emptied), each with its encoded size.
    New(Vec<(Node, usize)>),
}

/// One change to a collection: the chunks it reads and writes, and the ones it replaces.
pub(crate) struct Tx<'s> {
    pub store: &'s mut Store,
    pub key: Vec<u8>,
    pub generation: u64,
    pub next_id: u64,
    pub freed: Vec<u64>,
    pub chunk_bytes: usize,
    /// The first id this change hands out (the root's next id when it began).
    pub first_new_id: u64,
    /// Nodes this change made, not yet written: a change of many members rewrites a node it
    /// touches many times, and only its last version is written (by [`Tx::flush`]). Kept
    /// across the commands of a server batch when the store writes collections back
    /// (`OpenCollection`): ids from `first_new_id` on are only ever here until the flush.
    pub pending: HashMap<u64, (Node, usize)>,
    /// The encoded bytes of the nodes in `pending` (the write-back's memory bound).
    pub pending_bytes: usize,
    /// Whether a [`Tx::modify`] changed a leaf (a change that changed nothing writes nothing).
    pub changed: bool,
}

impl<'s> Tx<'s> {
    /// A change to the collection at `key` whose root is `root`, handing out ids from the
    /// root's next one.
    pub(crate) fn begin(store: &'s mut Store, key: &[u8], root: &Root) -> Tx<'s> {
        let chunk_bytes = store.chunk_bytes();
        Tx {
            store,
            key: key.to_vec(),
            generation: root.generation,
            next_id: root.next_id,
            freed: Vec::new(),
            chunk_bytes,
            first_new_id: root.next_id,
            pending: Default::default(),
            pending_bytes: 0,
            changed: false,
        }
    }
}

/// What a walk calls with each entry (key, value) in turn; false stops it.
pub(crate) type WalkFn<'f> = dyn FnMut(&[u8], &[u8]) -> bool + 'f;

/// A walk over the entries of one leaf from `from`; false when `f` said stop.
fn walk_leaf<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    e: &[(K, V)],
    from: u64,
    rev: bool,
    f: &mut WalkFn<'_>,
) -> bool {
    if e.is_empty() {
        return true;
    }
    let from = from as usize;
    if rev {
        e[..=from.min(e.len() - 1)]
            .iter()
            .rev()
            .all(|x| f(x.0.as_ref(), x.1.as_ref()))
    } else {
        e.iter().skip(from).all(|x| f(x.0.as_ref(), x.1.as_ref()))
    }
}

/// [`walk_leaf`] of a node's own (double-ended) leaf.
fn walk_leaf_entries(e: &Leaf, from: u64, rev: bool, f: &mut WalkFn<'_>) -> bool {
    if e.is_empty() {
        return true;
    }
    let from = from as usize;
    if rev {
        e.range(..=from.min(e.len() - 1))
            .rev()
            .all(|x| f(&x.0, &x.1))
    } else {
        e.range(from.min(e.len())..).all(|x| f(&x.0, &x.1))
    }
}

fn missing_chunk(key: &[u8], id: u64) -> StoreError {
    StoreError::Corrupt(format!(
        "collection {:?} refers to its chunk {id}, which is missing (lost in a crash under --durability none, or in a damaged range): delete the key",
        String::from_utf8_lossy(key)
    ))
}

/// What the descent needs of a leaf entry and of an inner node's child, owned or borrowed.
pub(crate) trait Keyed {
    fn key(&self) -> &[u8];
}

pub(crate) trait Counted: Keyed {
    fn count(&self) -> u64;
}

impl Keyed for Entry {
    fn key(&self) -> &[u8] {
        &self.0
    }
}

impl Keyed for (&[u8], &[u8]) {
    fn key(&self) -> &[u8] {
        self.0
    }
}

impl Keyed for Child {
    fn key(&self) -> &[u8] {
        &self.first
    }
}

impl Counted for Child {
    fn count(&self) -> u64 {
        self.count
    }
}

impl Keyed for ChildRef<'_> {
    fn key(&self) -> &[u8] {
        self.first
    }
}

impl Counted for ChildRef<'_> {
    fn count(&self) -> u64 {
        self.count
    }
}

/// A leaf's position for `seek` (for a key: found or where it goes).
pub(crate) fn leaf_pos<E: Keyed>(
    entries: &[E],
    seek: Seek<'_>,
) -> std::result::Result<usize, usize> {
    match seek {
        Seek::Key(k) => entries.binary_search_by(|e| e.key().cmp(k)),
        Seek::At(i) if (i as usize) < entries.len() => Ok(i as usize),
        Seek::At(_) => Err(entries.len()),
        Seek::Before(i) => Err((i as usize).min(entries.len())),
    }
}

/// [`leaf_pos`] in a node's own (double-ended) leaf.
pub(crate) fn leaf_pos_in(entries: &Leaf, seek: Seek<'_>) -> std::result::Result<usize, usize> {
    match seek {
        Seek::Key(k) => entries.binary_search_by(|e| e.0.as_slice().cmp(k)),
        Seek::At(i) if (i as usize) < entries.len() => Ok(i as usize),
        Seek::At(_) => Err(entries.len()),
        Seek::Before(i) => Err((i as usize).min(entries.len())),
    }
}

/// The child of an inner node that `seek` goes to, and `seek` made relative to that child.
pub(crate) fn child_for<'a, C: Counted>(children: &[C], seek: Seek<'a>) -> (usize, Seek<'a>) {
    match seek {
        Seek::Key(k) => {
            let j = children.partition_point(|c| c.key() <= k).saturating_sub(1);
            (j, seek)
        }
        Seek::At(mut i) => {
            for (j, c) in children.iter().enumerate() {
                if i < c.count() {
                    return (j, Seek::At(i));
                }
                i -= c.count();
            }
            // Past the end: the last child reports it absent.
            let last = children.len() - 1;
            (last, Seek::At(children[last].count() + i))
        }
        Seek::Before(mut i) => {
            for (j, c) in children.iter().enumerate() {
                if i <= c.count() {
                    return (j, Seek::Before(i));
                }
                i -= c.count();
            }
            let last = children.len() - 1;
            (last, Seek::Before(children[last].count()))
        }
    }
}

/// [`child_for`] of an inner node holding `total` entries: a position in its second half is
/// found counting from the end (a push or pop at a list's tail walks no counts but the last).
fn child_for_counted<'a>(children: &[Child], seek: Seek<'a>, total: u64) -> (usize, Seek<'a>) {
    let last = children.len() - 1;
    match seek {
        Seek::At(i) if i < total && i > total / 2 => {
            // `rest` entries from `i` to the end; `after` of them lie after child `j`.
            let rest = total - i;
            let (mut j, mut after) = (last, 0);
            while j > 0 && after + children[j].count < rest {
                after += children[j].count;
                j -= 1;
            }
            (j, Seek::At(children[j].count - (rest - after)))
        }
        Seek::Before(i) if i <= total && i > total / 2 => {
            // The first child whose end is at or past the gap: `after` entries follow it.
            let rest = total - i;
            let (mut j, mut after) = (last, 0);
            while j > 0 && after + children[j].count <= rest {
                after += children[j].count;
                j -= 1;
            }
            (j, Seek::Before(children[j].count - (rest - after)))
        }
        _ => child_for(children, seek),
    }
}

/// Cut `items` into pieces of at most about `target` bytes each (at least `min` items a piece),
/// balanced: a node split in two halves, not a full one and a sliver. Each piece comes with the
/// bytes of its items.
fn split_by_size<T>(
    items: Vec<T>,
    size: impl Fn(&T) -> usize,
    target: usize,
    min: usize,
) -> Vec<(Vec<T>, usize)> {
    // What a node's entries may take: the target less the node's own header.
    let target = target.saturating_sub(super::node::NODE_HEADER);
    let total: usize = items.iter().map(&size).sum();
    let pieces = total.div_ceil(target.max(1)).max(1);
    let each = total.div_ceil(pieces);
    let mut out = Vec::with_capacity(pieces);
    let mut cur = Vec::new();
    let mut cur_size = 0;
    let mut left = items.len();
    for it in items {
        let s = size(&it);
        if cur.len() >= min && left >= min && cur_size + s > each {
            out.push((std::mem::take(&mut cur), cur_size));
            cur_size = 0;
        }
        cur_size += s;
        cur.push(it);
        left -= 1;
    }
    if !cur.is_empty() || out.is_empty() {
        out.push((cur, cur_size));
    }
    out
}

/// Whether a node over the chunk size is cut: a leaf of two entries or more, an inner node of
/// four children or more (so that its pieces have two each: with long keys and small chunks,
/// inner nodes of one child each would make a tree of unbounded height).
pub(crate) fn may_split(node: &Node) -> bool {
    match node {
        Node::Leaf(e) => e.len() >= 2,
        Node::Inner(c) => c.len() >= 2 * INNER_MIN,
    }
}

/// Fewest children of an inner node below the top.
const INNER_MIN: usize = 2;

/// A node cut into pieces that fit a chunk (itself alone when it fits or cannot be cut), each
/// with its encoded size (measured here once: a node's size is a walk over its entries).
fn split_node(node: Node, target: usize) -> Vec<(Node, usize)> {
    let size = node.size();
    split_sized(node, size, target)
}

/// [`split_node`] of a node whose encoded size is known.
fn split_sized(node: Node, size: usize, target: usize) -> Vec<(Node, usize)> {
    debug_assert_eq!(size, node.size(), "a node's tracked size");
    if size <= target || !may_split(&node) {
        return vec![(node, size)];
    }
    let header = super::node::NODE_HEADER;
    match node {
        Node::Leaf(e) => split_by_size(Vec::from(e), leaf_entry_size, target, 1)
            .into_iter()
            .map(|(p, s)| (Node::Leaf(Leaf::from(p)), header + s))
            .collect(),
        Node::Inner(c) => split_by_size(c, inner_entry_size, target, INNER_MIN)
            .into_iter()
            .map(|(p, s)| (Node::Inner(p), header + s))
            .collect(),
    }
}

/// A leaf of `total` encoded bytes cut before entry `k` into two leaves, each with its size,
/// when both fit `target`; else the leaf back. Only the shorter side is measured.
fn cut_leaf_at(
    mut e: Leaf,
    total: usize,
    k: usize,
    target: usize,
) -> std::result::Result<Vec<(Node, usize)>, Leaf> {
    if k == 0 || k >= e.len() {
        return Err(e);
    }
    let header = super::node::NODE_HEADER;
    let measure = |x: std::collections::vec_deque::Iter<'_, Entry>| {
        header + x.map(leaf_entry_size).sum::<usize>()
    };
    let (left, right) = if k <= e.len() - k {
        let left = measure(e.range(..k));
        (left, total + header - left)
    } else {
        let right = measure(e.range(k..));
        (total + header - right, right)
    };
    if left > target || right > target {
        return Err(e);
    }
    let back = e.split_off(k);
    Ok(vec![(Node::Leaf(e), left), (Node::Leaf(back), right)])
}

/// Two neighbouring nodes of one level as one.
fn concat(a: Node, b: Node) -> Node {
    match (a, b) {
        (Node::Leaf(mut a), Node::Leaf(b)) => {
            a.extend(b);
            Node::Leaf(a)
        }
        (Node::Inner(mut a), Node::Inner(b)) => {
            a.extend(b);
            Node::Inner(a)
        }
        // Levels are uniform; a mix means a damaged chunk, which decode could not see.
        (a, _) => a,
    }
}

impl Tx<'_> {
    fn chunk_key(&self, id: u64) -> Vec<u8> {
        crate::keys::chunk_key(&self.key, self.generation, id)
    }

    pub(crate) fn load(&mut self, id: u64) -> Result<Node> {
        if let Some((n, _)) = self.pending.get(&id) {
            return Ok(n.clone());
        }
        self.decode_chunk(id).map(|(n, _)| n)
    }

    /// The stored chunk `id` read in place, and the collection's key its checks name.
    fn stored_chunk(&mut self, id: u64) -> Result<(&[u8], &[u8])> {
        let ck = self.chunk_key(id);
        let bytes = self
            .store
            .chunk_ref(&ck)?
            .ok_or_else(|| missing_chunk(&self.key, id))?;
        Ok((bytes, &self.key))
    }

    /// The stored node of chunk `id`, parsed in place.
    fn stored_node(&mut self, id: u64) -> Result<NodeRef<'_>> {
        let (bytes, key) = self.stored_chunk(id)?;
        NodeRef::parse(bytes, key)
    }

    /// The stored chunk `id` decoded, and its size.
    fn decode_chunk(&mut self, id: u64) -> Result<(Node, usize)> {
        let (bytes, key) = self.stored_chunk(id)?;
        let size = bytes.len();
        let mut r = Reader::new(bytes, key);
        let node = Node::decode(&mut r)?;
        if !r.done() {
            return Err(r.corrupt("bytes after the node"));
        }
        Ok((node, size))
    }

    /// A node to change: taken out of `pending` (no copy) when this change made it, else
    /// decoded from its chunk. The flag says it was pending: a caller that changes nothing
    /// puts it back ([`Tx::put_back`]).
    fn take(&mut self, id: u64) -> Result<(Node, usize, bool)> {
        if let Some((n, size)) = self.pending.remove(&id) {
            self.pending_bytes -= size;
            return Ok((n, size, true));
        }
        // The last write-back's node of this chunk, kept decoded (`WrittenNodes`).
        if let Some((n, size)) = self
            .store
            .written_nodes
            .take(&self.key, self.generation, id)
        {
            return Ok((n, size, false));
        }
        let (n, size) = self.decode_chunk(id)?;
        Ok((n, size, false))
    }

    fn put_back(&mut self, id: u64, node: Node, size: usize) {
        self.pending_bytes += size;
        self.pending.insert(id, (node, size));
    }

    /// A chunk this change replaced. One the change itself made is no root's and was never
    /// written (ids from `first_new_id` on stay in `pending` until the flush that ends the
    /// change): it just goes. One of the tree before the change is still the current root's,
    /// and goes after the new root is written.
    fn free(&mut self, id: u64) -> Result<()> {
        if id >= self.first_new_id {
            if let Some((_, size)) = self.pending.remove(&id) {
                self.pending_bytes -= size;
            }
        } else {
            self.freed.push(id);
        }
        Ok(())
    }

    /// A new node (of `size` encoded bytes) under a fresh id, kept until the flush.
    fn write(&mut self, node: Node, size: usize) -> Result<Child> {
        let id = self.next_id;
        self.next_id += 1;
        let child = Child {
            first: node.first_key().to_vec(),
            id,
            count: node.count(),
        };
        self.pending_bytes += size;
        self.pending.insert(id, (node, size));
        Ok(child)
    }

    /// Write the nodes this change made (before its root: the caller writes that next).
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.flush_keeping(false).map(drop)
    }

    /// [`Tx::flush`], returning the nodes written when `keep` (else none).
    pub(crate) fn flush_keeping(&mut self, keep: bool) -> Result<HashMap<u64, (Node, usize)>> {
        let mut ids: Vec<u64> = self.pending.keys().copied().collect();
        ids.sort_unstable();
        let mut b = Vec::new();
        let mut written = HashMap::new();
        for id in ids {
            let (node, size) = self.pending.remove(&id).expect("listed above");
            b.clear();
            node.encode(&mut b);
            let ck = self.chunk_key(id);
            let room =
                coarse_slot(SLOT_HEADER + ck.len() + b.len()) - (SLOT_HEADER + ck.len() + b.len());
            self.store.chunk_write_with_room(&ck, &b, room)?;
            if keep {
                written.insert(id, (node, size));
            }
        }
        self.pending_bytes = 0;
        Ok(written)
    }

    /// Read the entry `seek` finds, without changing anything. Chunks below the top are read in
    /// place, not decoded into owned entries: a point read allocates per node, not per member.
    pub(crate) fn find(&mut self, top: &Node, seek: Seek<'_>) -> Result<Option<Entry>> {
        let (mut id, mut seek) = match top {
            Node::Leaf(e) => return Ok(leaf_pos_in(e, seek).ok().map(|i| e[i].clone())),
            Node::Inner(c) => {
                let (j, s) = child_for(c, seek);
                (c[j].id, s)
            }
        };
        loop {
            // A node this change made is looked at where it is; a stored one in place.
            if let Some((n, _)) = self.pending.get(&id) {
                match n {
                    Node::Leaf(e) => return Ok(leaf_pos_in(e, seek).ok().map(|i| e[i].clone())),
                    Node::Inner(c) => {
                        let (j, s) = child_for(c, seek);
                        (id, seek) = (c[j].id, s);
                        continue;
                    }
                }
            }
            match self.stored_node(id)? {
                NodeRef::Leaf(e) => {
                    return Ok(leaf_pos(&e, seek)
                        .ok()
                        .map(|i| (e[i].0.to_vec(), e[i].1.to_vec())));
                }
                NodeRef::Inner(c) => {
                    let (j, s) = child_for(&c, seek);
                    (id, seek) = (c[j].id, s);
                }
            }
        }
    }

    /// Entries whose key is below `key` (with `inclusive`, at or below).
    pub(crate) fn count_below(&mut self, top: &Node, key: &[u8], inclusive: bool) -> Result<u64> {
        let below = |k: &[u8]| if inclusive { k <= key } else { k < key };
        let (mut id, mut n) = match top {
            Node::Leaf(e) => return Ok(e.partition_point(|e| below(&e.0)) as u64),
            Node::Inner(c) => {
                let j = c.partition_point(|c| below(&c.first)).saturating_sub(1);
                (c[j].id, c[..j].iter().map(|c| c.count).sum::<u64>())
            }
        };
        loop {
            if let Some((node, _)) = self.pending.get(&id) {
                match node {
                    Node::Leaf(e) => return Ok(n + e.partition_point(|e| below(&e.0)) as u64),
                    Node::Inner(c) => {
                        let j = c.partition_point(|c| below(&c.first)).saturating_sub(1);
                        n += c[..j].iter().map(|c| c.count).sum::<u64>();
                        id = c[j].id;
                        continue;
                    }
                }
            }
            match self.stored_node(id)? {
                NodeRef::Leaf(e) => return Ok(n + e.partition_point(|e| below(e.0)) as u64),
                NodeRef::Inner(c) => {
                    let j = c.partition_point(|c| below(c.first)).saturating_sub(1);
                    n += c[..j].iter().map(|c| c.count).sum::<u64>();
                    id = c[j].id;
                }
            }
        }
    }

    /// Visit entries in order from position `from` (forward) or down from position `from`
    /// (backward) while `f` says go on. Chunks are read in place ([`NodeRef`]): a walk
    /// allocates per node, not per member.
    pub(crate) fn walk(
        &mut self,
        top: &Node,
        from: u64,
        rev: bool,
        f: &mut WalkFn<'_>,
    ) -> Result<()> {
        if from >= top.count() && !rev {
            return Ok(());
        }
        let from = from.min(top.count().saturating_sub(1));
        if top.count() == 0 {
            return Ok(());
        }
        self.walk_node(top, from, rev, f).map(|_| ())
    }

    /// Walk `node` (a top, or a node this change made); false when `f` said stop.
    fn walk_node(&mut self, node: &Node, from: u64, rev: bool, f: &mut WalkFn<'_>) -> Result<bool> {
        match node {
            Node::Leaf(e) => Ok(walk_leaf_entries(e, from, rev, f)),
            Node::Inner(c) => {
                let kids: Vec<(u64, u64)> = c.iter().map(|c| (c.id, c.count)).collect();
                self.walk_children(&kids, from, rev, f)
            }
        }
    }

    /// Walk the children `kids` ((id, count) each) of an inner node from `from`.
    fn walk_children(
        &mut self,
        kids: &[(u64, u64)],
        from: u64,
        rev: bool,
        f: &mut WalkFn<'_>,
    ) -> Result<bool> {
        let mut start = 0u64;
        let starts: Vec<u64> = kids
            .iter()
            .map(|&(_, n)| {
                let s = start;
                start += n;
                s
            })
            .collect();
        for step in 0..kids.len() {
            let j = if rev { kids.len() - 1 - step } else { step };
            let ((id, n), s) = (kids[j], starts[j]);
            if n == 0 {
                continue;
            }
            let local = if rev {
                if s > from {
                    continue;
                }
                (from - s).min(n - 1)
            } else {
                if s + n <= from {
                    continue;
                }
                from.saturating_sub(s)
            };
            if !self.walk_chunk(id, local, rev, f)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Walk the node of chunk `id`: one this change made, lent out of `pending` meanwhile, or
    /// the stored chunk read in place.
    fn walk_chunk(&mut self, id: u64, from: u64, rev: bool, f: &mut WalkFn<'_>) -> Result<bool> {
        if let Some((node, size)) = self.pending.remove(&id) {
            let r = self.walk_node(&node, from, rev, f);
            self.pending.insert(id, (node, size));
            return r;
        }
        let kids: Vec<(u64, u64)> = {
            let (bytes, key) = self.stored_chunk(id)?;
            if !rev && bytes.first() == Some(&super::node::LEAF) {
                // A forward walk reads the leaf's entries as it goes (no slot list for a
                // range that takes a few of them).
                return super::node::walk_leaf_bytes(bytes, key, from, f);
            }
            match NodeRef::parse(bytes, key)? {
                NodeRef::Leaf(e) => return Ok(walk_leaf(&e, from, rev, f)),
                NodeRef::Inner(c) => c.iter().map(|c| (c.id, c.count)).collect(),
            }
        };
        self.walk_children(&kids, from, rev, f)
    }

    /// Change a list's leaf where it lies, without rewriting its path: for a push or pop at a
    /// list's end, the common command of a batch. Only when every node from below the top to
    /// the leaf is one this change made (in `pending`, never written: it keeps its id, and no
    /// other root refers to it) and the change keeps the leaf within a chunk's bounds, so that
    /// nothing splits or merges: then the leaf changes in place, its size is adjusted by what
    /// `f` says it grew, and the counts on its path by the entries it gained or lost.
    ///
    /// `f` gets the leaf's entries, the position found and the [`Room`] the leaf has; it
    /// returns `None` having changed nothing when its change does not fit (the caller then
    /// goes the way of [`Tx::modify`]), else its result and by how many encoded bytes the leaf
    /// grew. Returns `None` too when the path is not all this change's. For trees whose keys
    /// are all empty (lists): a leaf's first key, which its parent keeps, never changes.
    pub(crate) fn modify_in_place<R>(
        &mut self,
        top: &mut Node,
        seek: Seek<'_>,
        f: impl FnOnce(&mut Leaf, std::result::Result<usize, usize>, Room) -> Option<(R, isize)>,
    ) -> Option<R> {
        // Deeper than any tree of a store's chunks (each inner chunk has two children or more).
        const DEPTH_MAX: usize = 64;
        let Node::Inner(top_children) = top else {
            return None;
        };
        let total: u64 = top_children.iter().map(|c| c.count).sum();
        let (top_j, mut seek) = child_for_counted(top_children, seek, total);
        let (mut id, mut count) = (top_children[top_j].id, top_children[top_j].count);
        // The inner nodes passed (id, which child), whose counts change with the leaf's. On
        // the stack for the depths a store's trees have; not a zeroed array of DEPTH_MAX, whose
        // 1 KiB of stores per call were a third of this function's time under RPOP.
        let mut path: smallvec::SmallVec<[(u64, usize); 8]> = smallvec::SmallVec::new();
        loop {
            match &self.pending.get(&id)?.0 {
                Node::Leaf(_) => break,
                Node::Inner(c) => {
                    if path.len() == DEPTH_MAX {
                        return None;
                    }
                    let (k, s) = child_for_counted(c, seek, count);
                    path.push((id, k));
                    (id, count, seek) = (c[k].id, c[k].count, s);
                }
            }
        }
        let (node, size) = self.pending.get_mut(&id).expect("found above");
        let Node::Leaf(e) = node else {
            unreachable!("found a leaf above")
        };
        let pos = leaf_pos_in(e, seek);
        let room = Room {
            grow: self.chunk_bytes.saturating_sub(*size),
            shrink: size.saturating_sub(self.chunk_bytes / 4),
        };
        let before = e.len() as i64;
        let (r, grew) = f(e, pos, room)?;
        debug_assert!(!e.is_empty(), "an in-place change emptied a leaf");
        debug_assert!(
            e.front().is_none_or(|x| x.0.is_empty()),
            "a list's keys are empty"
        );
        let added = e.len() as i64 - before;
        *size = size.saturating_add_signed(grew);
        self.pending_bytes = self.pending_bytes.saturating_add_signed(grew);
        debug_assert_eq!(*size, node.size(), "a leaf's tracked size");
        for &(pid, k) in &path {
            if let Some((Node::Inner(c), _)) = self.pending.get_mut(&pid) {
                c[k].count = c[k].count.saturating_add_signed(added);
            }
        }
        top_children[top_j].count = top_children[top_j].count.saturating_add_signed(added);
        self.changed = true;
        Some(r)
    }

    /// Change the leaf `seek` reaches with `f` (given the leaf's entries and the position
    /// within it) and write the path back; the top is replaced in place. Returns what `f` did.
    pub(crate) fn modify<R>(
        &mut self,
        top: &mut Node,
        seek: Seek<'_>,
        f: &mut LeafFn<'_, R>,
    ) -> Result<R> {
        let old = std::mem::replace(top, Node::empty_leaf());
        let count = old.count();
        let (mut nodes, r) = match self.modify_node(old, None, count, seek, f)? {
            (Outcome::Same(n), r) => {
                *top = n;
                return Ok(r);
            }
            (Outcome::New(nodes), r) => (nodes, r),
        };
        self.changed = true;
        *top = match nodes.len() {
            0 => Node::empty_leaf(),
            1 => nodes.pop().expect("one").0,
            _ => {
                let mut children = Vec::with_capacity(nodes.len());
                for (n, size) in nodes {
                    children.push(self.write(n, size)?);
                }
                Node::Inner(children)
            }
        };
        // A top with one child gives way to it: the tree shrinks a level.
        while let Node::Inner(c) = &*top {
            if c.len() != 1 {
                break;
            }
            let id = c[0].id;
            let (child, _, _) = self.take(id)?;
            self.free(id)?;
            *top = child;
        }
        // A top that grew past a chunk splits (its halves become chunks under a new top).
        if top.size() > self.chunk_bytes && top.slots() > 1 {
            let pieces = split_node(std::mem::replace(top, Node::empty_leaf()), self.chunk_bytes);
            let mut children = Vec::with_capacity(pieces.len());
            for (n, size) in pieces {
                children.push(self.write(n, size)?);
            }
            *top = Node::Inner(children);
        }
        Ok(r)
    }

    /// Returns the node's replacements: none (it emptied), itself changed, or the pieces it
    /// split into; or the node as it was when `f` changed nothing.
    /// `size`: the node's encoded size when known (a chunk's), so that a change that knows
    /// what it added or removed need not measure the node again.
    fn modify_node<R>(
        &mut self,
        node: Node,
        size: Option<usize>,
        count: u64,
        seek: Seek<'_>,
        f: &mut LeafFn<'_, R>,
    ) -> Result<(Outcome, R)> {
        match node {
            Node::Leaf(mut e) => {
                let pos = leaf_pos_in(&e, seek);
                let mut edit = LeafEdit {
                    changed: true,
                    grew: None,
                    split_at: None,
                };
                let r = f(&mut e, pos, &mut edit);
                if !edit.changed {
                    return Ok((Outcome::Same(Node::Leaf(e)), r));
                }
                if e.is_empty() {
                    return Ok((Outcome::New(Vec::new()), r));
                }
                let new_size = match (size, edit.grew) {
                    (Some(s), Some(g)) => Some(s.saturating_add_signed(g)),
                    _ => None,
                };
                if let (Some(total), Some(k)) = (new_size, edit.split_at) {
                    if total > self.chunk_bytes {
                        match cut_leaf_at(e, total, k, self.chunk_bytes) {
                            Ok(pieces) => return Ok((Outcome::New(pieces), r)),
                            // Not there (a side would not fit): in balanced pieces below.
                            Err(back) => e = back,
                        }
                    }
                }
                let node = Node::Leaf(e);
                let pieces = match (size, edit.grew) {
                    (Some(s), Some(g)) => {
                        split_sized(node, s.saturating_add_signed(g), self.chunk_bytes)
                    }
                    _ => split_node(node, self.chunk_bytes),
                };
                Ok((Outcome::New(pieces), r))
            }
            Node::Inner(mut c) => {
                let (j, s) = child_for_counted(&c, seek, count);
                debug_assert_eq!(
                    (j, format!("{s:?}")),
                    {
                        let (j, s) = child_for(&c, seek);
                        (j, format!("{s:?}"))
                    },
                    "counting from the end finds the child counting from the start does"
                );
                let (child, child_size, was_pending) = self.take(c[j].id)?;
                let (mut pieces, r) =
                    match self.modify_node(child, Some(child_size), c[j].count, s, f)? {
                        (Outcome::Same(child), r) => {
                            if was_pending {
                                self.put_back(c[j].id, child, child_size);
                            }
                            return Ok((Outcome::Same(Node::Inner(c)), r));
                        }
                        (Outcome::New(p), r) => (p, r),
                    };
                let mut lo = j;
                let mut hi = j + 1;
                // A result that shrank small merges with a neighbour (re-split when the two are
                // too big), so chunks stay between a quarter and a whole of the target. One that
                // grew is not merged: a list's new end leaf fills from a few members (the full
                // one it was cut from would be cut in halves again). An inner node of one child
                // always merges. (A child that emptied just goes.)
                let thin = |(p, size): &(Node, usize)| {
                    (*size < self.chunk_bytes / 4 && *size < child_size)
                        || matches!(p, Node::Inner(pc) if pc.len() < INNER_MIN)
                };
                if pieces.len() == 1 && thin(&pieces[0]) && c.len() > 1 {
                    let (nb, right) = if j + 1 < c.len() {
                        (j + 1, true)
                    } else {
                        (j - 1, false)
                    };
                    let (neighbour, _, _) = self.take(c[nb].id)?;
                    let (p, _) = pieces.pop().expect("one piece");
                    let merged = if right {
                        concat(p, neighbour)
                    } else {
                        concat(neighbour, p)
                    };
                    pieces = split_node(merged, self.chunk_bytes);
                    lo = lo.min(nb);
                    hi = hi.max(nb + 1);
                }
                for child in &c[lo..hi] {
                    self.free(child.id)?;
                }
                let out: usize = c[lo..hi].iter().map(inner_entry_size).sum();
                let size = if pieces.len() == 1 && hi == lo + 1 {
                    // The common change: one child for one, in place.
                    let (p, psize) = pieces.pop().expect("one piece");
                    c[lo] = self.write(p, psize)?;
                    // This node's new size from the children it traded, when its old one is
                    // known.
                    size.map(|s| s + inner_entry_size(&c[lo]) - out)
                } else {
                    let mut new = Vec::with_capacity(pieces.len());
                    for (p, size) in pieces {
                        new.push(self.write(p, size)?);
                    }
                    let inn: usize = new.iter().map(inner_entry_size).sum();
                    c.splice(lo..hi, new);
                    size.map(|s| s + inn - out)
                };
                if c.is_empty() {
                    return Ok((Outcome::New(Vec::new()), r));
                }
                let node = Node::Inner(c);
                let pieces = match size {
                    Some(s) => split_sized(node, s, self.chunk_bytes),
                    None => split_node(node, self.chunk_bytes),
                };
                Ok((Outcome::New(pieces), r))
            }
        }
    }
}

/// The kind a root under `key` must have for an operation of kind `want`.
pub(crate) fn check_kind(held: Kind, want: Kind) -> Result<()> {
    if held == want {
        Ok(())
    } else {
        Err(StoreError::WrongType {
            held: held.type_name(),
        })
    }
}

/// The slot size a collection node of `need` bytes (slot header, key and value) is written
/// into: the first of a series 4/3 apart (64, 88, 120, ...) at or above it. A node is written
/// anew under a new chunk key by every batch that changes it, a little larger or smaller each
/// time (a list's end leaf under pushes or pops); in the arena's fine size classes (1/16 apart)
/// nearly every write took a slot of another class than the slot it freed, and a class without
/// a free slot sets up a whole slab page. On this coarser series a node changes class only when
/// it grows or shrinks by a third, and the slot its previous version freed is usually the one
/// it takes. The slot wastes at most about a third of itself (a quarter on average less).
pub(crate) fn coarse_slot(need: usize) -> usize {
    let mut slot = 64;
    while slot < need {
        slot = (slot * 4 / 3).next_multiple_of(8);
    }
    slot
}

#[cfg(test)]
mod tests {
    use super::coarse_slot;

    /// The coarse series: each size at least the need, a third or so above the one before,
    /// and every need up to 64 KiB in a slot that wastes at most about a third of itself.
    #[test]
    fn chunks_take_slots_of_a_coarse_series() {
        assert_eq!(coarse_slot(1), 64);
        assert_eq!(coarse_slot(64), 64);
        assert_eq!(coarse_slot(65), 88);
        assert_eq!(coarse_slot(89), 120);
        let mut sizes = std::collections::BTreeSet::new();
        for need in 1..=64 << 10 {
            let slot = coarse_slot(need);
            assert!(slot >= need && slot % 8 == 0);
            assert!(need <= 64 || slot * 3 <= need * 4 + 24, "{need} in {slot}");
            sizes.insert(slot);
        }
        // About 24 sizes up to 64 KiB, where the arena's fine classes number about 120.
        assert!(sizes.len() < 30, "{}", sizes.len());
    }
}
