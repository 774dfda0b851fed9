//! Direct I/O for the NVMe tier: 4 KiB-aligned buffers, files opened with `O_DIRECT`, and an
//! io_uring that submits a batch of positioned reads or writes with one system call and waits for
//! all of them.
//!
//! `O_DIRECT` bypasses the page cache, so the store's NVMe tier costs no DRAM behind its back (a
//! memory cgroup would otherwise charge the cache to the store). Its price is alignment: buffer
//! addresses, file offsets and lengths must be multiples of the logical block size; [`ALIGN`]
//! (4096) satisfies every device in practice.

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::io::Read;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;

use io_uring::{opcode, types, IoUring};

/// Alignment of every direct I/O buffer, offset and length.
pub const ALIGN: usize = 4096;

/// A zeroed heap buffer aligned to [`ALIGN`], its length a multiple of it.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively (like a Vec<u8>); nothing else aliases it.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes rounded up to a multiple of [`ALIGN`] (at least one block).
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.max(1).next_multiple_of(ALIGN);
        let layout = Layout::from_size_align(len, ALIGN).expect("aligned buffer size overflows");
        // SAFETY: the layout has a non-zero size (at least ALIGN bytes).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points at len initialised (zeroed at allocation) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout =
            Layout::from_size_align(self.len, ALIGN).expect("layout was valid at allocation");
        // SAFETY: allocated in `new` with exactly this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// A file or block device opened for direct I/O.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    block_device: bool,
}

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

impl DirectFile {
    /// Open `path` read-write with `O_DIRECT`, creating a regular file if `create` and it is absent.
    pub fn open(path: &Path, create: bool) -> io::Result<DirectFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        let block_device = file.metadata()?.file_type().is_block_device();
        Ok(DirectFile { file, block_device })
    }

    /// Whether this is a block device rather than a regular file.
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// Size in bytes (the device's size for a block device).
    pub fn size(&self) -> io::Result<u64> {
        if !self.block_device {
            return Ok(self.file.metadata()?.len());
        }
        let mut size: u64 = 0;
        // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `size`.
        let ret =
            unsafe { libc::ioctl(self.file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(size)
    }

    /// Reserve `len` bytes of disk space from offset 0 (`fallocate`), so that a full disk is found
    /// now rather than in the middle of a write.
    pub fn preallocate(&self, len: u64) -> io::Result<()> {
        loop {
            // SAFETY: fallocate on our own open descriptor; no memory is passed.
            let ret = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len as libc::off_t) };
            if ret == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                return self.preallocate_by_writing(len);
            }
            // A large reservation can be interrupted by a signal; it is safe to ask again.
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// On a file system without `fallocate` (ext2, some network and FUSE file systems), reserve
    /// the space by writing zeros beyond the file's current end, as glibc's `posix_fallocate`
    /// does: a full disk is still found now (`ENOSPC`), and nothing the file holds is written
    /// over. `write_all_at` retries interrupted and partial writes.
    pub(crate) fn preallocate_by_writing(&self, len: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let align = ALIGN as u64;
        let current = self.file.metadata()?.len();
        let mut at = current.next_multiple_of(align);
        let end = len / align * align;
        let zeros = AlignedBuf::new(1 << 20);
        while at < end {
            let n = ((end - at) as usize).min(zeros.len());
            self.file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        if len > self.file.metadata()?.len() {
            self.file.set_len(len)?;
        }
        Ok(())
    }

    /// Flush written data to stable storage (`fdatasync`).
    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    pub(crate) fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }
}

/// `io_uring_setup`'s failure `e`, saying its likely cause: `refused` for EPERM (the kernel
/// refusing io_uring to this process), an old kernel for ENOSYS, the locked-memory limit for
/// ENOMEM.
pub(crate) fn setup_error(e: io::Error, refused: &str) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EPERM) => refused,
        Some(libc::ENOSYS) => "this kernel has no io_uring (Linux 5.1 or later is needed)",
        Some(libc::ENOMEM) => "not enough locked memory for the ring (raise RLIMIT_MEMLOCK)",
        _ => "io_uring_setup failed",
    };
    io::Error::new(e.kind(), format!("{why}: {e}"))
}

