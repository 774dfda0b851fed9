//! Owned anonymous memory: `mmap(2)` / `munmap(2)`, with `madvise(2)` and `mbind(2)` on it.

use std::ptr::NonNull;

use libc::{c_long, c_ulong, c_void};

use crate::error::{ErrorKind, SysError};
use crate::mempolicy::{explain_einval, Policy};

/// Advice for [`Mapping::advise`]. Only advice that never changes the mapping's contents is offered,
/// so that advising is safe while the memory is borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_HUGEPAGE`: back the range with transparent huge pages where possible.
    HugePage,
    /// `MADV_NOHUGEPAGE`: never back the range with transparent huge pages of any size
    /// (including multi-size THP): every base page is allocated, and placed, on its own.
    NoHugePage,
}

impl Advice {
    fn raw(self) -> libc::c_int {
        match self {
            Advice::HugePage => libc::MADV_HUGEPAGE,
            Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
        }
    }
}

/// Flags for `mbind(2)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MbindFlags {
    /// `MPOL_MF_STRICT`: fail with EIO if pages already present do not follow the policy (and could
    /// not be moved when `move_pages` is set).
    pub strict: bool,
    /// `MPOL_MF_MOVE`: migrate pages used only by this process to follow the policy.
    pub move_pages: bool,
    /// `MPOL_MF_MOVE_ALL`: migrate shared pages too (needs CAP_SYS_NICE).
    pub move_all: bool,
}

impl MbindFlags {
    fn raw(self) -> c_ulong {
        let mut raw = 0;
        if self.strict {
            raw |= 1 << 0;
        }
        if self.move_pages {
            raw |= 1 << 1;
        }
        if self.move_all {
            raw |= 1 << 2;
        }
        raw
    }
}

