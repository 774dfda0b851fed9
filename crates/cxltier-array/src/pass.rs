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

/// One job of the I/O thread: gather the next block, scatter the one computed before.
struct Job {
    /// Step and buffer to gather into, with the positions of the block not to read: their
    /// chunks are being computed on right now and are copied in afterwards.
    read: Option<(usize, AlignedBuf, Vec<usize>)>,
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
        let mut reports = self.passes(&[blocks], |_, b, bytes| compute(b, bytes))?;
        Ok(reports.pop().unwrap_or_default())
    }

    /// Several passes in a row as one pipeline: `compute(pass, block, bytes)` runs on every block
    /// of every pass, in order, and the pipeline does not drain between passes (the first block
    /// of a pass is read while the last of the one before is computed, and that one is written
    /// while the second is read). Every pass follows the rules of [`TieredArray::pass`], and all
    /// blocks of all passes have the same length. A chunk may appear in consecutive passes'
    /// neighbouring blocks: a read never overtakes the computation or the write of the same
    /// chunk (it is copied from the block that holds its newest contents instead). Returns one
    /// report per pass; a pass's wall time runs from the start of its first block's computation
    /// (the first pass: from the start) to the end of its last one's (the last pass: to the end
    /// of its last write), so the reports add up to the whole run.
    pub fn passes<F>(
        &mut self,
        passes: &[&[Vec<usize>]],
        mut compute: F,
    ) -> Result<Vec<PassReport>, ArrayError>
    where
        F: FnMut(usize, usize, &mut [u8]) -> Result<(), String>,
    {
        let start = Instant::now();
        let per_block = passes.iter().find_map(|p| p.first()).map_or(0, Vec::len);
        let mut seen = vec![usize::MAX; self.chunks.len()];
        for (p, blocks) in passes.iter().enumerate() {
            for b in blocks.iter() {
                if b.len() != per_block {
                    return Err(ArrayError::Config(
                        "every block of every pass must have as many chunks".into(),
                    ));
                }
                for &c in b {
                    if c >= seen.len() || std::mem::replace(&mut seen[c], p) == p {
                        return Err(ArrayError::Config(format!(
                            "chunk {c} is out of range or appears twice in one pass"
                        )));
                    }
                }
            }
        }
        let block_bytes = per_block * self.chunk;
        let mut reports: Vec<PassReport> = passes
            .iter()
            .map(|blocks| PassReport {
                blocks: blocks.len(),
                block_bytes,
                ..PassReport::default()
            })
            .collect();
        // The pipeline runs over steps: (pass, block) in order.
        let steps: Vec<(usize, usize)> = passes
            .iter()
            .enumerate()
            .flat_map(|(p, blocks)| (0..blocks.len()).map(move |b| (p, b)))
            .collect();
        if steps.is_empty() || per_block == 0 {
            return Ok(reports);
        }
        let block_of = |s: usize| -> &[usize] {
            let (p, b) = steps[s];
            &passes[p][b]
        };
        // For each step after the first: (position in it, position in the step before) of the
        // chunks both hold. Only neighbouring blocks of two passes can share chunks.
        let carried: Vec<Vec<(usize, usize)>> = (0..steps.len())
            .map(|s| {
                if s == 0 || steps[s - 1].0 == steps[s].0 {
                    return Vec::new();
                }
                let before = block_of(s - 1);
                block_of(s)
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| before.iter().position(|x| x == c).map(|j| (i, j)))
                    .collect()
            })
            .collect();
        let chunk = self.chunk;
        let chunks = &mut self.chunks;
        let files = &self.files;
        let ring = &mut self.ring;
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let mut failure: Option<ArrayError> = None;
        let steps = &steps;
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
                            .map(|(s, buf, skip)| (block_of(*s), buf, skip.as_slice())),
                        job.write.as_ref().map(|(s, buf)| (block_of(*s), buf)),
                    );
                    let done = Done {
                        read: job.read.map(|(s, buf, _)| (s, buf)),
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
            // Record one answer of the I/O thread: bytes to the passes of the blocks read and
            // written, busy time to `to` (the pass computing meanwhile); or its error.
            let account = |done: Done,
                           read_pass: Option<usize>,
                           write_pass: Option<usize>,
                           to: usize,
                           reports: &mut [PassReport]| {
                reports[to].io_busy_seconds += done.busy.as_secs_f64();
                let (r, w) = done.result?;
                if let Some(p) = read_pass {
                    reports[p].bytes_read += r;
                }
                if let Some(p) = write_pass {
                    reports[p].bytes_written += w;
                }
                Ok::<_, ArrayError>((done.read, done.write))
            };
            let mut pass_start = start;
            job_tx
                .send(Job {
                    read: Some((0, AlignedBuf::new(block_bytes), Vec::new())),
                    write: None,
                })
                .expect("the I/O thread lives for the whole pass");
            let done = done_rx.recv().expect("the I/O thread answers every job");
            reports[0].io_wait_seconds += start.elapsed().as_secs_f64();
            let mut current = match account(done, Some(0), None, 0, &mut reports) {
                Ok((read, _)) => read.expect("the first read returns its buffer"),
                Err(e) => {
                    failure = Some(e);
                    return;
                }
            };
            let mut previous: Option<(usize, AlignedBuf)> = None;
            for s in 0..steps.len() {
                let (p, b) = steps[s];
                let next = s + 1;
                let read = (next < steps.len()).then(|| {
                    let skip = carried[next].iter().map(|&(i, _)| i).collect();
                    (next, spare.pop().expect("three buffers suffice"), skip)
                });
                let write_pass = previous.as_ref().map(|&(w, _)| steps[w].0);
                job_tx
                    .send(Job {
                        read,
                        write: previous.take(),
                    })
                    .expect("the I/O thread lives for the whole pass");
                let t = Instant::now();
                let computed = compute(p, b, &mut current.1);
                reports[p].compute_seconds += t.elapsed().as_secs_f64();
                let t = Instant::now();
                let done = done_rx.recv().expect("the I/O thread answers every job");
                reports[p].io_wait_seconds += t.elapsed().as_secs_f64();
                if let Err(message) = computed {
                    failure = Some(ArrayError::Compute {
                        pass: p,
                        block: b,
                        message,
                    });
                    return;
                }
                let read_pass = steps.get(next).map(|&(q, _)| q);
                let (read, written) = match account(done, read_pass, write_pass, p, &mut reports) {
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
                let Some(mut next_block) = read else { break };
                // The chunks the next block shares with this one were not read: they were
                // being computed on. Their newest contents are here.
                let done_block = &previous.as_ref().expect("just set").1;
                for &(i, j) in &carried[next] {
                    next_block.1[i * chunk..(i + 1) * chunk]
                        .copy_from_slice(&done_block[j * chunk..(j + 1) * chunk]);
                }
                current = next_block;
                if steps[next].0 != p {
                    reports[p].wall_seconds = pass_start.elapsed().as_secs_f64();
                    pass_start = Instant::now();
                }
            }
            let last = steps[steps.len() - 1].0;
            let t = Instant::now();
            let write_pass = previous.as_ref().map(|&(w, _)| steps[w].0);
            job_tx
                .send(Job {
                    read: None,
                    write: previous.take(),
                })
                .expect("the I/O thread lives for the whole pass");
            let done = done_rx.recv().expect("the I/O thread answers every job");
            reports[last].io_wait_seconds += t.elapsed().as_secs_f64();
            if let Err(e) = account(done, None, write_pass, last, &mut reports) {
                failure = Some(e);
            }
            reports[last].wall_seconds = pass_start.elapsed().as_secs_f64();
            drop(job_tx);
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(reports),
        }
    }
}