/// An io_uring instance for batches of direct reads and writes.
pub struct Uring {
    ring: IoUring,
    entries: u32,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Uring({} entries)", self.entries)
    }
}

impl Uring {
    /// A ring with room for `entries` requests in flight. Fails with a message naming the cause
    /// when the kernel refuses io_uring (disabled by sysctl, seccomp, or too old).
    pub fn new(entries: u32) -> io::Result<Uring> {
        let ring = IoUring::new(entries).map_err(|e| {
            setup_error(
                e,
                "the kernel refuses io_uring to this process (sysctl kernel.io_uring_disabled=2, \
                 or 1 without CAP_SYS_ADMIN; set it to 0 with `sysctl kernel.io_uring_disabled=0`, \
                 or a seccomp filter of the container blocks it)",
            )
        })?;
        Ok(Uring { ring, entries })
    }

    /// Read into each `(offset, buffer)` pair, all submitted at once; one result per pair (bytes
    /// read, or the error). Offsets and buffer lengths must be multiples of [`ALIGN`].
    pub fn read_batch(
        &mut self,
        file: &DirectFile,
        requests: &mut [(u64, &mut AlignedBuf)],
    ) -> Vec<io::Result<usize>> {
        let mut results: Vec<io::Result<usize>> = (0..requests.len()).map(|_| Ok(0)).collect();
        let per_submit = self.entries as usize;
        let total = requests.len();
        let mut start = 0;
        while start < total {
            let chunk = start..(start + per_submit).min(total);
            start = chunk.end;
            for i in chunk.clone() {
                let (offset, buf) = &mut requests[i];
                let sqe = opcode::Read::new(self.fd_of(file), buf.as_mut_ptr(), buf.len() as u32)
                    .offset(*offset)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the buffer is borrowed mutably by `requests` for this whole call, and the
                // call does not return before every submitted request of this chunk has completed
                // (complete() waits for all of them), so the kernel never writes to freed memory.
                unsafe { self.ring.submission().push(&sqe) }
                    .expect("the chunk is no larger than the ring");
            }
            self.complete(chunk.len(), &mut results);
        }
        results
    }

    /// Write `buf` at `offset` and wait for it. Returns the bytes written.
    pub fn write_at(&mut self, file: &DirectFile, offset: u64, buf: &[u8]) -> io::Result<usize> {
        let sqe = opcode::Write::new(self.fd_of(file), buf.as_ptr(), buf.len() as u32)
            .offset(offset)
            .build()
            .user_data(0);
        // SAFETY: `buf` is borrowed for the whole call and the call waits for the completion.
        unsafe { self.ring.submission().push(&sqe) }.expect("an empty ring has room for one");
        let mut results = vec![Ok(0)];
        self.complete(1, &mut results);
        results.pop().expect("one result")
    }

    fn fd_of(&self, file: &DirectFile) -> types::Fd {
        file.fd()
    }

    /// Submit what is queued and wait until `n` completions have been collected into `results`.
    fn complete(&mut self, n: usize, results: &mut [io::Result<usize>]) {
        let mut done = 0;
        let mut failures = 0u32;
        while done < n {
            if let Err(e) = self.ring.submit_and_wait(n - done) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // The requests may still be in flight: keep waiting for them (the buffers must
                // outlive them), recording the error for every one that never completes.
                // EBUSY: the completion queue is full; EAGAIN: the kernel lacked memory for the
                // submission for now. Both pass: wait again (as the batched ring does).
                if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) {
                    continue;
                }
                // Anything else is a broken ring. The requests may still be in flight, so
                // returning (and letting the caller free the buffers they read into or write
                // from) is not an option: retry for a while, then abort the process rather than
                // let the kernel touch freed memory (as the batched ring does).
                failures += 1;
                if failures > 10_000 {
                    crate::abort_with(format_args!(
                        "io_uring_enter keeps failing ({e}) with {} direct I/O requests in flight; aborting",
                        n - done
                    ));
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
                continue;
            }
            for cqe in self.ring.completion() {
                let i = cqe.user_data() as usize;
                let res = cqe.result();
                results[i] = if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res as usize)
                };
                done += 1;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A file `name` in `dir` opened for direct I/O, with room for `blocks` blocks.
    pub(crate) fn direct_file(dir: &Path, name: &str, blocks: u64) -> DirectFile {
        let file = DirectFile::open(&dir.join(name), true).unwrap();
        file.preallocate(blocks * ALIGN as u64).unwrap();
        file
    }

