//! Swap readahead tuned by its own hit rate: memory mode's `--swap-readahead auto`.
//!
//! A swap-in reads up to `2^vm.page-cluster` pages around the faulting one (the kernel's default
//! is 3: eight pages). For a process that reads its memory in address order that is the
//! prefetch it needs; for one that jumps at random (a pointer chase, a hash table) every extra
//! page is a wasted read on the NVMe device and a page of memory taken from the budget. The
//! kernel counts both sides in `/proc/vmstat`: `swap_ra` (pages read ahead) and `swap_ra_hit`
//! (read-ahead pages that were then used). Each interval the tuner looks at what the last
//! interval's readahead bought and moves `vm.page-cluster` one step: down while fewer than a
//! quarter of the read-ahead pages are used, up while more than three quarters are, between 0
//! and [`MAX_PAGE_CLUSTER`]. An interval with too little readahead to judge changes nothing.
//!
//! `vm.page-cluster` is one setting for the whole system: [`ReadaheadPlan::changes`] says so
//! before anything is written, and the value found is written back on
//! [`ReadaheadTuner::restore`] or when the tuner is dropped.

use crate::setting::HeldSetting;
use crate::TierdError;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The largest value the tuner sets: 32 pages (128 KiB) per swap-in.
pub const MAX_PAGE_CLUSTER: u32 = 5;
/// Fewer read-ahead pages than this in an interval say nothing about their use.
const MIN_READAHEAD_PAGES: u64 = 64;

/// `--swap-readahead`: what tierd does with the system's swap readahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapReadahead {
    /// Tune `vm.page-cluster` by readahead's hit rate.
    Auto,
    /// Leave it as it is.
    Keep,
    /// Set it to this value for the run.
    Fixed(u32),
}

impl SwapReadahead {
    pub fn parse(text: &str) -> Result<SwapReadahead, TierdError> {
        match text {
            "auto" => Ok(SwapReadahead::Auto),
            "keep" => Ok(SwapReadahead::Keep),
            n => match n.parse::<u32>() {
                Ok(v) if v <= MAX_PAGE_CLUSTER => Ok(SwapReadahead::Fixed(v)),
                _ => Err(TierdError::Setting {
                    setting: "--swap-readahead",
                    message: format!(
                        "{text:?}: expected auto, keep, or a vm.page-cluster value from 0 to \
                         {MAX_PAGE_CLUSTER} (2^N pages read per swap-in)"
                    ),
                }),
            },
        }
    }
}

/// The next `vm.page-cluster` after an interval in which `readahead` pages were read ahead and
/// `hits` read-ahead pages were used.
pub fn next_page_cluster(current: u32, readahead: u64, hits: u64) -> u32 {
    if readahead < MIN_READAHEAD_PAGES {
        return current;
    }
    // Hits can exceed the interval's readahead (pages read ahead in an earlier interval).
    if hits.saturating_mul(4) < readahead {
        current.saturating_sub(1)
    } else if hits.saturating_mul(4) > readahead.saturating_mul(3) {
        (current + 1).min(MAX_PAGE_CLUSTER)
    } else {
        current
    }
}

/// `swap_ra` and `swap_ra_hit` from `/proc/vmstat`'s text (`None`: the kernel does not count
/// them).
pub fn parse_vmstat_readahead(text: &str) -> Option<(u64, u64)> {
    let (mut ra, mut hit) = (None, None);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match (f.next(), f.next().and_then(|v| v.parse().ok())) {
            (Some("swap_ra"), Some(v)) => ra = Some(v),
            (Some("swap_ra_hit"), Some(v)) => hit = Some(v),
            _ => {}
        }
    }
    Some((ra?, hit?))
}

/// Memory mode's swap readahead setting, checked against the machine; nothing written yet.
#[derive(Debug)]
pub struct ReadaheadPlan {
    mode: SwapReadahead,
    setting: HeldSetting,
    vmstat: PathBuf,
    previous: u32,
}

