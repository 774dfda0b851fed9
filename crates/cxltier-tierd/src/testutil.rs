//! Scratch directories for tests, and the frames of this process's own pages.

use std::path::{Path, PathBuf};

/// The page frame of each of the first `pages` pages of `m` (touched by the caller), from
/// `/proc/self/pagemap`: `None` where the kernel hides it (not root).
pub fn frames_of(m: &cxltier_sys::Mapping, pages: usize) -> Vec<Option<u64>> {
    let page = cxltier_sys::page_size();
    let pm = cxltier_sys::pagemap::Pagemap::open(Path::new("/proc/self/pagemap")).unwrap();
    let mut frames = Vec::new();
    pm.walk(
        m.addr() as u64,
        (m.addr() + pages * page) as u64,
        page as u64,
        |_, e| frames.push(e.pfn()),
    )
    .unwrap();
    frames
}

pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "cxltier-tierd-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn write(&self, rel: &str, content: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.0.join(rel))
            .unwrap()
            .trim()
            .to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One base page at `addr` on `node`, seen accessed `accesses` times and last `age` scans ago,
/// never written.
pub fn page_at(addr: usize, node: u32, accesses: u32, age: u32) -> crate::plan::PageInfo {
    crate::plan::PageInfo {
        addr,
        pages: 1,
        node,
        accesses,
        age,
        written: false,
    }
}
