//! Where the engine learns which pages are accessed: the plug point for access sources.
//!
//! Two sources, one interface ([`Tracker`]): each interval, for one target, a [`Sample`] gives
//! every page of the target's movable ranges an access frequency and an age in the same terms
//! ([`PageAccess`]), so the planner ([`crate::plan`]) judges hot and cold alike whichever source
//! is in use:
//!
//! - [`SourceKind::Damon`]: DAMON's sysfs interface ([`crate::damon`]); a page takes its region's
//!   `nr_accesses` (samples that saw the region accessed, out of `aggregation_ms / sample_ms`) and
//!   age (aggregation intervals the count has held).
//! - [`SourceKind::IdlePage`]: idle-page tracking ([`crate::idle`]); a page's frequency is how many
//!   of its last `idle_history` intervals saw it accessed, its age how many intervals in a row had
//!   the same outcome.
//!
//! [`choose_source`] picks one: DAMON when the kernel has it, else idle-page tracking, unless the
//! policy (`access_source`) or `--access-source` names one.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::str::FromStr;

use crate::damon::{self, Monitor, Region};
pub use crate::idle::PageAccess;
use crate::idle::{self, IdlePages};
use crate::policy::{Policy, Tracking};
use crate::procfs::Range;
use crate::TierdError;

/// The access source asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessSource {
    /// DAMON when the kernel has its sysfs interface, else idle-page tracking.
    #[default]
    Auto,
    Damon,
    IdlePage,
}

impl FromStr for AccessSource {
    type Err = TierdError;
    fn from_str(s: &str) -> Result<Self, TierdError> {
        match s {
            "auto" => Ok(AccessSource::Auto),
            "damon" => Ok(AccessSource::Damon),
            "idle-page" => Ok(AccessSource::IdlePage),
            _ => Err(TierdError::UnknownSource { given: s.into() }),
        }
    }
}

/// The source in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    Damon,
    IdlePage,
}

impl SourceKind {
    /// `damon` or `idle-page`: the name in reports.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Damon => "damon",
            SourceKind::IdlePage => "idle-page",
        }
    }
}

/// Where access information comes from, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// `damon` or `idle-page`.
    pub name: &'static str,
    pub kind: SourceKind,
    /// Why this source: what was asked for and what the kernel offers.
    pub reason: String,
}

impl Source {
    /// The system-wide setting this source writes to follow `pids`, in a sentence (said before
    /// it is written).
    pub fn system_wide_write(&self, pids: &[u32]) -> String {
        let pid_list = pids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        match self.kind {
            SourceKind::Damon => format!(
                "writing DAMON's sysfs interface (a system-wide setting): {} kdamond(s) under \
                 /sys/kernel/mm/damon/admin/kdamonds monitoring pid {pid_list}; removed when \
                 tierd stops",
                pids.len()
            ),
            SourceKind::IdlePage => format!(
                "writing /sys/kernel/mm/page_idle/bitmap (a system-wide setting): every interval \
                 the resident pages of pid {pid_list} are marked idle, which any other user of \
                 idle-page tracking sees too; nothing to remove when tierd stops (a page's idle \
                 flag clears on its next access)"
            ),
        }
    }
}

/// Pick the access source: the one `wanted` names if the kernel has it, or with
/// [`AccessSource::Auto`] DAMON's sysfs interface (virtual-address monitoring) when the kernel
/// has it and idle-page tracking otherwise. A kernel with neither, or without the one named, is
/// refused with what to do.
pub fn choose_source(sys_root: &Path, wanted: AccessSource) -> Result<Source, TierdError> {
    let admin = damon::admin_dir(sys_root);
    let idle = idle::bitmap_path(sys_root);
    let has_damon = admin.join("kdamonds/nr_kdamonds").exists();
    let has_idle = idle.exists();
    let source = |kind: SourceKind, reason: &str| Source {
        name: kind.name(),
        kind,
        reason: reason.into(),
    };
    match wanted {
        AccessSource::Auto if has_damon => Ok(source(
            SourceKind::Damon,
            if has_idle {
                "DAMON's sysfs interface is present (preferred over idle-page tracking, which is \
                 also present: DAMON samples regions instead of scanning every page)"
            } else {
                "DAMON's sysfs interface is present; this kernel has no idle-page tracking"
            },
        )),
        AccessSource::Auto if has_idle => Ok(source(
            SourceKind::IdlePage,
            "this kernel has no DAMON sysfs interface (CONFIG_DAMON_SYSFS); idle-page tracking \
             is present (/sys/kernel/mm/page_idle/bitmap), each resident page scanned every \
             interval",
        )),
        AccessSource::Auto => Err(TierdError::NoAccessSource { damon: admin, idle }),
        AccessSource::Damon if has_damon => Ok(source(
            SourceKind::Damon,
            "asked for (access source damon); DAMON's sysfs interface is present",
        )),
        AccessSource::Damon => Err(TierdError::NoDamon {
            damon: admin,
            idle_present: has_idle,
        }),
        AccessSource::IdlePage if has_idle => Ok(source(
            SourceKind::IdlePage,
            if has_damon {
                "asked for (access source idle-page), although DAMON is present too"
            } else {
                "asked for (access source idle-page); this kernel has no DAMON sysfs interface"
            },
        )),
        AccessSource::IdlePage => Err(TierdError::NoIdlePageTracking { idle }),
    }
}