impl ReadaheadPlan {
    /// Read the current `vm.page-cluster` under `proc_root` (`None` for `keep`). `auto` needs
    /// the kernel's readahead counters.
    pub fn prepare(
        mode: SwapReadahead,
        proc_root: &Path,
    ) -> Result<Option<ReadaheadPlan>, TierdError> {
        if mode == SwapReadahead::Keep {
            return Ok(None);
        }
        let setting = HeldSetting::read(&proc_root.join("sys/vm/page-cluster"))?;
        let previous = setting.previous().parse().map_err(|_| TierdError::Parse {
            path: setting.path().to_path_buf(),
            content: setting.previous().to_string(),
            why: "vm.page-cluster is a number".into(),
        })?;
        let vmstat = proc_root.join("vmstat");
        if mode == SwapReadahead::Auto {
            let text = std::fs::read_to_string(&vmstat)
                .map_err(|e| TierdError::io("cannot read", &vmstat, e))?;
            if parse_vmstat_readahead(&text).is_none() {
                return Err(TierdError::Setting {
                    setting: "--swap-readahead",
                    message: format!(
                        "auto: {} has no swap_ra/swap_ra_hit counters (a kernel before 4.14?); \
                         use --swap-readahead keep or a fixed value from 0 to {MAX_PAGE_CLUSTER}",
                        vmstat.display()
                    ),
                });
            }
        }
        Ok(Some(ReadaheadPlan {
            mode,
            setting,
            vmstat,
            previous,
        }))
    }

    /// The system-wide change, in words, before it is made.
    pub fn changes(&self) -> Vec<String> {
        let path = self.setting.path().display();
        vec![match self.mode {
            SwapReadahead::Fixed(v) => format!(
                "set {path} from {} to {v} ({} pages per swap-in)",
                self.previous,
                1u32 << v
            ),
            _ => format!(
                "tune {path} (now {}) between 0 and {MAX_PAGE_CLUSTER} by how many read-ahead swap \
                 pages are used (/proc/vmstat swap_ra_hit / swap_ra)",
                self.previous
            ),
        }]
    }

    /// Make the change (a fixed value is written now; `auto` starts from the current value).
    pub fn apply(self) -> Result<ReadaheadTuner, TierdError> {
        let mut t = ReadaheadTuner {
            setting: self.setting,
            vmstat: self.vmstat,
            previous: self.previous,
            current: self.previous,
            auto: self.mode == SwapReadahead::Auto,
            last: None,
        };
        if let SwapReadahead::Fixed(v) = self.mode {
            t.write(v)?;
        }
        Ok(t)
    }
}

/// One interval of swap readahead, in each memory-mode interval line (`memory.swap_readahead`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ReadaheadReport {
    /// `vm.page-cluster` for the next interval.
    pub page_cluster: u32,
    /// Pages read ahead and read-ahead pages used in the interval (system-wide: the counters
    /// are the kernel's), `None` in the first interval.
    pub readahead_pages: Option<u64>,
    pub readahead_hits: Option<u64>,
    /// The tuner moves the value (false: a fixed value).
    pub auto: bool,
}

/// The system's swap readahead while tierd runs; the value found is written back on
/// [`restore`](ReadaheadTuner::restore) or drop.
#[derive(Debug)]
pub struct ReadaheadTuner {
    setting: HeldSetting,
    vmstat: PathBuf,
    previous: u32,
    current: u32,
    auto: bool,
    last: Option<(u64, u64)>,
}

impl ReadaheadTuner {
    fn write(&mut self, value: u32) -> Result<(), TierdError> {
        self.setting.set(&value.to_string())?;
        self.current = value;
        Ok(())
    }

    pub fn setting(&self) -> &Path {
        self.setting.path()
    }

    pub fn previous(&self) -> u32 {
        self.previous
    }

    /// Read the counters and, with `auto`, move `vm.page-cluster` for the next interval.
    pub fn step(&mut self) -> Result<ReadaheadReport, TierdError> {
        let text = std::fs::read_to_string(&self.vmstat)
            .map_err(|e| TierdError::io("cannot read", &self.vmstat, e))?;
        let now = parse_vmstat_readahead(&text);
        let delta = match (self.last, now) {
            (Some((ra0, hit0)), Some((ra1, hit1))) => {
                Some((ra1.saturating_sub(ra0), hit1.saturating_sub(hit0)))
            }
            _ => None,
        };
        self.last = now;
        if let (true, Some((ra, hits))) = (self.auto, delta) {
            let next = next_page_cluster(self.current, ra, hits);
            if next != self.current {
                self.write(next)?;
            }
        }
        Ok(ReadaheadReport {
            page_cluster: self.current,
            readahead_pages: delta.map(|d| d.0),
            readahead_hits: delta.map(|d| d.1),
            auto: self.auto,
        })
    }

