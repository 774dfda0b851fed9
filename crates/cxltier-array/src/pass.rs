//! The triple-buffered pass: read block k+1, compute on block k, write block k-1, at once.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use cxltier_sys::iobatch::{IoBatchRing, IoRequest};
use cxltier_sys::uring::AlignedBuf;
use serde::Serialize;

use crate::array::{Chunk, SpillFile};
use crate::{ArrayError, TieredArray};

/// What one pass did and where its time went.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassReport {
    /// Blocks processed.
    pub blocks: usize,
    /// Bytes per block.
    pub block_bytes: usize,
    /// Bytes read from spill files.
    pub bytes_read: u64,
    /// Bytes written to spill files.
    pub bytes_written: u64,
    /// Wall-clock seconds of the pass.
    pub wall_seconds: f64,
    /// Seconds the caller spent computing.
    pub compute_seconds: f64,
    /// Seconds the caller waited for I/O (reading the first block, waiting for reads and writes
    /// that took longer than the computation, writing the last block).
    pub io_wait_seconds: f64,
    /// Seconds the I/O thread was busy (copying memory chunks and doing file I/O).
    pub io_busy_seconds: f64,
}

struct Job {
    read: Option<(usize, AlignedBuf)>,
    write: Option<(usize, AlignedBuf)>,
}

struct Done {
    read: Option<(usize, AlignedBuf)>,
    write: Option<AlignedBuf>,
    result: Result<(u64, u64), ArrayError>,
    busy: Duration,
}