/// One target's access, one interval.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// What the source watched: DAMON's regions, or the pages idle-page tracking observed.
    pub units: usize,
    /// For each page of the ranges, in address order.
    pub pages: Vec<PageAccess>,
}

/// A running access source.
pub enum Tracker {
    /// One kdamond per target; `slot` is the target's kdamond.
    Damon(Monitor),
    IdlePage(IdlePages),
}

impl Tracker {
    /// Start watching `pids` with `kind`. DAMON's kdamonds are written now (removed again on
    /// failure); idle-page tracking opens the bitmap (root only) and marks nothing before the
    /// first sample.
    pub fn start(
        kind: SourceKind,
        sys_root: &Path,
        proc_root: &Path,
        pids: &[u32],
        tracking: &Tracking,
    ) -> Result<Tracker, TierdError> {
        Ok(match kind {
            SourceKind::Damon => Tracker::Damon(Monitor::start(sys_root, pids, tracking)?),
            SourceKind::IdlePage => {
                Tracker::IdlePage(IdlePages::open(sys_root, proc_root, tracking.idle_history)?)
            }
        })
    }

    pub fn kind(&self) -> SourceKind {
        match self {
            Tracker::Damon(_) => SourceKind::Damon,
            Tracker::IdlePage(_) => SourceKind::IdlePage,
        }
    }

    /// The highest access frequency a page can have.
    pub fn max_accesses(&self, policy: &Policy) -> u32 {
        match self {
            Tracker::Damon(_) => policy.max_accesses(),
            Tracker::IdlePage(t) => t.history(),
        }
    }

    /// Each page's access, for the pages of `ranges` (`page` bytes each). DAMON waits for its
    /// next aggregation interval; idle-page tracking observes the interval since its last sample
    /// and marks the pages idle again.
    pub fn sample(
        &mut self,
        slot: usize,
        pid: u32,
        ranges: &[Range],
        page: usize,
    ) -> Result<Sample, TierdError> {
        match self {
            Tracker::Damon(m) => {
                let regions = m.regions(slot)?;
                let addrs = ranges.iter().flat_map(|r| (r.start..r.end).step_by(page));
                Ok(Sample {
                    units: regions.len(),
                    pages: region_access(addrs, &regions),
                })
            }
            Tracker::IdlePage(t) => {
                let scan = t.scan(pid, ranges, page)?;
                Ok(Sample {
                    units: scan.observed,
                    pages: scan.pages,
                })
            }
        }
    }

    /// DAMON's regions for slot `slot`, without expanding them page by page (`None` for
    /// idle-page tracking, which observes every page).
    pub fn regions(
        &mut self,
        slot: usize,
    ) -> Option<Result<Vec<crate::damon::Region>, TierdError>> {
        match self {
            Tracker::Damon(m) => Some(m.regions(slot)),
            Tracker::IdlePage(_) => None,
        }
    }

    /// Watch `pids` from now on (slot i is `pids[i]`). DAMON is restarted with one kdamond per
    /// target (its kdamonds cannot be added to while they run), so region history starts over;
    /// idle-page tracking keeps the history of the targets that stay.
    pub fn restart(
        &mut self,
        sys_root: &Path,
        pids: &[u32],
        tracking: &Tracking,
    ) -> Result<(), TierdError> {
        match self {
            Tracker::Damon(m) => {
                let pageout = m.pageout_scheme();
                m.stop()?;
                *m = Monitor::start_with(sys_root, pids, tracking, pageout)?;
            }
            Tracker::IdlePage(t) => t.retain(pids),
        }
        Ok(())
    }

    /// Memory mode's DAMOS pageout: the kdamonds are started again with a pageout scheme each
    /// (before the first interval: no history is lost). False with idle-page tracking, which
    /// has no DAMOS.
    pub fn enable_damos_pageout(
        &mut self,
        sys_root: &Path,
        tracking: &Tracking,
        scheme: crate::damon::PageoutScheme,
    ) -> Result<bool, TierdError> {
        match self {
            Tracker::Damon(m) => {
                let pids = m.pids().to_vec();
                m.stop()?;
                *m = Monitor::start_with(sys_root, &pids, tracking, Some(scheme))?;
                Ok(true)
            }
            Tracker::IdlePage(_) => Ok(false),
        }
    }