/// A private anonymous mapping, readable and writable, unmapped on drop.
///
/// Its length is a whole number of pages. The memory starts zero-filled and no page is allocated
/// until first touched, so the memory policy in force at the first *write* decides each page's node.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping owns its pages exclusively, like a Box<[u8]>: moving it to another thread moves
// that ownership, and the memory is only reached through &self (reads) or &mut self (writes), so
// sharing &Mapping between threads allows only concurrent reads.
unsafe impl Send for Mapping {}
// SAFETY: see Send above: &Mapping gives only shared, read-only access to the bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes (rounded up to whole pages) of anonymous memory.
    pub fn anonymous(len: usize) -> Result<Mapping, SysError> {
        const CALL: &str = "mmap";
        let page = crate::page_size();
        let len = len
            .checked_next_multiple_of(page)
            .filter(|&l| l > 0 && l <= isize::MAX as usize)
            .ok_or_else(|| {
                SysError::new(
                    CALL,
                    libc::EINVAL,
                    ErrorKind::InvalidArgument,
                    format!("cannot map {len} bytes: the size must be from 1 byte to isize::MAX"),
                )
            })?;
        // SAFETY: a new private anonymous mapping at an address of the kernel's choosing (NULL hint,
        // no MAP_FIXED) cannot overlap or alter any existing memory; fd -1 and offset 0 are what
        // MAP_ANONYMOUS requires.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let err = SysError::last(CALL);
            if err.kind == ErrorKind::OutOfMemory {
                return Err(err.with_detail(format!(
                    "cannot map {len} bytes: out of memory (ENOMEM): the kernel's overcommit \
                     policy or RLIMIT_AS refused the size; ask for less"
                )));
            }
            return Err(err);
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| {
            SysError::new(CALL, 0, ErrorKind::Other, "mmap returned a NULL mapping")
        })?;
        Ok(Mapping { ptr, len })
    }

    /// The length in bytes (a whole number of pages, never zero).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The start address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The address of each `step`-byte unit (normally each page), in order.
    pub fn page_addresses(&self, step: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).step_by(step.max(1)).map(|o| self.addr() + o)
    }

    /// The memory, read only. Reading untouched pages maps the shared zero page, not new memory.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is the start of a live, readable mapping of `len` bytes (zero-filled by the
        // kernel, so initialized) owned by `self`; the borrow of `self` keeps it mapped, and writes
        // need `&mut self`, so no mutable alias exists for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The memory, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`; `&mut self` makes this the only reference to the memory.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Write `value` to the first byte of every `step`-byte unit, in address order, with volatile
    /// writes the compiler cannot drop. With `step` = the page size this allocates every page in
    /// order under the policy in force.
    pub fn write_each(&mut self, step: usize, value: u8) {
        let step = step.max(1);
        let base = self.ptr.as_ptr();
        for offset in (0..self.len).step_by(step) {
            // SAFETY: `offset < len`, so `base + offset` is inside the live writable mapping owned
            // by `self`, and `&mut self` guarantees no other reference to it exists.
            unsafe { std::ptr::write_volatile(base.add(offset), value) };
        }
    }

    /// `madvise(2)` the whole mapping.
    pub fn advise(&self, advice: Advice) -> Result<(), SysError> {
        const CALL: &str = "madvise";
        // SAFETY: the range is exactly this live mapping, and both offered advice values only change
        // how future faults are backed (huge pages or not), never the contents.
        let ret =
            unsafe { libc::madvise(self.ptr.as_ptr().cast::<c_void>(), self.len, advice.raw()) };
        if ret != 0 {
            let err = SysError::last(CALL);
            if err.errno == libc::EINVAL {
                return Err(err.with_detail(format!(
                    "the kernel rejected {advice:?} (built without CONFIG_TRANSPARENT_HUGEPAGE?)"
                )));
            }
            return Err(err);
        }
        Ok(())
    }

    /// Give the pages of `[offset, offset + len)` back to the kernel (`madvise(MADV_DONTNEED)`):
    /// the range reads as zeros afterwards and its pages are allocated again, under the mapping's
    /// memory policy, when next touched. `offset` and `len` must be multiples of the page size and
    /// inside the mapping.
    pub fn discard(&mut self, offset: usize, len: usize) -> Result<(), SysError> {
        const CALL: &str = "madvise";
        let page = crate::page_size();
        let end = offset.checked_add(len);
        if offset % page != 0 || len % page != 0 || end.is_none_or(|e| e > self.len) {
            return Err(SysError::new(
                CALL,
                libc::EINVAL,
                ErrorKind::InvalidArgument,
                format!(
                    "range {offset}+{len} is not whole pages inside the {}-byte mapping",
                    self.len
                ),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range lies inside this live private anonymous mapping (checked above), and
        // `&mut self` guarantees no reference into it exists, so zero-filling it behind the
        // compiler's back is unobservable to safe code.
        let ret = unsafe {
            libc::madvise(
                self.ptr.as_ptr().add(offset).cast::<c_void>(),
                len,
                libc::MADV_DONTNEED,
            )
        };
        if ret != 0 {
            return Err(SysError::last(CALL));
        }
        Ok(())
    }

    /// Set the memory policy of this mapping (`mbind(2)`); with `flags.move_pages`, pages already
    /// allocated are migrated to follow it.
    pub fn bind(&self, policy: &Policy, flags: MbindFlags) -> Result<(), SysError> {
        const CALL: &str = "mbind";
        policy.check(CALL)?;
        self.bind_raw(policy, flags).map_err(|err| {
            if err.errno == libc::EIO {
                err.with_detail(
                    "some pages do not follow the policy and could not be moved (MPOL_MF_STRICT)",
                )
            } else {
                explain_einval(CALL, err, policy)
            }
        })
    }

    /// `mbind(2)` without the argument check or the EINVAL diagnosis.
    pub(crate) fn bind_raw(&self, policy: &Policy, flags: MbindFlags) -> Result<(), SysError> {
        let (mask, maxnode) = policy.nodes.syscall_args();
        let mode = policy.raw_mode();
        // SAFETY: mbind(void *start, unsigned long len, int mode, const unsigned long *nmask,
        // unsigned long maxnode, unsigned flags) on exactly this live mapping. The kernel reads
        // `maxnode - 1` bits from `mask` (the NodeMask's storage, alive for the call) and at most
        // migrates the mapping's pages, which preserves their contents, so no Rust-visible memory
        // changes.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.ptr.as_ptr().cast::<c_void>(),
                self.len as c_ulong,
                mode as c_long,
                mask,
                maxnode,
                flags.raw(),
            )
        };
        if ret != 0 {
            return Err(SysError::last("mbind"));
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and owns; it is unmapped
        // exactly once, here, and no reference into it can outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mempolicy::{mems_allowed, Mode};

    #[test]
    fn discard_zeroes_the_range_and_nothing_else() {
        let page = crate::page_size();
        let mut m = Mapping::anonymous(4 * page).unwrap();
        m.as_mut_slice().fill(7);
        m.discard(page, 2 * page).unwrap();
        let s = m.as_slice();
        assert!(s[..page].iter().all(|&b| b == 7));
        assert!(s[page..3 * page].iter().all(|&b| b == 0));
        assert!(s[3 * page..].iter().all(|&b| b == 7));
        // Touching the range again works: the pages come back.
        m.as_mut_slice()[page] = 1;
        assert_eq!(m.as_slice()[page], 1);
        for (off, len) in [
            (1, page),
            (0, page + 1),
            (3 * page, 2 * page),
            (usize::MAX, page),
        ] {
            let e = m.discard(off, len).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{off}+{len}: {e}");
        }
    }

    #[test]
    fn maps_touches_and_unmaps() {
        let page = crate::page_size();
        let mut m = Mapping::anonymous(3 * page + 1).unwrap();
        assert_eq!(m.len(), 4 * page);
        m.advise(Advice::NoHugePage).unwrap();
        m.write_each(page, 7);
        assert_eq!(m.as_slice()[0], 7);
        assert_eq!(m.as_slice()[page], 7);
        assert_eq!(m.as_slice()[1], 0);
        m.as_mut_slice()[5] = 9;
        assert_eq!(m.as_slice()[5], 9);
        assert_eq!(m.page_addresses(page).count(), 4);
        assert!(Mapping::anonymous(0).is_err());
        assert!(Mapping::anonymous(usize::MAX).is_err());
    }

    #[test]
    fn mbind_moves_to_allowed_nodes() {
        let page = crate::page_size();
        let mut m = Mapping::anonymous(4 * page).unwrap();
        m.write_each(page, 1);
        let allowed = mems_allowed().unwrap();
        let flags = MbindFlags {
            strict: true,
            move_pages: true,
            move_all: false,
        };
        m.bind(&Policy::new(Mode::Bind, allowed), flags).unwrap();
        let e = m
            .bind(&Policy::new(Mode::Bind, Default::default()), flags)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
    }
}
