//! Tiering: where an object lives and when it moves. Promotion on access and admission from
//! NVMe (TinyLFU), room made by CLOCK eviction, demotion one tier down with write-back to the
//! log, slab pages moved between size classes and emptied within a tier (`compact`), the DRAM
//! budget kept, and the log's segment cleaning that appends may need.

use std::time::Instant;

use super::{Store, CXL, DRAM, LOW_WATERMARK, PROMOTE_MIN};
use crate::arena::SlotOffset;
use crate::index::Place;
use crate::log::NvLoc;
use crate::{Kind, Result, StoreError};

/// How many slots one eviction may look at before giving up on a tier.
const SWEEP_BUDGET: usize = 64;
/// How much colder than what it makes room for (by the sketch) a donor class's tail must rate
/// for a slab page to move: by one only, classes of about equally hot objects passed pages back
/// and forth (`bench/collections-scale --sizes 10000 --no-filler`, the collections alone in a
/// DRAM budget of 15 slab pages: 14 moves and 342 objects demoted, against 10 and 32 at 2).
const PAGE_MOVE_MARGIN: u8 = 2;
/// Most objects one slab page move ([`Store::move_page_to`]) sends down a tier: a page of slots
/// of 2 KiB or more always qualifies; a page of smaller slots only once it holds no more than
/// this, so that one request never pays for tens of thousands of demotions.
const MAX_PAGE_MOVE_OBJECTS: u32 = 1024;

impl Store {
    /// Bytes the DRAM tier may give to objects: its budget less the index.
    fn dram_object_limit(&self) -> u64 {
        self.dram_budget.saturating_sub(self.index_bytes())
    }

    pub(super) fn tier_limit(&self, t: usize) -> u64 {
        if t == DRAM {
            self.dram_object_limit().min(self.arenas[DRAM].capacity())
        } else {
            self.arenas[t].capacity()
        }
    }

    /// Whether tier `t` can take a slot of `slot` bytes without evicting.
    fn has_room(&self, t: usize, key_len: usize, len: usize) -> bool {
        let a = &self.arenas[t];
        let Some(slot) = a.slot_size_for(key_len, len) else {
            return false;
        };
        // A slot that needs a new slab page makes the arena's resident memory grow by a page:
        // the DRAM budget bounds what is resident, not only what is in use.
        let page_fits = t != DRAM
            || !a.needs_page(key_len, len)
            || a.resident_bytes() + a.page_size() as u64 <= self.tier_limit(t);
        a.used_bytes + slot as u64 <= self.tier_limit(t) && page_fits && a.has_room(key_len, len)
    }

    /// Find a CLOCK victim in tier `t` of the class `key_len`/`len` need: the first slot whose
    /// reference count is zero (counts are decremented on the way).
    fn find_victim(&mut self, t: usize, key_len: usize, len: usize) -> Option<Vec<u8>> {
        let class = self.arenas[t].class_for(key_len, len)?;
        let (victim, _) = self.arenas[t].sweep(class, SWEEP_BUDGET);
        let victim = victim?;
        self.arenas[t].key_at(victim).map(<[u8]>::to_vec)
    }

