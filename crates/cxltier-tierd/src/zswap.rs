//! zswap as a compressed tier between memory and NVMe: memory mode's `--zswap[=PERCENT]`.
//!
//! With zswap on, a page on its way to swap is compressed into a pool in RAM first and written
//! to the swap device only when the pool is full (or the kernel's shrinker writes it back); a
//! fault on it decompresses instead of reading the device. It is the kernel's own mechanism,
//! one switch for the whole system (`/sys/module/zswap/parameters/enabled`) and a bound on the
//! pool (`max_pool_percent` of RAM). [`ZswapPlan::changes`] says both before anything is
//! written; the values found are written back on [`ZswapTier::restore`] or drop. Each interval
//! [`ZswapTier::step`] reads what the pool holds (`/proc/meminfo` `Zswap:` compressed,
//! `Zswapped:` original) and the interval's traffic (`/proc/vmstat` `zswpout`, `zswpin`,
//! `zswpwb`): system-wide figures, as the setting is.

use crate::setting::HeldSetting;
use crate::TierdError;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The kernel's default pool bound, and `--zswap`'s without a value.
pub const DEFAULT_POOL_PERCENT: u32 = 20;

/// zswap's settings, checked against the machine; nothing written yet.
#[derive(Debug)]
pub struct ZswapPlan {
    enabled: HeldSetting,
    pool: HeldSetting,
    pool_percent: u32,
    compressor: String,
    meminfo: PathBuf,
    vmstat: PathBuf,
}

/// `Zswap:` and `Zswapped:` of `/proc/meminfo`, in bytes (`None`: a kernel before 5.19 does not
/// say).
pub fn parse_meminfo_zswap(text: &str) -> Option<(u64, u64)> {
    let kib = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    Some((kib("Zswap:")? * 1024, kib("Zswapped:")? * 1024))
}

/// `zswpout`, `zswpin` and `zswpwb` of `/proc/vmstat` (a counter the kernel lacks reads 0).
pub fn parse_vmstat_zswap(text: &str) -> (u64, u64, u64) {
    let mut c = (0, 0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(key), Some(v)) = (f.next(), f.next().and_then(|v| v.parse().ok())) else {
            continue;
        };
        match key {
            "zswpout" => c.0 = v,
            "zswpin" => c.1 = v,
            "zswpwb" => c.2 = v,
            _ => {}
        }
    }
    c
}

impl ZswapPlan {
    /// Read zswap's parameters under `sys_root`; refuse a kernel without zswap or a pool bound
    /// outside 1..=100.
    pub fn prepare(
        pool_percent: u32,
        sys_root: &Path,
        proc_root: &Path,
    ) -> Result<ZswapPlan, TierdError> {
        if !(1..=100).contains(&pool_percent) {
            return Err(TierdError::Setting {
                setting: "--zswap",
                message: format!(
                    "{pool_percent}: expected the pool's most share of RAM in percent, 1 to 100 \
                     (the kernel's default is {DEFAULT_POOL_PERCENT})"
                ),
            });
        }
        let params = sys_root.join("module/zswap/parameters");
        if !params.join("enabled").exists() {
            return Err(TierdError::Unsupported(format!(
                "--zswap: this kernel has no zswap ({} missing: it needs CONFIG_ZSWAP); run \
                 without --zswap",
                params.display()
            )));
        }
        let compressor = std::fs::read_to_string(params.join("compressor"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        Ok(ZswapPlan {
            enabled: HeldSetting::read(&params.join("enabled"))?,
            pool: HeldSetting::read(&params.join("max_pool_percent"))?,
            pool_percent,
            compressor,
            meminfo: proc_root.join("meminfo"),
            vmstat: proc_root.join("vmstat"),
        })
    }

    /// The system-wide changes, in words, before they are made.
    pub fn changes(&self) -> Vec<String> {
        vec![
            format!(
                "set {} from {} to {} (the compressed pool's most share of RAM, percent)",
                self.pool.path().display(),
                self.pool.previous(),
                self.pool_percent
            ),
            format!(
                "set {} from {} to Y (zswap: pages on their way to swap are compressed with {} \
                 into that pool first, and written to the swap device when it is full)",
                self.enabled.path().display(),
                self.enabled.previous(),
                self.compressor
            ),
        ]
    }

    /// Bound the pool, then turn zswap on; a refusal puts the bound back and says why.
    pub fn apply(mut self) -> Result<ZswapTier, TierdError> {
        self.pool.set(&self.pool_percent.to_string())?;
        if let Err(e) = self.enabled.set("Y") {
            let _ = self.pool.restore();
            return Err(TierdError::Unsupported(format!(
                "cannot turn zswap on ({e}): its compressor {} may not be available (load it, \
                 e.g. `modprobe {}`, or name another in {}), or run without --zswap",
                self.compressor,
                self.compressor,
                self.enabled.path().with_file_name("compressor").display()
            )));
        }
        Ok(ZswapTier {
            enabled: self.enabled,
            pool: self.pool,
            meminfo: self.meminfo,
            vmstat: self.vmstat,
            last: None,
        })
    }
}

/// zswap over the last interval, in each memory-mode interval line (`memory.zswap`);
/// system-wide figures.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ZswapReport {
    /// The pool's size in RAM (compressed) and what it holds uncompressed (`None`: the kernel's
    /// meminfo does not say).
    pub pool_bytes: Option<u64>,
    pub stored_bytes: Option<u64>,
    /// Pages stored into, loaded from and written back from the pool in the interval (`None` in
    /// the first).
    pub stored_pages: Option<u64>,
    pub loaded_pages: Option<u64>,
    pub written_back_pages: Option<u64>,
}

/// zswap turned on for the run; its parameters are written back on
/// [`restore`](ZswapTier::restore) or drop.
#[derive(Debug)]
pub struct ZswapTier {
    enabled: HeldSetting,
    pool: HeldSetting,
    meminfo: PathBuf,
    vmstat: PathBuf,
    last: Option<(u64, u64, u64)>,
}

impl ZswapTier {
    /// Read the pool and the interval's traffic.
    pub fn step(&mut self) -> Result<ZswapReport, TierdError> {
        let meminfo = std::fs::read_to_string(&self.meminfo)
            .map_err(|e| TierdError::io("cannot read", &self.meminfo, e))?;
        let vmstat = std::fs::read_to_string(&self.vmstat)
            .map_err(|e| TierdError::io("cannot read", &self.vmstat, e))?;
        let pool = parse_meminfo_zswap(&meminfo);
        let now = parse_vmstat_zswap(&vmstat);
        let delta = self.last.map(|(o, i, w)| {
            (
                now.0.saturating_sub(o),
                now.1.saturating_sub(i),
                now.2.saturating_sub(w),
            )
        });
        self.last = Some(now);
        Ok(ZswapReport {
            pool_bytes: pool.map(|p| p.0),
            stored_bytes: pool.map(|p| p.1),
            stored_pages: delta.map(|d| d.0),
            loaded_pages: delta.map(|d| d.1),
            written_back_pages: delta.map(|d| d.2),
        })
    }

