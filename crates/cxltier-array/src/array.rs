//! The array: chunks in memory (bound per chunk) and chunks in spill files (striped).

use std::path::{Path, PathBuf};

use cxltier_sys::iobatch::{IoBatchRing, IoRequest};
use cxltier_sys::uring::{AlignedBuf, DirectFile};
use cxltier_sys::{query_pages, Advice, Mapping, MbindFlags, Mode, NodeMask, PageStatus, Policy};
use serde::Serialize;

use crate::{ArrayConfig, ArrayError};

/// Where a chunk lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkHome {
    /// In memory, bound to a node (or under the default policy when `None`).
    Memory {
        /// The node it is bound to.
        node: Option<u32>,
    },
    /// In spill file `file` at byte `offset`.
    Spilled {
        /// Index of the spill file.
        file: usize,
        /// Byte offset in it.
        offset: u64,
    },
}

pub(crate) enum Chunk {
    Memory(Mapping),
    Spilled { file: usize, offset: u64 },
}

pub(crate) struct SpillFile {
    pub(crate) path: PathBuf,
    pub(crate) file: DirectFile,
}

/// Run one chunk's direct read or write (`op`) in `ring`: its failure is chunk `chunk`'s, at
/// `offset` of `file`.
fn run_one(
    ring: &mut IoBatchRing,
    request: IoRequest<'_>,
    op: &'static str,
    chunk: usize,
    file: &SpillFile,
    offset: u64,
) -> Result<(), ArrayError> {
    let result = ring.run(&mut [request]).pop().expect("one result");
    result.map(|_| ()).map_err(|source| ArrayError::Io {
        op,
        chunk,
        path: file.path.clone(),
        offset,
        source,
    })
}

/// Where the array's chunks are, as counted after creation.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkPlacement {
    /// Chunk size in bytes.
    pub chunk_bytes: usize,
    /// Chunks in memory.
    pub memory_chunks: usize,
    /// Chunks in spill files.
    pub spilled_chunks: usize,
    /// Memory pages per node, as `move_pages` reported them (`node`, `pages`); empty when
    /// verification was off. Serialized as `{"<node>": pages}`, the one per-node shape of the
    /// CLI's JSON.
    #[serde(serialize_with = "pages_by_node")]
    pub pages_per_node: Vec<(u32, usize)>,
    /// The spill files, by the names they were created with (they are unlinked at once, so
    /// these names no longer exist).
    pub spill_files: Vec<PathBuf>,
    /// Memory chunks the kernel accepted transparent huge page advice for (chunks of 2 MiB or
    /// more, when [`crate::ArrayConfig::huge_pages`] is on and the kernel has THP).
    pub huge_page_chunks: usize,
}

fn pages_by_node<S: serde::Serializer>(pairs: &[(u32, usize)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(pairs.len()))?;
    for (node, pages) in pairs {
        map.serialize_entry(&node.to_string(), pages)?;
    }
    map.end()
}

/// A chunked array over memory nodes and spill files.
pub struct TieredArray {
    pub(crate) chunk: usize,
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) homes: Vec<ChunkHome>,
    pub(crate) files: Vec<SpillFile>,
    pub(crate) ring: IoBatchRing,
    keep_spill_names: bool,
    placement: ChunkPlacement,
}

impl std::fmt::Debug for TieredArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredArray")
            .field("placement", &self.placement)
            .finish()
    }
}