    /// A file in a scratch directory whose `blocks` blocks are written, block `i` with bytes
    /// `i + 1`, each write whole.
    fn numbered_blocks(blocks: u8) -> (tempfile::TempDir, DirectFile) {
        let tmp = tempfile::tempdir().unwrap();
        let file = direct_file(tmp.path(), "f", blocks.into());
        let mut ring = Uring::new(4).unwrap();
        for block in 0..blocks {
            let mut b = AlignedBuf::new(ALIGN);
            b.fill(block + 1);
            let written = ring.write_at(&file, block as u64 * ALIGN as u64, &b);
            assert_eq!(written.unwrap(), ALIGN, "block {block}");
        }
        (tmp, file)
    }

    #[test]
    fn queued_reads_complete_into_owned_buffers() {
        let (_tmp, file) = numbered_blocks(8);
        let mut q = ReadQueue::new(4).unwrap();
        let mut want = std::collections::HashMap::new();
        let mut got = std::collections::HashMap::new();
        // Ten reads through four tickets: the queue says when it is full, reaping frees tickets.
        let mut next = 0u8;
        while got.len() < 10 {
            while next < 10 {
                match q.push(&file, (next % 8) as u64 * ALIGN as u64, ALIGN) {
                    Some(t) => {
                        want.insert(t, next % 8 + 1);
                        next += 1;
                    }
                    None => break,
                }
            }
            assert!(q.in_flight() <= 4);
            q.submit().unwrap();
            for d in q.reap(1).unwrap() {
                assert_eq!(d.result.unwrap(), ALIGN);
                let expect = want.remove(&d.ticket).unwrap();
                assert!(d.buf.iter().all(|&x| x == expect), "ticket {}", d.ticket);
                got.insert(got.len(), expect);
            }
        }
        assert_eq!(q.in_flight(), 0);
        // The completion eventfd: quiet once cleared, readable after a read completes, and a
        // recycled buffer serves the next read with that read's bytes.
        q.clear_completion_signal();
        let readable = |fd: RawFd, ms: i32| {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, and its count.
            unsafe { libc::poll(&mut p, 1, ms) == 1 }
        };
        assert!(!readable(q.completion_fd(), 0));
        q.recycle(AlignedBuf::new(ALIGN));
        let t = q.push(&file, 2 * ALIGN as u64, ALIGN).unwrap();
        q.submit().unwrap();
        assert!(readable(q.completion_fd(), 5000), "no completion signalled");
        q.clear_completion_signal();
        let d = q.reap(1).unwrap().pop().unwrap();
        assert_eq!((d.ticket, d.result.as_ref().ok()), (t, Some(&ALIGN)));
        assert!(d.buf.iter().all(|&x| x == 3));
        // Dropping a queue with reads in flight waits for them.
        q.push(&file, 0, ALIGN).unwrap();
        drop(q);
    }