impl TieredArray {
    /// Run `compute` on every block, in order, with I/O overlapped: each block is a list of chunk
    /// indices (all blocks the same length, no chunk twice), gathered into one buffer in that
    /// order, handed to `compute(block_index, bytes)`, and scattered back. Stops at the first
    /// failed read, write or computation and reports it.
    pub fn pass<F>(
        &mut self,
        blocks: &[Vec<usize>],
        mut compute: F,
    ) -> Result<PassReport, ArrayError>
    where
        F: FnMut(usize, &mut [u8]) -> Result<(), String>,
    {
        let start = Instant::now();
        let per_block = blocks.first().map_or(0, Vec::len);
        let mut seen = vec![false; self.chunks.len()];
        for b in blocks {
            if b.len() != per_block {
                return Err(ArrayError::Config(
                    "every block of a pass must have as many chunks".into(),
                ));
            }
            for &c in b {
                if c >= seen.len() || std::mem::replace(&mut seen[c], true) {
                    return Err(ArrayError::Config(format!(
                        "chunk {c} is out of range or appears twice in one pass"
                    )));
                }
            }
        }
        let block_bytes = per_block * self.chunk;
        let mut report = PassReport {
            blocks: blocks.len(),
            block_bytes,
            ..PassReport::default()
        };
        if blocks.is_empty() {
            return Ok(report);
        }
        let chunk = self.chunk;
        let chunks = &mut self.chunks;
        let files = &self.files;
        let ring = &mut self.ring;
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let mut compute_time = Duration::ZERO;
        let mut wait_time = Duration::ZERO;
        let mut busy_time = Duration::ZERO;
        let mut failure: Option<ArrayError> = None;
        std::thread::scope(|scope| {
            scope.spawn(move || {
                for mut job in job_rx {
                    let t = Instant::now();
                    let result = transfer(
                        chunks,
                        files,
                        ring,
                        chunk,
                        job.read
                            .as_mut()
                            .map(|(b, buf)| (blocks[*b].as_slice(), buf)),
                        job.write
                            .as_ref()
                            .map(|(b, buf)| (blocks[*b].as_slice(), buf)),
                    );
                    let done = Done {
                        read: job.read,
                        write: job.write.map(|(_, buf)| buf),
                        result,
                        busy: t.elapsed(),
                    };
                    if done_tx.send(done).is_err() {
                        break;
                    }
                }
            });
            let mut spare: Vec<AlignedBuf> = (0..2).map(|_| AlignedBuf::new(block_bytes)).collect();
            // Record one answer of the I/O thread: its busy time and bytes, or its error.
            let account = |done: Done, report: &mut PassReport, busy: &mut Duration| {
                *busy += done.busy;
                let (r, w) = done.result?;
                report.bytes_read += r;
                report.bytes_written += w;
                Ok::<_, ArrayError>((done.read, done.write))
            };
            let t = Instant::now();
            job_tx
                .send(Job {
                    read: Some((0, AlignedBuf::new(block_bytes))),
                    write: None,
                })
                .expect("the I/O thread lives for the whole pass");
            let done = done_rx.recv().expect("the I/O thread answers every job");
            wait_time += t.elapsed();
            let mut current = match account(done, &mut report, &mut busy_time) {
                Ok((read, _)) => read.expect("the first read returns its buffer"),
                Err(e) => {
                    failure = Some(e);
                    return;
                }
            };
            let mut previous: Option<(usize, AlignedBuf)> = None;
            for k in 0..blocks.len() {
                let read = (k + 1 < blocks.len())
                    .then(|| (k + 1, spare.pop().expect("three buffers suffice")));
                job_tx
                    .send(Job {
                        read,
                        write: previous.take(),
                    })
                    .expect("the I/O thread lives for the whole pass");
                let t = Instant::now();
                let computed = compute(current.0, &mut current.1);
                compute_time += t.elapsed();
                let t = Instant::now();
                let done = done_rx.recv().expect("the I/O thread answers every job");
                wait_time += t.elapsed();
                if let Err(message) = computed {
                    failure = Some(ArrayError::Compute { block: k, message });
                    return;
                }
                let (read, written) = match account(done, &mut report, &mut busy_time) {
                    Ok(x) => x,
                    Err(e) => {
                        failure = Some(e);
                        return;
                    }
                };
                if let Some(buf) = written {
                    spare.push(buf);
                }
                previous = Some(current);
                match read {
                    Some(next) => current = next,
                    None => break,
                }
            }
            let t = Instant::now();
            job_tx
                .send(Job {
                    read: None,
                    write: previous.take(),
                })
                .expect("the I/O thread lives for the whole pass");
            let done = done_rx.recv().expect("the I/O thread answers every job");
            wait_time += t.elapsed();
            if let Err(e) = account(done, &mut report, &mut busy_time) {
                failure = Some(e);
            }
            drop(job_tx);
        });
        if let Some(e) = failure {
            return Err(e);
        }
        report.wall_seconds = start.elapsed().as_secs_f64();
        report.compute_seconds = compute_time.as_secs_f64();
        report.io_wait_seconds = wait_time.as_secs_f64();
        report.io_busy_seconds = busy_time.as_secs_f64();
        Ok(report)
    }
}