impl TieredArray {
    /// Allocate the array as configured: map and bind the memory chunks (then touch them, so that
    /// each page is allocated under its chunk's policy, and verify where the pages went), create
    /// and preallocate the spill files. Fails before allocating anything if the configuration
    /// cannot work, and before any computation if the spill does not fit.
    pub fn create(config: &ArrayConfig) -> Result<TieredArray, ArrayError> {
        config.check()?;
        let total = config.chunks();
        let resident = config.resident_chunks();
        let spilled = total - resident;
        // Spill files first: refusing for lack of space must come before gigabytes are touched.
        let mut files = Vec::new();
        if spilled > 0 {
            let n = config.spill.len();
            // Bytes asked of each file system so far (by id), since several directories may
            // share one.
            let mut asked: Vec<(u64, u64)> = Vec::new();
            for (i, (dir, cap)) in config.spill.iter().enumerate() {
                let share = (spilled + n - 1 - i) / n; // chunks i, i+n, ... of the spilled ones
                let needed = share as u64 * config.chunk as u64;
                let (fs, free) = free_space(dir)?;
                let on_fs = match asked.iter_mut().find(|(id, _)| *id == fs) {
                    Some(entry) => {
                        entry.1 += needed;
                        entry.1
                    }
                    None => {
                        asked.push((fs, needed));
                        needed
                    }
                };
                if on_fs > free {
                    return Err(ArrayError::NoSpace {
                        path: dir.clone(),
                        needed: on_fs,
                        available: free,
                        hint: format!(
                            "the file system is {} bytes short; free space there, add spill \
                             directories on other file systems, or raise the memory limit",
                            on_fs - free
                        ),
                    });
                }
                if let Some(cap) = cap {
                    if needed > *cap {
                        return Err(ArrayError::NoSpace {
                            path: dir.clone(),
                            needed,
                            available: *cap,
                            hint:
                                "give more space, more spill directories, or a higher memory limit"
                                    .into(),
                        });
                    }
                }
                let path = dir.join(format!(
                    "cxltier-array-{}-{}-{i}.spill",
                    std::process::id(),
                    unique()
                ));
                let file = DirectFile::open(&path, true).map_err(|source| {
                    let hint = if source.raw_os_error() == Some(libc_einval()) {
                        "; the file system does not support O_DIRECT (tmpfs before Linux 6.6, some \
                         network and FUSE file systems): spill to a directory on ext4 or xfs"
                            .to_string()
                    } else {
                        String::new()
                    };
                    ArrayError::Open {
                        path: path.clone(),
                        source,
                        hint,
                    }
                })?;
                // Unlinked at once: nothing can be left behind, whether the process returns, is
                // interrupted or is killed; O_DIRECT and fallocate work the same on the open file.
                if !config.keep_spill_names {
                    std::fs::remove_file(&path).map_err(|source| ArrayError::Open {
                        path: path.clone(),
                        source,
                        hint: "; the scratch file could not be unlinked after it was opened \
                               (remove it by hand)"
                            .into(),
                    })?;
                }
                let spill = SpillFile { path, file };
                if needed > 0 {
                    if let Err(e) = preallocate(&spill.file, needed) {
                        if config.keep_spill_names {
                            let _ = std::fs::remove_file(&spill.path);
                        }
                        return Err(ArrayError::NoSpace {
                            path: spill.path.clone(),
                            needed,
                            available: 0,
                            hint: format!(
                                "the file system could not reserve the space ({e}); free space, add \
                                 spill directories, or raise the memory limit"
                            ),
                        });
                    }
                }
                files.push(spill);
            }
        }
        let ring = IoBatchRing::new(64).map_err(|source| ArrayError::Open {
            path: PathBuf::from("io_uring"),
            source,
            hint: String::new(),
        })?;
        let mut array = TieredArray {
            chunk: config.chunk,
            chunks: Vec::with_capacity(total),
            homes: Vec::with_capacity(total),
            files,
            ring,
            keep_spill_names: config.keep_spill_names,
            placement: ChunkPlacement {
                chunk_bytes: config.chunk,
                memory_chunks: resident,
                spilled_chunks: spilled,
                pages_per_node: Vec::new(),
                spill_files: Vec::new(),
                huge_page_chunks: 0,
            },
        };
        array.placement.spill_files = array.files.iter().map(|f| f.path.clone()).collect();
        let sequence: Vec<u32> = config
            .weights
            .iter()
            .flat_map(|&(node, w)| std::iter::repeat_n(node, w as usize))
            .collect();
        let page = cxltier_sys::page_size();
        let mut counted = cxltier_sys::PagesPerNode::default();
        let mut maps = Vec::with_capacity(resident);
        for i in 0..resident {
            let map = Mapping::anonymous(config.chunk)?;
            // Before the first touch, so that the pages are allocated huge. The advice only
            // fails on kernels without THP (EINVAL), where base pages are all there is; the
            // placement report counts the chunks that took it.
            if config.huge_pages
                && config.chunk >= HUGE_PAGE
                && map.advise(Advice::HugePage).is_ok()
            {
                array.placement.huge_page_chunks += 1;
            }
            let node = (!sequence.is_empty()).then(|| sequence[i % sequence.len()]);
            if let Some(node) = node {
                let policy = Policy::new(Mode::Bind, NodeMask::from_nodes([node])?);
                map.bind(&policy, MbindFlags::default())?;
            }
            maps.push((map, node));
        }
        // Touch every page now, under the chunk's policy, so that placement is decided (and
        // checked) here rather than at the first computation. The kernel zeroes each new page in
        // the thread that faults it, so the chunks are touched by one thread per CPU; a bound
        // chunk's pages go to its node whichever thread touches them.
        let touchers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(maps.len().max(1));
        let per_toucher = maps.len().div_ceil(touchers).max(1);
        std::thread::scope(|scope| {
            for part in maps.chunks_mut(per_toucher) {
                scope.spawn(move || {
                    for (map, _) in part {
                        map.write_each(page, 0);
                    }
                });
            }
        });
        for (i, (map, node)) in maps.into_iter().enumerate() {
            if config.verify {
                let addrs: Vec<usize> = map.page_addresses(page).collect();
                let status = query_pages(None, &addrs)?;
                let mut misplaced = 0;
                let mut first = None;
                counted.add(&status);
                for s in &status {
                    if let Some(want) = node {
                        if s.node() != Some(want) {
                            misplaced += 1;
                            first.get_or_insert(*s);
                        }
                    }
                }
                if let (Some(want), Some(found)) = (node, first) {
                    return Err(ArrayError::Placement {
                        chunk: i,
                        expected: want,
                        misplaced,
                        pages: status.len(),
                        found: label(found),
                    });
                }
            }
            array.chunks.push(Chunk::Memory(map));
            array.homes.push(ChunkHome::Memory { node });
        }
        let nfiles = array.files.len().max(1);
        for j in 0..spilled {
            let file = j % nfiles;
            let offset = (j / nfiles) as u64 * config.chunk as u64;
            array.chunks.push(Chunk::Spilled { file, offset });
            array.homes.push(ChunkHome::Spilled { file, offset });
        }
        array.placement.pages_per_node = counted
            .nodes
            .iter()
            .map(|(&n, &c)| (n, c as usize))
            .collect();
        Ok(array)
    }

