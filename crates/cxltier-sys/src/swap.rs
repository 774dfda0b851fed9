//! Swap areas and advice to another process's memory: `swapon(2)`/`swapoff(2)` with a
//! priority, `pidfd_open(2)` and `process_madvise(2)` (`MADV_PAGEOUT`, `MADV_WILLNEED`).

use crate::error::{ErrorKind, SysError};
use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `SWAP_FLAG_PREFER` from `<sys/swap.h>`: the priority in the low bits is used.
const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
/// `SWAP_FLAG_PRIO_MASK`.
const SWAP_FLAG_PRIO_MASK: libc::c_int = 0x7fff;

fn c_path(call: &'static str, path: &Path) -> Result<CString, SysError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        SysError::new(
            call,
            libc::EINVAL,
            ErrorKind::InvalidArgument,
            format!("{} contains a NUL byte", path.display()),
        )
    })
}

/// Turn the swap area at `path` (a file or a block device holding a swap header) on with
/// `priority` (0..=32767; higher is used first).
pub fn swapon(path: &Path, priority: u16) -> Result<(), SysError> {
    let c = c_path("swapon", path)?;
    let flags = SWAP_FLAG_PREFER | (libc::c_int::from(priority) & SWAP_FLAG_PRIO_MASK);
    // SAFETY: `c` is a NUL-terminated string that outlives the call; the kernel only reads it.
    let ret = unsafe { libc::swapon(c.as_ptr(), flags) };
    if ret == 0 {
        return Ok(());
    }
    let err = SysError::last("swapon");
    let what = path.display();
    Err(match err.errno {
        libc::EBUSY => err.with_detail(format!(
            "{what} is already in use as swap (or open exclusively): see /proc/swaps; \
             `swapoff {what}` or name another path"
        )),
        libc::EINVAL => err.with_detail(format!(
            "the kernel refused {what} as swap: the file has holes, its filesystem does not \
             support swap files, or the header is not a swap header; use a file on ext4 or \
             xfs, or a block device"
        )),
        libc::EPERM | libc::EACCES => err.with_detail(format!(
            "turning swap on needs CAP_SYS_ADMIN (or {what} is already swap in another \
             area); run as root"
        )),
        _ => err,
    })
}

/// Turn the swap area at `path` off; its pages are read back into memory first, which fails with
/// [`ErrorKind::OutOfMemory`] when they do not fit.
pub fn swapoff(path: &Path) -> Result<(), SysError> {
    let c = c_path("swapoff", path)?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call; the kernel only reads it.
    let ret = unsafe { libc::swapoff(c.as_ptr()) };
    if ret == 0 {
        Ok(())
    } else {
        let err = SysError::last("swapoff");
        Err(match err.errno {
            libc::ENOMEM => err.with_detail(format!(
                "not enough free memory to read {}'s swapped pages back; free memory and run \
                 `swapoff {}`",
                path.display(),
                path.display()
            )),
            libc::EINVAL => {
                err.with_detail(format!("{} is not an active swap area", path.display()))
            }
            _ => err,
        })
    }
}

