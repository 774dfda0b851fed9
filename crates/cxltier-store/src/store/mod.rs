//! The store: the `Store` type, opening (recovery from the log) and closing, and the entry points
//! that read and write objects (get, put, patch, delete, rename, flush, commit, tick).
//!
//! Each concern around it is an `impl Store` in a child module of its own: `tiering` (promotion,
//! admission, room made by eviction, demotion with write-back, slab page moves and compaction),
//! `reads` (NVMe reads: prefetch, asynchronous reads started and reaped, staged values), `scan`
//! (walks in key order), `stats` (statistics, arenas, page placement), `parts` (the parts of
//! collections and big values as objects, and recovery's clean-up of orphans), `poison` (objects
//! on poisoned memory restored from NVMe or reported lost), `check` (the offline log check and
//! the invariants tests check).

use std::ops::Bound;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// foldhash (seeded per process) rather than std's SipHash: several lookups per command, and
// SipHash showed in profiles.
use hashbrown::{HashMap, HashSet};

use crate::admission::Sketch;
use crate::arena::Arena;
use crate::index::{access_clock, Entry, Index, Place, SlotId};
use crate::keys::{
    chunk_key, db_key, in_db, is_internal_key, parse_chunk_key, split_db_key, CHUNK_PREFIX,
    MAX_KEY, MAX_PARTS_KEY,
};
use crate::log::{Log, LogConfig, NvLoc, ASYNC_READS};
use crate::{Durability, KeyInfo, Kind, ObjectRef, Result, StoreBuilder, StoreError};

// Child modules see the store's private fields: each concern keeps its own `impl Store`.
mod check;
mod evict;
mod parts;
mod poison;
mod reads;
mod scan;
mod stats;
mod tiering;
pub use check::{check_log, LogCheck};
pub use poison::{PoisonOutcome, RetiredMemory};

const DRAM: usize = 0;
const CXL: usize = 1;
/// Fraction of a memory tier above which `tick` demotes, and the level it demotes down to. The
/// band between them is headroom for writes, which need no admission; values read from NVMe
/// enter it only by beating a victim ([`Store::make_room`]). A wider band holds fewer objects:
/// at 0.95/0.90 the DRAM tier at 5x held 34.0K YCSB objects against 36.9K at 0.99/0.98.
const HIGH_WATERMARK: f64 = 0.99;
const LOW_WATERMARK: f64 = 0.98;
/// Sketch estimate from which a CXL object is promoted to DRAM on access.
const PROMOTE_MIN: u8 = 3;
/// How long a value read from NVMe that no tier admitted stays staged. A read-modify-write
/// (YCSB F) sends its write when the read's reply arrives, a batch or more later: dropped at the
/// end of the read's batch, the value was read from the device again for the write (0.79 NVMe
/// reads per F operation at 5x, against 0.63 while such values were admitted).
const RESTAGED_FOR: Duration = Duration::from_millis(5);
/// The open log segment is written ahead once this much of it waits: each write is then a short
/// wait for the event loop (a 64 KiB write, against 2 MiB when a segment filled).
const WRITE_AHEAD_BYTES: usize = 64 << 10;
/// A record's place in write order: its segment's sequence number, its offset there.
type WritePos = (u64, u64);

#[derive(Debug, Default, Clone)]
struct TierCounters {
    hits: u64,
    promotions: u64,
    demotions: u64,
}

/// The tiered store. Single-threaded: the server owns it.
pub struct Store {
    index: Index,
    /// False only while no key can have a TTL: none was written with one since the store was
    /// empty (Redis's empty `expires` dictionary): then a command's lazy-expiry look-up of its
    /// keys finds nothing to do and is skipped ([`Store::may_have_expiring_keys`]). Recovered
    /// keys count as having one.
    may_expire: bool,
    arenas: Vec<Arena>,
    dram_budget: u64,
    log: Option<Log>,
    durability: Durability,
    max_object: usize,
    /// Most reads begun by [`Store::start_reads`] in flight at once.
    nvme_queue_depth: usize,
    sketch: Sketch,
    counters: [TierCounters; 3],
    misses: u64,
    evictions_to_nvme: u64,
    admissions_rejected: u64,
    /// Slab pages taken from one class for another ([`Store::move_page_to`]), and the objects
    /// those moves sent down a tier.
    slab_pages_moved: u64,
    slab_objects_moved: u64,
    /// Slab pages emptied by moving their objects within their tier ([`Store::compact`]), and
    /// writes placed in a larger class's free slot ([`Store::place_in_spare`]).
    slab_pages_compacted: u64,
    spare_slot_writes: u64,
    last_sync: Instant,
    last_tick: Instant,
    /// The time a command sees, while it runs ([`Store::freeze_clock`]).
    frozen_ms: Option<u64>,
    /// Values read from NVMe that no memory tier admitted, kept for the rest of the batch.
    staged: HashMap<Box<[u8]>, (Kind, Vec<u8>, u64)>,
    /// Device reads in flight ([`Store::start_reads`]): ticket → key, and the keys.
    reading: HashMap<u32, Box<[u8]>>,
    reading_keys: HashSet<Box<[u8]>>,
    /// Reads collected from the log, kept between calls to save an allocation per batch.
    finished_reads: Vec<crate::log::ReadFinished>,
    /// Values read from NVMe that no tier admitted, and when: kept staged for [`RESTAGED_FOR`].
    restaged: std::collections::VecDeque<(Instant, Box<[u8]>)>,
    /// How long those stay: [`RESTAGED_FOR`]; tests set it to make the window independent of
    /// the machine's load.
    restage_window: Duration,
    /// Where the last scan ended, for the sequential-scan prefetch hook.
    expiry_cursor: Vec<u8>,
    /// Whether `tick` samples keys to expire (Redis's active expiry; DEBUG SET-ACTIVE-EXPIRE
    /// turns it off so that tests see keys expire only when looked up).
    active_expire: bool,
    recovered_keys: u64,
    recovery: crate::Recovery,
    /// Index bytes a new key's entry will take, held while its `put` makes room.
    reserved: u64,
    /// Where `any_victim` starts looking.
    victim_class: usize,
    /// The size collection chunks are split at.
    chunk_bytes: usize,
    /// The generation the next new collection gets (see `collection`).
    next_generation: u64,
    /// Chunks written by collection changes.
    chunk_writes: u64,
    /// Changes made to what the store holds (puts, patches, deletes of live keys, flushes), not
    /// counting expiry or moves between tiers: Redis's `server.dirty`, which the server reads
    /// around a command to know whether it changed anything (and so is replicated).
    changes: u64,
    /// With [`Store::track_expired`]: the user keys removed because their TTL passed (lazily,
    /// actively, or found so by a delete), in order, until [`Store::take_expired`]: the server
    /// replicates each as `DEL` and announces it (keyspace notifications), without reading its
    /// value.
    expired: Option<Vec<Vec<u8>>>,
    /// Injected failures (tests): chunk writes and chunk deletes left before they fail.
    chunk_faults: (Option<u64>, Option<u64>),
    /// The longest value kept whole (one slot, one log record); longer strings are kept in
    /// pieces (`collection::bigstr`).
    whole_max: usize,
    /// The big string read whole last (its key and bytes), lent by [`Store::get`] until the
    /// key changes or the batch ends.
    pub(crate) assembled: Option<(Box<[u8]>, Kind, Vec<u8>)>,
    /// Where procfs is mounted, from the builder (`self/pagemap` for poisoned memory).
    pub(crate) proc_root: std::path::PathBuf,
    /// Collections changed in this batch whose writes wait for its end (`collection`).
    pub(crate) open: crate::collection::open::OpenCollections,
    /// The nodes the last write-back wrote, kept decoded (`collection::open::WrittenNodes`).
    pub(crate) written_nodes: crate::collection::open::WrittenNodes,
    /// Whether changed collections are kept open across a batch (the server's mode).
    pub(crate) collection_write_back: bool,
    /// A write-back that failed at [`Store::end_batch`], returned by the next commit.
    write_back_failed: Option<StoreError>,
    /// How keys' accesses are recorded in their entries (LRU clock or LFU counter), and the
    /// eviction policy and pool that choose by them (`evict`).
    pub(crate) access: crate::eviction::AccessTracker,
    pub(crate) eviction: evict::Eviction,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({} keys, {:?})", self.index.len(), self.arenas)
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Store {
    /// The time a command sees: the time frozen by [`Store::freeze_clock`], or the clock's.
    pub(crate) fn now_ms(&self) -> u64 {
        self.frozen_ms.unwrap_or_else(now_ms)
    }

    /// Freeze the time expiries and access clocks are judged by at `ms` (since the epoch) until
    /// [`Store::thaw_clock`], as Redis does for the length of a command: a command sees one
    /// time however many keys it looks at (a key does not expire between its EXISTS and its
    /// GET in one MULTI), and a short command reads the clock once instead of at every lookup.
    /// The background work of [`Store::tick`] always reads the clock.
    pub fn freeze_clock(&mut self, ms: u64) {
        self.frozen_ms = Some(ms);
    }

    /// The time frozen by [`Store::freeze_clock`], if it is.
    pub fn frozen_clock(&self) -> Option<u64> {
        self.frozen_ms
    }

    /// Judge expiries by the clock again.
    pub fn thaw_clock(&mut self) {
        self.frozen_ms = None;
    }
}

fn is_expired(e: &Entry, now: u64) -> bool {
    e.is_expired(now)
}

/// The NUMA nodes the store may pick from, as the caller gave them when the store is built.
struct Nodes<'a> {
    topo: Option<&'a cxltier_topo::Topology>,
    proc_root: &'a std::path::Path,
}