    /// What was written back, as `(file, value)`: zswap off (as found) first, then the bound.
    pub fn restore(&mut self) -> Result<Vec<(PathBuf, String)>, TierdError> {
        self.enabled.restore()?;
        self.pool.restore()?;
        Ok(vec![
            (
                self.enabled.path().to_path_buf(),
                self.enabled.previous().to_string(),
            ),
            (
                self.pool.path().to_path_buf(),
                self.pool.previous().to_string(),
            ),
        ])
    }
}

impl Drop for ZswapTier {
    fn drop(&mut self) {
        // Off before the bound (fields would drop in declaration order: the same).
        let _ = self.enabled.restore();
        let _ = self.pool.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(enabled: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let params = d.path().join("sys/module/zswap/parameters");
        std::fs::create_dir_all(&params).unwrap();
        std::fs::create_dir_all(d.path().join("proc")).unwrap();
        std::fs::write(params.join("enabled"), enabled).unwrap();
        std::fs::write(params.join("max_pool_percent"), "20\n").unwrap();
        std::fs::write(params.join("compressor"), "lzo\n").unwrap();
        std::fs::write(
            d.path().join("proc/meminfo"),
            "MemTotal: 100 kB\nZswap:  4 kB\nZswapped:   16 kB\n",
        )
        .unwrap();
        std::fs::write(d.path().join("proc/vmstat"), "zswpout 10\nzswpin 2\n").unwrap();
        d
    }

    #[test]
    fn zswap_is_bounded_turned_on_reported_and_put_back() {
        let d = fake("N\n");
        let params = d.path().join("sys/module/zswap/parameters");
        let plan = ZswapPlan::prepare(30, &d.path().join("sys"), &d.path().join("proc")).unwrap();
        let said = plan.changes().join("; ");
        assert!(
            said.contains("from 20 to 30") && said.contains("from N to Y"),
            "{said}"
        );
        assert!(said.contains("lzo"), "{said}");
        // The parameters' (enabled, max_pool_percent) as the kernel shows them.
        let params_now = || {
            ["enabled", "max_pool_percent"]
                .map(|name| std::fs::read_to_string(params.join(name)).unwrap())
        };
        let mut z = plan.apply().unwrap();
        assert_eq!(params_now(), ["Y\n", "30\n"]);
        let first = z.step().unwrap();
        assert_eq!(
            (first.pool_bytes, first.stored_bytes, first.stored_pages),
            (Some(4096), Some(16384), None)
        );
        std::fs::write(
            d.path().join("proc/vmstat"),
            "zswpout 25\nzswpin 3\nzswpwb 1\n",
        )
        .unwrap();
        let r = z.step().unwrap();
        assert_eq!(
            (r.stored_pages, r.loaded_pages, r.written_back_pages),
            (Some(15), Some(1), Some(1))
        );
        let back = z.restore().unwrap();
        assert_eq!(back[0].1, "N");
        assert_eq!(params_now(), ["N\n", "20\n"]);
    }

    #[test]
    fn a_kernel_without_zswap_and_a_bad_bound_are_refused_naming_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let e = ZswapPlan::prepare(20, d.path(), d.path()).unwrap_err();
        assert!(
            e.to_string().contains("CONFIG_ZSWAP") && e.to_string().contains("without --zswap"),
            "{e}"
        );
        for bad in [0, 101] {
            let e = ZswapPlan::prepare(bad, d.path(), d.path()).unwrap_err();
            assert!(e.to_string().contains("1 to 100"), "{e}");
        }
    }

    #[test]
    fn meminfo_without_zswap_lines_says_none() {
        assert_eq!(parse_meminfo_zswap("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_vmstat_zswap("pswpin 3\n"), (0, 0, 0));
    }

    #[test]
    fn dropping_the_tier_turns_zswap_off_again() {
        let d = fake("N\n");
        let params = d.path().join("sys/module/zswap/parameters");
        let z = ZswapPlan::prepare(20, &d.path().join("sys"), &d.path().join("proc"))
            .unwrap()
            .apply()
            .unwrap();
        drop(z);
        assert_eq!(
            std::fs::read_to_string(params.join("enabled")).unwrap(),
            "N\n"
        );
    }
}
