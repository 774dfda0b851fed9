//! Reads from NVMe: batched prefetch, asynchronous reads started, reaped and admitted, and the
//! values staged for a batch that no memory tier took.

use std::time::Instant;

use super::Store;
use crate::index::Place;
use crate::log::{Log, NvLoc, ReadStart, ASYNC_READS};
use crate::Result;

impl Store {
    /// Bring NVMe-only objects among `keys` into memory with one batched io_uring submission.
    pub fn prefetch(&mut self, keys: &[&[u8]]) -> Result<()> {
        self.staged.clear();
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        let mut want: Vec<(&[u8], NvLoc)> = Vec::new();
        let mut seen: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        for &k in keys {
            if let Some(e) = self.index.get(k) {
                if e.place() == Place::Nvme && seen.insert(k) {
                    want.push((k, e.nv().expect("an NVMe-only entry has a log copy")));
                }
            }
        }
        if want.is_empty() {
            return Ok(());
        }
        let locs: Vec<NvLoc> = want.iter().map(|w| w.1).collect();
        let results = log.read_many(&locs);
        for ((k, _), r) in want.into_iter().zip(results) {
            let rec = r?;
            let e = &self.index[k];
            self.staged
                .insert(k.into(), (e.kind(), rec.value, e.expires()));
        }
        Ok(())
    }

    /// Whether a command reading `key` should wait: a device read begun for it by
    /// [`Store::start_reads`] is still in flight, or it needs one that has not begun while others
    /// are in flight (the queue depth was reached: the caller starts it again once reads finish).
    /// With no read in flight, a key that needs one is read by the command itself.
    pub fn must_wait(&self, key: &[u8]) -> bool {
        (self.reading_keys.contains(key) && !self.staged.contains_key(key))
            || (self.read_unstarted(key) && self.reads_in_flight() > 0)
    }

    /// Whether `key` needs a device read that has not begun (it is only on NVMe, not staged,
    /// not being read).
    pub fn read_unstarted(&self, key: &[u8]) -> bool {
        self.log.is_some()
            && self
                .index
                .get(key)
                .is_some_and(|e| e.place() == Place::Nvme)
            && !self.staged.contains_key(key)
            && !self.reading_keys.contains(key)
    }

    /// Begin device reads for those of `keys` that need one and are not already being read,
    /// without waiting, up to the NVMe queue depth in flight: the server goes on serving what is
    /// in memory meanwhile, and [`Store::reap_reads`] collects the values. Keys left over
    /// ([`Store::read_unstarted`]) are for a later call, once reads have finished; a key whose
    /// read cannot begin (a bad location) is not staged, and its command reads it itself (and
    /// reports the error) when no read is in flight.
    pub fn start_reads(&mut self, keys: &[&[u8]]) -> Result<()> {
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        for &k in keys {
            let Some(e) = self.index.get(k) else {
                continue;
            };
            if e.place() != Place::Nvme
                || self.staged.contains_key(k)
                || self.reading_keys.contains(k)
            {
                continue;
            }
            if log.reads_in_flight() >= self.nvme_queue_depth {
                break;
            }
            let nv = e.nv().expect("an NVMe-only entry has a log copy");
            match log.start_read(nv) {
                ReadStart::Done(Ok(rec)) => {
                    self.staged
                        .insert(k.into(), (e.kind(), rec.value, e.expires()));
                }
                ReadStart::Done(Err(_)) => {}
                ReadStart::Queued(ticket) => {
                    self.reading.insert(ticket, k.into());
                    self.reading_keys.insert(k.into());
                }
                ReadStart::Full => break,
            }
        }
        log.submit_reads()
    }

    /// Whether the store has an NVMe tier (reads from the device are possible at all).
    pub fn has_nvme(&self) -> bool {
        self.log.is_some()
    }

    /// A file descriptor that becomes readable when a device read begun by
    /// [`Store::start_reads`] completes (an eventfd; `None` without an NVMe tier). An event loop
    /// registers it with its sockets so that it sleeps until either has something, rather than
    /// blocking on the device while requests arrive.
    pub fn read_completion_fd(&self) -> Option<std::os::fd::RawFd> {
        self.log.as_ref().map(Log::read_completion_fd)
    }

    /// Reset that file descriptor after it fired (then [`Store::reap_reads`]).
    pub fn clear_read_signal(&mut self) {
        if let Some(log) = self.log.as_mut() {
            log.clear_read_signal();
        }
    }

    /// Device reads begun by [`Store::start_reads`] and not yet collected.
    pub fn reads_in_flight(&self) -> usize {
        self.log.as_ref().map_or(0, Log::reads_in_flight)
    }

    /// Collect finished device reads into the staged values (only those still current: the key
    /// may have been written, deleted or moved meanwhile); with `wait`, block until at least one
    /// has finished. Returns how many values were staged.
    pub fn reap_reads(&mut self, wait: bool) -> Result<usize> {
        let Some(log) = self.log.as_mut() else {
            return Ok(0);
        };
        let mut staged = 0;
        let mut finished = std::mem::take(&mut self.finished_reads);
        let reaped = log.reap_reads(wait, &mut finished);
        for f in finished.drain(..) {
            let Some(key) = self.reading.remove(&f.ticket) else {
                continue;
            };
            self.reading_keys.remove(&key);
            // Stale or failed: the command reads the key itself and reports any error.
            let Some(Ok(rec)) = f.record else {
                continue;
            };
            if let Some(e) = self.index.get(&key[..]) {
                if e.place() == Place::Nvme
                    && e.nv() == Some(f.loc)
                    && !self.staged.contains_key(&key)
                {
                    self.staged.insert(key, (e.kind(), rec.value, e.expires()));
                    staged += 1;
                }
            }
        }
        self.finished_reads = finished;
        reaped.map(|()| staged)
    }

    /// Set how long a value read from NVMe that no tier admitted stays staged (default
    /// [`RESTAGED_FOR`](super::RESTAGED_FOR)): a test that checks the window cannot depend on
    /// how fast the machine runs.
    #[cfg(feature = "test-util")]
    pub fn set_restage_window(&mut self, window: std::time::Duration) {
        self.restage_window = window;
    }

    /// The end of a server batch: values read that no tier admitted are dropped once they are
    /// [`RESTAGED_FOR`](super::RESTAGED_FOR) old, and staged values are bounded (a value whose
    /// command never ran, its client gone, would stay).
    pub fn end_batch(&mut self) {
        // Collections changed in the batch are written back (the server's commit did so
        // already); a failure is kept for the next commit to return.
        if let Err(e) = self.settle_collections() {
            self.write_back_failed.get_or_insert(e);
        }
        let now = Instant::now();
        while let Some((at, _)) = self.restaged.front() {
            if now.duration_since(*at) < self.restage_window {
                break;
            }
            let (_, k) = self.restaged.pop_front().expect("front exists");
            self.staged.remove(&k);
        }
        self.assembled = None;
        // Over the bound, the oldest values kept out of memory go first, so the ones read last
        // (those a read-modify-write is about to write) stay; only then everything staged.
        let bound = 4 * ASYNC_READS as usize;
        while self.staged.len() > bound {
            let Some((_, k)) = self.restaged.pop_front() else {
                break;
            };
            self.staged.remove(&k);
        }
        if self.staged.len() > bound {
            self.staged.clear();
            self.restaged.clear();
        }
    }
}
