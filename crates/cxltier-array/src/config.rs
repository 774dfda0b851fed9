//! The builder that describes a tiered array before anything is allocated.

use std::path::PathBuf;

use crate::ArrayError;

/// How to lay out a tiered array: its size, its chunk size, how much may live in memory and on
/// which nodes with which weights, and where the rest is spilled.
#[derive(Debug, Clone)]
pub struct ArrayConfig {
    pub(crate) len: u64,
    pub(crate) chunk: usize,
    pub(crate) memory_limit: Option<u64>,
    pub(crate) weights: Vec<(u32, u32)>,
    pub(crate) spill: Vec<(PathBuf, Option<u64>)>,
    pub(crate) verify: bool,
    pub(crate) huge_pages: bool,
    /// Keep the spill files' names until the array is dropped (tests that act on the file by
    /// name); by default they are unlinked as soon as they are open.
    pub(crate) keep_spill_names: bool,
}

impl ArrayConfig {
    /// An array of `len` bytes in chunks of `chunk` bytes (a power of two, at least 4096, that
    /// divides `len`). By default everything is in memory under the default policy.
    pub fn new(len: u64, chunk: usize) -> ArrayConfig {
        ArrayConfig {
            len,
            chunk,
            memory_limit: None,
            weights: Vec::new(),
            spill: Vec::new(),
            verify: true,
            huge_pages: true,
            keep_spill_names: false,
        }
    }

    /// At most `bytes` of chunks in memory; the rest is spilled (needs [`ArrayConfig::spill_dir`]).
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Place memory chunks over `nodes` by weight, e.g. `[(0, 3), (1, 1)]`: three chunks on node
    /// 0 for each on node 1, each chunk bound with `mbind(MPOL_BIND)`.
    pub fn weights(mut self, weights: Vec<(u32, u32)>) -> Self {
        self.weights = weights;
        self
    }

    /// Spill to a new file in `dir`; with several, chunks are striped over them in turn. `cap`
    /// limits the bytes this directory may take. The file is unlinked as soon as it is open, so
    /// it has no name while the array uses it (`df` shows its space, `ls` does not show it) and
    /// its space returns to the file system however the process ends, even killed.
    pub fn spill_dir(mut self, dir: PathBuf, cap: Option<u64>) -> Self {
        self.spill.push((dir, cap));
        self
    }

    /// Whether to check each memory chunk's pages with `move_pages` after binding (default on).
    pub fn verify_placement(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Whether to advise transparent huge pages (`madvise(MADV_HUGEPAGE)`) on memory chunks of
    /// 2 MiB or more (default on): one TLB entry and one page fault per 2 MiB instead of 512.
    pub fn huge_pages(mut self, huge: bool) -> Self {
        self.huge_pages = huge;
        self
    }

    /// The number of chunks.
    pub fn chunks(&self) -> usize {
        (self.len / self.chunk as u64) as usize
    }

    /// How many chunks fit in memory.
    pub fn resident_chunks(&self) -> usize {
        match self.memory_limit {
            None => self.chunks(),
            Some(limit) => ((limit / self.chunk as u64) as usize).min(self.chunks()),
        }
    }

    pub(crate) fn check(&self) -> Result<(), ArrayError> {
        let bad = |m: String| Err(ArrayError::Config(m));
        if !self.chunk.is_power_of_two() || self.chunk < cxltier_sys::uring::ALIGN {
            return bad(format!(
                "chunk size {} must be a power of two of at least {} bytes (direct I/O alignment)",
                self.chunk,
                cxltier_sys::uring::ALIGN
            ));
        }
        if self.len == 0 || self.len % self.chunk as u64 != 0 {
            return bad(format!(
                "array length {} must be a non-zero multiple of the chunk size {}",
                self.len, self.chunk
            ));
        }
        if self.weights.iter().any(|&(_, w)| w == 0)
            || self.weights.iter().map(|w| w.1).sum::<u32>() > 1000
        {
            return bad(
                "interleave weights must be 1 or more each (and sum to at most 1000)".into(),
            );
        }
        for (i, (n, _)) in self.weights.iter().enumerate() {
            if self.weights[..i].iter().any(|(m, _)| m == n) {
                return bad(format!("node {n} is given two weights"));
            }
        }
        if self.resident_chunks() < self.chunks() && self.spill.is_empty() {
            return bad(format!(
                "the array ({} bytes) exceeds the memory limit ({} bytes) and no spill directory \
                 is given: give one on an NVMe file system (--ssd DIR), or raise the limit",
                self.len,
                self.memory_limit.unwrap_or(0)
            ));
        }
        for (dir, _) in &self.spill {
            if !dir.is_dir() {
                return bad(format!(
                    "spill path {} is not a directory: give a directory on the NVMe device's file \
                     system (a scratch file is created in it and unlinked as soon as it is open)",
                    dir.display()
                ));
            }
        }
        Ok(())
    }
}