impl Nodes<'_> {
    /// Whether `node` exists (without a topology, only node 0 does: a kernel without NUMA).
    fn exists(&self, node: u32) -> bool {
        match self.topo {
            Some(t) => t.nodes.iter().any(|n| n.id == node),
            None => node == 0,
        }
    }

    /// The node ids present, for error messages.
    fn present(&self) -> String {
        let mut v: Vec<u32> = match self.topo {
            Some(t) => t.nodes.iter().map(|n| n.id).collect(),
            None => vec![0],
        };
        v.sort_unstable();
        v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    }

    /// The node of the CPU this thread runs on (`/proc/self/stat` field 39), when it has memory;
    /// else the first node with CPUs and memory; else node 0.
    fn local(&self) -> u32 {
        let Some(t) = self.topo else { return 0 };
        let cpu = std::fs::read_to_string(self.proc_root.join("self/stat"))
            .ok()
            .and_then(|s| {
                // Fields after the command name, which is in parentheses and may hold spaces.
                let rest = &s[s.rfind(')')? + 2..];
                rest.split_whitespace().nth(36)?.parse::<u32>().ok()
            });
        let with_mem = |n: &&cxltier_topo::Node| n.online && n.has_memory();
        cpu.and_then(|c| {
            t.nodes
                .iter()
                .filter(with_mem)
                .find(|n| n.cpus.contains(&c))
        })
        .or_else(|| t.nodes.iter().filter(with_mem).find(|n| !n.cpus.is_empty()))
        .map(|n| n.id)
        .unwrap_or(0)
    }

    /// The first CPU-less memory node: a CXL node if the topology identifies one, else any
    /// memory-only node.
    fn cpuless(&self) -> Option<u32> {
        use cxltier_topo::NodeKind;
        let t = self.topo?;
        let usable = |n: &&cxltier_topo::Node| n.online && n.has_memory() && n.cpus.is_empty();
        t.nodes
            .iter()
            .filter(usable)
            .find(|n| n.kind == NodeKind::Cxl)
            .or_else(|| t.nodes.iter().find(usable))
            .map(|n| n.id)
    }
}

/// Refuse limits under which some value within `--max-object` could never be stored: the DRAM
/// arena is carved into slab pages sized for the largest object, and the DRAM budget (less the
/// index) must have room for one, or nothing is ever stored in DRAM; a record on the NVMe log
/// lies in one segment. (A CXL arena always maps at least one page, whatever `--cxl` says.)
fn check_limits(
    b: &StoreBuilder,
    whole_max: usize,
    max_slot: usize,
    empty_index: u64,
) -> Result<()> {
    let page = crate::arena::page_size_for(max_slot) as u64;
    let mib = |n: u64| format!("{}M", n.div_ceil(1 << 20));
    // The largest object whose slab pages fit in `bytes`: its slots are at most half a page
    // larger than a power of two below it.
    let largest_for = |bytes: u64| -> u64 {
        let pages = 1u64 << (63 - bytes.max(1 << 20).leading_zeros());
        pages.saturating_sub((crate::arena::SLOT_HEADER + 256) as u64)
    };
    if b.dram_bytes < page + empty_index {
        return Err(StoreError::Config(format!(
            "values kept whole (up to {whole_max} bytes) need slab pages of {} bytes, and --dram {} less the index and frequency sketch ({empty_index} bytes) holds none: no value could ever be stored in DRAM. Give --dram of at least {} or --max-object of at most {}",
            page,
            b.dram_bytes,
            mib(page + empty_index),
            largest_for(b.dram_bytes.saturating_sub(empty_index)),
        )));
    }
    if b.ssd.is_some() {
        let max = crate::log::max_value_len(crate::log::DEFAULT_SEGMENT_SIZE, MAX_PARTS_KEY);
        if whole_max > max {
            return Err(StoreError::Config(format!(
                "values kept whole (up to {whole_max} bytes) are larger than a record of the NVMe log can hold ({max} bytes: a segment of {} bytes less its header, the record's header and the longest key): give --max-object of at most {max}",
                crate::log::DEFAULT_SEGMENT_SIZE
            )));
        }
    }
    Ok(())
}

