//! An object store tiered over DRAM, CXL memory and an NVMe log.
//!
//! Every object lives in exactly one memory tier (DRAM or CXL: exclusive caching) or only on NVMe.
//! The NVMe tier ([`log`]) is a log-structured file or block device opened with `O_DIRECT` and
//! driven by io_uring; it holds everything that does not fit in memory, so demotion never drops
//! data, and (with durability on) it is also the write-ahead log that recovery replays.
//!
//! CONTRACT (shared by the store, the log and the server; keep the signatures stable):
//! - [`StoreBuilder`] → [`Store`]; the server owns one `Store` on one thread (no locking).
//! - Reads: [`Store::get`] (promotes on access), [`Store::prefetch`] (batched NVMe reads through
//!   one io_uring submission, so the server waits for the device once per event-loop batch).
//! - Writes: [`Store::put`], [`Store::delete`], [`Store::flush_all`]; they are durable only after
//!   [`Store::commit`], which the server calls once per event-loop iteration *before* it sends the
//!   replies of that iteration (group commit).
//! - Background work: [`Store::tick`] (demotion by watermarks, segment cleaning, expiry, the
//!   `everysec` sync); the server calls it when idle and at least every 100 ms.
//!
//! Modules, from the bottom up: [`keys`] (how keys are spelled: the database byte before a
//! user's key, the keys of collections' parts, key length limits; imports nothing of the crate),
//! `admission` (a TinyLFU sketch with a doorkeeper), `eviction` (Redis's `maxmemory-policy`
//! values and the LRU clock or LFU counter each key's index entry keeps), `arena` (one `mbind`-bound mapping per
//! memory tier, slab size classes, CLOCK eviction, pages emptied into their class's other pages
//! for another class), [`log`] (the NVMe tier: CRC32C records in segments, group commit,
//! cleaning, recovery; `log::scan` is shared by recovery, the cleaner and `cxltier store check`),
//! `index` (inline keys and packed entries in a chunked slab, a hash table for point lookups and
//! sorted leaves for order; its bytes are counted inside the DRAM budget), `collection` (lists,
//! sets, sorted sets and hashes as counted B+trees of the store's own objects, copy-on-write;
//! big strings in pieces; each kind in a module of its own, and `collection::open` the
//! collections a batch keeps open until its end), `store` (the `Store` type, open/close and the get/put/delete entry
//! points, expiry, recovery; its concerns in child modules: `store::tiering` (exclusive
//! placement, promotion on access, admission, demotion by watermarks with write-back, slab page
//! moves and compaction), `store::evict` (keys evicted by the policy, and how full the store is),
//! `store::reads` (NVMe reads started, prefetched and reaped),
//! `store::scan`, `store::stats`, `store::parts` (collections' parts as objects),
//! `store::poison` (objects on poisoned memory restored from NVMe or reported lost, the pages
//! retired) and `store::check` (the offline log check, invariants)). The caller gives the
//! machine's topology and the `/proc` root ([`StoreBuilder::topology`],
//! [`StoreBuilder::proc_root`]).

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod admission;
mod arena;
mod collection;
mod eviction;
mod index;
pub mod keys;
pub mod log;
mod store;
#[cfg(feature = "test-util")]
pub mod testing;

pub use eviction::EvictionPolicy;
pub use keys::{db_key, split_db_key, MAX_DATABASES};
pub use log::ReadLatency;