    #[test]
    fn without_fallocate_the_space_is_reserved_by_writing_zeros_past_the_end() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let file = DirectFile::open(&path, true).unwrap();
        let mut first = AlignedBuf::new(ALIGN);
        first.fill(0xab);
        file.file.write_all_at(&first, 0).unwrap();
        let len = (3 << 20) + 2 * ALIGN as u64;
        file.preallocate_by_writing(len).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), len);
        // Allocated, not a hole (512-byte units).
        assert!(meta.blocks() * 512 >= len, "{} blocks", meta.blocks());
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            bytes[..ALIGN].iter().all(|&b| b == 0xab),
            "the data was kept"
        );
        assert!(bytes[ALIGN..].iter().all(|&b| b == 0));
        // Again: nothing to do.
        file.preallocate_by_writing(len).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    }

    #[test]
    fn direct_write_then_batched_read() {
        let (_tmp, file) = numbered_blocks(4);
        let mut ring = Uring::new(4).unwrap();
        let mut bufs: Vec<AlignedBuf> = (0..6).map(|_| AlignedBuf::new(ALIGN)).collect();
        let mut reqs: Vec<(u64, &mut AlignedBuf)> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| (((i % 4) * ALIGN) as u64, b))
            .collect();
        let results = ring.read_batch(&file, &mut reqs);
        assert!(results.iter().all(|r| matches!(r, Ok(n) if *n == ALIGN)));
        for (i, b) in bufs.iter().enumerate() {
            assert!(b.iter().all(|&x| x == (i % 4) as u8 + 1));
        }
    }
}

/// Reads that stay in flight while the caller goes on: each read goes into a buffer the queue
/// owns until the kernel has completed it, so nothing the caller does can free memory the kernel
/// is still writing. The store's server uses it to serve requests whose data is in memory while
/// other requests wait for the device.
pub struct ReadQueue {
    ring: IoUring,
    /// Signalled by the kernel at every completion (`io_uring_register(2)`'s eventfd): an event
    /// loop waits on it together with its sockets instead of blocking in the ring, so requests
    /// that arrive while reads are in flight are seen at once.
    completions: File,
    /// The buffer of each ticket in flight; `None` for a free ticket.
    slots: Vec<Option<AlignedBuf>>,
    free: Vec<u32>,
    in_flight: usize,
    /// Buffers handed back by [`ReadQueue::recycle`], reused by the next reads: a read then
    /// costs no allocation and no zeroing of a fresh block.
    spare: Vec<AlignedBuf>,
}

/// Largest buffer kept for reuse: record reads are one or a few blocks; a rare large one is
/// freed rather than held.
const SPARE_MAX_LEN: usize = 16 * ALIGN;

impl std::fmt::Debug for ReadQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ReadQueue({} of {} in flight)",
            self.in_flight,
            self.slots.len()
        )
    }
}

/// One finished read of a [`ReadQueue`].
#[derive(Debug)]
pub struct ReadDone {
    /// The ticket [`ReadQueue::push`] gave.
    pub ticket: u32,
    /// Bytes read, or the error.
    pub result: io::Result<usize>,
    /// The buffer, now the caller's.
    pub buf: AlignedBuf,
}

impl ReadQueue {
    /// A queue with room for `entries` reads in flight at once.
    pub fn new(entries: u32) -> io::Result<ReadQueue> {
        let entries = entries.max(1);
        let ring = Uring::new(entries)?.ring;
        let completions = File::from(eventfd_nonblocking()?);
        ring.submitter().register_eventfd(completions.as_raw_fd())?;
        Ok(ReadQueue {
            ring,
            completions,
            slots: (0..entries).map(|_| None).collect(),
            free: (0..entries).rev().collect(),
            in_flight: 0,
            spare: Vec::new(),
        })
    }

    /// Give back a finished read's buffer for later reads to reuse (at most one per ticket is
    /// kept). Its bytes are not cleared: a later read overwrites the part it reads, and callers
    /// look only at the bytes its result says were read.
    pub fn recycle(&mut self, buf: AlignedBuf) {
        if buf.len() <= SPARE_MAX_LEN && self.spare.len() < self.slots.len() {
            self.spare.push(buf);
        }
    }