impl Store {
    pub(crate) fn build(mut b: StoreBuilder) -> Result<Store> {
        // A store of small objects (`--max-object 4K`) keeps working: the default chunk shrinks
        // to half the largest object; only a size asked for is refused.
        let whole_max = b.max_object.min(crate::collection::WHOLE_MAX);
        if !b.chunk_bytes_set {
            b.chunk_bytes = b.chunk_bytes.min(whole_max / 2);
        }
        if b.max_object < 16 || b.max_object > crate::MAX_VALUE {
            return Err(StoreError::Config(format!(
                "--max-object {} must be between 16 bytes and {}M (Redis's proto-max-bulk-len): give a smaller --max-object",
                b.max_object,
                crate::MAX_VALUE >> 20
            )));
        }
        if b.nvme_queue_depth == 0 || b.nvme_queue_depth > ASYNC_READS {
            return Err(StoreError::Config(format!(
                "--nvme-queue-depth {}: give between 1 and {ASYNC_READS} reads at the device at once",
                b.nvme_queue_depth
            )));
        }
        if b.dram_bytes < 8 << 20 {
            return Err(StoreError::Config(format!(
                "--dram {} is too small: give at least 8M (the index and the frequency sketch live there too)",
                b.dram_bytes
            )));
        }
        if b.chunk_bytes < crate::collection::MIN_CHUNK_BYTES || b.chunk_bytes > whole_max / 2 {
            return Err(StoreError::Config(format!(
                "collection chunks of {} bytes: give between {} bytes and half the largest value kept whole ({})",
                b.chunk_bytes,
                crate::collection::MIN_CHUNK_BYTES,
                whole_max / 2
            )));
        }
        if b.ssd.is_none() && b.durability != Durability::None {
            return Err(StoreError::Config(
                "durability everysec or always needs an NVMe tier: add --ssd PATH:SIZE, or use --durability none"
                    .into(),
            ));
        }
        let nodes = Nodes {
            topo: b.topology.as_ref(),
            proc_root: &b.proc_root,
        };
        for (what, n) in [("--dram-node", b.dram_node), ("--cxl-node", b.cxl_node)] {
            if let Some(n) = n {
                if !nodes.exists(n) {
                    return Err(StoreError::Config(format!(
                        "{what} {n}: there is no NUMA node {n} (nodes present: {}); see `cxltier topo`",
                        nodes.present()
                    )));
                }
            }
        }
        let dram_node = b.dram_node.unwrap_or_else(|| nodes.local());
        let max_slot = whole_max + crate::arena::SLOT_HEADER + 256;
        let sketch = Sketch::new(Sketch::width_for_keys(0));
        check_limits(
            &b,
            whole_max,
            max_slot,
            Index::new().bytes() + sketch.bytes(),
        )?;
        let mut arenas = vec![Arena::new(
            "dram",
            dram_node,
            false,
            b.dram_bytes,
            max_slot,
        )?];
        if b.cxl_bytes > 0 {
            let (node, emulated) = match b.cxl_node.or_else(|| nodes.cpuless()) {
                Some(n) => (n, false),
                None => (dram_node, true),
            };
            arenas.push(Arena::new("cxl", node, emulated, b.cxl_bytes, max_slot)?);
        }
        let mut store = Store {
            index: Index::new(),
            may_expire: false,
            arenas,
            dram_budget: b.dram_bytes,
            log: None,
            durability: b.durability,
            max_object: b.max_object,
            nvme_queue_depth: b.nvme_queue_depth as usize,
            sketch,
            counters: Default::default(),
            misses: 0,
            evictions_to_nvme: 0,
            admissions_rejected: 0,
            slab_pages_moved: 0,
            slab_objects_moved: 0,
            slab_pages_compacted: 0,
            spare_slot_writes: 0,
            last_sync: Instant::now(),
            last_tick: Instant::now(),
            frozen_ms: None,
            staged: HashMap::new(),
            reading: HashMap::new(),
            reading_keys: HashSet::new(),
            finished_reads: Vec::new(),
            restaged: std::collections::VecDeque::new(),
            restage_window: RESTAGED_FOR,
            expiry_cursor: Vec::new(),
            active_expire: true,
            recovered_keys: 0,
            recovery: crate::Recovery::default(),
            reserved: 0,
            victim_class: 0,
            access: crate::eviction::AccessTracker::default(),
            eviction: evict::Eviction::default(),
            chunk_bytes: b.chunk_bytes,
            // Generations only need to differ between the lives of one key; starting from the
            // clock keeps them growing across restarts without a stored counter.
            next_generation: now_ms() << 16,
            chunk_writes: 0,
            changes: 0,
            expired: None,
            chunk_faults: (None, None),
            whole_max,
            assembled: None,
            proc_root: b.proc_root.clone(),
            open: Default::default(),
            written_nodes: Default::default(),
            collection_write_back: b.collection_write_back,
            write_back_failed: None,
        };
        if let Some(ssd) = &b.ssd {
            let mut cfg = LogConfig::new(&ssd.path, ssd.capacity);
            cfg.recover_anyway = b.recover_anyway;
            store.open_log(cfg)?;
            store.may_expire = store.index.len() > 0;
        }
        Ok(store)
    }

