//! DAMON's sysfs interface (`/sys/kernel/mm/damon/admin`): one kdamond per target process,
//! virtual-address monitoring, and a `stat` scheme that matches every region so that
//! `update_schemes_tried_regions` lists each region with its access count and age.
//!
//! Everything takes a root directory (`/` on a live system, a recorded tree in tests).

use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

use crate::policy::Tracking;
use crate::TierdError;

/// The admin directory under a root.
pub fn admin_dir(root: &Path) -> PathBuf {
    root.join("sys/kernel/mm/damon/admin")
}

/// One region DAMON reported: `[start, end)` in the target's address space, how many samples of
/// the last aggregation interval saw it accessed, and for how many intervals that count has held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Region {
    pub start: usize,
    pub end: usize,
    pub nr_accesses: u32,
    pub age: u32,
}

fn read(path: &Path) -> Result<String, TierdError> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| TierdError::io("cannot read", path, e))
}

fn read_num<T: std::str::FromStr>(path: &Path) -> Result<T, TierdError> {
    let text = read(path)?;
    text.parse().map_err(|_| TierdError::Parse {
        path: path.to_path_buf(),
        content: text.clone(),
        why: "expected a number".into(),
    })
}

/// Writes a kernel attribute that must already exist: opened write-only, never created.
/// `fs::write` opens with `O_CREAT`, and on sysfs (or procfs) an attribute that is missing at that
/// moment — a kdamond's directory being rebuilt after `nr_kdamonds` changed, a process that exited
/// — then fails with EACCES, which reads as "permission denied" even for root; without `O_CREAT`
/// it is ENOENT, and says so. Outside sysfs (tests' scratch trees) it never leaves a stray file.
pub(crate) fn write_existing(path: &Path, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    // O_TRUNC as a shell's `>` does: sysfs ignores it, and a scratch tree's shorter value
    // replaces the longer one instead of overwriting its start.
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?
        .write_all(value.as_bytes())
}

fn write(path: &Path, value: &str) -> Result<(), TierdError> {
    write_existing(path, value).map_err(|e| TierdError::io("cannot write", path, e))
}

/// Write a kdamond's `state` or `nr_kdamonds`. The kernel answers EBUSY while its DAMON sysfs lock
/// is held, which a kdamond does briefly while it serves a request (such as
/// `update_schemes_tried_regions`): try again for up to a second before giving up.
fn write_control(path: &Path, value: &str) -> Result<(), TierdError> {
    const EBUSY: i32 = 16;
    let mut tries = 0;
    loop {
        match write_existing(path, value) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(TierdError::io("cannot write", path, e)),
        }
    }
}

/// The smallest size quota written: DAMOS reads 0 as "no limit".
const DAMOS_MIN_QUOTA: u64 = 4096;

/// Memory mode's DAMOS `pageout` scheme (`--pageout-with damos`): a second scheme per kdamond
/// whose action is `pageout`, matching no region until [`Monitor::set_pageout_bytes`] gives it a
/// size quota; under the quota DAMOS pages out the coldest regions first (its priority weighs
/// access frequency and age), at most that many bytes per `reset_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageoutScheme {
    pub reset_ms: u64,
}

/// The writes that set up monitoring, in order, as (file relative to the admin dir, value): what
/// `--dry-run` and the stderr notice show.
pub fn setup_writes(pids: &[u32], t: &Tracking) -> Vec<(String, String)> {
    setup_writes_with(pids, t, None)
}