    /// Reads queued or in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// A file descriptor that becomes readable when a read completes (an eventfd): register it
    /// with `epoll` to wake up for completions and for sockets alike. Call
    /// [`ReadQueue::clear_completion_signal`] when it fires, then reap.
    pub fn completion_fd(&self) -> RawFd {
        self.completions.as_raw_fd()
    }

    /// Reset the completion eventfd's counter (it is non-blocking: nothing to reset is fine).
    pub fn clear_completion_signal(&mut self) {
        let mut counter = [0u8; 8];
        // WouldBlock: nothing completed since the last reset.
        let _ = self.completions.read(&mut counter);
    }

    /// Queue a read of `len` bytes (rounded up to [`ALIGN`]) at `offset` (a multiple of
    /// [`ALIGN`]) of `file`; it goes to the kernel at the next [`ReadQueue::submit`] or
    /// [`ReadQueue::reap`]. `None` when the queue is full: reap first.
    pub fn push(&mut self, file: &DirectFile, offset: u64, len: usize) -> Option<u32> {
        let ticket = self.free.pop()?;
        let need = len.max(1).next_multiple_of(ALIGN);
        let mut buf = match self.spare.pop() {
            Some(b) if b.len() >= need => b,
            _ => AlignedBuf::new(need),
        };
        let sqe = opcode::Read::new(file.fd(), buf.as_mut_ptr(), need as u32)
            .offset(offset)
            .build()
            .user_data(ticket as u64);
        // SAFETY: the kernel writes at most `need` bytes, and the buffer (fresh or reused) has at
        // least that many. Its heap memory is owned by `self.slots[ticket]` from here until its
        // completion is reaped (moving the AlignedBuf value does not move that memory), and Drop
        // waits for every read in flight before the buffers are freed. The ring has as many
        // entries as tickets, so a free ticket means a free submission slot. The file descriptor is
        // resolved by the kernel when the entry is submitted; callers submit before the file can
        // be closed (the store's log owns both and drops this queue first).
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() {
            self.free.push(ticket);
            return None;
        }
        self.slots[ticket as usize] = Some(buf);
        self.in_flight += 1;
        Some(ticket)
    }

    /// Hand the queued reads to the kernel without waiting for any.
    pub fn submit(&mut self) -> io::Result<()> {
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Submit what is queued and collect the finished reads, waiting until at least `min` have
    /// finished (0: do not wait).
    pub fn reap(&mut self, min: usize) -> io::Result<Vec<ReadDone>> {
        let mut done = Vec::new();
        self.reap_into(min, &mut done)?;
        Ok(done)
    }

    /// [`ReadQueue::reap`] appending to `done`: a caller that reaps often keeps one vector
    /// rather than allocating one per call.
    pub fn reap_into(&mut self, min: usize, done: &mut Vec<ReadDone>) -> io::Result<()> {
        let min = min.min(self.in_flight);
        loop {
            match self.ring.submit_and_wait(min) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => break,
                Err(e) => return Err(e),
            }
        }
        for cqe in self.ring.completion() {
            let ticket = cqe.user_data() as u32;
            let Some(buf) = self.slots.get_mut(ticket as usize).and_then(Option::take) else {
                continue;
            };
            let res = cqe.result();
            let result = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            };
            self.free.push(ticket);
            self.in_flight -= 1;
            done.push(ReadDone {
                ticket,
                result,
                buf,
            });
        }
        Ok(())
    }
}

impl Drop for ReadQueue {
    fn drop(&mut self) {
        // The kernel may still write into the buffers: wait for every read before they go.
        while self.in_flight > 0 {
            match self.reap(self.in_flight) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Cannot wait: leak the buffers rather than free memory the kernel may write.
                Err(_) => {
                    for slot in &mut self.slots {
                        if let Some(buf) = slot.take() {
                            std::mem::forget(buf);
                        }
                    }
                    return;
                }
            }
        }
    }
}

/// A new eventfd, non-blocking and close-on-exec.
fn eventfd_nonblocking() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; it returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor just returned by eventfd(2), owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