/// Scatter `write` to its chunks and gather `read` from its chunks: memory chunks by copying,
/// spilled chunks with one io_uring batch for both directions. Returns bytes read and written on
/// files.
fn transfer(
    chunks: &mut [Chunk],
    files: &[SpillFile],
    ring: &mut IoBatchRing,
    chunk: usize,
    read: Option<(&[usize], &mut AlignedBuf)>,
    write: Option<(&[usize], &AlignedBuf)>,
) -> Result<(u64, u64), ArrayError> {
    let mut requests: Vec<IoRequest<'_>> = Vec::new();
    let mut what: Vec<(&'static str, usize, usize, u64)> = Vec::new();
    let (mut bytes_read, mut bytes_written) = (0, 0);
    if let Some((ids, buf)) = write {
        for (&c, data) in ids.iter().zip(buf.chunks(chunk)) {
            match &mut chunks[c] {
                Chunk::Memory(m) => m.as_mut_slice().copy_from_slice(data),
                &mut Chunk::Spilled { file, offset } => {
                    requests.push(IoRequest::Write {
                        file: &files[file].file,
                        offset,
                        buf: data,
                    });
                    what.push(("write", c, file, offset));
                    bytes_written += chunk as u64;
                }
            }
        }
    }
    if let Some((ids, buf)) = read {
        for (&c, data) in ids.iter().zip(buf.chunks_mut(chunk)) {
            match &chunks[c] {
                Chunk::Memory(m) => data.copy_from_slice(m.as_slice()),
                &Chunk::Spilled { file, offset } => {
                    requests.push(IoRequest::Read {
                        file: &files[file].file,
                        offset,
                        buf: data,
                    });
                    what.push(("read", c, file, offset));
                    bytes_read += chunk as u64;
                }
            }
        }
    }
    let results = ring.run(&mut requests);
    for (r, (op, c, file, offset)) in results.into_iter().zip(what) {
        if let Err(source) = r {
            return Err(ArrayError::Io {
                op,
                chunk: c,
                path: files[file].path.clone(),
                offset,
                source,
            });
        }
    }
    Ok((bytes_read, bytes_written))
}

#[cfg(test)]
mod tests {
    use crate::{ArrayConfig, TieredArray};
    use cxltier_sys::uring::AlignedBuf;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cxltier-array-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn passes_see_and_keep_every_chunk_in_memory_and_spilled() {
        let chunk = 4096;
        // 16 chunks, 5 in memory, 11 striped over two spill files.
        let cfg = ArrayConfig::new(16 * chunk as u64, chunk)
            .memory_limit(5 * chunk as u64)
            .spill_dir(dir(), None)
            .spill_dir(dir(), None);
        let mut a = TieredArray::create(&cfg).unwrap();
        assert_eq!(a.placement().memory_chunks, 5);
        assert_eq!(a.placement().spilled_chunks, 11);
        assert!(a.memory_chunks_mut().is_none());
        // Pass 1: blocks of two chunks, each byte set to its chunk's index.
        let blocks: Vec<Vec<usize>> = (0..8).map(|b| vec![b, b + 8]).collect();
        let r = a
            .pass(&blocks, |b, bytes| {
                assert!(bytes.iter().all(|&x| x == 0), "the array starts zeroed");
                bytes[..chunk].fill(b as u8);
                bytes[chunk..].fill(b as u8 + 8);
                Ok(())
            })
            .unwrap();
        assert_eq!(r.blocks, 8);
        assert_eq!(r.bytes_read, 11 * chunk as u64);
        assert_eq!(r.bytes_written, 11 * chunk as u64);
        // Pass 2, grouped differently: every chunk holds its own index, then add one.
        let blocks: Vec<Vec<usize>> = (0..4)
            .map(|b| vec![4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3])
            .collect();
        a.pass(&blocks, |b, bytes| {
            for (j, c) in bytes.chunks_mut(chunk).enumerate() {
                assert!(c.iter().all(|&x| x as usize == 4 * b + j));
                c.fill(c[0] + 100);
            }
            Ok(())
        })
        .unwrap();
        let mut buf = AlignedBuf::new(chunk);
        for i in 0..16 {
            a.read_chunk(i, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x as usize == i + 100), "chunk {i}");
        }
        // A failing computation stops the pass with the block named.
        let err = a.pass(
            &blocks,
            |b, _| if b == 2 { Err("boom".into()) } else { Ok(()) },
        );
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("block 2 failed: boom"));
        // A chunk twice in one pass is refused.
        assert!(a.pass(&[vec![0, 0]], |_, _| Ok(())).is_err());
        let files = a.placement().spill_files.clone();
        drop(a);
        assert!(files.iter().all(|f| !f.exists()), "spill files are removed");
    }

    #[test]
    fn a_spill_larger_than_its_cap_is_refused_before_anything_is_allocated() {
        let chunk = 4096;
        let cfg = ArrayConfig::new(64 * chunk as u64, chunk)
            .memory_limit(0)
            .spill_dir(dir(), Some(10 * chunk as u64));
        let err = TieredArray::create(&cfg).unwrap_err().to_string();
        assert!(err.contains("needs 262144 bytes"), "{err}");
        let cfg = ArrayConfig::new(64 * chunk as u64, chunk).memory_limit(0);
        assert!(TieredArray::create(&cfg)
            .unwrap_err()
            .to_string()
            .contains("no spill directory"));
        let cfg = ArrayConfig::new(64 * chunk as u64, 1000);
        assert!(TieredArray::create(&cfg).is_err());
    }

    #[test]
    fn memory_chunks_are_bound_and_verified() {
        // Node 0 exists everywhere; weights over one node still bind each chunk and verify it.
        let chunk = 1 << 16;
        let cfg = ArrayConfig::new(8 * chunk as u64, chunk).weights(vec![(0, 3)]);
        let mut a = TieredArray::create(&cfg).unwrap();
        let pages: usize = a.placement().pages_per_node.iter().map(|p| p.1).sum();
        assert_eq!(pages, 8 * chunk / cxltier_sys::page_size());
        assert_eq!(a.placement().pages_per_node[0].0, 0);
        assert_eq!(a.memory_chunks_mut().unwrap().len(), 8);
    }

    #[test]
    fn chunks_of_2_mib_or_more_take_huge_page_advice_and_are_all_touched() {
        // Five chunks, more than there are CPUs here, so that the parallel touch splits them.
        let chunk = 2 << 20;
        let cfg = ArrayConfig::new(5 * chunk as u64, chunk).weights(vec![(0, 1)]);
        let mut a = TieredArray::create(&cfg).unwrap();
        assert_eq!(a.placement().huge_page_chunks, 5);
        let pages: usize = a.placement().pages_per_node.iter().map(|p| p.1).sum();
        assert_eq!(pages, 5 * chunk / cxltier_sys::page_size());
        assert!(a
            .memory_chunks_mut()
            .unwrap()
            .iter()
            .all(|c| c.iter().all(|&b| b == 0)));
        let small = ArrayConfig::new(4 << 20, 1 << 20);
        assert_eq!(
            TieredArray::create(&small)
                .unwrap()
                .placement()
                .huge_page_chunks,
            0
        );
        let off = ArrayConfig::new(4 << 20, 2 << 20).huge_pages(false);
        assert_eq!(
            TieredArray::create(&off)
                .unwrap()
                .placement()
                .huge_page_chunks,
            0
        );
    }
}