/// [`setup_writes`], with memory mode's pageout scheme after the `stat` one.
pub fn setup_writes_with(
    pids: &[u32],
    t: &Tracking,
    pageout: Option<PageoutScheme>,
) -> Vec<(String, String)> {
    let mut w = vec![("kdamonds/nr_kdamonds".to_string(), pids.len().to_string())];
    for (k, pid) in pids.iter().enumerate() {
        let c = format!("kdamonds/{k}/contexts/0");
        let s = format!("{c}/schemes/0");
        let ms_to_us = |ms: u64| (ms * 1000).to_string();
        w.extend([
            (format!("kdamonds/{k}/contexts/nr_contexts"), "1".into()),
            (format!("{c}/operations"), "vaddr".into()),
            (
                format!("{c}/monitoring_attrs/intervals/sample_us"),
                ms_to_us(t.sample_ms),
            ),
            (
                format!("{c}/monitoring_attrs/intervals/aggr_us"),
                ms_to_us(t.aggregation_ms),
            ),
            (
                format!("{c}/monitoring_attrs/intervals/update_us"),
                ms_to_us(t.update_ms),
            ),
            (
                format!("{c}/monitoring_attrs/nr_regions/max"),
                t.max_regions.to_string(),
            ),
            (
                format!("{c}/monitoring_attrs/nr_regions/min"),
                t.min_regions.to_string(),
            ),
            (format!("{c}/targets/nr_targets"), "1".into()),
            (format!("{c}/targets/0/pid_target"), pid.to_string()),
            (
                format!("{c}/schemes/nr_schemes"),
                if pageout.is_some() { "2" } else { "1" }.into(),
            ),
            // `stat` only counts: DAMON itself moves nothing; the ranges below match every region
            // (a new scheme's ranges are 0..0, which would match none).
            (format!("{s}/action"), "stat".into()),
            (format!("{s}/access_pattern/sz/min"), "0".into()),
            (format!("{s}/access_pattern/sz/max"), u64::MAX.to_string()),
            (format!("{s}/access_pattern/nr_accesses/min"), "0".into()),
            (
                format!("{s}/access_pattern/nr_accesses/max"),
                u32::MAX.to_string(),
            ),
            (format!("{s}/access_pattern/age/min"), "0".into()),
            (format!("{s}/access_pattern/age/max"), u32::MAX.to_string()),
        ]);
        if let Some(p) = pageout {
            let s = format!("{c}/schemes/1");
            w.extend([
                (format!("{s}/action"), "pageout".into()),
                // Size 0..0 matches no region: off until a quota is set.
                (format!("{s}/access_pattern/sz/min"), "0".into()),
                (format!("{s}/access_pattern/sz/max"), "0".into()),
                (format!("{s}/access_pattern/nr_accesses/min"), "0".into()),
                (
                    format!("{s}/access_pattern/nr_accesses/max"),
                    u32::MAX.to_string(),
                ),
                (format!("{s}/access_pattern/age/min"), "0".into()),
                (format!("{s}/access_pattern/age/max"), u32::MAX.to_string()),
                (format!("{s}/quotas/ms"), "0".into()),
                // Never 0, which DAMOS reads as "no limit": the first window's effective quota
                // is this value, whatever is committed during it.
                (format!("{s}/quotas/bytes"), DAMOS_MIN_QUOTA.to_string()),
                (
                    format!("{s}/quotas/reset_interval_ms"),
                    p.reset_ms.to_string(),
                ),
                (format!("{s}/quotas/weights/sz_permil"), "0".into()),
                (
                    format!("{s}/quotas/weights/nr_accesses_permil"),
                    "1000".into(),
                ),
                (format!("{s}/quotas/weights/age_permil"), "1000".into()),
            ]);
        }
        w.push((format!("kdamonds/{k}/state"), "on".into()));
    }
    w
}

/// Running kdamonds, one per target; turned off and removed on [`Monitor::stop`] or drop.
#[derive(Debug)]
pub struct Monitor {
    admin: PathBuf,
    pids: Vec<u32>,
    active: bool,
    pageout: Option<PageoutScheme>,
}

impl Monitor {
    /// Check that DAMON can monitor virtual addresses and that no other tool's kdamonds exist.
    pub fn check(root: &Path) -> Result<(), TierdError> {
        let kdamonds = admin_dir(root).join("kdamonds");
        let count: u32 = read_num(&kdamonds.join("nr_kdamonds"))?;
        if count != 0 {
            return Err(TierdError::DamonBusy {
                dir: kdamonds,
                count,
            });
        }
        Ok(())
    }