    /// Write the value found back (once; the drop does it too); returns it.
    pub fn restore(&mut self) -> Result<u32, TierdError> {
        self.setting.restore()?;
        Ok(self.previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readahead_shrinks_when_unused_and_grows_when_used() {
        assert_eq!(next_page_cluster(3, 1000, 100), 2, "10% used");
        assert_eq!(next_page_cluster(0, 1000, 0), 0, "never below 0");
        assert_eq!(next_page_cluster(3, 1000, 900), 4, "90% used");
        assert_eq!(
            next_page_cluster(MAX_PAGE_CLUSTER, 1000, 1000),
            MAX_PAGE_CLUSTER
        );
        assert_eq!(next_page_cluster(3, 1000, 500), 3, "half used: kept");
        assert_eq!(next_page_cluster(3, 10, 0), 3, "too little to judge");
        assert_eq!(next_page_cluster(2, 100, 400), 3, "hits on older readahead");
    }

    #[test]
    fn settings_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(SwapReadahead::parse("auto").unwrap(), SwapReadahead::Auto);
        assert_eq!(SwapReadahead::parse("keep").unwrap(), SwapReadahead::Keep);
        assert_eq!(SwapReadahead::parse("0").unwrap(), SwapReadahead::Fixed(0));
        for bad in ["6", "-1", "", "fast"] {
            let e = SwapReadahead::parse(bad).unwrap_err().to_string();
            assert!(e.contains("auto, keep"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_counters_are_read_from_vmstat() {
        let text = "pswpin 5\nswap_ra 120\nswap_ra_hit 30\nthp_fault_alloc 0\n";
        assert_eq!(parse_vmstat_readahead(text), Some((120, 30)));
        assert_eq!(parse_vmstat_readahead("pswpin 5\n"), None);
    }

    fn fake_proc(page_cluster: &str, vmstat: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/vm")).unwrap();
        std::fs::write(dir.path().join("sys/vm/page-cluster"), page_cluster).unwrap();
        std::fs::write(dir.path().join("vmstat"), vmstat).unwrap();
        dir
    }

    #[test]
    fn the_tuner_follows_the_counters_and_restores_the_value_found() {
        let proc = fake_proc("3\n", "swap_ra 0\nswap_ra_hit 0\n");
        let setting = proc.path().join("sys/vm/page-cluster");
        let vmstat = proc.path().join("vmstat");
        let plan = ReadaheadPlan::prepare(SwapReadahead::Auto, proc.path())
            .unwrap()
            .unwrap();
        assert!(plan.changes()[0].contains("now 3"), "{:?}", plan.changes());
        let mut t = plan.apply().unwrap();
        let first = t.step().unwrap();
        assert_eq!((first.page_cluster, first.readahead_pages), (3, None));
        // Random access: 1000 pages read ahead, 20 used.
        std::fs::write(&vmstat, "swap_ra 1000\nswap_ra_hit 20\n").unwrap();
        let r = t.step().unwrap();
        assert_eq!(
            (r.page_cluster, r.readahead_pages, r.readahead_hits),
            (2, Some(1000), Some(20))
        );
        assert_eq!(std::fs::read_to_string(&setting).unwrap().trim(), "2");
        std::fs::write(&vmstat, "swap_ra 2000\nswap_ra_hit 40\n").unwrap();
        assert_eq!(t.step().unwrap().page_cluster, 1);
        drop(t);
        assert_eq!(
            std::fs::read_to_string(&setting).unwrap().trim(),
            "3",
            "the value found is back"
        );
    }

    #[test]
    fn a_fixed_value_is_set_and_undone_and_keep_touches_nothing() {
        let proc = fake_proc("3\n", "");
        let setting = proc.path().join("sys/vm/page-cluster");
        assert!(ReadaheadPlan::prepare(SwapReadahead::Keep, proc.path())
            .unwrap()
            .is_none());
        let e = ReadaheadPlan::prepare(SwapReadahead::Auto, proc.path()).unwrap_err();
        assert!(e.to_string().contains("swap_ra"), "{e}");
        let mut t = ReadaheadPlan::prepare(SwapReadahead::Fixed(0), proc.path())
            .unwrap()
            .unwrap()
            .apply()
            .unwrap();
        assert_eq!(std::fs::read_to_string(&setting).unwrap().trim(), "0");
        let r = t.step().unwrap();
        assert_eq!((r.page_cluster, r.auto), (0, false));
        assert_eq!(t.restore().unwrap(), 3);
        assert_eq!(std::fs::read_to_string(&setting).unwrap().trim(), "3");
    }
}