    /// Move `key` out of its memory tier one step down (DRAM → CXL → NVMe). False when it cannot
    /// move (no lower tier with room and no NVMe).
    pub(super) fn demote(&mut self, key: &[u8], depth: u8) -> Result<bool> {
        let Some(e) = self.index.get(key) else {
            return Ok(false);
        };
        let Place::Mem(t, off) = e.place() else {
            return Ok(false);
        };
        let t = t as usize;
        let mut cur = *e;
        let (len, kind, expires) = (e.len() as usize, e.kind(), e.expires());
        // DRAM → CXL when there is a CXL tier with room (making room there, one level deep).
        if t == DRAM && self.arenas.len() > CXL {
            let mut room = self.has_room(CXL, key.len(), len);
            if !room && depth == 0 {
                if let Some(v) = self.find_victim(CXL, key.len(), len) {
                    room = self.demote(&v, depth + 1)? && self.has_room(CXL, key.len(), len);
                    // That demotion may have cleaned log segments and moved this entry's copy.
                    cur = self.index[key];
                }
            }
            if room {
                let value = self.arenas[DRAM].value(off, key.len(), len).to_vec();
                if let Some(new) = self.arenas[CXL].alloc(key, &value) {
                    self.arenas[DRAM].free(off);
                    self.index
                        .get_mut(key)
                        .expect("present")
                        .set_place(Place::Mem(CXL as u8, new));
                    self.counters[DRAM].demotions += 1;
                    return Ok(true);
                }
            }
        }
        // → NVMe: write it back first if the log lacks this version.
        if self.log.is_none() {
            return Ok(false);
        }
        if cur.dirty() || cur.nv().is_none() {
            let value = self.arenas[t].value(off, key.len(), len).to_vec();
            let loc = self.log_append(key, kind, &value, (expires != 0).then_some(expires))?;
            let e = self.index.get_mut(key).expect("present");
            let old = e.nv();
            e.set_nv(Some(loc));
            e.set_dirty(false);
            if let Some(old) = old {
                self.log.as_mut().expect("log").mark_dead(old);
            }
        }
        self.arenas[t].free(off);
        self.index
            .get_mut(key)
            .expect("present")
            .set_place(Place::Nvme);
        self.counters[t].demotions += 1;
        self.evictions_to_nvme += 1;
        Ok(true)
    }

    /// Append to the log, cleaning once and retrying when it is full.
    pub(super) fn log_append(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        expires: Option<u64>,
    ) -> Result<NvLoc> {
        let log = self.log.as_mut().expect("callers check for the log");
        match log.append(key, kind, value, expires) {
            Err(StoreError::Full { .. }) => {
                self.clean(8)?;
                self.log
                    .as_mut()
                    .expect("log")
                    .append(key, kind, value, expires)
            }
            other => other,
        }
    }

    pub(super) fn clean(&mut self, max: usize) -> Result<()> {
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        let index = &mut self.index;
        let mut moves: Vec<(Vec<u8>, NvLoc)> = Vec::new();
        log.clean(
            max,
            &mut |k, loc| index.get(k).is_some_and(|e| e.nv() == Some(loc)),
            &mut |k, _, new| moves.push((k.to_vec(), new)),
        )?;
        for (k, new) in moves {
            if let Some(e) = self.index.get_mut(k.as_slice()) {
                e.set_nv(Some(new));
            }
        }
        Ok(())
    }

    /// Make room in tier `t` for `key`'s object of `len` bytes: when its size class can get no
    /// page, first by emptying another class's page within the tier ([`Store::compact`]), then
    /// by taking a slab page from a colder class ([`Store::move_page_to`]); else by CLOCK
    /// eviction within its size class. `candidate` (the sketch estimate of the incoming key)
    /// must beat the victim's when given (TinyLFU admission).
    pub(super) fn make_room(
        &mut self,
        t: usize,
        key: &[u8],
        len: usize,
        candidate: Option<u8>,
    ) -> Result<bool> {
        let key_len = key.len();
        let Some(class) = self.arenas[t].class_for(key_len, len) else {
            return Ok(false);
        };
        // Above the low watermark the room left is the headroom background demotion keeps for
        // writes: a candidate must still beat a victim to take it, as in a full tier. Letting
        // every value read from NVMe in there left the choice of what stays to the watermark's
        // CLOCK demotion alone, by recency, and bypassed admission (at 5x on YCSB C, 340K
        // admissions per million reads and a hit ratio of 0.448; with this rule 70K and 0.458,
        // against a best possible 0.516 for that many objects).
        let in_headroom = candidate.is_some() && self.above_low_watermark(t);
        let mut must_beat_victim = in_headroom;
        // One page move at most per call: the work is bounded and nothing loops on it.
        let mut page_move_tried = false;
        for _ in 0..8 {
            if !must_beat_victim && self.has_room(t, key_len, len) {
                return Ok(true);
            }
            must_beat_victim = false;
            if !page_move_tried && self.class_out_of_pages(t, class) {
                page_move_tried = true;
                // A page another class can empty within memory first: no object leaves it. Not
                // for a value read into the headroom, which must displace a colder object.
                if !in_headroom && self.compact(t, Some(class)).is_some() {
                    continue;
                }
                let heat = self.room_heat(t, class, key, candidate);
                if self.move_page_to(t, class, heat)? {
                    continue;
                }
            }
            let Some(victim) = self.find_victim(t, key_len, len) else {
                return Ok(false);
            };
            if let Some(c) = candidate {
                if self.sketch.estimate(&victim) >= c {
                    self.admissions_rejected += 1;
                    return Ok(false);
                }
            }
            if !self.demote(&victim, 0)? {
                return Ok(false);
            }
        }
        Ok(self.has_room(t, key_len, len))
    }