    /// Let slot `slot`'s pageout scheme page out at most `bytes` per interval; the bytes it has
    /// paged out so far (`None`: no DAMOS pageout here).
    pub fn set_pageout_bytes(
        &mut self,
        slot: usize,
        bytes: u64,
    ) -> Result<Option<u64>, TierdError> {
        match self {
            Tracker::Damon(m) if m.pageout_scheme().is_some() => {
                m.set_pageout_bytes(slot, bytes).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Stop: DAMON's kdamonds are turned off and removed. Idle-page tracking leaves nothing to
    /// remove (the idle flags it set are cleared by the next access to each page).
    pub fn stop(&mut self) -> Result<(), TierdError> {
        match self {
            Tracker::Damon(m) => m.stop(),
            Tracker::IdlePage(t) => {
                t.retain(&[]);
                Ok(())
            }
        }
    }
}

/// Each address takes its DAMON region's access count and age (0 and 0 outside every region).
/// `regions` are in address order.
pub fn region_access(addrs: impl Iterator<Item = usize>, regions: &[Region]) -> Vec<PageAccess> {
    let mut out = Vec::new();
    let mut r = 0;
    for addr in addrs {
        while r < regions.len() && regions[r].end <= addr {
            r += 1;
        }
        out.push(match regions.get(r) {
            Some(reg) if reg.start <= addr => PageAccess {
                accesses: reg.nr_accesses,
                age: reg.age,
            },
            _ => PageAccess::default(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use crate::Classify;

    #[test]
    fn pages_take_their_regions_heat() {
        let regions = [
            Region {
                start: 0x1000,
                end: 0x3000,
                nr_accesses: 7,
                age: 1,
            },
            Region {
                start: 0x5000,
                end: 0x6000,
                nr_accesses: 0,
                age: 9,
            },
        ];
        let got = region_access((0..7).map(|i| i * 0x1000), &regions);
        let acc: Vec<(u32, u32)> = got.iter().map(|p| (p.accesses, p.age)).collect();
        assert_eq!(
            acc,
            vec![(0, 0), (7, 1), (7, 1), (0, 0), (0, 0), (0, 9), (0, 0)]
        );
    }

    #[test]
    fn damon_first_then_idle_pages_and_a_named_source_must_exist() {
        let dir = TempDir::new("source");
        let e = choose_source(dir.path(), AccessSource::Auto).unwrap_err();
        assert!(e.to_string().contains("neither DAMON"), "{e}");
        assert_eq!(e.class(), crate::Class::Unsupported);
        let e = choose_source(dir.path(), AccessSource::IdlePage).unwrap_err();
        assert!(e.to_string().contains("CONFIG_IDLE_PAGE_TRACKING"), "{e}");
        assert_eq!(e.class(), crate::Class::Unsupported);

        // Only idle-page tracking: chosen by itself, and DAMON named alone is refused.
        dir.write("sys/kernel/mm/page_idle/bitmap", "");
        let s = choose_source(dir.path(), AccessSource::Auto).unwrap();
        assert_eq!((s.name, s.kind), ("idle-page", SourceKind::IdlePage));
        assert!(s.reason.contains("no DAMON"), "{}", s.reason);
        let e = choose_source(dir.path(), AccessSource::Damon).unwrap_err();
        assert!(e.to_string().contains("--access-source idle-page"), "{e}");
        assert_eq!(e.class(), crate::Class::Unsupported);

        // Both: DAMON unless idle-page is asked for.
        dir.write("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "0\n");
        let s = choose_source(dir.path(), AccessSource::Auto).unwrap();
        assert_eq!(s.kind, SourceKind::Damon);
        assert!(s.reason.contains("idle-page"));
        let s = choose_source(dir.path(), AccessSource::IdlePage).unwrap();
        assert_eq!(s.kind, SourceKind::IdlePage);
        assert!(s.reason.contains("asked for"));

        // DAMON only: idle-page named is refused, naming the kernel option.
        std::fs::remove_file(idle::bitmap_path(dir.path())).unwrap();
        let e = choose_source(dir.path(), AccessSource::IdlePage).unwrap_err();
        assert!(e.to_string().contains("CONFIG_IDLE_PAGE_TRACKING"), "{e}");
        assert_eq!(
            choose_source(dir.path(), AccessSource::Damon).unwrap().kind,
            SourceKind::Damon
        );

        assert_eq!(
            "idle-page".parse::<AccessSource>().unwrap(),
            AccessSource::IdlePage
        );
        let e = "idle".parse::<AccessSource>().unwrap_err();
        assert_eq!(e.class(), crate::Class::BadInput);
        assert!(e.to_string().contains("auto, damon or idle-page"), "{e}");
    }
}