/// Object reads kept at the device at once by default. A deeper queue did not read faster on the
/// virtual disk this was measured on (fio: about the same reads per second at depth 32 and 64), and
/// the device completes what it is given in batches, so reads queued deeper only waited longer
/// there: with up to 256 at once, the store's reads took a p99 of 2–3 ms at 50K reads/s where the
/// device alone, paced, took under 0.5 ms. Waiting in the store instead, a read begins as soon as
/// there is room and the commands it holds up are served sooner. Raise it for a device that
/// gains from deeper queues (many NVMe drives scale to 128 and more).
pub const DEFAULT_NVME_QUEUE_DEPTH: u32 = 32;
/// The largest value the store accepts at most (`max_object`'s ceiling and the default of
/// `cxltier serve --max-object`): Redis's `proto-max-bulk-len` default, 512 MiB. Values past
/// the slot size are kept in pieces, so the memory tiers and the log never hold one whole.
pub const MAX_VALUE: usize = 512 << 20;
pub use collection::{
    CollectionProbe, LexBound, ListEnd, ScanPage, ScoreBound, StreamEdit, StreamTree, ZAddFlags,
    ZAddOutcome, OPEN_BYTES_MAX, OPEN_COLLECTIONS_MAX,
};
pub use store::{check_log, LogCheck, PoisonOutcome, RetiredMemory, Store};

/// One database's keys as [`Store::keyspace`] counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DbKeyspace {
    pub db: u8,
    pub keys: u64,
    /// Keys with a TTL.
    pub expires: u64,
    /// The sum of their remaining times, in ms.
    pub ttl_ms_sum: u128,
}

use std::path::PathBuf;

/// How hard the store works to keep acknowledged writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Writes reach NVMe only when demoted or when the log buffer fills; a crash loses them.
    None,
    /// The log is written and `fdatasync`ed at least once a second: a crash loses at most ~1 s.
    #[default]
    EverySec,
    /// Every [`Store::commit`] writes and `fdatasync`s the log before replies are sent.
    Always,
}

/// What an object's value is. `String` and `Hash` values are encoded by the server (the store
/// only keeps the tag); the collection kinds are roots the store encodes and reads itself (see
/// [`Store::list_push`] and the rest of the collection API, and `docs/server.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    String = 0,
    Hash = 1,
    List = 2,
    Set = 3,
    ZSet = 4,
    /// A hash kept as a tree of chunks (`hset`, ...), for hashes too large to rewrite whole.
    ChunkedHash = 5,
    /// A part of a collection, under an internal key: never returned to users.
    Chunk = 6,
    /// The root of a value longer than one slot holds (a string, or a hash the caller encodes
    /// as one value), kept as a tree of pieces (see [`Store::get_range`]): [`Store::get`]
    /// returns it whole, as the [`Kind::String`] or [`Kind::Hash`] it was written as.
    BigString = 7,
    /// A stream: its entries by id, and its metadata, consumer groups, pending entries and
    /// consumers, each a tree of the same root (`stream_*`).
    Stream = 8,
}

impl Kind {
    /// The kind stored as `b` (in the index and in log records); `None` for an unknown byte.
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::String,
            1 => Kind::Hash,
            2 => Kind::List,
            3 => Kind::Set,
            4 => Kind::ZSet,
            5 => Kind::ChunkedHash,
            6 => Kind::Chunk,
            7 => Kind::BigString,
            8 => Kind::Stream,
            _ => return None,
        })
    }

    /// Whether this is the root of a collection the store keeps in chunks.
    pub fn is_collection(self) -> bool {
        matches!(
            self,
            Kind::List
                | Kind::Set
                | Kind::ZSet
                | Kind::ChunkedHash
                | Kind::BigString
                | Kind::Stream
        )
    }

    /// Redis's name for the type (`TYPE`, `SCAN ... TYPE`): a hash is a hash however it is kept.
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::String | Kind::BigString => "string",
            Kind::Hash | Kind::ChunkedHash => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::Stream => "stream",
            // Never reaches a user: the store hides collection parts.
            Kind::Chunk => "none",
        }
    }
}

/// An object borrowed from the store (valid until the next `&mut self` call).
#[derive(Debug, Clone, Copy)]
pub struct ObjectRef<'a> {
    pub kind: Kind,
    pub value: &'a [u8],
    /// Absolute expiry time in milliseconds since the Unix epoch, if any.
    pub expires_at_ms: Option<u64>,
}