    /// Whether class `class` of tier `t` can get a slot only by evicting: it has no free slot,
    /// and no page is to be had without taking one from another class (none is empty, the
    /// mapping has none left, or, in DRAM, making one more resident would pass the budget).
    fn class_out_of_pages(&self, t: usize, class: usize) -> bool {
        let a = &self.arenas[t];
        if a.class_has_free_slot(class) || a.has_empty_page() {
            return false;
        }
        !a.has_page_to_assign()
            || (t == DRAM && a.resident_bytes() + a.page_size() as u64 > self.tier_limit(t))
    }

    /// How hot what a page move would make room for is, by the sketch: a donor class's coldest
    /// object must rate below it. What the room is for is the incoming key, and the alternative
    /// to a page move is evicting the coldest object of its own class. For a value read (a
    /// `candidate`, which must beat what it displaces) the lower of the two. For a write (which
    /// evicts in its own class without admission: recent writes are hot) the own class's coldest
    /// when the class holds objects, else the key's estimate counting this write: a key written
    /// once takes no page from keys read since, and a class of rewritten keys does.
    fn room_heat(&self, t: usize, class: usize, key: &[u8], candidate: Option<u8>) -> u8 {
        let a = &self.arenas[t];
        let own_coldest = a
            .coldest_ahead(class, SWEEP_BUDGET)
            .and_then(|off| a.key_at(off))
            .map(|k| self.sketch.estimate(k));
        match (candidate, own_coldest) {
            (Some(c), Some(o)) => c.min(o),
            (Some(c), None) => c,
            (None, Some(o)) => o,
            (None, None) => self.sketch.estimate(key).saturating_add(1),
        }
    }

    /// Slab page rebalancing (memcached's slab automove, by heat): give class `class` of tier
    /// `t` a page taken from the class whose tail is coldest. Each other class in use is judged
    /// by the sketch estimate of the coldest of the next slots ahead of its CLOCK hand (looked
    /// at, not aged); one rating below `heat` gives its sparsest page (fewest objects to move,
    /// at most [`MAX_PAGE_MOVE_OBJECTS`]), the coldest class first, the sparser page on a tie.
    /// The page's objects go down a tier the way eviction sends them ([`Store::demote`]: to CXL
    /// when it has room, else written to the log), so the index and durability stay right; the
    /// emptied page stays resident and is the next page any class gets, which is `class` now.
    /// The DRAM budget is untouched: no page is made resident. False when no class qualifies or
    /// an object could not move down.
    fn move_page_to(&mut self, t: usize, class: usize, heat: u8) -> Result<bool> {
        let a = &self.arenas[t];
        // (coldest estimate, objects to move, page)
        let mut donor: Option<(u8, u32, usize)> = None;
        for d in a.classes_in_use() {
            if d == class {
                continue;
            }
            let Some((page, used)) = a.sparsest_page_of(d) else {
                continue;
            };
            if used > MAX_PAGE_MOVE_OBJECTS {
                continue;
            }
            let Some(coldest) = a.coldest_ahead(d, SWEEP_BUDGET).and_then(|o| a.key_at(o)) else {
                continue;
            };
            let est = self.sketch.estimate(coldest);
            if est.saturating_add(PAGE_MOVE_MARGIN) > heat {
                continue;
            }
            if donor.is_none_or(|(e, u, _)| (est, used) < (e, u)) {
                donor = Some((est, used, page));
            }
        }
        let Some((_, _, page)) = donor else {
            return Ok(false);
        };
        let keys = self.arenas[t].page_keys(page);
        for k in &keys {
            if !self.demote(k, 0)? {
                return Ok(false);
            }
        }
        self.slab_pages_moved += 1;
        self.slab_objects_moved += keys.len() as u64;
        Ok(true)
    }