#[cfg(test)]
mod failure_tests {
    use crate::{ArrayConfig, ArrayError, TieredArray};
    use std::process::Command;

    fn chattr(flag: &str, path: &std::path::Path) {
        let out = Command::new("chattr").arg(flag).arg(path).output();
        let ok = matches!(&out, Ok(o) if o.status.success());
        assert!(
            ok,
            "chattr {flag} {} failed ({out:?}): this test makes a spill file immutable so that \
             writes to it really fail; it needs root and a file system with the immutable flag \
             (ext4, xfs)",
            path.display()
        );
    }

    #[test]
    fn a_failed_write_stops_the_pass_and_names_the_chunk() {
        let dir = std::env::current_dir()
            .unwrap()
            .join(format!("../../target/array-fail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let chunk = 4096;
        let cfg = ArrayConfig::new(32 * chunk as u64, chunk)
            .memory_limit(0)
            .spill_dir(dir.clone(), None);
        let mut a = TieredArray::create(&cfg).unwrap();
        let file = a.placement().spill_files[0].clone();
        // An immutable file still reads, but every write to it fails (EPERM), as a failing
        // device would fail them.
        chattr("+i", &file);
        let blocks: Vec<Vec<usize>> = (0..16).map(|b| vec![2 * b, 2 * b + 1]).collect();
        let mut computed = 0;
        let result = a.pass(&blocks, |_, bytes| {
            computed += 1;
            bytes.fill(1);
            Ok(())
        });
        chattr("-i", &file);
        match result {
            Err(ArrayError::Io {
                op, chunk, path, ..
            }) => {
                assert_eq!(op, "write");
                assert_eq!(chunk, 0, "block 0 is the first written");
                assert_eq!(path, file);
            }
            other => panic!("expected a failed write, got {other:?}"),
        }
        // The pass stopped at the failure: block 0 is written while block 1 is computed.
        assert!(
            computed <= 2,
            "{computed} blocks computed after the failure"
        );
        drop(a);
        assert!(!file.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
