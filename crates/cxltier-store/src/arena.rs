//! A memory tier's arena: one anonymous mapping bound (`mbind`, `MPOL_BIND`) to the tier's NUMA node
//! before it is first touched, carved into slab pages of one size class each (memcached-style).
//!
//! A slot holds `[key_len u16][used u8][refs u8][key][value]`, `used` holding bits 16 and up of
//! the key's length above its bit 0 (keys up to 8 MiB): the key is kept with the value so
//! that the CLOCK hand, walking slots, can name its victim, and the CLOCK reference count (0..=3)
//! is in the slot so that the hand never has to look anything up in the index.

use std::collections::BTreeSet;

use cxltier_sys::{Mapping, MbindFlags, Mode, NodeMask, Policy};

use crate::{Result, StoreError};

/// Bytes of a slot before the key.
pub const SLOT_HEADER: usize = 4;
/// Smallest slot.
const MIN_SLOT: usize = 64;

/// The size class after `size`: 1/16 larger (at least 8 bytes), a multiple of 8. A slot wastes
/// at most about 6% of itself, where memcached's default factor of 1.25 wastes up to 20% (a
/// YCSB record of 1171 bytes took a 1368-byte slot: 14% of the DRAM budget held nothing). The
/// cost is more classes (about 160 up to 1 MiB), each in use holding at least one slab page.
fn next_class(size: usize) -> usize {
    (size + (size / 16).max(8)).next_multiple_of(8)
}

/// The slab page size of an arena for slots up to `max_slot` bytes: every class's pages have it,
/// so a tier holds nothing at all unless it has room for one.
pub fn page_size_for(max_slot: usize) -> usize {
    (1usize << 20).max(max_slot.next_power_of_two())
}

/// Whether an object of `need` bytes fills at least three quarters of a slot of `slot` bytes:
/// the most a slot roomier than the object's own class may waste.
fn fills_enough(need: usize, slot: usize) -> bool {
    slot * 3 <= need * 4
}

/// Where a slot is inside its arena.
pub type SlotOffset = u64;

#[derive(Debug)]
struct Class {
    slot_size: usize,
    free: Vec<SlotOffset>,
    /// Slab pages of this class, and the CLOCK hand over their slots (page index in `pages`, slot).
    pages: Vec<usize>,
    /// The page whose slots past its `page_carved` count are handed out next, once `free` is
    /// empty.
    carving: Option<usize>,
    hand: (usize, usize),
    /// Used slots.
    used: u64,
}

/// One tier's memory.
pub struct Arena {
    pub tier: &'static str,
    pub node: u32,
    /// True when this arena stands in for a missing CXL node on the DRAM node.
    pub emulated: bool,
    map: Mapping,
    page_size: usize,
    classes: Vec<Class>,
    /// Size class of each slab page (`u8::MAX`: not assigned).
    page_class: Vec<u8>,
    /// Used slots in each slab page.
    page_used: Vec<u32>,
    /// Slots of each slab page handed out since its class took it (used, freed or retired):
    /// those past it were never set up for this class and hold whatever the page held before,
    /// so nothing reads them. A page is carved one slot at a time as its class needs them: a
    /// class taking a page sets up none of its slots (a list's end chunk, changing size class
    /// every few batches, had a whole page of slots set up each time, most of an LPUSH's
    /// allocation cost).
    page_carved: Vec<u32>,
    /// Pages given back to the kernel by [`Arena::release_page`], reused before `next_page`.
    released: Vec<usize>,
    /// Assigned pages whose slots are all free: resident, and taken by a class that needs a page
    /// before a released or a new one, so a class no longer in use does not keep its pages (a key
    /// rewritten at changing sizes left one page behind in every class it passed through, until
    /// those pages filled the DRAM budget with one object).
    empty: BTreeSet<usize>,
    next_page: usize,
    /// Byte ranges of the mapping retired because they held poison: OS-page aligned, sorted,
    /// disjoint. No slot overlapping them is handed out again, whatever class its page gets.
    retired: Vec<(usize, usize)>,
    /// Bytes of assigned slots in use (slot sizes, not value sizes).
    pub used_bytes: u64,
    pub objects: u64,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Arena({} on node {}, {} bytes)",
            self.tier,
            self.node,
            self.map.len()
        )
    }
}

impl Arena {
    /// Map `bytes` (rounded to whole slab pages) bound to `node`, for objects up to `max_slot`.
    pub fn new(
        tier: &'static str,
        node: u32,
        emulated: bool,
        bytes: u64,
        max_slot: usize,
    ) -> Result<Arena> {
        let page_size = page_size_for(max_slot);
        let pages = (bytes as usize / page_size).max(1);
        let map = Mapping::anonymous(pages * page_size)?;
        let nodes = NodeMask::from_nodes([node])?;
        map.bind(&Policy::new(Mode::Bind, nodes), MbindFlags::default())
            .map_err(|e| {
                StoreError::Config(format!(
                    "cannot bind the {tier} arena to node {node}: {e}; pick a node with memory (see `cxltier topo`)"
                ))
            })?;
        let mut classes = Vec::new();
        let mut size = MIN_SLOT;
        while size < max_slot {
            classes.push(Class {
                slot_size: size,
                free: Vec::new(),
                pages: Vec::new(),
                carving: None,
                hand: (0, 0),
                used: 0,
            });
            size = next_class(size);
        }
        classes.push(Class {
            slot_size: max_slot.next_multiple_of(8),
            free: Vec::new(),
            pages: Vec::new(),
            carving: None,
            hand: (0, 0),
            used: 0,
        });
        // Page classes are kept in a u8, u8::MAX meaning none.
        if classes.len() >= usize::from(u8::MAX) {
            return Err(StoreError::Config(format!(
                "objects of up to {max_slot} bytes need {} size classes, more than the {} an arena has; lower the largest object size",
                classes.len(),
                u8::MAX - 1
            )));
        }
        Ok(Arena {
            tier,
            node,
            emulated,
            map,
            page_size,
            classes,
            page_class: vec![u8::MAX; pages],
            page_used: vec![0; pages],
            page_carved: vec![0; pages],
            released: Vec::new(),
            empty: BTreeSet::new(),
            next_page: 0,
            retired: Vec::new(),
            used_bytes: 0,
            objects: 0,
        })
    }