    /// Create one kdamond per pid and turn them on. On any failure, what was set up is removed.
    pub fn start(root: &Path, pids: &[u32], tracking: &Tracking) -> Result<Monitor, TierdError> {
        Self::start_with(root, pids, tracking, None)
    }

    /// [`start`](Monitor::start), with memory mode's pageout scheme in each kdamond.
    pub fn start_with(
        root: &Path,
        pids: &[u32],
        tracking: &Tracking,
        pageout: Option<PageoutScheme>,
    ) -> Result<Monitor, TierdError> {
        Self::check(root)?;
        let admin = admin_dir(root);
        let mut monitor = Monitor {
            admin: admin.clone(),
            pids: pids.to_vec(),
            active: true,
            pageout,
        };
        for (file, value) in setup_writes_with(pids, tracking, pageout) {
            // Before turning the first kdamond on, make sure it can monitor virtual addresses.
            if file.ends_with("/operations") {
                let avail = admin.join(&file).with_file_name("avail_operations");
                if avail.exists() {
                    let ops = read(&avail)?;
                    if !ops.split_whitespace().any(|o| o == "vaddr") {
                        monitor.stop().ok();
                        return Err(TierdError::NoVaddr { available: ops });
                    }
                }
            }
            if let Err(e) = write(&admin.join(&file), &value) {
                monitor.stop().ok();
                return Err(e);
            }
        }
        Ok(monitor)
    }