/// A file descriptor referring to process `pid` (`pidfd_open(2)`, Linux 5.3+): advice through it
/// reaches that process even if its pid is reused meanwhile.
pub fn pidfd_open(pid: u32) -> Result<OwnedFd, SysError> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| {
        SysError::new(
            "pidfd_open",
            libc::EINVAL,
            ErrorKind::InvalidArgument,
            format!("pid {pid} is out of range"),
        )
    })?;
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1; no memory of ours
    // is touched.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    if ret < 0 {
        return Err(SysError::last("pidfd_open"));
    }
    let fd = RawFd::try_from(ret)
        .map_err(|_| SysError::new("pidfd_open", 0, ErrorKind::Other, "descriptor out of range"))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Advice for [`process_madvise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteAdvice {
    /// `MADV_PAGEOUT`: reclaim the pages now (anonymous pages go to swap).
    Pageout,
    /// `MADV_WILLNEED`: read the pages back in ahead of the fault (swap readahead).
    WillNeed,
    /// `MADV_COLD`: deactivate the pages, reclaimed first under pressure.
    Cold,
}

impl RemoteAdvice {
    fn raw(self) -> libc::c_int {
        match self {
            RemoteAdvice::Pageout => libc::MADV_PAGEOUT,
            RemoteAdvice::WillNeed => libc::MADV_WILLNEED,
            RemoteAdvice::Cold => libc::MADV_COLD,
        }
    }
}

/// At most this many ranges per call (`UIO_MAXIOV`).
const MAX_IOVECS: usize = 1024;

/// Give `advice` for `ranges` (`(start, length)` in the target's address space, page aligned) of
/// the process behind `pidfd` (`process_madvise(2)`, Linux 5.10+). Returns the bytes advised. The
/// kernel may stop early (a range no longer mapped, a signal): the call is repeated from where it
/// stopped, and a range it refuses (`EFAULT`/`ENOMEM`: unmapped meanwhile) is skipped.
pub fn process_madvise(
    pidfd: &OwnedFd,
    ranges: &[(usize, usize)],
    advice: RemoteAdvice,
) -> Result<u64, SysError> {
    use std::os::fd::AsRawFd;
    let mut advised = 0u64;
    let mut pending: Vec<(usize, usize)> = ranges.iter().copied().filter(|r| r.1 > 0).collect();
    pending.reverse();
    while !pending.is_empty() {
        let batch: Vec<libc::iovec> = pending
            .iter()
            .rev()
            .take(MAX_IOVECS)
            .map(|&(start, len)| libc::iovec {
                iov_base: start as *mut libc::c_void,
                iov_len: len,
            })
            .collect();
        // SAFETY: `batch` is a live array of `batch.len()` iovecs; the kernel reads it and the
        // target process's address ranges it names, never our memory at those addresses.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd.as_raw_fd(),
                batch.as_ptr(),
                batch.len(),
                advice.raw(),
                0 as libc::c_uint,
            )
        };
        if ret < 0 {
            let err = SysError::last("process_madvise");
            match err.errno {
                libc::EINTR | libc::EAGAIN => continue,
                // The first range is no longer mapped as it was: skip it, go on with the rest.
                libc::EFAULT | libc::ENOMEM => {
                    pending.pop();
                    continue;
                }
                libc::EINVAL if advice == RemoteAdvice::Pageout => {
                    return Err(err.with_detail(
                        "the kernel refused MADV_PAGEOUT for another process (Linux 5.10+ with \
                         CONFIG_ADVISE_SYSCALLS is needed), or a range is not page aligned",
                    ))
                }
                libc::EPERM => {
                    return Err(err.with_detail(
                        "advising another process's memory needs CAP_SYS_NICE and ptrace access \
                         to it; run as root",
                    ))
                }
                _ => return Err(err),
            }
        }
        let mut done = ret as u64;
        advised += done;
        // Drop what was advised, keeping the unadvised tail of a partly advised range.
        while done > 0 {
            let Some(last) = pending.last_mut() else {
                break;
            };
            if (last.1 as u64) <= done {
                done -= last.1 as u64;
                pending.pop();
            } else {
                last.0 += done as usize;
                last.1 -= done as usize;
                done = 0;
            }
        }
        if ret == 0 {
            // Nothing advanced: skip the first range rather than loop.
            pending.pop();
        }
    }
    Ok(advised)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Advice, Mapping};

    #[test]
    fn a_path_with_a_nul_byte_is_refused_before_the_kernel() {
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
        let e = swapon(p, 1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.detail.contains("NUL"), "{e}");
    }

    #[test]
    fn swapoff_of_something_that_is_not_swap_is_refused() {
        let dir = std::env::temp_dir().join(format!("cxltier-noswap-{}", std::process::id()));
        std::fs::write(&dir, b"x").unwrap();
        let e = swapoff(&dir).unwrap_err();
        std::fs::remove_file(&dir).unwrap();
        // Root sees EINVAL (not a swap area), others EPERM.
        assert!(matches!(e.errno, libc::EINVAL | libc::EPERM), "{e}");
    }

    #[test]
    fn willneed_on_our_own_memory_advises_every_byte() {
        let page = crate::page_size();
        let mut m = Mapping::anonymous(4 * page).unwrap();
        m.advise(Advice::NoHugePage).ok();
        m.as_mut_slice().fill(7);
        let fd = pidfd_open(std::process::id()).unwrap();
        let base = m.addr();
        // Two ranges, one of them spanning two pages.
        let n = process_madvise(
            &fd,
            &[(base, page), (base + 2 * page, 2 * page)],
            RemoteAdvice::WillNeed,
        )
        .unwrap();
        assert_eq!(n, 3 * page as u64);
        assert!(m.as_slice().iter().all(|&b| b == 7));
    }

    #[test]
    fn pidfd_of_a_process_that_does_not_exist_is_esrch() {
        let e = pidfd_open(i32::MAX as u32).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoSuchProcess, "{e}");
    }
}