/// What the index knows of a live key ([`Store::key_info`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInfo {
    pub kind: Kind,
    /// Absolute expiry time in milliseconds since the Unix epoch, if any.
    pub expires_at_ms: Option<u64>,
    /// Seconds since the key was last read or written (`OBJECT IDLETIME`), on Redis's 24-bit
    /// clock of seconds (an idle time past 194 days wraps, as in Redis).
    pub idle_seconds: u64,
    /// The key's LFU counter, decayed to now (`OBJECT FREQ`): meaningful only while an LFU
    /// eviction policy is set ([`EvictionPolicy::is_lfu`]), as the same bits hold the access
    /// clock otherwise.
    pub lfu_frequency: u8,
}

/// Where the NVMe tier lives: `PATH[:SIZE]` (a file, created if missing, or a block device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsdSpec {
    pub path: PathBuf,
    /// Capacity in bytes; `None` means the whole block device, or for a file: required when the
    /// file does not exist yet (error otherwise), else its current size.
    pub capacity: Option<u64>,
}

impl SsdSpec {
    /// The directory of a log that is a file (where files beside it, such as a replica's
    /// snapshot, may go); `None` for a block device, whose directory is /dev.
    pub fn file_dir(&self) -> Option<PathBuf> {
        if !std::fs::metadata(&self.path).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let dir = self.path.parent()?;
        Some(if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir.to_path_buf()
        })
    }
}

/// One object returned by [`Store::scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanItem {
    pub key: Vec<u8>,
    pub kind: Kind,
    pub value: Vec<u8>,
    pub expires_at_ms: Option<u64>,
}

/// Where an arena's touched pages are, as the kernel reports them (`move_pages(2)`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ArenaPlacement {
    pub tier: &'static str,
    /// The node the arena is bound to.
    pub node: u32,
    /// Sampled pages per node they are on.
    pub pages_by_node: std::collections::BTreeMap<u32, u64>,
}

/// The store's one error type: what failed, with context, and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Bad configuration (budgets, paths, nodes): the message names the option and the fix.
    #[error("{0}")]
    Config(String),
    /// The value is larger than the store accepts.
    #[error("value of {len} bytes is larger than the maximum object size of {max} bytes")]
    TooLarge { len: usize, max: usize },
    /// Every tier is full of live data: writes fail, reads go on.
    #[error("the store is full: {detail}")]
    Full { detail: String },
    /// An I/O error on the NVMe tier, with what the store was doing.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A record failed its checksum or has an impossible header.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// Recovery found bytes it could not read that may have held acknowledged data, and was not
    /// told to go on: nothing was written.
    #[error("{0}")]
    Damaged(Box<Damage>),
    /// A collection command on a key that holds another type (Redis's WRONGTYPE).
    #[error(
        "WRONGTYPE Operation against a key holding the wrong kind of value (it holds a {held})"
    )]
    WrongType { held: &'static str },
    /// A NUMA system call failed (binding an arena, ...).
    #[error(transparent)]
    Sys(#[from] cxltier_sys::SysError),
}

impl cxltier_error::Classify for StoreError {
    fn class(&self) -> cxltier_error::Class {
        use cxltier_error::Class;
        match self {
            StoreError::Config(_) | StoreError::TooLarge { .. } => Class::BadInput,
            StoreError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                Class::Permission
            }
            _ => Class::Runtime,
        }
    }
}

/// What recovery could not read, for [`StoreError::Damaged`].
#[derive(Debug, Clone)]
pub struct Damage {
    pub path: PathBuf,
    pub report: log::OpenReport,
    /// Keys whose newest readable record lies before a damaged range (so a newer version or a
    /// delete may have been lost), when the store counted them.
    pub keys_possibly_stale: Option<u64>,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.report;
        write!(
            f,
            "the NVMe tier {} is damaged: {} range(s), {} bytes, could not be read and may have held acknowledged writes",
            self.path.display(),
            r.damaged.len(),
            r.damaged_bytes()
        )?;
        const SHOWN: usize = 8;
        for d in r.damaged.iter().take(SHOWN) {
            write!(f, "; {d}")?;
        }
        if r.damaged.len() > SHOWN {
            write!(f, "; and {} more", r.damaged.len() - SHOWN)?;
        }
        if let Some(k) = self.keys_possibly_stale {
            write!(
                f,
                ". {k} key(s) may have lost a newer version or a delete there"
            )?;
        }
        write!(
            f,
            ". Nothing was written. `cxltier store check {}` lists the damage; restore the file from a copy (or repair the bytes), or start with --recover-anyway to serve what is readable",
            self.path.display()
        )
    }
}