    /// Slab compaction: empty a slab page of tier `t` (of a class other than `except`) by moving
    /// its objects into free slots of their class's other pages ([`Arena::compactable_page`],
    /// [`Arena::empty_page`]), and point their index entries at the new slots. Nothing leaves
    /// memory and nothing is written to the log, so it needs no lower tier: a store with DRAM
    /// alone gets the space its deletes freed back for objects of any size (it refused a 5-byte
    /// write when 1 KiB values held every page, two of them deleted). The page stays resident
    /// and is the next any class takes. Returns the emptied page; None when no class holds a
    /// page's worth of slots to spare. Its cost is one page's objects copied (at most a page's
    /// bytes) and one index update each, paid only when a class can get a page no other way;
    /// a class gives a page only once it has a page's worth of free slots, which its deletes
    /// made, so over time the copies are at most one per slot freed.
    fn compact(&mut self, t: usize, except: Option<usize>) -> Option<usize> {
        let page = self.arenas[t].compactable_page(except)?;
        let index = &self.index;
        let moved = self.arenas[t].empty_page(page, |key, off| {
            index
                .get(key)
                .filter(|e| e.place() == Place::Mem(t as u8, off))
                .map(|e| e.len() as usize)
        });
        for &off in &moved {
            let key = self.arenas[t].key_at(off).expect("a moved object");
            self.index
                .get_mut(key)
                .expect("moved objects are indexed")
                .set_place(Place::Mem(t as u8, off));
        }
        if !self.arenas[t].page_is_empty(page) {
            return None;
        }
        self.slab_pages_compacted += 1;
        Some(page)
    }

    /// Place `key` and `value` in tier `t` in a free slot of a larger class than theirs
    /// ([`Arena::alloc_spare`]) when the tier's budget allows that slot: the last resort of a
    /// write that found no room in its own class in any tier, before it goes to the log or is
    /// refused.
    pub(super) fn place_in_spare(&mut self, t: usize, key: &[u8], value: &[u8]) -> Option<Place> {
        let a = &self.arenas[t];
        let slot = a.spare_slot_size(key.len(), value.len())?;
        if a.used_bytes + slot as u64 > self.tier_limit(t) {
            return None;
        }
        let off = self.arenas[t].alloc_spare(key, value)?;
        self.spare_slot_writes += 1;
        Some(Place::Mem(t as u8, off))
    }

    /// Whether tier `t` is filled past its low watermark.
    fn above_low_watermark(&self, t: usize) -> bool {
        self.arenas[t].used_bytes as f64 > self.fillable(t) as f64 * LOW_WATERMARK
    }

    /// The bytes of objects tier `t` can actually hold, of which the watermarks are fractions:
    /// its limit, for DRAM rounded down to whole slab pages (a page counts against the budget
    /// once resident). Against the bare limit, a DRAM tier whose limit was 8.2 MB filled at
    /// 6 MiB of 2 MiB pages and never reached its watermarks.
    pub(super) fn fillable(&self, t: usize) -> u64 {
        let limit = self.tier_limit(t);
        if t != DRAM {
            return limit;
        }
        let page = self.arenas[t].page_size() as u64;
        match limit / page * page {
            0 => limit,
            whole => whole,
        }
    }

    /// Shrink DRAM when the index grew (or is about to: `reserved`): demote until the objects
    /// fit the budget the index leaves. False when they cannot (nothing can move down).
    pub(super) fn fit_dram_to_budget(&mut self) -> Result<bool> {
        let mut guard = 0;
        while self.arenas[DRAM].used_bytes > self.dram_object_limit() {
            guard += 1;
            if guard > 4096 {
                return Ok(false);
            }
            let Some(v) = self.any_victim(DRAM) else {
                return Ok(false);
            };
            if !self.demote(&v, 0)? {
                return Ok(false);
            }
        }
        // Pages stay resident after their objects leave: when what is resident passes the
        // budget, empty the sparsest slab page (its objects move down) and give it back.
        while self.arenas[DRAM].resident_bytes() > self.dram_object_limit() {
            guard += 1;
            if guard > 4096 {
                return Ok(false);
            }
            // A page emptied within DRAM first: nothing moves down.
            if !self.arenas[DRAM].has_empty_page() {
                if let Some(page) = self.compact(DRAM, None) {
                    self.arenas[DRAM].release_page(page)?;
                    continue;
                }
            }
            let Some((page, keys)) = self.arenas[DRAM].sparsest_page() else {
                return Ok(false);
            };
            for k in keys {
                if !self.demote(&k, 0)? {
                    return Ok(false);
                }
            }
            self.arenas[DRAM].release_page(page)?;
        }
        Ok(true)
    }