    pub fn capacity(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn addr(&self) -> usize {
        self.map.addr()
    }

    /// Bytes a slot for this key and value takes, or None when larger than the largest class.
    pub fn slot_size_for(&self, key_len: usize, value_len: usize) -> Option<usize> {
        let need = SLOT_HEADER + key_len + value_len;
        self.classes
            .iter()
            .find(|c| c.slot_size >= need)
            .map(|c| c.slot_size)
    }

    fn class_of(&self, need: usize) -> Option<usize> {
        self.classes.iter().position(|c| c.slot_size >= need)
    }

    /// Used slots of class `c`, and the slots its pages hold.
    pub fn class_usage(&self, c: usize) -> (u64, u64) {
        let class = &self.classes[c];
        let per_page = (self.page_size / class.slot_size) as u64;
        (class.used, per_page * class.pages.len() as u64)
    }

    /// Number of size classes.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// The size class a key and value need.
    pub fn class_for(&self, key_len: usize, value_len: usize) -> Option<usize> {
        self.class_of(SLOT_HEADER + key_len + value_len)
    }

    /// Whether a slot for `key`+`value` can be had without evicting anything.
    pub fn has_room(&self, key_len: usize, value_len: usize) -> bool {
        let Some(c) = self.class_of(SLOT_HEADER + key_len + value_len) else {
            return false;
        };
        let need = SLOT_HEADER + key_len + value_len;
        self.has_slot(c) || self.roomier_free_class(c, need).is_some() || self.can_assign_page()
    }

    fn can_assign_page(&self) -> bool {
        !self.empty.is_empty()
            || !self.released.is_empty()
            || self.next_page < self.page_class.len()
    }

    /// Whether a slot for `key`+`value` would make the arena's resident memory grow by a slab
    /// page: its class has no free slot and no empty page is resident to take.
    pub fn needs_page(&self, key_len: usize, value_len: usize) -> bool {
        let need = SLOT_HEADER + key_len + value_len;
        self.class_of(need).is_some_and(|c| {
            !self.has_slot(c) && self.roomier_free_class(c, need).is_none() && self.empty.is_empty()
        })
    }

    /// Bytes of slab pages assigned to classes: the arena's resident memory (a page once touched
    /// stays resident until it is released).
    pub fn resident_bytes(&self) -> u64 {
        ((self.next_page - self.released.len()) * self.page_size) as u64
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The assigned slab page with the fewest used slots, and the keys in it: the cheapest page to
    /// empty when the arena must shrink.
    pub fn sparsest_page(&self) -> Option<(usize, Vec<Vec<u8>>)> {
        let page = (0..self.next_page)
            .filter(|&p| self.page_class[p] != u8::MAX)
            .min_by_key(|&p| self.page_used[p])?;
        Some((page, self.page_keys(page)))
    }

    /// The keys of the objects in slab page `page` (empty when the page is not assigned).
    pub fn page_keys(&self, page: usize) -> Vec<Vec<u8>> {
        let Some(class) = self.classes.get(self.page_class[page] as usize) else {
            return Vec::new();
        };
        let size = class.slot_size;
        let base = page * self.page_size;
        (0..self.page_carved[page] as usize)
            .filter_map(|i| self.key_at((base + i * size) as u64).map(<[u8]>::to_vec))
            .collect()
    }

    /// Class `c`'s page with the fewest used slots, and how many: the cheapest of its pages to
    /// empty when another class takes a page from it.
    pub fn sparsest_page_of(&self, c: usize) -> Option<(usize, u32)> {
        self.classes[c]
            .pages
            .iter()
            .map(|&p| (p, self.page_used[p]))
            .min_by_key(|&(p, used)| (used, p))
    }

    /// Classes holding at least one object.
    pub fn classes_in_use(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.classes.len()).filter(|&c| self.classes[c].used > 0)
    }

    /// Whether class `c` has a free slot in a page it holds already.
    pub fn class_has_free_slot(&self, c: usize) -> bool {
        self.has_slot(c)
    }

    /// Whether a page could be given to a class without taking one from another class: an
    /// empty page is resident, one was released, or the mapping has pages never used. (The
    /// DRAM budget may still forbid making a new one resident: see the store's `has_room`.)
    pub fn has_page_to_assign(&self) -> bool {
        self.can_assign_page()
    }

    /// Whether a page can be given to a class without making the arena's resident memory grow:
    /// an assigned page has all its slots free.
    pub fn has_empty_page(&self) -> bool {
        !self.empty.is_empty()
    }

    /// The coldest of the next `budget` used slots of class `c` ahead of its CLOCK hand: the one
    /// with the lowest reference count, the first of those on a tie. Unlike [`Arena::sweep`] it
    /// changes nothing: it looks at another class's tail without ageing it.
    pub fn coldest_ahead(&self, c: usize, budget: usize) -> Option<SlotOffset> {
        let class = &self.classes[c];
        if class.pages.is_empty() || class.used == 0 {
            return None;
        }
        let per_page = self.page_size / class.slot_size;
        let mem = self.map.as_slice();
        let (mut p, mut i) = class.hand;
        let mut coldest: Option<(u8, SlotOffset)> = None;
        // Every slot of the class at most once, however large the budget.
        for _ in 0..budget.min(per_page * class.pages.len()) {
            if i >= per_page {
                i = 0;
                p += 1;
            }
            if p >= class.pages.len() {
                p = 0;
            }
            let page = class.pages[p];
            if i >= self.page_carved[page] as usize {
                // Not yet carved: nothing there.
                i = per_page;
                continue;
            }
            let off = page * self.page_size + i * class.slot_size;
            i += 1;
            if mem[off + 2] & 1 != 1 {
                continue;
            }
            let refs = mem[off + 3];
            if coldest.is_none_or(|(r, _)| refs < r) {
                coldest = Some((refs, off as SlotOffset));
                if refs == 0 {
                    break;
                }
            }
        }
        coldest.map(|(_, off)| off)
    }

    /// Give an empty slab page back to the kernel (`MADV_DONTNEED`), so that the arena's resident
    /// memory shrinks; the page can be assigned to any class again later.
    pub fn release_page(&mut self, page: usize) -> Result<()> {
        let c = self.page_class[page];
        if c == u8::MAX || self.page_used[page] != 0 {
            return Err(StoreError::Config(format!(
                "internal: slab page {page} of the {} arena is not an empty assigned page",
                self.tier
            )));
        }
        self.unassign(page);
        self.map.discard(page * self.page_size, self.page_size)?;
        self.released.push(page);
        Ok(())
    }

    /// Take an empty page away from its class (its free slots leave the class's free list).
    fn unassign(&mut self, page: usize) {
        let class = &mut self.classes[self.page_class[page] as usize];
        let (lo, hi) = (
            (page * self.page_size) as u64,
            ((page + 1) * self.page_size) as u64,
        );
        class.free.retain(|&o| o < lo || o >= hi);
        class.pages.retain(|&p| p != page);
        if class.carving == Some(page) {
            class.carving = None;
        }
        class.hand = (0, 0);
        self.page_class[page] = u8::MAX;
        self.empty.remove(&page);
    }

    /// Store `key` and `value` in a free slot; None when the class has no free slot and no page is
    /// left to give it.
    pub fn alloc(&mut self, key: &[u8], value: &[u8]) -> Option<SlotOffset> {
        self.alloc_with_room(key, value, 0)
    }

    /// As [`Arena::alloc`], in a slot with `room` bytes to spare beyond the value when a class
    /// has it (else the value's own class): an object that is growing is rewritten in place
    /// until it outgrows the spare room (see [`Arena::fits_in_place`]).
    pub fn alloc_with_room(&mut self, key: &[u8], value: &[u8], room: usize) -> Option<SlotOffset> {
        // The size asked is the value's and the room's, in every choice below as in
        // `has_room` and `needs_page`, which the store asks with the same size first.
        let value_need = SLOT_HEADER + key.len() + value.len();
        let need = if self.class_of(value_need + room).is_some() {
            value_need + room
        } else {
            value_need
        };
        let mut c = self.class_of(need)?;
        if !self.has_slot(c) {
            c = self.roomier_free_class(c, need).unwrap_or(c);
        }
        let off = self.take_slot(c, true)?;
        self.fill_slot(c, off, key, value);
        Some(off)
    }

    /// A slot of class `c` to hand out: a free one, else the next of the page being carved,
    /// else (when `may_take_page`) the first slot of a page the class takes: an empty one
    /// another class holds, a released one, or one never used. None when there is none.
    fn take_slot(&mut self, c: usize, may_take_page: bool) -> Option<SlotOffset> {
        loop {
            if let Some(off) = self.classes[c].free.pop() {
                return Some(off);
            }
            let size = self.classes[c].slot_size;
            if let Some(page) = self.classes[c].carving {
                let i = self.page_carved[page] as usize;
                if i < self.page_size / size {
                    self.page_carved[page] += 1;
                    let off = (page * self.page_size + i * size) as u64;
                    // Retired memory is never touched (it may hold poison).
                    if !self.is_retired(off, size) {
                        return Some(off);
                    }
                    continue;
                }
                self.classes[c].carving = None;
            }
            if !may_take_page {
                return None;
            }
            // An empty page another class holds first: it is resident already.
            let page = match self.empty.first().copied() {
                Some(p) => {
                    self.unassign(p);
                    p
                }
                None => match self.released.pop() {
                    Some(p) => p,
                    None if self.next_page < self.page_class.len() => {
                        self.next_page += 1;
                        self.next_page - 1
                    }
                    None => return None,
                },
            };
            self.page_class[page] = c as u8;
            self.page_carved[page] = 0;
            self.classes[c].pages.push(page);
            self.classes[c].carving = Some(page);
        }
    }

    /// Write `key` and `value` into the slot at `off` of class `c`, taken by
    /// [`Arena::take_slot`], and count it used.
    fn fill_slot(&mut self, c: usize, off: SlotOffset, key: &[u8], value: &[u8]) {
        let size = self.classes[c].slot_size;
        let slot = &mut self.map.as_mut_slice()[off as usize..off as usize + size];
        slot[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        slot[2] = 1 | (((key.len() >> 16) as u8) << 1);
        // A new slot counts as referenced once, so the hand passes it once before it may go.
        slot[3] = 1;
        slot[SLOT_HEADER..SLOT_HEADER + key.len()].copy_from_slice(key);
        slot[SLOT_HEADER + key.len()..SLOT_HEADER + key.len() + value.len()].copy_from_slice(value);
        self.used_bytes += size as u64;
        self.objects += 1;
        self.classes[c].used += 1;
        let page = off as usize / self.page_size;
        if self.page_used[page] == 0 {
            self.empty.remove(&page);
        }
        self.page_used[page] += 1;
    }

    /// The class of the spare slot [`Arena::alloc_spare`] would give a key and value: the
    /// smallest class above their own that can hand out a slot without taking a page.
    fn spare_class(&self, key_len: usize, value_len: usize) -> Option<usize> {
        let c = self.class_of(SLOT_HEADER + key_len + value_len)?;
        (c + 1..self.classes.len()).find(|&k| self.has_slot(k))
    }

    /// The size of the slot [`Arena::alloc_spare`] would take for a key and value, if any.
    pub fn spare_slot_size(&self, key_len: usize, value_len: usize) -> Option<usize> {
        self.spare_class(key_len, value_len)
            .map(|k| self.classes[k].slot_size)
    }

    /// Store `key` and `value` in a free slot of the smallest larger class that has one, however
    /// much of it they leave unused: the last resort of a write whose own class has no free slot
    /// and can get no page (none empty, none to make resident, none another class can give up
    /// without sending objects down a tier). Its slot is the larger class's as long as it is
    /// there: its next write that does not fit in place goes to its own class, and the CLOCK
    /// hand and page moves see it as any object of the class.
    pub fn alloc_spare(&mut self, key: &[u8], value: &[u8]) -> Option<SlotOffset> {
        let k = self.spare_class(key.len(), value.len())?;
        let off = self.take_slot(k, false)?;
        self.fill_slot(k, off, key, value);
        Some(off)
    }

    /// Slots class `c` can hand out without taking a page: its free ones and those its carving
    /// page has not carved yet (some of these may lie on retired memory and be skipped).
    fn spare_slots(&self, c: usize) -> usize {
        let class = &self.classes[c];
        class.free.len()
            + class.carving.map_or(0, |p| {
                (self.page_size / class.slot_size).saturating_sub(self.page_carved[p] as usize)
            })
    }

    /// A slab page [`Arena::empty_page`] can empty, of a class other than `except`: the page with
    /// the fewest objects among the sparsest pages of the classes that hold at least a page's
    /// worth of slots to hand out. Such a class can always empty its sparsest page: the page's
    /// objects are no more than the slots it does not use, so the class's other pages have a
    /// slot for each. A class with fewer spare slots than a page holds (less than a page's
    /// bytes) is never asked: this is what may stay unused of the bytes freed in a tier, per
    /// class (see `docs/server.md`, "Freed space is reused").
    pub fn compactable_page(&self, except: Option<usize>) -> Option<usize> {
        self.classes_in_use()
            .filter(|&d| Some(d) != except)
            .filter(|&d| self.spare_slots(d) >= self.page_size / self.classes[d].slot_size)
            .filter_map(|d| self.sparsest_page_of(d))
            .min_by_key(|&(p, used)| (used, p))
            .map(|(p, _)| p)
    }

    /// Empty slab page `page` by moving its objects into free slots of its class's other pages
    /// (free ones first, then the carving page's uncarved ones; never taking a page), as a slab
    /// allocator compacts a class to give a page to another: memory to memory, no object leaves
    /// the tier. `value_len(key, slot)` tells an object's value length (None: the index does not
    /// place that key in that slot, which then stays). Copies only the header, key and value of
    /// each object (with its CLOCK count). Returns the moved objects' new slots; the page is
    /// empty (and in the empty set, to be taken by the next class that needs a page) when every
    /// object found a slot, which [`Arena::compactable_page`] guarantees for the page it names.
    pub fn empty_page(
        &mut self,
        page: usize,
        value_len: impl Fn(&[u8], SlotOffset) -> Option<usize>,
    ) -> Vec<SlotOffset> {
        let mut moved = Vec::new();
        let c = self.page_class[page] as usize;
        if c >= self.classes.len() {
            return moved;
        }
        let size = self.classes[c].slot_size;
        let base = page * self.page_size;
        let (lo, hi) = (base as u64, (base + self.page_size) as u64);
        // Slots of the page itself are no destination: off the free list, not carved further.
        self.classes[c].free.retain(|&o| o < lo || o >= hi);
        let was_carving = self.classes[c].carving == Some(page);
        if was_carving {
            self.classes[c].carving = None;
        }
        for i in 0..self.page_carved[page] as usize {
            let from = base + i * size;
            // A header on retired memory is not read (it may hold poison).
            if self.is_retired(from as u64, SLOT_HEADER) {
                continue;
            }
            let Some(key) = self.key_at(from as u64) else {
                continue;
            };
            let Some(len) = value_len(key, from as u64) else {
                continue;
            };
            let bytes = SLOT_HEADER + key.len() + len;
            let Some(to) = self.take_slot(c, false) else {
                break;
            };
            let mem = self.map.as_mut_slice();
            mem.copy_within(from..from + bytes, to as usize);
            mem[from + 2] = 0;
            self.page_used[page] -= 1;
            let dest = to as usize / self.page_size;
            if self.page_used[dest] == 0 {
                self.empty.remove(&dest);
            }
            self.page_used[dest] += 1;
            moved.push(to);
        }
        // The page's unused slots are the class's free slots again, as after any free.
        for i in 0..self.page_carved[page] as usize {
            let off = (base + i * size) as u64;
            if !self.is_retired(off, size) && self.map.as_slice()[off as usize + 2] & 1 == 0 {
                self.classes[c].free.push(off);
            }
        }
        if self.page_used[page] == 0 {
            self.empty.insert(page);
        } else if was_carving && self.classes[c].carving.is_none() {
            self.classes[c].carving = Some(page);
        }
        moved
    }

    /// Whether slab page `page` is assigned to a class and holds no object.
    pub fn page_is_empty(&self, page: usize) -> bool {
        self.page_class[page] != u8::MAX && self.page_used[page] == 0
    }

    /// The size of the slot at `off` (its page's class).
    pub fn slot_size_at(&self, off: SlotOffset) -> usize {
        let page = off as usize / self.page_size;
        self.classes[self.page_class[page] as usize].slot_size
    }

    /// A class above `c` with a free slot that an object of `need` bytes fills three quarters
    /// of at least: it takes that slot rather than a slab page for class `c`. An object that
    /// shrinks a little at each write (a list's end chunk, popped, is written anew each time)
    /// otherwise reached a class without free slots every few writes, and each time a page was
    /// taken from another class and all its slots set up anew (most of an LPOP's allocation
    /// cost). The unused quarter bounds the memory this wastes.
    fn roomier_free_class(&self, c: usize, need: usize) -> Option<usize> {
        (c + 1..self.classes.len())
            .take_while(|&k| fills_enough(need, self.classes[k].slot_size))
            .find(|&k| self.has_slot(k))
    }

    /// Whether class `c` can hand out a slot without taking a page: a free one, or one not yet
    /// carved from the page it is carving.
    fn has_slot(&self, c: usize) -> bool {
        let class = &self.classes[c];
        !class.free.is_empty()
            || class
                .carving
                .is_some_and(|p| (self.page_carved[p] as usize) < self.page_size / class.slot_size)
    }

    /// Whether a key and value of these lengths can be written over the slot at `off`: the
    /// slot is of their own size class, or it holds them and they fill three quarters of it at
    /// least (the bound on the memory a roomier slot wastes, as in
    /// [`Arena::roomier_free_class`]). An object that shrinks or grows a little at each write
    /// stays in its slot: no new slot, no index change.
    pub fn fits_in_place(&self, off: SlotOffset, key_len: usize, value_len: usize) -> bool {
        let need = SLOT_HEADER + key_len + value_len;
        let size = self.slot_size_at(off);
        need <= size
            && (fills_enough(need, size) || self.slot_size_for(key_len, value_len) == Some(size))
    }

    /// Release a slot.
    pub fn free(&mut self, off: SlotOffset) {
        let size = self.slot_size_at(off);
        let page = off as usize / self.page_size;
        let c = self.page_class[page] as usize;
        self.map.as_mut_slice()[off as usize + 2] = 0;
        if !self.is_retired(off, size) {
            self.classes[c].free.push(off);
        }
        self.classes[c].used -= 1;
        self.page_used[page] -= 1;
        if self.page_used[page] == 0 {
            self.empty.insert(page);
        }
        self.used_bytes -= size as u64;
        self.objects -= 1;
    }

    /// Whether the slot at `off` of `size` bytes overlaps retired memory.
    fn is_retired(&self, off: SlotOffset, size: usize) -> bool {
        if self.retired.is_empty() {
            return false;
        }
        let (from, to) = (off as usize, off as usize + size);
        // The first range ending after the slot's start decides: ranges are sorted and disjoint.
        let i = self.retired.partition_point(|&(_, e)| e <= from);
        self.retired.get(i).is_some_and(|&(s, _)| s < to)
    }

    /// Retire the OS pages holding bytes `[from, to)` of the mapping for good: free slots
    /// overlapping them leave the free lists now, used ones when they are freed, and slab pages
    /// assigned later skip them. The kernel takes poisoned memory out of service a page at a
    /// time (soft or hard offline), so the store does too. Returns the bytes newly retired.
    pub fn retire(&mut self, from: usize, to: usize) -> u64 {
        let os_page = cxltier_sys::page_size();
        let from = from / os_page * os_page;
        let to = to.min(self.map.len()).next_multiple_of(os_page);
        if from >= to {
            return 0;
        }
        let before = self.retired_bytes();
        self.retired.push((from, to));
        self.retired.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.retired.len());
        for &(s, e) in &self.retired {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.retired = merged;
        let retired = std::mem::take(&mut self.retired);
        for class in &mut self.classes {
            let size = class.slot_size;
            class.free.retain(|&o| {
                let (a, b) = (o as usize, o as usize + size);
                !retired.iter().any(|&(s, e)| a < e && s < b)
            });
        }
        self.retired = retired;
        self.retired_bytes() - before
    }

    /// Bytes of the mapping retired for poison.
    pub fn retired_bytes(&self) -> u64 {
        self.retired.iter().map(|&(s, e)| (e - s) as u64).sum()
    }

    /// Checks that no free slot lies on retired memory (tests).
    pub fn check_retired(&self) -> std::result::Result<(), String> {
        for class in &self.classes {
            if let Some(o) = class
                .free
                .iter()
                .find(|&&o| self.is_retired(o, class.slot_size))
            {
                return Err(format!(
                    "{} arena: free slot {o} lies on retired memory",
                    self.tier
                ));
            }
        }
        Ok(())
    }

    /// Checks the slab bookkeeping (tests): each assigned page's count of used slots is what its
    /// carved slots hold, each class's count the sum over its pages, its free slots unused
    /// carved slots of its own pages (each once), the empty set the assigned pages holding
    /// nothing, and the bytes and objects in use what the classes hold.
    pub fn check_slabs(&self) -> std::result::Result<(), String> {
        let tier = self.tier;
        let mem = self.map.as_slice();
        let (mut used_bytes, mut objects) = (0u64, 0u64);
        for (c, class) in self.classes.iter().enumerate() {
            let size = class.slot_size;
            let mut used = 0u64;
            for &p in &class.pages {
                if self.page_class[p] as usize != c {
                    return Err(format!(
                        "{tier} arena: page {p} is listed by class {c} but assigned to another"
                    ));
                }
                // A slot on retired memory may be an object that was next to the poison, or
                // one a class skipped when carving, which still holds the bytes of the page's
                // previous class: it counts as either.
                let (mut in_use, mut on_retired) = (0u32, 0u32);
                for i in 0..self.page_carved[p] as usize {
                    let off = p * self.page_size + i * size;
                    if mem[off + 2] & 1 == 1 {
                        if self.is_retired(off as u64, size) {
                            on_retired += 1;
                        } else {
                            in_use += 1;
                        }
                    }
                }
                let counted = self.page_used[p];
                if counted < in_use || counted > in_use + on_retired {
                    return Err(format!(
                        "{tier} arena: page {p} counts {counted} used slots and holds {in_use} (and {on_retired} on retired memory)"
                    ));
                }
                if (counted == 0) != self.empty.contains(&p) {
                    return Err(format!(
                        "{tier} arena: page {p} holds {counted} objects and is{} in the empty set",
                        if counted == 0 { " not" } else { "" }
                    ));
                }
                used += u64::from(counted);
            }
            if used != class.used {
                return Err(format!(
                    "{tier} arena: class {c} counts {} used slots and its pages hold {used}",
                    class.used
                ));
            }
            if let Some(p) = class.carving {
                if self.page_class[p] as usize != c {
                    return Err(format!(
                        "{tier} arena: class {c} carves page {p} of another class"
                    ));
                }
            }
            let mut free = std::collections::HashSet::new();
            for &o in &class.free {
                let (p, within) = (o as usize / self.page_size, o as usize % self.page_size);
                if self.page_class[p] as usize != c
                    || within % size != 0
                    || within / size >= self.page_carved[p] as usize
                    || mem[o as usize + 2] & 1 == 1
                    || !free.insert(o)
                {
                    return Err(format!(
                        "{tier} arena: free slot {o} of class {c} is not an unused carved slot of its pages, listed once"
                    ));
                }
            }
            used_bytes += used * size as u64;
            objects += used;
        }
        if let Some(&p) = self.empty.iter().find(|&&p| self.page_class[p] == u8::MAX) {
            return Err(format!(
                "{tier} arena: unassigned page {p} is in the empty set"
            ));
        }
        if used_bytes != self.used_bytes || objects != self.objects {
            return Err(format!(
                "{tier} arena: counts {} bytes and {} objects in use, its classes hold {used_bytes} and {objects}",
                self.used_bytes, self.objects
            ));
        }
        Ok(())
    }

    /// The value stored at `off` (of `len` bytes) after a key of `key_len` bytes.
    pub fn value(&self, off: SlotOffset, key_len: usize, len: usize) -> &[u8] {
        let start = off as usize + SLOT_HEADER + key_len;
        &self.map.as_slice()[start..start + len]
    }

    /// The key stored at a used slot.
    pub fn key_at(&self, off: SlotOffset) -> Option<&[u8]> {
        let s = self.map.as_slice();
        let o = off as usize;
        if s[o + 2] & 1 != 1 {
            return None;
        }
        let len = u16::from_le_bytes([s[o], s[o + 1]]) as usize | ((s[o + 2] >> 1) as usize) << 16;
        Some(&s[o + SLOT_HEADER..o + SLOT_HEADER + len])
    }

    /// Overwrite the value of the object at `off` (its key of `key_len` bytes stays); the caller
    /// has checked that the value fits the slot.
    pub fn rewrite(&mut self, off: SlotOffset, key_len: usize, value: &[u8]) {
        self.rewrite_at(off, key_len, 0, value);
    }

    /// Overwrite `bytes` at `at` inside the value of the slot at `off` (the caller keeps it
    /// within the value).
    pub fn rewrite_at(&mut self, off: SlotOffset, key_len: usize, at: usize, bytes: &[u8]) {
        let start = off as usize + SLOT_HEADER + key_len + at;
        self.map.as_mut_slice()[start..start + bytes.len()].copy_from_slice(bytes);
    }

    /// Count an access to the object at `off` (CLOCK reference, at most 3).
    pub fn touch(&mut self, off: SlotOffset) {
        let r = &mut self.map.as_mut_slice()[off as usize + 3];
        *r = (*r + 1).min(3);
    }

    /// Advance class `c`'s CLOCK hand over up to `budget` slots: a used slot whose reference
    /// count is zero is the victim (the hand stops just past it); others have their count
    /// decremented on the way. Returns the victim, or else the first slot whose count this sweep
    /// brought to zero (a fallback when the budget ran out), or None.
    pub fn sweep(&mut self, c: usize, budget: usize) -> (Option<SlotOffset>, Option<SlotOffset>) {
        let class = &self.classes[c];
        if class.pages.is_empty() {
            return (None, None);
        }
        let per_page = self.page_size / class.slot_size;
        let (slot_size, page_size) = (class.slot_size, self.page_size);
        let (mut p, mut i) = class.hand;
        let mut cooled = None;
        let mut victim = None;
        let mem = self.map.as_mut_slice();
        for _ in 0..budget {
            if i >= per_page {
                i = 0;
                p += 1;
            }
            if p >= self.classes[c].pages.len() {
                p = 0;
            }
            let page = self.classes[c].pages[p];
            if i >= self.page_carved[page] as usize {
                // Not yet carved: nothing there.
                i = per_page;
                continue;
            }
            let off = page * page_size + i * slot_size;
            i += 1;
            if mem[off + 2] & 1 != 1 {
                continue;
            }
            if mem[off + 3] == 0 {
                victim = Some(off as SlotOffset);
                break;
            }
            mem[off + 3] -= 1;
            if mem[off + 3] == 0 && cooled.is_none() {
                cooled = Some(off as SlotOffset);
            }
        }
        self.classes[c].hand = (p, i);
        (victim, cooled)
    }

    /// Addresses of the first byte of each slab page in use (for placement checks).
    pub fn used_page_addrs(&self) -> Vec<usize> {
        let base = self.map.addr();
        let step = cxltier_sys::page_size();
        (0..self.next_page * self.page_size)
            .step_by(step * 64)
            .map(|o| base + o)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page emptied by one class and taken by another: the new class's slots lie across the
    /// old one's, and the old slots' headers must not read as objects of the new class (the
    /// CLOCK hand named a key that was not there, and a page move read past the arena).
    #[test]
    fn a_page_taken_by_another_class_has_no_stale_objects() {
        let mut a = Arena::new("dram", 0, false, 1 << 20, 8 << 10).unwrap();
        let small = a.class_for(4, 60).unwrap();
        let big = a.class_for(4, 3000).unwrap();
        // Fill one page with small objects whose values look like used slot headers.
        let mut offs = Vec::new();
        let (_, slots) = {
            offs.push(a.alloc(b"k000", &[0xffu8; 60]).unwrap());
            a.class_usage(small)
        };
        for i in 1..slots {
            offs.push(
                a.alloc(format!("k{i:03}").as_bytes(), &[0xffu8; 60])
                    .unwrap(),
            );
        }
        for off in offs {
            a.free(off);
        }
        assert!(a.has_empty_page());
        let off = a.alloc(b"bigk", &[1u8; 3000]).unwrap();
        assert_eq!(a.class_usage(big).0, 1);
        let page = off as usize / a.page_size();
        assert_eq!(a.page_keys(page), vec![b"bigk".to_vec()]);
        // The hand finds the one object (reference count 1, then 0) and nothing else.
        let (victim, cooled) = a.sweep(big, 1 << 12);
        assert_eq!(victim.or(cooled), Some(off));
        assert_eq!(a.coldest_ahead(big, 1 << 12), Some(off));
    }

    /// An object a little smaller than its class's neighbour below takes a free slot of the
    /// larger class rather than a new slab page (a shrinking list chunk took a page, set up
    /// every slot of it, at each class it passed); one that would leave most of a slot unused
    /// still gets its own class.
    #[test]
    fn a_slightly_smaller_object_takes_a_free_slot_of_a_larger_class() {
        let mut a = Arena::new("dram", 0, false, 8 << 20, 8 << 10).unwrap();
        let larger = a.class_for(4, 3000).unwrap();
        let first = a.alloc(b"k000", &[1u8; 3000]).unwrap();
        let size = a.slot_size_at(first);
        // Sized for the class just below: a page of its own on the old code.
        let value_len = size - SLOT_HEADER - 4 - 200;
        let smaller = a.class_for(4, value_len).unwrap();
        assert!(
            smaller < larger,
            "the test object must belong to a smaller class"
        );
        let resident = a.resident_bytes();
        let off = a.alloc(b"k001", &vec![2u8; value_len]).unwrap();
        assert_eq!(a.resident_bytes(), resident, "no slab page was taken");
        assert_eq!(a.slot_size_at(off), size);
        assert_eq!(a.class_usage(larger).0, 2);
        assert_eq!(a.value(off, 4, value_len), &vec![2u8; value_len][..]);
        a.free(off);
        assert_eq!(a.class_usage(larger).0, 1);
        // Less than three quarters of the slot: its own class, on a page of its own.
        let small = a.alloc(b"k002", &[3u8; 1000]).unwrap();
        assert!(a.slot_size_at(small) < size);
        assert_eq!(a.resident_bytes(), resident + a.page_size() as u64);
    }

    /// A class taking a page sets up none of its slots: they are carved one at a time as the
    /// class hands them out, a freed slot is handed out again before a new one is carved, and
    /// a page taken by another class starts uncarved.
    #[test]
    fn a_page_is_carved_one_slot_at_a_time() {
        let mut a = Arena::new("dram", 0, false, 1 << 20, 8 << 10).unwrap();
        let x = a.alloc(b"k0", &[7u8; 60]).unwrap();
        let page = x as usize / a.page_size();
        assert_eq!(a.page_carved[page], 1);
        let y = a.alloc(b"k1", &[7u8; 60]).unwrap();
        assert_eq!(y, x + a.slot_size_at(x) as u64, "slots in address order");
        assert_eq!(a.page_carved[page], 2);
        a.free(x);
        assert_eq!(
            a.alloc(b"k2", &[7u8; 60]).unwrap(),
            x,
            "the freed slot first"
        );
        assert_eq!(a.page_carved[page], 2);
        assert_eq!(a.page_keys(page), vec![b"k2".to_vec(), b"k1".to_vec()]);
        a.free(x);
        a.free(y);
        // The emptied page goes to a class of larger slots, uncarved but for the one taken.
        let big = a.alloc(b"big", &[1u8; 3000]).unwrap();
        assert_eq!(big as usize / a.page_size(), page);
        assert_eq!(a.page_carved[page], 1);
        assert_eq!(a.page_keys(page), vec![b"big".to_vec()]);
    }

    /// A class holding a page's worth of free slots empties its sparsest page into its other
    /// pages: each object keeps its bytes and CLOCK count, and the page goes to the next class
    /// that needs one. A class with fewer spare slots is not asked.
    #[test]
    fn a_page_is_emptied_into_free_slots_of_its_class() {
        let mut a = Arena::new("dram", 0, false, 3 << 20, 8 << 10).unwrap();
        let value = |i: usize| vec![i as u8; 1000];
        let first = a.alloc(b"0000", &value(0)).unwrap();
        let per_page = a.page_size() / a.slot_size_at(first);
        let mut offs = vec![first];
        for i in 1..2 * per_page {
            offs.push(a.alloc(format!("{i:04}").as_bytes(), &value(i)).unwrap());
        }
        assert_eq!(a.compactable_page(None), None, "no slot to spare");
        // Half of each page freed: a page's worth of free slots in all.
        for off in offs.iter().step_by(2) {
            a.free(*off);
        }
        let page = a.compactable_page(None).expect("a page to empty");
        let (base, end) = (
            (page * a.page_size()) as u64,
            ((page + 1) * a.page_size()) as u64,
        );
        let staying: Vec<(usize, u64)> = (1..2 * per_page)
            .step_by(2)
            .map(|i| (i, offs[i]))
            .filter(|&(_, off)| off >= base && off < end)
            .collect();
        let hot = staying[0].1;
        a.touch(hot);
        a.touch(hot);
        let moved = a.empty_page(page, |_, _| Some(1000));
        assert_eq!(moved.len(), staying.len());
        assert!(a.page_is_empty(page));
        assert!(moved.iter().all(|&o| o < base || o >= end));
        for &o in &moved {
            let key = a.key_at(o).unwrap().to_vec();
            let i: usize = std::str::from_utf8(&key).unwrap().parse().unwrap();
            assert_eq!(a.value(o, 4, 1000), &value(i)[..]);
        }
        let hot_now = moved[0];
        assert_eq!(
            a.map.as_slice()[hot_now as usize + 3],
            3,
            "the CLOCK count moved"
        );
        a.check_slabs().unwrap();
        let big = a.alloc(b"big", &[9u8; 3000]).unwrap();
        assert_eq!(
            big as usize / a.page_size(),
            page,
            "the emptied page went on"
        );
        a.check_slabs().unwrap();
    }

    /// An object whose class has no free slot and can get no page takes, as a last resort, a
    /// free slot of the smallest larger class that has one.
    #[test]
    fn a_small_object_takes_a_larger_free_slot_when_no_page_is_left() {
        let mut a = Arena::new("dram", 0, false, 1 << 20, 8 << 10).unwrap();
        let mut offs = Vec::new();
        while let Some(off) = a.alloc(format!("{:04}", offs.len()).as_bytes(), &[1u8; 1000]) {
            offs.push(off);
        }
        let freed = offs[7];
        a.free(freed);
        assert_eq!(a.alloc(b"tiny", b"x"), None, "no page for the small class");
        assert_eq!(a.spare_slot_size(4, 1), Some(a.slot_size_at(freed)));
        let off = a.alloc_spare(b"tiny", b"x").unwrap();
        assert_eq!(off, freed);
        assert_eq!(a.key_at(off), Some(&b"tiny"[..]));
        assert_eq!(a.value(off, 4, 1), b"x");
        assert_eq!(a.alloc_spare(b"tin2", b"y"), None, "no free slot left");
        a.check_slabs().unwrap();
    }

    /// A rewrite stays in its slot when it fits and fills three quarters of it; a growing
    /// object can be given room to spare.
    #[test]
    fn rewrites_fit_in_place_within_a_quarter_of_their_slot() {
        let mut a = Arena::new("dram", 0, false, 4 << 20, 8 << 10).unwrap();
        let off = a.alloc_with_room(b"k", &[1u8; 1000], 125).unwrap();
        let size = a.slot_size_at(off);
        assert!(size >= SLOT_HEADER + 1 + 1000 + 125, "room was given");
        let largest = size - SLOT_HEADER - 1;
        assert!(a.fits_in_place(off, 1, largest));
        assert!(
            !a.fits_in_place(off, 1, largest + 1),
            "larger than the slot"
        );
        let smallest = (size * 3).div_ceil(4) - SLOT_HEADER - 1;
        assert!(a.fits_in_place(off, 1, smallest));
        assert!(
            !a.fits_in_place(off, 1, smallest - 1),
            "under three quarters"
        );
        // An object of the smallest class fits its slot whatever it fills of it.
        let tiny = a.alloc(b"t", b"1").unwrap();
        assert!(a.fits_in_place(tiny, 1, 2) && a.fits_in_place(tiny, 1, 0));
        // Room is given only where a class has it: the largest class holds the value alone.
        let max_value = a.classes.last().unwrap().slot_size - SLOT_HEADER - 1;
        let m = a
            .alloc_with_room(b"m", &vec![0u8; max_value], 4096)
            .unwrap();
        assert_eq!(a.value(m, 1, max_value), &vec![0u8; max_value][..]);
    }
}