/// What recovery found when the store was opened (all zeros without an NVMe tier).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Recovery {
    pub keys_recovered: u64,
    pub records: u64,
    pub segments_replayed: u32,
    pub damaged_ranges: Vec<log::DamagedRange>,
    pub damaged_bytes: u64,
    /// Keys served although a newer version or a delete may have been lost (started with the
    /// override).
    pub keys_possibly_stale: u64,
    /// A write torn by a crash at the end of the newest segment (left on disk as it is).
    pub torn_tail: Option<log::DamagedRange>,
    /// Segments whose damaged header was identified from their records.
    pub headers_repaired: u32,
    /// Collection chunks a crash left unreferenced (written for a change whose root never made
    /// it, or replaced by one whose deletes never did), deleted at start.
    pub chunks_dropped: u64,
}

impl Recovery {
    /// What recovery could not read (with the override) and what a crash tore, one sentence
    /// each, for the operator; none after a clean start.
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .damaged_ranges
            .iter()
            .map(|d| format!("damaged: {d}"))
            .collect();
        if !self.damaged_ranges.is_empty() {
            notes.push(format!(
                "{} range(s), {} bytes could not be read; {} key(s) are served although a newer version or a delete of theirs may be lost (--recover-anyway)",
                self.damaged_ranges.len(),
                self.damaged_bytes,
                self.keys_possibly_stale
            ));
        }
        if let Some(t) = &self.torn_tail {
            notes.push(format!("left as it is: {t}"));
        }
        if self.headers_repaired > 0 {
            notes.push(format!(
                "{} segment header(s) were damaged; their records told their place, and they are not written to again",
                self.headers_repaired
            ));
        }
        notes
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Builder for a [`Store`] (foyer-style).
#[derive(Debug, Clone)]
pub struct StoreBuilder {
    pub(crate) dram_bytes: u64,
    pub(crate) cxl_bytes: u64,
    pub(crate) ssd: Option<SsdSpec>,
    pub(crate) durability: Durability,
    pub(crate) dram_node: Option<u32>,
    pub(crate) cxl_node: Option<u32>,
    pub(crate) max_object: usize,
    pub(crate) nvme_queue_depth: u32,
    pub(crate) recover_anyway: bool,
    pub(crate) chunk_bytes: usize,
    /// Whether `chunk_bytes` was asked for: the default shrinks to fit a small `max_object`.
    pub(crate) chunk_bytes_set: bool,
    pub(crate) collection_write_back: bool,
    /// The machine's NUMA nodes, from the caller (`None`: one node 0, as without NUMA).
    pub(crate) topology: Option<cxltier_topo::Topology>,
    /// Where procfs is mounted (`/proc` on a live machine).
    pub(crate) proc_root: std::path::PathBuf,
}

/// Per-tier statistics (`INFO`, `--json`). Field names are a stable interface.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TierStats {
    /// "dram", "cxl" or "nvme".
    pub tier: &'static str,
    /// NUMA node of a memory tier's arena.
    pub node: Option<u32>,
    pub capacity_bytes: u64,
    /// Memory tiers: bytes of the arena's slab pages that are assigned (resident); for DRAM the
    /// budget bounds this plus the index.
    pub resident_bytes: u64,
    pub objects: u64,
    pub bytes: u64,
    pub hits: u64,
    pub promotions: u64,
    pub demotions: u64,
    /// NVMe only: reads and writes issued to the device, bytes.
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Memory tiers: the size classes holding objects, and the bytes of a slab page. The bytes
    /// freed in a tier are reusable by objects of any size but for less than one slab page per
    /// size class holding objects, plus one page (see `docs/server.md`, "Freed space is
    /// reused"): these two give that bound.
    pub size_classes: u64,
    pub slab_page_bytes: u64,
}