    /// The monitored pids, in kdamond order.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    pub fn pageout_scheme(&self) -> Option<PageoutScheme> {
        self.pageout
    }

    /// Let kdamond `index`'s pageout scheme page out at most `bytes` per reset interval (0: none)
    /// from now on (`commit`), and return the bytes it has paged out so far (its
    /// `stats/sz_applied`).
    pub fn set_pageout_bytes(&self, index: usize, bytes: u64) -> Result<u64, TierdError> {
        if self.pageout.is_none() {
            return Err(TierdError::Setting {
                setting: "--pageout-with damos",
                message: "the kdamonds were started without a pageout scheme".into(),
            });
        }
        let k = self.kdamond(index);
        let s = k.join("contexts/0/schemes/1");
        if bytes > 0 {
            write(
                &s.join("quotas/bytes"),
                &bytes.max(DAMOS_MIN_QUOTA).to_string(),
            )?;
            write(&s.join("access_pattern/sz/max"), &u64::MAX.to_string())?;
        } else {
            // Off: a size range no region has (a quota of 0 would mean no limit at all).
            write(&s.join("access_pattern/sz/max"), "0")?;
        }
        write_control(&k.join("state"), "commit")?;
        write_control(&k.join("state"), "update_schemes_stats")?;
        read_num(&s.join("stats/sz_applied"))
    }

    fn kdamond(&self, index: usize) -> PathBuf {
        self.admin.join(format!("kdamonds/{index}"))
    }

    /// Whether kdamond `index` still runs (DAMON stops it by itself when its target exits).
    pub fn running(&self, index: usize) -> bool {
        read(&self.kdamond(index).join("state")).is_ok_and(|s| s == "on")
    }

    /// Ask kdamond `index` for its current regions (waits for its next aggregation interval), and
    /// read them.
    pub fn regions(&self, index: usize) -> Result<Vec<Region>, TierdError> {
        let k = self.kdamond(index);
        write_control(&k.join("state"), "update_schemes_tried_regions")?;
        read_tried_regions(&k.join("contexts/0/schemes/0/tried_regions"))
    }

    /// Turn every kdamond off and remove them. Idempotent.
    pub fn stop(&mut self) -> Result<(), TierdError> {
        if !self.active {
            return Ok(());
        }
        self.active = false;
        let mut first_err = None;
        for index in 0..self.pids.len() {
            let state = self.kdamond(index).join("state");
            if read(&state).is_ok_and(|s| s == "on") {
                if let Err(e) = write_control(&state, "off") {
                    first_err.get_or_insert(e);
                }
            }
        }
        let nr = self.admin.join("kdamonds/nr_kdamonds");
        if nr.exists() {
            if let Err(e) = write_control(&nr, "0") {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Read a scheme's `tried_regions` directory: numbered subdirectories with `start`, `end`,
/// `nr_accesses` and `age`, in address order.
pub fn read_tried_regions(dir: &Path) -> Result<Vec<Region>, TierdError> {
    let entries = fs::read_dir(dir).map_err(|e| TierdError::io("cannot list", dir, e))?;
    let mut numbered: Vec<(u64, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| TierdError::io("cannot list", dir, e))?;
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            numbered.push((n, entry.path()));
        }
    }
    numbered.sort_unstable();
    let mut regions = Vec::with_capacity(numbered.len());
    for (_, d) in numbered {
        regions.push(Region {
            start: read_num(&d.join("start"))?,
            end: read_num(&d.join("end"))?,
            nr_accesses: read_num(&d.join("nr_accesses"))?,
            age: read_num(&d.join("age"))?,
        });
    }
    regions.sort_unstable_by_key(|r| r.start);
    Ok(regions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    /// The files a kernel with two kdamonds would show (sysfs creates them on write; a plain
    /// directory tree needs them up front).
    fn fake_admin(dir: &TempDir, kdamonds: usize) {
        dir.write("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "0\n");
        for k in 0..kdamonds {
            for (file, _) in setup_writes(&[1], &Tracking::default()).into_iter().skip(1) {
                let file = file.replace("kdamonds/0/", &format!("kdamonds/{k}/"));
                dir.write(&format!("sys/kernel/mm/damon/admin/{file}"), "");
            }
            dir.write(
                &format!("sys/kernel/mm/damon/admin/kdamonds/{k}/contexts/0/avail_operations"),
                "vaddr\nfvaddr\npaddr\n",
            );
        }
    }

    #[test]
    fn the_pageout_scheme_starts_off_never_unlimited_and_takes_its_quota() {
        let dir = TempDir::new("damon-pageout");
        dir.write("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "0\n");
        let scheme = PageoutScheme { reset_ms: 500 };
        for (file, _) in setup_writes_with(&[1], &Tracking::default(), Some(scheme))
            .into_iter()
            .skip(1)
        {
            dir.write(&format!("sys/kernel/mm/damon/admin/{file}"), "");
        }
        let s1 = "sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/1";
        dir.write(&format!("{s1}/stats/sz_applied"), "8192\n");
        let m = Monitor::start_with(dir.path(), &[7], &Tracking::default(), Some(scheme)).unwrap();
        assert_eq!(dir.read(&format!("{s1}/action")), "pageout");
        assert_eq!(dir.read(&format!("{s1}/access_pattern/sz/max")), "0", "off");
        assert_eq!(dir.read(&format!("{s1}/quotas/bytes")), "4096", "never 0");
        assert_eq!(dir.read(&format!("{s1}/quotas/reset_interval_ms")), "500");
        assert_eq!(m.set_pageout_bytes(0, 1 << 20).unwrap(), 8192);
        assert_eq!(dir.read(&format!("{s1}/quotas/bytes")), "1048576");
        assert_eq!(
            dir.read(&format!("{s1}/access_pattern/sz/max")),
            u64::MAX.to_string()
        );
        // The last control written: the stats were asked for after the commit.
        assert_eq!(
            dir.read("sys/kernel/mm/damon/admin/kdamonds/0/state"),
            "update_schemes_stats"
        );
        m.set_pageout_bytes(0, 0).unwrap();
        assert_eq!(dir.read(&format!("{s1}/access_pattern/sz/max")), "0");
        assert_eq!(
            dir.read(&format!("{s1}/quotas/bytes")),
            "1048576",
            "a quota of 0 would mean no limit: the scheme is turned off by its size range"
        );
        let plain = Monitor::start(dir.path(), &[7], &Tracking::default());
        // (The first monitor still holds the kdamonds: the second is refused as busy.)
        assert!(plain.is_err());
    }

    #[test]
    fn start_writes_one_kdamond_per_target_and_stop_removes_them() {
        let dir = TempDir::new("damon-start");
        fake_admin(&dir, 2);
        let mut m = Monitor::start(dir.path(), &[41, 42], &Tracking::default()).unwrap();
        let k = "sys/kernel/mm/damon/admin/kdamonds";
        assert_eq!(dir.read(&format!("{k}/nr_kdamonds")), "2");
        assert_eq!(
            dir.read(&format!("{k}/1/contexts/0/targets/0/pid_target")),
            "42"
        );
        assert_eq!(dir.read(&format!("{k}/0/contexts/0/operations")), "vaddr");
        assert_eq!(
            dir.read(&format!(
                "{k}/0/contexts/0/monitoring_attrs/intervals/aggr_us"
            )),
            "200000"
        );
        assert_eq!(
            dir.read(&format!("{k}/0/contexts/0/schemes/0/access_pattern/sz/max")),
            u64::MAX.to_string()
        );
        assert_eq!(dir.read(&format!("{k}/0/state")), "on");
        assert!(m.running(1));
        m.stop().unwrap();
        assert_eq!(dir.read(&format!("{k}/0/state")), "off");
        assert_eq!(dir.read(&format!("{k}/nr_kdamonds")), "0");
    }

    #[test]
    fn busy_damon_and_missing_vaddr_are_refused() {
        let dir = TempDir::new("damon-busy");
        fake_admin(&dir, 1);
        dir.write("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "1\n");
        let e = Monitor::start(dir.path(), &[1], &Tracking::default()).unwrap_err();
        assert!(matches!(e, TierdError::DamonBusy { count: 1, .. }), "{e}");

        let dir = TempDir::new("damon-novaddr");
        fake_admin(&dir, 1);
        dir.write(
            "sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/avail_operations",
            "paddr\n",
        );
        let e = Monitor::start(dir.path(), &[1], &Tracking::default()).unwrap_err();
        assert!(e.to_string().contains("CONFIG_DAMON_VADDR"), "{e}");
        assert_eq!(
            dir.read("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds"),
            "0"
        );
    }

    /// A kdamond's files that vanish between tierd's writes (the kernel rebuilding the directory)
    /// are reported as missing, not created: sysfs would refuse a creation as "permission
    /// denied", and a scratch tree would gain a stray file.
    #[test]
    fn a_missing_attribute_is_reported_missing_and_never_created() {
        let dir = TempDir::new("damon-missing");
        fake_admin(&dir, 1);
        let state = dir
            .path()
            .join("sys/kernel/mm/damon/admin/kdamonds/0/state");
        std::fs::remove_file(&state).unwrap();
        let e = Monitor::start(dir.path(), &[1], &Tracking::default()).unwrap_err();
        assert!(
            e.to_string().contains("No such file") && e.to_string().contains("state"),
            "{e}"
        );
        assert!(!state.exists(), "tierd created {}", state.display());
    }

    #[test]
    fn tried_regions_are_read_in_address_order() {
        let dir = TempDir::new("damon-regions");
        let t = "tried_regions";
        dir.write(&format!("{t}/total_bytes"), "12288\n");
        for (i, (start, acc, age)) in [(0x3000, 0, 9), (0x1000, 20, 2), (0x2000, 5, 0)]
            .iter()
            .enumerate()
        {
            dir.write(&format!("{t}/{i}/start"), &format!("{start}\n"));
            dir.write(&format!("{t}/{i}/end"), &format!("{}\n", start + 0x1000));
            dir.write(&format!("{t}/{i}/nr_accesses"), &format!("{acc}\n"));
            dir.write(&format!("{t}/{i}/age"), &format!("{age}\n"));
        }
        let r = read_tried_regions(&dir.path().join(t)).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(
            r[0],
            Region {
                start: 0x1000,
                end: 0x2000,
                nr_accesses: 20,
                age: 2
            }
        );
        assert_eq!(r[2].age, 9);
        dir.write(&format!("{t}/0/age"), "many\n");
        assert!(read_tried_regions(&dir.path().join(t)).is_err());
    }
}
