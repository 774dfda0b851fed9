//! Thin, safe wrappers over the Linux system calls cxltier needs, and the only crate in the
//! workspace allowed to use `unsafe`.
//!
//! - memory policy: [`set_mempolicy`], [`get_mempolicy`], [`node_of_address`], [`mems_allowed`],
//!   [`kernel_supports`], with [`Policy`], [`Mode`] and [`NodeMask`];
//! - page placement: [`query_pages`] and [`move_pages`] (`move_pages(2)`);
//! - memory: [`Mapping`], an owned anonymous `mmap`, with [`Mapping::advise`] (`madvise`) and
//!   [`Mapping::bind`] (`mbind`);
//! - [`page_size`];
//! - [`rlimit`]: the open-file limit, read and raised;
//! - [`swap`]: `swapon`/`swapoff` with a priority, `pidfd_open` and `process_madvise`
//!   (`MADV_PAGEOUT`, `MADV_WILLNEED`) on another process's memory;
//! - [`signal`]: blocking, waiting for and forwarding signals while supervising a child;
//! - [`stream`]: non-temporal stores for memory bandwidth measurements;
//! - [`thp`]: transparent huge pages disabled for the calling process (`prctl`);
//! - [`timer`]: a one-shot timerfd that wakes an event loop at a given microsecond;
//! - [`uring`]: aligned buffers, `O_DIRECT` files and batched io_uring reads and writes;
//! - [`iobatch`]: mixed batches of direct reads and writes on any number of files;
//! - [`heap`]: memory the allocators hold free, handed back to the system.
//!
//! Every `unsafe` block states why it is sound in a `// SAFETY:` comment. Errors are [`SysError`]s
//! that name the call and say, where the errno allows, what the cause is and what to do.
//!
//! Running a program under a policy needs no `unsafe` here: set the policy with [`set_mempolicy`]
//! on the calling thread, then start the program with `std::process::Command` (`spawn`, or
//! `std::os::unix::process::CommandExt::exec`). A thread's memory policy is copied to children and
//! kept across `execve`.

#![deny(unsafe_op_in_unsafe_fn)]
// Every unsafe block carries its safety argument, in every module: a block without one fails the
// build rather than warning.
#![deny(clippy::undocumented_unsafe_blocks)]
// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]
// Every public item says what it is, but for the two modules marked below, which do not yet.
#![warn(missing_docs)]

mod error;
pub mod heap;
pub mod iobatch;
mod mapping;
mod mempolicy;
/// `/proc/PID/pagemap` entries, read in batches.
#[allow(missing_docs)]
pub mod pagemap;
mod pages;
pub mod rlimit;
pub mod signal;
#[allow(missing_docs)]
pub mod stream;
pub mod swap;
pub mod thp;
pub mod timer;
pub mod uring;
mod usage;

pub use error::{errno_name, ErrorKind, SysError};
pub use mapping::{Advice, Mapping, MbindFlags};
pub use mempolicy::{
    get_mempolicy, kernel_supports, mems_allowed, node_of_address, set_mempolicy, Mode, ModeFlags,
    NodeMask, Policy,
};
pub use pages::{move_pages, query_pages, Moved, PageStatus, PagesPerNode};
pub use usage::{cpu_times, CpuTimes, Whose};

/// The base page size in bytes (`sysconf(_SC_PAGESIZE)`, what `getpagesize()` returns).
pub fn page_size() -> usize {
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

/// Says why on stderr, then aborts the process: for a ring whose requests may still be writing
/// into buffers the caller would free on return. The one place the library prints: there is no
/// caller left to return the reason to.
#[allow(clippy::print_stderr)]
pub(crate) fn abort_with(why: std::fmt::Arguments<'_>) -> ! {
    eprintln!("{why}");
    std::process::abort()
}

#[cfg(test)]
mod tests {
    #[test]
    fn page_size_is_a_power_of_two() {
        let p = super::page_size();
        assert!(p >= 4096 && p.is_power_of_two());
    }
}