    /// Open the log and rebuild the index from it.
    fn open_log(&mut self, cfg: LogConfig) -> Result<()> {
        let now = now_ms();
        let mut index = Index::new();
        // Deleted (or expired) keys: the delete's record sequence, its place in write order and,
        // for a delete written as a tombstone, where that is and what it shields
        // ([`crate::log::Recovered::tombstone_before`]).
        type Deleted = (u64, WritePos, Option<(NvLoc, u64)>);
        let mut deleted: HashMap<Box<[u8]>, Deleted> = HashMap::new();
        let mut dead: Vec<NvLoc> = Vec::new();
        let mut flush_seq = 0u64;
        // Segment index → sequence number, for the place in write order of an entry's record.
        let mut segment_seqs: HashMap<u32, u64> = HashMap::new();
        let opened = Log::open(&cfg, &mut |r| {
            segment_seqs.insert(r.loc.segment, r.segment_seq);
            let at = (r.segment_seq, r.loc.offset as u64);
            if r.flush_all {
                flush_seq = r.seq;
                dead.extend(index.values().filter_map(|e| e.nv()));
                dead.extend(deleted.drain().filter_map(|(_, (_, _, t))| t.map(|t| t.0)));
                index.clear();
                dead.push(r.loc);
                return;
            }
            if r.seq < flush_seq || deleted.get(r.key).is_some_and(|&(s, _, _)| s > r.seq) {
                dead.push(r.loc);
                return;
            }
            if let Some(e) = index.get(r.key) {
                if e.seq() > r.seq {
                    dead.push(r.loc);
                    return;
                }
            }
            let old = index.remove(r.key);
            if let Some(nv) = old.as_ref().and_then(|e| e.nv()) {
                dead.push(nv);
            }
            // A newer record supersedes an older delete: its tombstone shields nothing now.
            if let Some((_, _, Some((t, _)))) = deleted.remove(r.key) {
                dead.push(t);
            }
            if r.tombstone {
                deleted.insert(
                    r.key.into(),
                    (r.seq, at, Some((r.loc, r.tombstone_before()))),
                );
                return;
            }
            if r.expires_at_ms.is_some_and(|t| t <= now) {
                // Like a tombstone: older versions replayed later (records relocated by cleaning
                // come back out of order) must not reappear.
                deleted.insert(r.key.into(), (r.seq, at, None));
                dead.push(r.loc);
                return;
            }
            index.insert(r.key, {
                let mut e = Entry::new(
                    Place::Nvme,
                    Some(r.loc),
                    false,
                    r.value_len,
                    r.kind,
                    r.expires_at_ms.unwrap_or(0),
                );
                e.set_recovery_seq(r.seq);
                // As Redis loading a snapshot: every key counts as accessed at the load.
                e.set_access(access_clock(now));
                e
            });
        });
        // Keys whose newest readable record (value or delete) lies before the latest damage in
        // write order: the damaged bytes may have held a newer version or a delete of any of them.
        let stale = |report: &crate::log::OpenReport| -> u64 {
            let Some(last) = report.last_damage() else {
                return 0;
            };
            let values = index
                .values()
                .filter_map(|e| e.nv())
                .filter(|l| (segment_seqs[&l.segment], l.offset as u64) < last)
                .count();
            let deletes = deleted.values().filter(|&&(_, at, _)| at < last).count();
            (values + deletes) as u64
        };
        let (mut log, report) = match opened {
            Ok(o) => o,
            Err(StoreError::Damaged(mut d)) => {
                d.keys_possibly_stale = Some(stale(&d.report));
                return Err(StoreError::Damaged(d));
            }
            Err(e) => return Err(e),
        };
        let keys_possibly_stale = stale(&report);
        for loc in dead {
            log.mark_dead(loc);
        }
        // Each key's newest delete keeps its tombstone while older segments live.
        for (_, _, t) in deleted.into_values() {
            if let Some((loc, before)) = t {
                log.note_tombstone(loc, before);
            }
        }
        log.release_tombstones();
        self.recovered_keys = index.user_len() as u64;
        self.recovery = crate::Recovery {
            keys_recovered: index.user_len() as u64,
            records: report.records,
            segments_replayed: report.segments_replayed,
            damaged_bytes: report.damaged_bytes(),
            damaged_ranges: report.damaged,
            keys_possibly_stale,
            torn_tail: report.torn_tail,
            headers_repaired: report.headers_repaired,
            chunks_dropped: 0,
        };
        self.sketch.fit_keys(index.len());
        self.index = index;
        self.log = Some(log);
        if self.index_bytes() > self.dram_budget {
            return Err(StoreError::Config(format!(
                "the log holds {} keys whose index needs {} bytes, more than --dram {}: raise --dram",
                self.index.len(),
                self.index_bytes(),
                self.dram_budget
            )));
        }
        self.recovery.chunks_dropped = self.drop_orphan_chunks()?;
        self.recovered_keys = self.index.user_len() as u64;
        self.recovery.keys_recovered = self.recovered_keys;
        Ok(())
    }

    /// What recovery found when the store was opened: keys, damaged ranges, keys possibly stale.
    pub fn recovery(&self) -> &crate::Recovery {
        &self.recovery
    }

    /// The largest value accepted.
    pub fn max_object(&self) -> usize {
        self.max_object
    }

    /// Change the largest value accepted (`CONFIG SET proto-max-bulk-len`): 16 bytes to
    /// [`crate::MAX_VALUE`]. Slab pages and log records keep the sizes chosen at build (values
    /// past the longest one kept whole are kept in pieces), so any size in range works.
    pub fn set_max_object(&mut self, bytes: usize) -> Result<()> {
        if !(16..=crate::MAX_VALUE).contains(&bytes) {
            return Err(StoreError::Config(format!(
                "the largest value must be between 16 bytes and {}M, not {bytes} bytes",
                crate::MAX_VALUE >> 20
            )));
        }
        self.max_object = bytes;
        Ok(())
    }

    /// Keys recovered from NVMe when the store was opened.
    pub fn recovered_keys(&self) -> u64 {
        self.recovered_keys
    }

    fn index_bytes(&self) -> u64 {
        self.index.bytes() + self.sketch.bytes() + self.reserved
    }

    /// Remove an expired entry. When its memory copy is dirty (write-back) the log's copy is an
    /// older version without this expiry, which recovery would bring back: a tombstone buries it
    /// (best effort: if the log is full the old version may return after a restart).
    fn expire(&mut self, key: &[u8]) {
        if let Some(expired) = self.expired.as_mut() {
            if !is_internal_key(key) && self.index.contains_key(key) {
                expired.push(key.to_vec());
            }
        }
        if let Some(e) = self.index.get(key) {
            if let (true, Some(_), Some(log)) = (e.dirty(), e.nv(), self.log.as_mut()) {
                let _ = log.append_tombstone(key);
            }
        }
        self.drop_entry(key);
    }

    /// Remove an entry (expired or deleted) and release its memory; the log copy is dead.
    fn drop_entry(&mut self, key: &[u8]) -> Option<Entry> {
        self.forget_open_collection(key);
        let e = self.index.remove(key)?;
        self.staged.remove(key);
        self.forget_assembled(key);
        self.free_place(e.place());
        if let (Some(nv), Some(log)) = (e.nv(), self.log.as_mut()) {
            log.mark_dead(nv);
        }
        if e.kind().is_collection() {
            self.drop_chunks_of(key);
        }
        Some(e)
    }