    /// Chunk size in bytes.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Where each chunk lives.
    pub fn homes(&self) -> &[ChunkHome] {
        &self.homes
    }

    /// The placement summary.
    pub fn placement(&self) -> &ChunkPlacement {
        &self.placement
    }

    /// Whether every chunk is in memory.
    pub fn all_in_memory(&self) -> bool {
        self.placement.spilled_chunks == 0
    }

    /// Every chunk as a mutable slice, in order, when all are in memory (`None` otherwise).
    pub fn memory_chunks_mut(&mut self) -> Option<Vec<&mut [u8]>> {
        self.chunks
            .iter_mut()
            .map(|c| match c {
                Chunk::Memory(m) => Some(m.as_mut_slice()),
                Chunk::Spilled { .. } => None,
            })
            .collect()
    }

    /// Copy chunk `i` into `out` (`chunk_bytes` long), from memory or with one direct read.
    pub fn read_chunk(&mut self, i: usize, out: &mut AlignedBuf) -> Result<(), ArrayError> {
        let chunk = self.chunk;
        match &self.chunks[i] {
            Chunk::Memory(m) => {
                out[..chunk].copy_from_slice(m.as_slice());
                Ok(())
            }
            &Chunk::Spilled { file, offset } => {
                let f = &self.files[file];
                let read = IoRequest::Read {
                    file: &f.file,
                    offset,
                    buf: &mut out[..chunk],
                };
                run_one(&mut self.ring, read, "read", i, f, offset)
            }
        }
    }

    /// Write `data` (`chunk_bytes` long) as chunk `i`.
    pub fn write_chunk(&mut self, i: usize, data: &AlignedBuf) -> Result<(), ArrayError> {
        let chunk = self.chunk;
        match &mut self.chunks[i] {
            Chunk::Memory(m) => {
                m.as_mut_slice().copy_from_slice(&data[..chunk]);
                Ok(())
            }
            &mut Chunk::Spilled { file, offset } => {
                let f = &self.files[file];
                let write = IoRequest::Write {
                    file: &f.file,
                    offset,
                    buf: &data[..chunk],
                };
                run_one(&mut self.ring, write, "write", i, f, offset)
            }
        }
    }
}

impl Drop for TieredArray {
    fn drop(&mut self) {
        // Unlinked spill files (the default) vanish with their descriptors.
        if self.keep_spill_names {
            for f in &self.files {
                let _ = std::fs::remove_file(&f.path);
            }
        }
    }
}

/// The file system holding `dir` (its id) and the bytes an unprivileged process may still
/// allocate on it.
fn free_space(dir: &Path) -> Result<(u64, u64), ArrayError> {
    let st = rustix::fs::statvfs(dir).map_err(|e| ArrayError::Open {
        path: dir.to_path_buf(),
        source: e.into(),
        hint: "; cannot read the spill directory's free space (statvfs)".into(),
    })?;
    Ok((st.f_fsid, st.f_bavail.saturating_mul(st.f_frsize)))
}

/// `fallocate`, retried when a signal interrupts it (it can take a while on a large file).
fn preallocate(file: &DirectFile, len: u64) -> std::io::Result<()> {
    loop {
        match file.preallocate(len) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The size of a transparent huge page on x86-64 and (4 KiB-page) aarch64.
const HUGE_PAGE: usize = 2 << 20;

fn label(s: PageStatus) -> String {
    s.label()
}

fn libc_einval() -> i32 {
    22
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