/// Whole-store statistics.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StoreStats {
    pub keys: u64,
    pub index_bytes: u64,
    /// The memory tiers' slots in use plus the index ([`Store::memory_used`]): Redis's
    /// `used_memory`, which falls as keys are deleted.
    pub memory_used_bytes: u64,
    pub misses: u64,
    pub evictions_to_nvme: u64,
    pub admissions_rejected: u64,
    /// Slab pages a memory tier took from one size class for another whose objects rated hotter
    /// (slab rebalancing), and the objects those moves sent down a tier.
    pub slab_pages_moved: u64,
    pub slab_objects_moved: u64,
    /// Slab pages a memory tier emptied for another size class by moving their objects into
    /// free slots of their class's other pages (no object left memory), and writes that took a
    /// free slot of a larger class because theirs could get no page.
    pub slab_pages_compacted: u64,
    pub spare_slot_writes: u64,
    /// Device bytes written / bytes of objects the user wrote (1.0 = no amplification).
    pub write_amplification: f64,
    pub segments_cleaned: u64,
    pub durability: &'static str,
    /// No CPU-less node was found: the "cxl" tier is a second arena on the DRAM node.
    pub cxl_emulated_on_dram: bool,
    pub tiers: Vec<TierStats>,
    /// The NVMe tier's record reads, from each read's start to its collection (the device's
    /// time plus the event loop's delay in collecting it); `None` without reads.
    pub nvme_read_latency: Option<ReadLatency>,
}

impl StoreStats {
    /// One phrase a tier, as the server announces the store it opened: a memory tier's capacity
    /// and node (a CXL tier emulated on DRAM says so), the NVMe tier's capacity, its file or
    /// device (`ssd`) and how many reads it keeps in flight (`queue_depth`).
    pub fn tier_lines(&self, ssd: Option<&std::path::Path>, queue_depth: u32) -> Vec<String> {
        use cxltier_topo::format_bytes;
        self.tiers
            .iter()
            .map(|t| match (t.tier, t.node) {
                ("cxl", Some(n)) if self.cxl_emulated_on_dram => format!(
                    "cxl {} on node{n} (no CPU-less node: emulated on DRAM)",
                    format_bytes(t.capacity_bytes)
                ),
                (name, Some(n)) => format!("{name} {} on node{n}", format_bytes(t.capacity_bytes)),
                (name, None) => format!(
                    "{name} {} at {} (up to {queue_depth} reads at once)",
                    format_bytes(t.capacity_bytes),
                    ssd.map(|p| p.display().to_string()).unwrap_or_default(),
                ),
            })
            .collect()
    }
}

/// A memory arena and where its pages are meant to be (for `move_pages` checks).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ArenaInfo {
    pub tier: &'static str,
    pub node: u32,
    pub addr: usize,
    pub len: usize,
}