    /// A victim of any class in tier `t` (for watermark demotion and for shrinking DRAM). Classes
    /// are tried in turn from a rotating start so that no class is always the one to give; in
    /// each, the CLOCK hand may go round up to four times (reference counts are at most 3, so
    /// a victim is found unless the cap of 64 Ki slots per class stops it first).
    pub(super) fn any_victim(&mut self, t: usize) -> Option<Vec<u8>> {
        let n = self.arenas[t].class_count();
        self.victim_class = (self.victim_class + 1) % n;
        for i in 0..n {
            let class = (self.victim_class + i) % n;
            let (used, slots) = self.arenas[t].class_usage(class);
            if used == 0 {
                continue;
            }
            let mut left = (4 * slots).min(1 << 18);
            let mut fallback: Option<SlotOffset> = None;
            while left > 0 {
                let step = (SWEEP_BUDGET as u64 * 16).min(left);
                left -= step;
                let (victim, cooled) = self.arenas[t].sweep(class, step as usize);
                if let Some(v) = victim {
                    return self.arenas[t].key_at(v).map(<[u8]>::to_vec);
                }
                fallback = fallback.or(cooled);
            }
            // The cap stopped the hand: the first object it cooled down goes.
            if let Some(f) = fallback {
                return self.arenas[t].key_at(f).map(<[u8]>::to_vec);
            }
        }
        None
    }

    /// Place bytes into tier `t` (room already made). Returns the place or None.
    pub(super) fn place_in(
        &mut self,
        t: usize,
        key: &[u8],
        value: &[u8],
        room: usize,
    ) -> Option<Place> {
        self.arenas[t]
            .alloc_with_room(key, value, room)
            .map(|off| Place::Mem(t as u8, off))
    }

    pub(super) fn free_place(&mut self, place: Place) {
        if let Place::Mem(t, off) = place {
            self.arenas[t as usize].free(off);
        }
    }

    /// CXL → DRAM for a hot object.
    pub(super) fn promote(&mut self, key: &[u8]) -> Result<()> {
        let e = &self.index[key];
        let Place::Mem(t, off) = e.place() else {
            return Ok(());
        };
        let len = e.len() as usize;
        let est = self.sketch.estimate(key);
        if !self.make_room(DRAM, key, len, Some(est))? {
            return Ok(());
        }
        // Making room may have moved this very object (DRAM victims go to CXL, whose victims go
        // down): only promote it from where it still is.
        if self.index.get(key).map(|e| e.place()) != Some(Place::Mem(t, off)) {
            return Ok(());
        }
        let value = self.arenas[t as usize].value(off, key.len(), len).to_vec();
        if let Some(p) = self.place_in(DRAM, key, &value, 0) {
            self.arenas[t as usize].free(off);
            self.index.get_mut(key).expect("present").set_place(p);
            self.counters[t as usize].promotions += 1;
        }
        Ok(())
    }

    /// An object just read from NVMe: DRAM if the sketch rates it hot, else CXL, else keep it
    /// staged for this batch only.
    pub(super) fn admit_from_nvme(&mut self, key: &[u8], value: Vec<u8>) -> Result<()> {
        let est = self.sketch.estimate(key);
        let tiers: &[usize] = if self.arenas.len() > CXL {
            if est >= PROMOTE_MIN {
                &[DRAM, CXL]
            } else {
                &[CXL, DRAM]
            }
        } else {
            &[DRAM]
        };
        for &t in tiers {
            if self.make_room(t, key, value.len(), Some(est))? {
                if let Some(p) = self.place_in(t, key, &value, 0) {
                    self.index.get_mut(key).expect("present").set_place(p);
                    self.counters[2].promotions += 1;
                    return Ok(());
                }
            }
        }
        let e = &self.index[key];
        self.staged
            .insert(key.into(), (e.kind(), value, e.expires()));
        self.restaged.push_back((Instant::now(), key.into()));
        Ok(())
    }
}