    /// Look a key up (expired keys are absent); counts an access, may promote.
    /// A string kept in pieces is read whole (see [`Store::get_range`] for a part of it).
    pub fn get(&mut self, key: &[u8]) -> Result<Option<ObjectRef<'_>>> {
        if is_internal_key(key) {
            self.misses += 1;
            return Ok(None);
        }
        self.get_inner(key, true)
    }

    /// [`Store::get`] of a user's key, a big string's root as it is stored.
    pub(crate) fn get_root(&mut self, key: &[u8]) -> Result<Option<ObjectRef<'_>>> {
        if is_internal_key(key) {
            self.misses += 1;
            return Ok(None);
        }
        self.get_raw(key)
    }

    /// The longest value kept whole.
    pub(crate) fn whole_max(&self) -> usize {
        self.whole_max
    }

    /// The value length of `key`'s entry (a big string's: its root's).
    pub(crate) fn entry_len(&self, key: &[u8]) -> Option<u64> {
        self.index.get(key).map(|e| e.len() as u64)
    }

    /// [`Store::get`] for any key, collection chunks included.
    fn get_raw(&mut self, key: &[u8]) -> Result<Option<ObjectRef<'_>>> {
        self.get_inner(key, false)
    }

    /// [`Store::get_raw`]; with `whole`, a big value is read whole (its root, then its pieces).
    /// The kind is checked on the entry the lookup found: a GET costs no second lookup.
    fn get_inner(&mut self, key: &[u8], whole: bool) -> Result<Option<ObjectRef<'_>>> {
        // A collection changed in this batch is written back before its root is read here.
        self.settle_collection(key)?;
        let now = self.now_ms();
        let Some(e) = self.index.get_mut(key) else {
            self.misses += 1;
            return Ok(None);
        };
        if is_expired(e, now) {
            self.expire(key);
            self.misses += 1;
            return Ok(None);
        }
        let bits = self.access.accessed(e.access(), now);
        e.set_access(bits);
        let e = *e;
        if whole && e.kind() == Kind::BigString {
            return self.get_big(key);
        }
        let place = e.place();
        if let Place::Mem(t, off) = place {
            self.arenas[t as usize].touch(off);
        }
        self.sketch.touch(key);
        match place {
            Place::Mem(t, off) => {
                self.counters[t as usize].hits += 1;
                if t as usize == CXL && self.sketch.estimate(key) >= PROMOTE_MIN {
                    self.promote(key)?;
                } else {
                    // Staying where it is (the common hit): answer from the entry in hand.
                    return Ok(Some(ObjectRef {
                        kind: e.kind(),
                        value: self.arenas[t as usize].value(off, key.len(), e.len() as usize),
                        expires_at_ms: (e.expires() != 0).then_some(e.expires()),
                    }));
                }
            }
            Place::Nvme => {
                self.counters[2].hits += 1;
                let value = match self.staged.remove(key) {
                    Some((_, v, _)) => v,
                    None => {
                        let nv = self.index[key]
                            .nv()
                            .expect("an NVMe-only entry has a log copy");
                        self.log.as_mut().expect("log").read(nv)?.value
                    }
                };
                self.admit_from_nvme(key, value)?;
            }
        }
        Ok(self.peek_raw(key))
    }

    /// The expiry of `key` from the index alone (nothing read, wherever the value lives):
    /// `None` when the key is absent, `Some(None)` when it has no expiry.
    pub fn expiry_of(&self, key: &[u8]) -> Option<Option<u64>> {
        if is_internal_key(key) {
            return None;
        }
        let e = self.index.get(key)?;
        Some((e.expires() != 0).then_some(e.expires()))
    }

    /// The object where it is now, without counting an access or moving anything: for a
    /// command that already read the key with [`Store::get`] in this batch and needs its value
    /// again (a value that get read from NVMe is still at hand). `None` when the key is absent,
    /// or only on NVMe and not read in this batch.
    pub fn peek(&self, key: &[u8]) -> Option<ObjectRef<'_>> {
        if is_internal_key(key) {
            return None;
        }
        let o = self.peek_raw(key)?;
        if o.kind == Kind::BigString {
            return self.assembled_ref(key, o.expires_at_ms);
        }
        Some(o)
    }

    pub(crate) fn peek_raw(&self, key: &[u8]) -> Option<ObjectRef<'_>> {
        let e = self.index.get(key)?;
        let value = match e.place() {
            Place::Mem(t, off) => self.arenas[t as usize].value(off, key.len(), e.len() as usize),
            Place::Nvme => self.staged.get(key).map(|s| s.1.as_slice())?,
        };
        Some(ObjectRef {
            kind: e.kind(),
            value,
            expires_at_ms: (e.expires() != 0).then_some(e.expires()),
        })
    }

    /// Insert or replace. Replacing a collection (a list, set, sorted set or chunked hash)
    /// deletes its parts; writing one of those kinds here is refused (the collection API
    /// writes them), as is a key starting with the bytes the store keeps for collection parts.
    pub fn put(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        if is_internal_key(key) {
            return Err(StoreError::Config(format!(
                "keys may not start with the bytes {:?}: the store keeps them for the parts of collections",
                CHUNK_PREFIX
            )));
        }
        if kind.is_collection() || kind == Kind::Chunk {
            return Err(StoreError::Config(format!(
                "a {} is written through the store's collection calls, not as one value",
                kind.type_name()
            )));
        }
        if value.len() > self.max_object {
            return Err(StoreError::TooLarge {
                len: value.len(),
                max: self.max_object,
            });
        }
        if value.len() > self.whole_max {
            return self.big_put(key, kind, value, expires_at_ms);
        }
        // One index lookup for the write (an INCR or a SET of an existing key): the slot found
        // here is the one the write goes to, unless a collection under the key is deleted first.
        self.settle_collection(key)?;
        let mut slot = self.index.slot_of(key);
        if slot.is_some_and(|s| self.index.entry_at(s).kind().is_collection()) {
            self.delete_collection(key)?;
            slot = self.index.slot_of(key);
        }
        self.put_raw_at(slot, 0, key, kind, value, expires_at_ms)
    }

    /// [`Store::put`] for any key and kind, leaving an existing collection's parts alone (the
    /// collection code writes its roots and chunks with it), into a memory slot with `room`
    /// bytes to spare beyond the value where a tier has one (with 0, or else, the value's own
    /// size class).
    pub(crate) fn put_raw(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        expires_at_ms: Option<u64>,
        room: usize,
    ) -> Result<()> {
        // Whatever replaces a collection changed in this batch comes after its write-back.
        self.settle_collection(key)?;
        let slot = self.index.slot_of(key);
        self.put_raw_at(slot, room, key, kind, value, expires_at_ms)
    }

    /// [`Store::put_raw`] once `key`'s collection is settled and its slot looked up: where the
    /// write goes first (`slot`: where the key's entry is now, `None` for a new key; `room` as
    /// for [`Store::put_raw`]), then what is written.
    fn put_raw_at(
        &mut self,
        slot: Option<SlotId>,
        room: usize,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        if value.len() > self.whole_max {
            return Err(StoreError::TooLarge {
                len: value.len(),
                max: self.whole_max,
            });
        }
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(StoreError::Config(format!(
                "keys must be 1 to {MAX_KEY} bytes, not {}",
                key.len()
            )));
        }
        if expires_at_ms.is_some_and(|t| t <= self.now_ms()) {
            // Already expired (e.g. EXPIREAT in the past): the write is a delete.
            self.delete_raw(key)?;
            return Ok(());
        }
        self.changes += 1;
        if !self.staged.is_empty() {
            self.staged.remove(key);
        }
        self.forget_assembled(key);
        if slot.is_some() {
            return self.put_inner(key, slot, kind, value, expires_at_ms, room);
        }
        // The new entry, and the sketch's growth when the store outgrows it.
        let entry = self.index.growth_for(key) + self.sketch.growth_for_keys(self.index.len() + 1);
        if self.index_bytes() + entry > self.dram_budget {
            return Err(StoreError::Full {
                detail: format!(
                    "the index of {} keys fills the DRAM budget of {} bytes: raise --dram",
                    self.index.len(),
                    self.dram_budget
                ),
            });
        }
        // Hold the new entry's index bytes while room is made, so DRAM objects and the index
        // never add up to more than the budget.
        self.reserved = entry;
        let r = match self.fit_dram_to_budget() {
            Ok(true) => self.put_inner(key, None, kind, value, expires_at_ms, room),
            Ok(false) => Err(StoreError::Full {
                detail: format!(
                    "DRAM ({} bytes, {} of them index) has no object to move down for a new key: {}",
                    self.dram_budget,
                    self.index_bytes(),
                    if self.log.is_none() {
                        "add --ssd PATH:SIZE or raise --dram/--cxl"
                    } else {
                        "raise --dram"
                    }
                ),
            }),
            Err(e) => Err(e),
        };
        self.reserved = 0;
        if r.is_ok() {
            self.sketch.fit_keys(self.index.len());
        }
        r
    }

    /// An update that keeps the object's slot size (the common YCSB update: one field rewritten
    /// at the same length) is written over the old bytes in place: no new slot, no new index
    /// entry. False when the object is not in memory or needs another slot size.
    fn rewrite_in_place(
        &mut self,
        key: &[u8],
        slot: SlotId,
        kind: Kind,
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let Place::Mem(t, off) = self.index.entry_at(slot).place() else {
            return Ok(false);
        };
        let now = self.now_ms();
        if !self.arenas[t as usize].fits_in_place(off, key.len(), value.len()) {
            return Ok(false);
        }
        let nv = if self.log.is_some() && self.durability != Durability::None {
            Some(self.log_append(key, kind, value, expires_at_ms)?)
        } else {
            None
        };
        self.arenas[t as usize].rewrite(off, key.len(), value);
        self.arenas[t as usize].touch(off);
        // Read the entry's log copy only now: the append may have cleaned segments and moved it
        // (so the entry is looked up again; without an append nothing touched the index).
        let e = if nv.is_some() {
            self.index.get_mut(key).expect("present")
        } else {
            self.index.entry_at_mut(slot)
        };
        if nv.is_some() {
            if let (Some(old), Some(log)) = (e.nv(), self.log.as_mut()) {
                log.mark_dead(old);
            }
            e.set_nv(nv);
            e.set_dirty(false);
        } else {
            // Write-back: the old log version stays the key's copy until this one is written back
            // (see put_inner).
            e.set_dirty(true);
        }
        e.set_len(value.len() as u32);
        e.set_kind(kind);
        e.set_expires(expires_at_ms.unwrap_or(0));
        // A write is an access (Redis's lookup for writing).
        let bits = self.access.accessed(e.access(), now);
        e.set_access(bits);
        self.may_expire |= expires_at_ms.is_some();
        self.sketch.touch(key);
        Ok(true)
    }

    /// Overwrite part of an object's value where it is: `bytes` at `at` (the value keeps its
    /// length), without reading and writing the whole value in memory. True when done; false
    /// when the key is absent, expired or only on NVMe, or the range is not inside its value:
    /// the caller then writes the whole value with [`Store::put`]. With durability on, the whole
    /// new value still goes to the log (its records are whole values). It does not count as an
    /// access for admission: the caller read the key (with [`Store::get`]) to find the range,
    /// and that read counted.
    pub fn patch(&mut self, key: &[u8], at: usize, bytes: &[u8]) -> Result<bool> {
        let Some(e) = self.index.get(key).copied() else {
            return Ok(false);
        };
        if e.kind().is_collection() || e.kind() == Kind::Chunk {
            return Ok(false);
        }
        let Place::Mem(t, off) = e.place() else {
            return Ok(false);
        };
        let len = e.len() as usize;
        if e.is_expired(self.now_ms()) || at.checked_add(bytes.len()).is_none_or(|end| end > len) {
            return Ok(false);
        }
        let t = t as usize;
        let nv = if self.log.is_some() && self.durability != Durability::None {
            let mut value = self.arenas[t].value(off, key.len(), len).to_vec();
            value[at..at + bytes.len()].copy_from_slice(bytes);
            let expires = (e.expires() != 0).then_some(e.expires());
            Some(self.log_append(key, e.kind(), &value, expires)?)
        } else {
            None
        };
        self.arenas[t].rewrite_at(off, key.len(), at, bytes);
        self.changes += 1;
        self.arenas[t].touch(off);
        self.staged.remove(key);
        // Read the entry's log copy only now: the append may have cleaned segments and moved it.
        let e = self.index.get_mut(key).expect("present");
        match nv {
            Some(nv) => {
                if let (Some(old), Some(log)) = (e.nv(), self.log.as_mut()) {
                    log.mark_dead(old);
                }
                e.set_nv(Some(nv));
                e.set_dirty(false);
            }
            // Write-back: the old log version stays the key's copy until this one is written
            // back (see put_inner).
            None => e.set_dirty(true),
        }
        Ok(true)
    }

    /// `slot`: the key's index slot when it exists (found by the caller, which looked already).
    fn put_inner(
        &mut self,
        key: &[u8],
        slot: Option<SlotId>,
        kind: Kind,
        value: &[u8],
        expires_at_ms: Option<u64>,
        room: usize,
    ) -> Result<()> {
        if let Some(slot) = slot {
            if self.rewrite_in_place(key, slot, kind, value, expires_at_ms)? {
                return Ok(());
            }
        }
        // Recent writes are hot (the insert-recency hook): they go to DRAM, making room by
        // demotion; else CXL. Except an update of a key that lives only on NVMe (its read was
        // not admitted): it passes admission like a read would, and when it rates below what it
        // would displace, the new value goes straight to the log. Otherwise every update of a
        // cold key pushed a hotter object out of memory (YCSB-A's hit ratio was the lowest).
        let old = self.index.get(key).map(|e| (e.place(), e.len() as usize));
        let candidate = match old {
            Some((Place::Nvme, _)) if self.log.is_some() => Some(self.sketch.estimate(key)),
            _ => None,
        };
        // An object in memory written larger than it was is growing (a list's end chunk under
        // pushes, an APPEND): it gets an eighth more room, so that its next writes fit in place
        // (`rewrite_in_place`) instead of each taking a slot of the next size class. Without
        // room to spare anywhere, the value's own size is placed.
        let growing = matches!(old, Some((Place::Mem(..), len)) if value.len() > len);
        let room = if growing {
            room.max((crate::arena::SLOT_HEADER + key.len() + value.len()) / 8)
        } else {
            room
        };
        let mut place = None;
        'tiers: for t in 0..self.arenas.len() {
            for room in [room, 0].into_iter().take(if room > 0 { 2 } else { 1 }) {
                if self.make_room(t, key, value.len() + room, candidate)? {
                    place = self.place_in(t, key, value, room);
                    if place.is_some() {
                        break 'tiers;
                    }
                }
            }
        }
        // No tier had room in the value's own class (nor a page for it, from anywhere): a free
        // slot of a larger class, which wastes part of itself, before the log or a refusal. A
        // value read from the log (`candidate`) that lost admission stays there instead.
        if place.is_none() && candidate.is_none() {
            place = (0..self.arenas.len()).find_map(|t| self.place_in_spare(t, key, value));
        }
        let nv = if self.log.is_some() && (self.durability != Durability::None || place.is_none()) {
            match self.log_append(key, kind, value, expires_at_ms) {
                Ok(loc) => Some(loc),
                Err(e) => {
                    if let Some(p) = place {
                        self.free_place(p);
                    }
                    return Err(e);
                }
            }
        } else {
            None
        };
        let Some(place) = place.or(nv.map(|_| Place::Nvme)) else {
            return Err(StoreError::Full {
                detail: "every memory tier is full and there is no NVMe tier: add --ssd PATH:SIZE or raise --dram/--cxl"
                    .into(),
            });
        };
        // Read the old entry only now: making room may have moved it.
        let mut kept_nv = None;
        let mut old_access = None;
        if let Some(old) = self.index.get(key).cloned() {
            old_access = Some(old.access());
            self.free_place(old.place());
            if let (Some(onv), Some(log)) = (old.nv(), self.log.as_mut()) {
                if nv.is_some() {
                    log.mark_dead(onv);
                } else {
                    // Write-back: the old version stays the key's log copy (dirty = memory is
                    // newer) so that a delete or an expiry can bury it with a tombstone, and it is
                    // marked dead only when the new version is written back.
                    kept_nv = Some(onv);
                }
            }
        }
        self.may_expire |= expires_at_ms.is_some();
        let mut entry = Entry::new(
            place,
            nv.or(kept_nv),
            nv.is_none(),
            value.len() as u32,
            kind,
            expires_at_ms.unwrap_or(0),
        );
        // A write is an access (Redis's new object, or its lookup for writing: an overwrite
        // keeps the key's LFU counter, as Redis's `dbSetValue` does).
        let now = self.now_ms();
        entry.set_access(match old_access {
            Some(bits) => self.access.accessed(bits, now),
            None => self.access.fresh(now),
        });
        self.index.insert(key, entry);
        self.sketch.touch(key);
        Ok(())
    }

    /// Change only the expiry of an existing key; false when absent.
    pub fn set_expiry(&mut self, key: &[u8], expires_at_ms: Option<u64>) -> Result<bool> {
        let Some(obj) = self.get_root(key)? else {
            return Ok(false);
        };
        // A collection's root keeps its parts: rewriting the root changes only its expiry.
        let (kind, value) = (obj.kind, obj.value.to_vec());
        self.put_raw(key, kind, &value, expires_at_ms, 0)?;
        Ok(true)
    }

    /// Remove; true when the key existed. A collection goes with all its parts.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if is_internal_key(key) {
            return Ok(false);
        }
        self.delete_raw(key)
    }

    /// `COPY`: `from`'s value (of any kind, a collection with all its parts) under `to` as well,
    /// with its expiry. False when `from` is absent, or `to` exists and not `replace`. A
    /// collection's parts are copied one by one (O(parts), like Redis's COPY).
    pub fn copy_key(&mut self, from: &[u8], to: &[u8], replace: bool) -> Result<bool> {
        if is_internal_key(to) || is_internal_key(from) {
            return Ok(false);
        }
        let Some(o) = self.get_root(from)? else {
            return Ok(false);
        };
        let (kind, value, exp) = (o.kind, o.value.to_vec(), o.expires_at_ms);
        if from == to || (!replace && self.contains(to)) {
            return Ok(false);
        }
        if !kind.is_collection() {
            if self.index.get(to).is_some_and(|e| e.kind().is_collection()) {
                self.delete_collection(to)?;
            }
            self.put_raw(to, kind, &value, exp, 0)?;
            return Ok(true);
        }
        let (generation, _, _) = crate::collection::root_header(&value, from)?;
        let chunks = self.chunk_keys_of(from);
        self.delete_raw(to)?;
        // The parts first, under the new key and the same generation and ids; the root last.
        for ck in chunks {
            let Some((_, g, id)) = parse_chunk_key(&ck) else {
                continue;
            };
            if g != generation {
                continue;
            }
            let Some(bytes) = self.chunk_read(&ck)? else {
                continue;
            };
            let nk = chunk_key(to, generation, id);
            self.put_raw(&nk, Kind::Chunk, &bytes, None, 0)?;
        }
        self.put_raw(to, kind, &value, exp, 0)?;
        Ok(true)
    }

    /// `RENAME` (`RENAMENX` without `replace`): [`Store::copy_key`], then `from` deleted.
    pub fn rename(&mut self, from: &[u8], to: &[u8], replace: bool) -> Result<bool> {
        if from == to {
            return Ok(self.contains(from));
        }
        if !self.copy_key(from, to, replace)? {
            return Ok(false);
        }
        self.delete_raw(from)?;
        Ok(true)
    }

    /// Delete a collection's root and its chunks.
    pub(crate) fn delete_collection(&mut self, key: &[u8]) -> Result<bool> {
        self.delete_raw(key)
    }

    /// [`Store::delete`] for any key; a collection root's chunks go with it (`drop_entry`).
    fn delete_raw(&mut self, key: &[u8]) -> Result<bool> {
        self.staged.remove(key);
        let Some(e) = self.index.get(key) else {
            return Ok(false);
        };
        let expired = is_expired(e, self.now_ms());
        if let (Some(_), true) = (e.nv(), self.log.is_some()) {
            // The tombstone comes first: if it cannot be written, the key stays as it was.
            let log = self.log.as_mut().expect("log");
            match log.append_tombstone(key) {
                Err(StoreError::Full { .. }) => {
                    self.clean(8)?;
                    self.log.as_mut().expect("log").append_tombstone(key)?;
                }
                other => other?,
            }
        }
        if let (true, Some(keys)) = (expired, self.expired.as_mut()) {
            if !is_internal_key(key) {
                keys.push(key.to_vec());
            }
        }
        self.drop_entry(key);
        if !expired {
            self.changes += 1;
        }
        Ok(!expired)
    }

    /// Whether a live key exists, without counting an access or reading NVMe.
    pub fn contains(&mut self, key: &[u8]) -> bool {
        if is_internal_key(key) {
            return false;
        }
        match self.index.get(key) {
            Some(e) if is_expired(e, self.now_ms()) => {
                self.expire(key);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Whether the index holds `key`, past its TTL or not, without expiring it or counting an
    /// access: what a write just did (a write with an expiry already past is a delete).
    pub fn holds(&self, key: &[u8]) -> bool {
        !is_internal_key(key) && self.index.contains_key(key)
    }

    /// A live key's kind and expiry, from the index: no access counted and no value read, as
    /// Redis's `TYPE`, `TTL` and `EXPIRETIME` look (`LOOKUP_NOTOUCH`). A value kept in pieces is
    /// [`Kind::BigString`] here (its root says whether it is a string or a hash).
    pub fn key_info(&mut self, key: &[u8]) -> Option<KeyInfo> {
        if !self.contains(key) {
            return None;
        }
        let e = self.index.get(key)?;
        Some(KeyInfo {
            kind: e.kind(),
            expires_at_ms: (e.expires() != 0).then_some(e.expires()),
            idle_seconds: crate::index::idle_seconds(e.access(), access_clock(self.now_ms())),
            lfu_frequency: self.access.decayed(e.access(), self.now_ms()),
        })
    }

    /// Count an access to a live key without reading its value (`TOUCH`); false when absent.
    pub fn touch(&mut self, key: &[u8]) -> bool {
        if !self.contains(key) {
            return false;
        }
        let now = self.now_ms();
        if let Some(e) = self.index.get_mut(key) {
            let bits = self.access.accessed(e.access(), now);
            e.set_access(bits);
        }
        self.sketch.touch(key);
        true
    }

    /// How many changes the store's contents have had (puts, patches, deletes of live keys,
    /// flushes; not expiry, not moves between tiers): compared before and after a command, it
    /// says whether the command changed anything (Redis's `server.dirty`).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Keep (`true`) or stop keeping the user keys that expire, for [`Store::take_expired`]. Off
    /// by default: nobody would take them.
    pub fn track_expired(&mut self, on: bool) {
        match (on, self.expired.is_some()) {
            (true, false) => self.expired = Some(Vec::new()),
            (false, true) => self.expired = None,
            _ => {}
        }
    }

    /// The user keys removed because their TTL passed since the last call, in the order they
    /// went (lazily by a lookup or by [`Store::tick`]'s sampling); empty unless tracked.
    pub fn take_expired(&mut self) -> Vec<Vec<u8>> {
        self.expired
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Number of live keys (a collection counts once, whatever its parts).
    pub fn len(&self) -> u64 {
        self.index.user_len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.index.user_len() == 0
    }

    /// Keys of database `db` ([`db_key`]), kept count of: O(1).
    pub fn db_len(&self, db: u8) -> u64 {
        self.index.db_len(db)
    }

    /// Each database holding keys, in order: its keys, those with a TTL and the sum of their
    /// remaining times (`INFO keyspace`). A walk of the index (no value is read): O(keys).
    pub fn keyspace(&self, now_ms: u64) -> Vec<crate::DbKeyspace> {
        let mut dbs: Vec<crate::DbKeyspace> = Vec::new();
        for (k, e) in self.index.iter() {
            let Some((db, _)) = split_db_key(k) else {
                continue;
            };
            if is_expired(e, now_ms) {
                continue;
            }
            if dbs.last().is_none_or(|d| d.db != db) {
                dbs.push(crate::DbKeyspace {
                    db,
                    ..Default::default()
                });
            }
            let d = dbs.last_mut().expect("pushed above");
            d.keys += 1;
            if e.expires() != 0 {
                d.expires += 1;
                d.ttl_ms_sum += (e.expires() - now_ms) as u128;
            }
        }
        dbs
    }

    /// Remove every key of database `db` (durably, after the next commit): a delete per key,
    /// collections with their parts, so O(keys of the database); returns how many went.
    pub fn flush_db(&mut self, db: u8) -> Result<u64> {
        let start = db_key(db, b"");
        let keys: Vec<Vec<u8>> = self
            .index
            .range_from(std::ops::Bound::Included(&start[..]))
            .map(|(k, _)| k)
            .take_while(|k| in_db(k, db))
            .map(<[u8]>::to_vec)
            .collect();
        let mut n = 0;
        for k in &keys {
            n += u64::from(self.delete(k)?);
        }
        Ok(n)
    }

    /// Remove every key (durably, after the next commit).
    pub fn flush_all(&mut self) -> Result<()> {
        self.changes += 1;
        self.open.clear();
        self.written_nodes.clear();
        if let Some(log) = self.log.as_mut() {
            log.flush_all()?;
        }
        let places: Vec<Place> = self.index.values().map(Entry::place).collect();
        for p in places {
            self.free_place(p);
        }
        self.index.clear();
        self.may_expire = false;
        self.staged.clear();
        self.assembled = None;
        Ok(())
    }

    /// Whether any key may have a TTL: false only while none was written with one since the
    /// store was last empty. A command's keys need no lazy-expiry look-up when it is false.
    pub fn may_have_expiring_keys(&self) -> bool {
        self.may_expire
    }

    /// Group commit: make this batch's writes as durable as the durability setting promises; and
    /// write the open log segment ahead in pieces of [`WRITE_AHEAD_BYTES`].
    pub fn commit(&mut self) -> Result<()> {
        // The collections changed in this batch are written before the sync, so that it covers
        // every acknowledged change; a write-back that failed at the batch's end fails here.
        self.settle_collections()?;
        if let Some(e) = self.write_back_failed.take() {
            return Err(e);
        }
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        match self.durability {
            Durability::Always => {
                if log.has_unflushed() {
                    log.sync(true)?;
                }
            }
            Durability::EverySec => {
                if self.last_sync.elapsed() >= Duration::from_secs(1) && log.has_unflushed() {
                    log.sync(true)?;
                    self.last_sync = Instant::now();
                }
            }
            Durability::None => {}
        }
        // Whatever the durability, the open segment goes out in pieces as it fills.
        log.write_ahead(WRITE_AHEAD_BYTES)?;
        Ok(())
    }

    /// Background work; cheap when there is nothing to do.
    pub fn tick(&mut self) -> Result<()> {
        self.commit()?;
        if self.last_tick.elapsed() < Duration::from_millis(10) {
            return Ok(());
        }
        self.last_tick = Instant::now();
        // Watermark demotion, tier by tier.
        for t in 0..self.arenas.len() {
            let limit = self.fillable(t) as f64;
            let has_lower = self.log.is_some() || (t == DRAM && self.arenas.len() > CXL);
            if has_lower && (self.arenas[t].used_bytes as f64) > limit * HIGH_WATERMARK {
                let mut budget = 256;
                while (self.arenas[t].used_bytes as f64) > limit * LOW_WATERMARK && budget > 0 {
                    budget -= 1;
                    let Some(v) = self.any_victim(t) else { break };
                    if !self.demote(&v, 0)? {
                        break;
                    }
                }
            }
        }
        // Expiry sampling from a rotating cursor.
        if !self.active_expire {
            return self.clean_if_needed();
        }
        let now = now_ms();
        let sample: Vec<(Vec<u8>, bool)> = self
            .index
            .range_from(Bound::Excluded(self.expiry_cursor.as_slice()))
            .take(32)
            .map(|(k, e)| (k.to_vec(), is_expired(e, now)))
            .collect();
        self.expiry_cursor = sample.last().map(|s| s.0.clone()).unwrap_or_default();
        for (k, expired) in sample {
            if expired {
                self.expire(&k);
            }
        }
        self.clean_if_needed()
    }

    fn clean_if_needed(&mut self) -> Result<()> {
        if self.log.as_ref().is_some_and(|l| l.needs_cleaning()) {
            self.clean(2)?;
        }
        Ok(())
    }

    /// Turns the expiry sampling of [`Store::tick`] off or on (on by default): while off, a
    /// key past its TTL goes only when something looks it up.
    pub fn set_active_expire(&mut self, on: bool) {
        self.active_expire = on;
    }

    /// Write everything out and sync (clean shutdown): dirty objects are written back.
    pub fn close(mut self) -> Result<()> {
        self.settle_collections()?;
        if self.log.is_none() {
            return Ok(());
        }
        let dirty: Vec<Vec<u8>> = self
            .index
            .iter()
            .filter(|(_, e)| e.dirty())
            .map(|(k, _)| k.to_vec())
            .collect();
        for k in dirty {
            let e = &self.index[k.as_slice()];
            let Place::Mem(t, off) = e.place() else {
                continue;
            };
            let (kind, len, exp) = (e.kind(), e.len() as usize, e.expires());
            let value = self.arenas[t as usize].value(off, k.len(), len).to_vec();
            let loc = self.log_append(&k, kind, &value, (exp != 0).then_some(exp))?;
            let e = self.index.get_mut(k.as_slice()).expect("present");
            let old = e.nv();
            e.set_nv(Some(loc));
            e.set_dirty(false);
            if let Some(old) = old {
                self.log.as_mut().expect("log").mark_dead(old);
            }
        }
        self.log.as_mut().expect("log").sync(true)
    }
}