impl StoreBuilder {
    pub fn new() -> Self {
        StoreBuilder {
            dram_bytes: 256 << 20,
            cxl_bytes: 0,
            ssd: None,
            durability: Durability::EverySec,
            dram_node: None,
            cxl_node: None,
            max_object: 1 << 20,
            nvme_queue_depth: DEFAULT_NVME_QUEUE_DEPTH,
            recover_anyway: false,
            chunk_bytes: collection::DEFAULT_CHUNK_BYTES,
            chunk_bytes_set: false,
            collection_write_back: false,
            topology: None,
            proc_root: std::path::PathBuf::from("/proc"),
        }
    }
    /// The machine's NUMA nodes, which `dram_node`/`cxl_node` are checked against and the
    /// defaults are chosen from (the local node, the first CPU-less node). The caller discovers
    /// them (`Topology::discover`, from `/` or a recorded tree); without a topology the store
    /// assumes what a kernel without NUMA has: node 0 alone.
    pub fn topology(mut self, topo: cxltier_topo::Topology) -> Self {
        self.topology = Some(topo);
        self
    }
    /// Where procfs is mounted (default `/proc`): the store reads `self/stat` (the node of the
    /// CPU it is built on) and `self/pagemap` (its frames on poisoned memory) below it.
    pub fn proc_root(mut self, root: impl Into<std::path::PathBuf>) -> Self {
        self.proc_root = root.into();
        self
    }
    /// DRAM budget, index included.
    pub fn dram(mut self, bytes: u64) -> Self {
        self.dram_bytes = bytes;
        self
    }
    /// CXL budget (0: no CXL tier).
    pub fn cxl(mut self, bytes: u64) -> Self {
        self.cxl_bytes = bytes;
        self
    }
    pub fn ssd(mut self, spec: SsdSpec) -> Self {
        self.ssd = Some(spec);
        self
    }
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }
    /// The node for the DRAM arena (default: the node of the CPU that builds the store).
    pub fn dram_node(mut self, node: u32) -> Self {
        self.dram_node = Some(node);
        self
    }
    /// The node for the CXL arena (default: the first CPU-less memory node; none: a second
    /// arena on the DRAM node so the code path still runs).
    pub fn cxl_node(mut self, node: u32) -> Self {
        self.cxl_node = Some(node);
        self
    }
    /// Largest accepted value (default 1 MiB, like memcached's item_size_max).
    pub fn max_object(mut self, bytes: usize) -> Self {
        self.max_object = bytes;
        self
    }
    /// Most object reads the store keeps at the NVMe device at once (1 to
    /// [`log::ASYNC_READS`]; default [`DEFAULT_NVME_QUEUE_DEPTH`]); reads beyond it wait in the
    /// store and begin as earlier ones finish.
    pub fn nvme_queue_depth(mut self, reads: u32) -> Self {
        self.nvme_queue_depth = reads;
        self
    }
    /// Open (recovering from NVMe when the log holds data) and bind the arenas.
    /// Open the NVMe tier even when recovery finds damage that may have held acknowledged data:
    /// serve what is readable and report the damage in [`Store::recovery`]. Without it such a
    /// store is refused with [`StoreError::Damaged`].
    pub fn recover_anyway(mut self, yes: bool) -> Self {
        self.recover_anyway = yes;
        self
    }
    /// The size a collection's chunk is split at (default 4 KiB, or half the largest object when
    /// that is smaller; at least 64 bytes). Small chunks make a change cheaper and a tree deeper;
    /// tests use them to split often.
    pub fn collection_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self.chunk_bytes_set = true;
        self
    }
    /// Keep changed collections in memory across a batch and write each once when the batch
    /// ends or commits (see [`Store::set_collection_write_back`]; default off: every change is
    /// written before its call returns).
    pub fn collection_write_back(mut self, on: bool) -> Self {
        self.collection_write_back = on;
        self
    }
    pub fn build(self) -> Result<Store> {
        Store::build(self)
    }
}

impl Default for StoreBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "none" | "no" => Ok(Durability::None),
            "everysec" => Ok(Durability::EverySec),
            "always" => Ok(Durability::Always),
            _ => Err(format!(
                "unknown durability {s:?}: use none, everysec or always"
            )),
        }
    }
}

impl std::str::FromStr for SsdSpec {
    type Err = String;
    /// `PATH[:SIZE]`, SIZE with K/M/G/T (binary) suffixes.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (path, size) = match s.rsplit_once(':') {
            Some((p, size)) if !p.is_empty() => (p, Some(size)),
            _ => (s, None),
        };
        if path.is_empty() {
            return Err(
                "--ssd needs a path: --ssd PATH[:SIZE], e.g. /var/lib/cxltier/nvme.log:8G".into(),
            );
        }
        let capacity = size
            .map(|z| {
                cxltier_topo::size::parse_size(z)
                    .map_err(|e| format!("--ssd {s}: bad size {z:?}: {e}"))
            })
            .transpose()?;
        Ok(SsdSpec {
            path: path.into(),
            capacity,
        })
    }
}