/// Scatter `write` to its chunks and gather `read` from its chunks (but for the positions in its
/// skip list): memory chunks by copying, spilled chunks with one io_uring batch for both
/// directions. Returns bytes read and written on files.
fn transfer(
    chunks: &mut [Chunk],
    files: &[SpillFile],
    ring: &mut IoBatchRing,
    chunk: usize,
    read: Option<(&[usize], &mut AlignedBuf, &[usize])>,
    write: Option<(&[usize], &AlignedBuf)>,
) -> Result<(u64, u64), ArrayError> {
    let mut requests: Vec<IoRequest<'_>> = Vec::new();
    let mut what: Vec<(&'static str, usize, usize, u64)> = Vec::new();
    // Each request with the chunk, file and offset it is for, for an error naming them.
    let mut queue = |request, op, c, file, offset| {
        requests.push(request);
        what.push((op, c, file, offset));
    };
    if let Some((ids, buf)) = write {
        for (&c, data) in ids.iter().zip(buf.chunks(chunk)) {
            match &mut chunks[c] {
                Chunk::Memory(m) => m.as_mut_slice().copy_from_slice(data),
                &mut Chunk::Spilled { file, offset } => {
                    let request = IoRequest::Write {
                        file: &files[file].file,
                        offset,
                        buf: data,
                    };
                    queue(request, "write", c, file, offset);
                }
            }
        }
    }
    if let Some((ids, buf, skip)) = read {
        for (i, (&c, data)) in ids.iter().zip(buf.chunks_mut(chunk)).enumerate() {
            if skip.contains(&i) {
                continue;
            }
            // A chunk written in this same batch (the last block of one pass, read again by the
            // next pass) is copied from the block being written: the device may serve the
            // read before the write.
            if let Some((wids, wbuf)) = write {
                if let Some(j) = wids.iter().position(|&x| x == c) {
                    data.copy_from_slice(&wbuf[j * chunk..(j + 1) * chunk]);
                    continue;
                }
            }
            match &chunks[c] {
                Chunk::Memory(m) => data.copy_from_slice(m.as_slice()),
                &Chunk::Spilled { file, offset } => {
                    let request = IoRequest::Read {
                        file: &files[file].file,
                        offset,
                        buf: data,
                    };
                    queue(request, "read", c, file, offset);
                }
            }
        }
    }
    let queued = |op| chunk as u64 * what.iter().filter(|w| w.0 == op).count() as u64;
    let (bytes_read, bytes_written) = (queued("read"), queued("write"));
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

    /// A scratch directory for spill files, removed when the test drops it.
    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// An array of `chunks` chunks of 4 KiB, none in memory, spilled to a new directory `name`
    /// in `tmp`: the directory and the array.
    fn all_spilled(
        tmp: &tempfile::TempDir,
        name: &str,
        chunks: u64,
    ) -> (std::path::PathBuf, TieredArray) {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let a = array(chunks, 0, &[&dir]);
        (dir, a)
    }

    /// Asserts that every byte of chunk `i` of the first `chunks` of `a` (of 4 KiB) is `want(i)`.
    fn assert_chunks(a: &mut TieredArray, chunks: usize, want: impl Fn(usize) -> usize) {
        let mut buf = AlignedBuf::new(4096);
        for i in 0..chunks {
            a.read_chunk(i, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x as usize == want(i)), "chunk {i}");
        }
    }

    /// An array of `chunks` chunks of 4 KiB, `in_memory` of them in memory and the rest spilled
    /// over `spill_dirs` (a directory named twice holds two spill files).
    fn array(chunks: u64, in_memory: u64, spill_dirs: &[&std::path::Path]) -> TieredArray {
        let mut cfg = ArrayConfig::new(chunks * 4096, 4096).memory_limit(in_memory * 4096);
        for d in spill_dirs {
            cfg = cfg.spill_dir(d.to_path_buf(), None);
        }
        TieredArray::create(&cfg).unwrap()
    }

    #[test]
    fn passes_see_and_keep_every_chunk_in_memory_and_spilled() {
        let tmp = dir();
        let chunk = 4096;
        // 16 chunks, 5 in memory, 11 striped over two spill files.
        let mut a = array(16, 5, &[tmp.path(), tmp.path()]);
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
        assert_chunks(&mut a, 16, |i| i + 100);
        // A failing computation stops the pass with the block named.
        let err = a.pass(
            &blocks,
            |b, _| if b == 2 { Err("boom".into()) } else { Ok(()) },
        );
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("block 2 of pass 0 failed: boom"));
        // A chunk twice in one pass is refused.
        assert!(a.pass(&[vec![0, 0]], |_, _| Ok(())).is_err());
        let files = a.placement().spill_files.clone();
        drop(a);
        assert!(files.iter().all(|f| !f.exists()), "spill files are removed");
    }

    #[test]
    fn spill_files_have_no_name_while_the_array_uses_them() {
        let tmp = dir();
        let (dir, mut a) = all_spilled(&tmp, "unnamed", 8);
        // Nothing to leave behind, however the process ends: the directory is already empty.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(!a.placement().spill_files[0].exists());
        // The unlinked file still holds the data, with direct I/O.
        let blocks: Vec<Vec<usize>> = (0..8).map(|b| vec![b]).collect();
        a.pass(&blocks, |b, bytes| {
            bytes.fill(b as u8 + 1);
            Ok(())
        })
        .unwrap();
        assert_chunks(&mut a, 8, |i| i + 1);
        drop(a);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_short_read_of_a_spilled_chunk_is_an_error_not_a_whole_chunk() {
        let tmp = dir();
        let (dir, mut a) = all_spilled(&tmp, "short", 4);
        let chunk = 4096;
        // Cut the unlinked file (reached through this process's descriptor) to one and a half
        // chunks: chunk 1 now reads short, chunks 2 and 3 read nothing.
        let fd = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| std::fs::read_link(p).is_ok_and(|t| t.starts_with(&dir)))
            .expect("the spill file is open");
        let file = std::fs::OpenOptions::new().write(true).open(&fd).unwrap();
        file.set_len(chunk as u64 + 2048).unwrap();
        let mut buf = AlignedBuf::new(chunk);
        a.read_chunk(0, &mut buf).unwrap();
        for i in 1..4 {
            let err = a.read_chunk(i, &mut buf).unwrap_err().to_string();
            assert!(err.contains(&format!("read of chunk {i}")), "{err}");
            assert!(err.contains("short transfer"), "{err}");
        }
        let blocks: Vec<Vec<usize>> = (0..4).map(|b| vec![b]).collect();
        let err = a.pass(&blocks, |_, _| Ok(())).unwrap_err().to_string();
        assert!(err.contains("read of chunk 1"), "{err}");
        drop(a);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_spill_beyond_the_free_space_is_refused_with_the_shortfall() {
        let tmp = dir();
        // An exbibyte: more than any test machine's disk, refused before a file is created.
        let chunk = 1 << 20;
        let dir = tmp.path().join("nospace");
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = ArrayConfig::new(1 << 60, chunk)
            .memory_limit(0)
            .spill_dir(dir.clone(), None);
        match TieredArray::create(&cfg).unwrap_err() {
            crate::ArrayError::NoSpace {
                needed,
                available,
                hint,
                ..
            } => {
                assert_eq!(needed, 1 << 60);
                assert!(available > 0, "the free space is read, not guessed");
                assert!(
                    hint.contains(&format!("{} bytes short", needed - available)),
                    "{hint}"
                );
            }
            other => panic!("expected NoSpace, got {other}"),
        }
        // Two directories on one file system add up: each half fits alone, not both.
        let cfg = ArrayConfig::new(1 << 60, chunk)
            .memory_limit(0)
            .spill_dir(dir.clone(), None)
            .spill_dir(dir.clone(), None);
        assert!(matches!(
            TieredArray::create(&cfg),
            Err(crate::ArrayError::NoSpace { .. })
        ));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn chained_passes_see_the_newest_contents_of_chunks_their_neighbouring_blocks_share() {
        let tmp = dir();
        // 8 chunks: 2 in memory, 6 spilled, so that shared chunks cross both kinds.
        let mut a = array(8, 2, &[tmp.path()]);
        let chunk = 4096;
        // Pass 0 ends with the block {6, 7}; pass 1 is one block {7, 6} (both chunks being
        // computed when it is read, in another order: carried over); pass 2 starts with {2, 3}
        // and ends with {6, 0}; pass 3 is one block {3, 2}; pass 4 starts with {0, 6}, read
        // while pass 3 computes and pass 2's last block, holding both, is being written
        // (forwarded from that block, not read from the device).
        let passes: Vec<Vec<Vec<usize>>> = vec![
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]],
            vec![vec![7, 6]],
            vec![vec![2, 3], vec![4, 5], vec![1, 7], vec![6, 0]],
            vec![vec![3, 2]],
            vec![vec![0, 6], vec![1, 7], vec![4, 5], vec![2, 3]],
        ];
        let refs: Vec<&[Vec<usize>]> = passes.iter().map(Vec::as_slice).collect();
        // Every computation adds 1 to each byte of its chunks: each block must see exactly the
        // computations of the passes before it.
        let mut count = [0u8; 8];
        let reports = a
            .passes(&refs, |p, b, bytes| {
                for (j, c) in bytes.chunks_mut(chunk).enumerate() {
                    let id = passes[p][b][j];
                    // Chunk `id` after `n` computations holds 16 * id + n (a fresh chunk is
                    // zeroed, as the array starts): stale or misplaced data shows.
                    let want = if count[id] == 0 {
                        0
                    } else {
                        16 * id as u8 + count[id]
                    };
                    assert!(
                        c.iter().all(|&x| x == want),
                        "pass {p} block {b} sees stale data in chunk {id}"
                    );
                    count[id] += 1;
                    c.fill(16 * id as u8 + count[id]);
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(reports.len(), 5);
        assert_eq!(reports[1].blocks, 1);
        assert_eq!(count, [3, 3, 4, 4, 3, 3, 4, 4]);
        // The first pass reads and writes each spilled chunk once (later ones read fewer: the
        // chunks carried over from the block before do not go through the device).
        let spilled: u64 = 6 * chunk as u64;
        assert_eq!(
            reports[0].bytes_read + reports[0].bytes_written,
            2 * spilled
        );
        let mut buf = AlignedBuf::new(chunk);
        for (i, &n) in count.iter().enumerate() {
            a.read_chunk(i, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x == 16 * i as u8 + n), "chunk {i}");
        }
        let total: f64 = reports.iter().map(|r| r.wall_seconds).sum();
        assert!(total > 0.0);
        // A failing computation names its pass.
        let err = a
            .passes(&refs, |p, b, _| {
                if p == 2 && b == 1 {
                    Err("boom".into())
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(err.to_string().contains("block 1 of pass 2 failed: boom"));
        // Blocks of different lengths across passes are refused.
        let one = vec![vec![0]];
        let uneven: Vec<&[Vec<usize>]> = vec![&passes[0], &one];
        assert!(a.passes(&uneven, |_, _, _| Ok(())).is_err());
    }

    #[test]
    fn a_spill_larger_than_its_cap_is_refused_before_anything_is_allocated() {
        let tmp = dir();
        let chunk = 4096;
        let cfg = ArrayConfig::new(64 * chunk as u64, chunk)
            .memory_limit(0)
            .spill_dir(tmp.path().to_path_buf(), Some(10 * chunk as u64));
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
        let mut cfg = ArrayConfig::new(32 * chunk as u64, chunk)
            .memory_limit(0)
            .spill_dir(dir.clone(), None);
        // chattr needs the file's name.
        cfg.keep_spill_names = true;
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
