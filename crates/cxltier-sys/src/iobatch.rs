//! Mixed batches of direct reads and writes on one io_uring: every request of a batch (reads into
//! some buffers, writes from others, on any number of files) goes to the kernel with one system
//! call, and the call returns when all of them have completed.
//!
//! This is the I/O step of an out-of-core pipeline: the reads of the next block and the writes of
//! the previous one are one batch, in flight together on the device while the caller computes on
//! the current block on another thread.

use std::io;

use io_uring::{opcode, IoUring};

use crate::uring::DirectFile;

/// One request of a batch: read into a buffer, or write from one, at an offset of a file.
#[derive(Debug)]
pub enum IoRequest<'a> {
    /// Read `buf.len()` bytes at `offset` of `file` into `buf`.
    Read {
        /// The file or device.
        file: &'a DirectFile,
        /// Byte offset, a multiple of [`crate::uring::ALIGN`].
        offset: u64,
        /// The destination; its address and length are multiples of [`crate::uring::ALIGN`].
        buf: &'a mut [u8],
    },
    /// Write `buf` at `offset` of `file`.
    Write {
        /// The file or device.
        file: &'a DirectFile,
        /// Byte offset, a multiple of [`crate::uring::ALIGN`].
        offset: u64,
        /// The source; its address and length are multiples of [`crate::uring::ALIGN`].
        buf: &'a [u8],
    },
}

impl IoRequest<'_> {
    fn len(&self) -> usize {
        match self {
            IoRequest::Read { buf, .. } => buf.len(),
            IoRequest::Write { buf, .. } => buf.len(),
        }
    }
}

/// An io_uring for mixed batches of direct reads and writes.
pub struct IoBatchRing {
    ring: IoUring,
    entries: u32,
}

impl std::fmt::Debug for IoBatchRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBatchRing({} entries)", self.entries)
    }
}

impl IoBatchRing {
    /// A ring with room for `entries` requests in flight at once (larger batches go in rounds).
    pub fn new(entries: u32) -> io::Result<IoBatchRing> {
        let ring = IoUring::new(entries.max(1)).map_err(|e| {
            crate::uring::setup_error(
                e,
                "the kernel refuses io_uring to this process (sysctl kernel.io_uring_disabled, \
                 or a seccomp filter of the container)",
            )
        })?;
        Ok(IoBatchRing {
            ring,
            entries: entries.max(1),
        })
    }

    /// Submit every request and wait for all of them. Returns one result per request, in order:
    /// the bytes transferred (a short transfer is an error: direct I/O on a file that is long
    /// enough never transfers less), or the error the kernel reported.
    pub fn run(&mut self, requests: &mut [IoRequest<'_>]) -> Vec<io::Result<usize>> {
        let mut results: Vec<Option<io::Result<usize>>> =
            (0..requests.len()).map(|_| None).collect();
        let total = requests.len();
        let mut start = 0;
        while start < total {
            let round = start..(start + self.entries as usize).min(total);
            start = round.end;
            for i in round.clone() {
                let sqe = match &mut requests[i] {
                    IoRequest::Read { file, offset, buf } => {
                        opcode::Read::new(file.fd(), buf.as_mut_ptr(), buf.len() as u32)
                            .offset(*offset)
                            .build()
                    }
                    IoRequest::Write { file, offset, buf } => {
                        opcode::Write::new(file.fd(), buf.as_ptr(), buf.len() as u32)
                            .offset(*offset)
                            .build()
                    }
                }
                .user_data(i as u64);
                // SAFETY: every buffer is borrowed by `requests` for the whole call (mutably for
                // reads), and this function does not return before every request pushed in this
                // round has completed (the loop below waits for each completion, and on a failed
                // wait keeps waiting), so the kernel never touches memory that was freed or lent
                // elsewhere.
                unsafe { self.ring.submission().push(&sqe) }
                    .expect("a round is no larger than the ring");
            }
            let mut pending = round.len();
            let mut failures = 0u32;
            while pending > 0 {
                if let Err(e) = self.ring.submit_and_wait(pending) {
                    match e.raw_os_error() {
                        Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => continue,
                        // Anything else is a broken ring. The requests may still be in flight,
                        // so returning (and freeing the buffers they write into) is not an
                        // option: retry for a while, then abort the process rather than let
                        // the kernel write into freed memory.
                        _ => {
                            failures += 1;
                            if failures > 10_000 {
                                crate::abort_with(format_args!(
                                    "io_uring_enter keeps failing ({e}) with {pending} direct \
                                     I/O requests in flight; aborting"
                                ));
                            }
                            std::thread::sleep(std::time::Duration::from_micros(100));
                            continue;
                        }
                    }
                }
                failures = 0;
                for cqe in self.ring.completion() {
                    let i = cqe.user_data() as usize;
                    let res = cqe.result();
                    let expected = requests[i].len();
                    results[i] = Some(if res < 0 {
                        Err(io::Error::from_raw_os_error(-res))
                    } else if res as usize != expected {
                        Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("short transfer: {res} of {expected} bytes"),
                        ))
                    } else {
                        Ok(res as usize)
                    });
                    pending -= 1;
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every request completed"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::tests::direct_file;
    use crate::uring::{AlignedBuf, ALIGN};

    #[test]
    fn mixed_batch_reads_what_an_earlier_batch_wrote() {
        let tmp = tempfile::tempdir().unwrap();
        let a = direct_file(tmp.path(), "a", 2);
        let b = direct_file(tmp.path(), "b", 2);
        let mut ring = IoBatchRing::new(2).unwrap();
        let mut w0 = AlignedBuf::new(ALIGN);
        let mut w1 = AlignedBuf::new(ALIGN);
        w0.fill(7);
        w1.fill(9);
        let results = ring.run(&mut [
            IoRequest::Write {
                file: &a,
                offset: ALIGN as u64,
                buf: &w0,
            },
            IoRequest::Write {
                file: &b,
                offset: 0,
                buf: &w1,
            },
        ]);
        assert!(results.iter().all(|r| matches!(r, Ok(n) if *n == ALIGN)));
        let mut r0 = AlignedBuf::new(ALIGN);
        let mut r1 = AlignedBuf::new(ALIGN);
        let mut w2 = AlignedBuf::new(ALIGN);
        w2.fill(3);
        // Three requests on a two-entry ring: the batch goes in two rounds.
        let results = ring.run(&mut [
            IoRequest::Read {
                file: &a,
                offset: ALIGN as u64,
                buf: &mut r0,
            },
            IoRequest::Read {
                file: &b,
                offset: 0,
                buf: &mut r1,
            },
            IoRequest::Write {
                file: &a,
                offset: 0,
                buf: &w2,
            },
        ]);
        assert!(results.iter().all(|r| matches!(r, Ok(n) if *n == ALIGN)));
        assert!(r0.iter().all(|&x| x == 7));
        assert!(r1.iter().all(|&x| x == 9));
        // Reading past the end of a file is a short transfer, reported as an error.
        let mut r3 = AlignedBuf::new(ALIGN);
        let results = ring.run(&mut [IoRequest::Read {
            file: &a,
            offset: 8 * ALIGN as u64,
            buf: &mut r3,
        }]);
        assert!(results[0].is_err());
    }
}
