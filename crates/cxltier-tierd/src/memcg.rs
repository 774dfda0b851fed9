//! Memory mode's memcg limits on a `--cgroup` target: on cgroup v2, `memory.high` set to the
//! DRAM + CXL budget and `memory.swap.max` to the size of tierd's swap area, so that the kernel's
//! own reclaim holds the cgroup to the budget between tierd's intervals and its swap stays within
//! the NVMe tier.
//!
//! `memory.max` is deliberately left alone: at `memory.max` a cgroup that cannot reclaim (the
//! NVMe tier full) is OOM-killed, and memory mode never kills its target; at `memory.high` it is
//! only throttled.
//!
//! On a host whose memory controller is on a cgroup v1 hierarchy (a `--cgroup` directory with
//! `memory.limit_in_bytes` and no `memory.high`), v1 has no throttling limit: the equivalents are
//! `memory.limit_in_bytes` (the budget; the kernel reclaims to it) with the cgroup's OOM killer
//! disabled (`memory.oom_control`: at the limit with nothing left to reclaim, its tasks pause
//! rather than die, as v2's `memory.high` throttles them), and `memory.memsw.limit_in_bytes`
//! (memory and swap together: the budget plus the NVMe tier) where swap is accounted. v1 has no
//! per-cgroup pressure file: the SLA loop then reads the system's (`psi::pressure_file`). [`MemcgPlan::changes`] lists every change with the value it replaces before
//! any is made (`--dry-run` prints them and stops there); [`MemcgLimits`] writes the previous
//! values back on [`MemcgLimits::restore`] or when dropped.

use crate::TierdError;
use serde::Serialize;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The limit files memory mode sets, in the order they are written.
pub const HIGH: &str = "memory.high";
pub const SWAP_MAX: &str = "memory.swap.max";
/// The cgroup's charge now.
const CURRENT: &str = "memory.current";
/// cgroup v1's equivalents, written in this order (memory and swap together may never be set
/// below memory alone, so the memory limit goes first and is restored last).
pub const V1_LIMIT: &str = "memory.limit_in_bytes";
pub const V1_OOM_CONTROL: &str = "memory.oom_control";
pub const V1_MEMSW_LIMIT: &str = "memory.memsw.limit_in_bytes";
/// A v1 cgroup's charge now.
const V1_USAGE: &str = "memory.usage_in_bytes";

/// One limit: the file, the value it is set to (bytes; for `memory.oom_control`, 1: the OOM
/// killer disabled), and its value before (as the kernel wrote it: `max` or a number of bytes;
/// for `memory.oom_control`, its `oom_kill_disable`), to be written back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limit {
    // Fields in the order the `memcg_limits` line has always written them (scripts and the lab
    // read `"bytes":N,"file":"memory.swap.max"`).
    pub bytes: u64,
    pub file: &'static str,
    pub previous: String,
}

/// The `memcg_limits` JSON line of docs/tierd.md: the limits set on a cgroup (or, with
/// `dry_run`, that would be set). Fields in the order the line has always written them.
#[derive(Debug, Clone, Serialize)]
pub struct LimitsReport<'a> {
    pub cgroup: &'a Path,
    pub dry_run: bool,
    pub limits: &'a [Limit],
}

/// The `memcg_restore` JSON line: which limits were written back when tierd stopped.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport<'a> {
    pub cgroup: &'a Path,
    pub cgroup_gone: bool,
    pub restored: Vec<RestoredFile<'a>>,
}

/// One limit file written back, and the value it holds again.
#[derive(Debug, Clone, Serialize)]
pub struct RestoredFile<'a> {
    pub file: &'a str,
    pub value: &'a str,
}

impl Restored {
    /// The `memcg_restore` line for the cgroup `dir`.
    pub fn report<'a>(&'a self, dir: &'a Path) -> RestoreReport<'a> {
        RestoreReport {
            cgroup: dir,
            cgroup_gone: self.cgroup_gone,
            restored: self
                .restored
                .iter()
                .map(|(file, value)| RestoredFile { file, value })
                .collect(),
        }
    }
}

/// The limits to set on one cgroup, checked against it; nothing written yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcgPlan {
    pub dir: PathBuf,
    pub limits: Vec<Limit>,
}

fn read_value(dir: &Path, file: &str) -> Result<String, TierdError> {
    let path = dir.join(file);
    fs::read_to_string(&path)
        .map(|t| t.trim().to_string())
        .map_err(|e| TierdError::io("reading", &path, e))
}

impl MemcgPlan {
    /// The `memcg_limits` line of a `--dry-run`: the limits that would be set.
    pub fn report(&self) -> LimitsReport<'_> {
        LimitsReport {
            cgroup: &self.dir,
            dry_run: true,
            limits: &self.limits,
        }
    }

    /// Check the cgroup directory `dir` and plan `memory.high = keep_bytes` and
    /// `memory.swap.max = swap_bytes`. A cgroup without the memory controller (or the root
    /// cgroup, which has no limits) is refused, naming the fix; a kernel without swap accounting
    /// (no `memory.swap.max`) gets only `memory.high`, and the returned note says so.
    pub fn prepare(
        dir: &Path,
        keep_bytes: u64,
        swap_bytes: u64,
    ) -> Result<(MemcgPlan, Option<String>), TierdError> {
        if keep_bytes == 0 {
            return Err(TierdError::Setting {
                setting: "--dram-budget",
                message: "a memory.high of 0 bytes would throttle the cgroup to a halt; give a \
                          DRAM budget above 0"
                    .into(),
            });
        }
        let parent = dir.parent().unwrap_or(dir);
        let root = dir.join("cgroup.procs").exists() && !parent.join("cgroup.procs").exists();
        if root {
            return Err(TierdError::Unsupported(format!(
                "--cgroup {}: the root cgroup has no memory limits; move the processes into a \
                 child cgroup and give that",
                dir.display()
            )));
        }
        if !dir.join(HIGH).exists() && dir.join(V1_LIMIT).exists() {
            return Self::prepare_v1(dir, keep_bytes, swap_bytes);
        }
        if !dir.join(HIGH).exists() {
            return Err(TierdError::Unsupported(format!(
                "--cgroup {}: no {HIGH} (cgroup v2) or {V1_LIMIT} (cgroup v1) there: the memory \
                 controller is not enabled for it; on cgroup v2 enable it with `echo +memory > \
                 {}/cgroup.subtree_control`",
                dir.display(),
                parent.display()
            )));
        }
        let mut limits = vec![Limit {
            file: HIGH,
            bytes: keep_bytes,
            previous: read_value(dir, HIGH)?,
        }];
        let mut note = None;
        if dir.join(SWAP_MAX).exists() {
            limits.push(Limit {
                file: SWAP_MAX,
                bytes: swap_bytes,
                previous: read_value(dir, SWAP_MAX)?,
            });
        } else {
            note = Some(format!(
                "{} has no {SWAP_MAX} (this kernel does not account swap per cgroup: \
                 cgroup.memory=noswap or CONFIG_MEMCG_SWAP off); the cgroup's swap is not limited",
                dir.display()
            ));
        }
        Ok((
            MemcgPlan {
                dir: dir.to_path_buf(),
                limits,
            },
            note,
        ))
    }

    /// The cgroup v1 plan: `memory.limit_in_bytes = keep_bytes`, the OOM killer disabled, and
    /// `memory.memsw.limit_in_bytes = keep_bytes + swap_bytes` where swap is accounted.
    fn prepare_v1(
        dir: &Path,
        keep_bytes: u64,
        swap_bytes: u64,
    ) -> Result<(MemcgPlan, Option<String>), TierdError> {
        let oom = read_value(dir, V1_OOM_CONTROL)?;
        let oom_kill_disable = oom
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill_disable "))
            .map(str::trim)
            .filter(|v| matches!(*v, "0" | "1"))
            .ok_or_else(|| {
                TierdError::Unsupported(format!(
                    "--cgroup {}: {V1_OOM_CONTROL} has no oom_kill_disable line ({oom:?}): this \
                     kernel's cgroup v1 memory controller cannot pause a cgroup instead of \
                     killing it, and memory mode never kills its target; use cgroup v2",
                    dir.display()
                ))
            })?
            .to_string();
        let mut limits = vec![
            Limit {
                file: V1_LIMIT,
                bytes: keep_bytes,
                previous: read_value(dir, V1_LIMIT)?,
            },
            Limit {
                file: V1_OOM_CONTROL,
                bytes: 1,
                previous: oom_kill_disable,
            },
        ];
        let mut note = format!(
            "{} is a cgroup v1 memory cgroup: {V1_LIMIT} holds the budget with the cgroup's OOM \
             killer disabled (its tasks pause rather than die if nothing is left to reclaim), and \
             v1 has no per-cgroup pressure, so the SLA loop reads /proc/pressure/memory",
            dir.display()
        );
        if dir.join(V1_MEMSW_LIMIT).exists() {
            limits.push(Limit {
                file: V1_MEMSW_LIMIT,
                bytes: keep_bytes.saturating_add(swap_bytes),
                previous: read_value(dir, V1_MEMSW_LIMIT)?,
            });
        } else {
            note.push_str(&format!(
                "; it has no {V1_MEMSW_LIMIT} (swap is not accounted per cgroup: boot with \
                 swapaccount=1), so the cgroup's swap is not limited"
            ));
        }
        Ok((
            MemcgPlan {
                dir: dir.to_path_buf(),
                limits,
            },
            Some(note),
        ))
    }

    /// Every change [`MemcgPlan::apply`] makes, in words, in order.
    pub fn changes(&self) -> Vec<String> {
        self.limits
            .iter()
            .map(|l| {
                format!(
                    "set {}/{} to {} bytes ({}; now {})",
                    self.dir.display(),
                    l.file,
                    l.bytes,
                    match l.file {
                        HIGH | V1_LIMIT =>
                            "DRAM + CXL budget: the kernel reclaims the cgroup above it",
                        V1_OOM_CONTROL =>
                            "oom_kill_disable: at the limit with nothing to reclaim, the cgroup's \
                             tasks pause instead of being killed",
                        V1_MEMSW_LIMIT =>
                            "the budget plus the NVMe tier's size: memory and swap together",
                        _ => "the NVMe tier's size: the cgroup swaps no more than that",
                    },
                    l.previous
                )
            })
            .collect()
    }

    /// Write the limits. A failure writes back the ones already set and is returned.
    pub fn apply(self) -> Result<MemcgLimits, TierdError> {
        let mut set = MemcgLimits {
            dir: self.dir.clone(),
            limits: Vec::new(),
        };
        for l in self.limits {
            let path = self.dir.join(l.file);
            if let Err(e) = fs::write(&path, l.bytes.to_string()) {
                let _ = set.restore();
                return Err(TierdError::io("setting", &path, e));
            }
            set.limits.push(l);
        }
        Ok(set)
    }
}

/// Limits tierd set; [`MemcgLimits::restore`] (or dropping it) writes the previous values back.
#[derive(Debug)]
pub struct MemcgLimits {
    dir: PathBuf,
    /// The limits set and not yet restored.
    limits: Vec<Limit>,
}

/// What [`MemcgLimits::restore`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Restored {
    /// `(file, value written back)`, in the order restored.
    pub restored: Vec<(&'static str, String)>,
    /// The cgroup was removed before tierd stopped: nothing was left to restore.
    pub cgroup_gone: bool,
}

impl MemcgLimits {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `memcg_limits` line of the limits set.
    pub fn report(&self) -> LimitsReport<'_> {
        LimitsReport {
            cgroup: &self.dir,
            dry_run: false,
            limits: &self.limits,
        }
    }

    /// The limits in force (set by tierd and not yet restored).
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// Write each limit's previous value back, last set first. Runs once; later calls do
    /// nothing. A cgroup removed meanwhile has nothing to restore and is said so; any other
    /// failure is returned after trying the remaining files, which stay to be restored.
    pub fn restore(&mut self) -> Result<Restored, TierdError> {
        let mut done = Restored::default();
        let mut first_error = None;
        let mut left = Vec::new();
        while let Some(l) = self.limits.pop() {
            let path = self.dir.join(l.file);
            match fs::write(&path, &l.previous) {
                Ok(()) => done.restored.push((l.file, l.previous)),
                Err(e) if e.kind() == io::ErrorKind::NotFound && !self.dir.exists() => {
                    done.cgroup_gone = true;
                }
                Err(e) => {
                    first_error.get_or_insert(TierdError::io("restoring", &path, e));
                    left.push(l);
                }
            }
        }
        left.reverse();
        self.limits = left;
        match first_error {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}

impl Drop for MemcgLimits {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

/// Bytes the cgroup `dir` may still charge before `memory.high` (`high - current`, 0 when over
/// it; on cgroup v1 `memory.limit_in_bytes - memory.usage_in_bytes`); `None` when there is no
/// numeric limit (`max`) or the files cannot be read.
pub fn headroom_bytes(dir: &Path) -> Option<u64> {
    let read = |f: &str| fs::read_to_string(dir.join(f)).ok();
    match read(HIGH) {
        Some(high) => parse_headroom(&high, &read(CURRENT)?),
        None => parse_headroom(&read(V1_LIMIT)?, &read(V1_USAGE)?),
    }
}

/// `memory.high` minus `memory.current`, from the files' texts.
pub fn parse_headroom(high: &str, current: &str) -> Option<u64> {
    let high: u64 = high.trim().parse().ok()?;
    let current: u64 = current.trim().parse().ok()?;
    Some(high.saturating_sub(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why keeping 1 MiB in memory with 16 MiB of swap is refused for `cg`.
    fn refusal(cg: &Path) -> String {
        MemcgPlan::prepare(cg, 1 << 20, 1 << 24)
            .unwrap_err()
            .to_string()
    }

    /// The `memcg_limits` line's text is read by scripts (and the lab) field by field, in the
    /// order it has always had.
    #[test]
    fn the_limits_line_keeps_its_field_order() {
        let limits = [Limit {
            bytes: 268435456,
            file: "memory.swap.max",
            previous: "max".into(),
        }];
        let report = LimitsReport {
            cgroup: Path::new("/sys/fs/cgroup/app"),
            dry_run: false,
            limits: &limits,
        };
        assert_eq!(
            serde_json::to_string(&report).unwrap(),
            r#"{"cgroup":"/sys/fs/cgroup/app","dry_run":false,"limits":[{"bytes":268435456,"file":"memory.swap.max","previous":"max"}]}"#
        );
    }

    fn cgroup(high: &str, swap_max: Option<&str>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let cg = d.path().join("app");
        fs::create_dir_all(&cg).unwrap();
        fs::write(d.path().join("cgroup.procs"), "").unwrap();
        fs::write(cg.join("cgroup.procs"), "7\n").unwrap();
        fs::write(cg.join(HIGH), format!("{high}\n")).unwrap();
        if let Some(s) = swap_max {
            fs::write(cg.join(SWAP_MAX), format!("{s}\n")).unwrap();
        }
        d
    }

    #[test]
    fn limits_are_set_and_the_previous_values_written_back() {
        let d = cgroup("max", Some("1073741824"));
        let cg = d.path().join("app");
        let (plan, note) = MemcgPlan::prepare(&cg, 12 << 20, 64 << 20).unwrap();
        assert_eq!(note, None);
        let changes = plan.changes();
        assert_eq!(changes.len(), 2);
        assert!(
            changes[0].contains("memory.high to 12582912 bytes") && changes[0].contains("now max"),
            "{}",
            changes[0]
        );
        assert!(
            changes[1].contains("memory.swap.max to 67108864")
                && changes[1].contains("now 1073741824"),
            "{}",
            changes[1]
        );
        // Planning writes nothing.
        assert_eq!(fs::read_to_string(cg.join(HIGH)).unwrap(), "max\n");
        let mut set = plan.apply().unwrap();
        assert_eq!(fs::read_to_string(cg.join(HIGH)).unwrap(), "12582912");
        assert_eq!(fs::read_to_string(cg.join(SWAP_MAX)).unwrap(), "67108864");
        let r = set.restore().unwrap();
        assert_eq!(
            r.restored,
            vec![
                (SWAP_MAX, "1073741824".to_string()),
                (HIGH, "max".to_string())
            ]
        );
        assert!(!r.cgroup_gone);
        assert_eq!(fs::read_to_string(cg.join(HIGH)).unwrap(), "max");
        assert_eq!(fs::read_to_string(cg.join(SWAP_MAX)).unwrap(), "1073741824");
        // Once only.
        assert_eq!(set.restore().unwrap(), Restored::default());
    }

    #[test]
    fn dropping_the_limits_restores_them() {
        let d = cgroup("500000000", Some("max"));
        let cg = d.path().join("app");
        let set = MemcgPlan::prepare(&cg, 1 << 20, 1 << 24)
            .unwrap()
            .0
            .apply()
            .unwrap();
        assert_eq!(fs::read_to_string(cg.join(HIGH)).unwrap(), "1048576");
        drop(set);
        assert_eq!(fs::read_to_string(cg.join(HIGH)).unwrap(), "500000000");
        assert_eq!(fs::read_to_string(cg.join(SWAP_MAX)).unwrap(), "max");
    }

    #[test]
    fn without_swap_accounting_only_memory_high_is_set_and_said() {
        let d = cgroup("max", None);
        let cg = d.path().join("app");
        let (plan, note) = MemcgPlan::prepare(&cg, 1 << 20, 1 << 24).unwrap();
        assert_eq!(plan.limits.len(), 1);
        assert!(note.unwrap().contains("not limited"));
    }

    #[test]
    fn a_cgroup_without_the_memory_controller_is_refused_with_the_fix() {
        let d = cgroup("max", None);
        let cg = d.path().join("app");
        fs::remove_file(cg.join(HIGH)).unwrap();
        let e = refusal(&cg);
        assert!(
            e.contains("+memory") && e.contains("cgroup.subtree_control"),
            "{e}"
        );
        // The root cgroup (no parent cgroup) has no limits at all.
        let e = MemcgPlan::prepare(d.path(), 1 << 20, 1 << 24)
            .unwrap_err()
            .to_string();
        assert!(e.contains("root cgroup"), "{e}");
        assert!(MemcgPlan::prepare(&cg, 0, 1).is_err());
    }

    #[test]
    fn the_headroom_is_what_is_left_below_memory_high() {
        assert_eq!(parse_headroom("12582912\n", "8388608\n"), Some(4 << 20));
        // Over the limit (the kernel is reclaiming): no room at all.
        assert_eq!(parse_headroom("12582912\n", "13000000\n"), Some(0));
        // No limit: no bound from the cgroup.
        assert_eq!(parse_headroom("max\n", "8388608\n"), None);
        let d = cgroup("12582912", None);
        let cg = d.path().join("app");
        assert_eq!(headroom_bytes(&cg), None, "no memory.current");
        fs::write(cg.join("memory.current"), "12582912\n").unwrap();
        assert_eq!(headroom_bytes(&cg), Some(0));
    }

    /// The v1 path against a real kernel's cgroup v1 memory controller. This machine's kernels
    /// have none (v1 memory is gone from Debian's 6.12), so the lab runs it inside bookworm's
    /// 6.1 kernel (`lab/checks/memcg-v1.sh`), with `CXLTIER_V1_CGROUP` naming a v1 memory cgroup
    /// that holds a running workload larger than the budget, and swap on: the kernel must take
    /// the limits in tierd's order (reclaiming the cgroup into swap to get under the limit),
    /// show them, and take every previous value back.
    #[test]
    #[ignore = "needs a cgroup v1 memory cgroup on a real kernel: the lab runs it"]
    // The lab's check shows what the kernel did: the line printed here.
    #[allow(clippy::print_stdout)]
    fn v1_limits_on_a_real_kernel() {
        let dir = PathBuf::from(
            std::env::var("CXLTIER_V1_CGROUP")
                .expect("CXLTIER_V1_CGROUP names a cgroup v1 memory cgroup to set limits on"),
        );
        let files = [V1_LIMIT, V1_OOM_CONTROL, V1_MEMSW_LIMIT];
        let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap();
        let before: Vec<String> = files.iter().map(|f| read(f)).collect();
        let usage_before: u64 = read(V1_USAGE).trim().parse().unwrap();
        let (keep, swap) = (12u64 << 20, 256u64 << 20);
        assert!(
            usage_before > keep,
            "the workload holds {usage_before} bytes, below {keep}"
        );
        let (plan, note) = MemcgPlan::prepare(&dir, keep, swap).unwrap();
        assert!(note.unwrap().contains("cgroup v1"));
        let planned: Vec<&str> = plan.limits.iter().map(|l| l.file).collect();
        assert_eq!(planned, files);
        let mut set = plan.apply().unwrap();
        let usage: u64 = read(V1_USAGE).trim().parse().unwrap();
        println!(
            "v1 limits set: usage {usage_before} -> {usage} bytes; {} = {}; {}; {} = {}",
            V1_LIMIT,
            read(V1_LIMIT).trim(),
            read(V1_OOM_CONTROL).replace('\n', " "),
            V1_MEMSW_LIMIT,
            read(V1_MEMSW_LIMIT).trim()
        );
        assert_eq!(read(V1_LIMIT).trim(), keep.to_string());
        assert!(read(V1_OOM_CONTROL).contains("oom_kill_disable 1"));
        assert_eq!(read(V1_MEMSW_LIMIT).trim(), (keep + swap).to_string());
        assert!(usage <= keep, "usage {usage} above the limit {keep}");
        assert!(headroom_bytes(&dir).is_some_and(|h| h <= keep));
        let restored = set.restore().unwrap();
        assert_eq!(restored.restored.len(), 3);
        assert!(!restored.cgroup_gone);
        let after: Vec<String> = files.iter().map(|f| read(f)).collect();
        assert_eq!(after, before, "every file as it was");
    }

    /// A cgroup v1 memory cgroup as the kernel lays it out (the v1 "unlimited" value).
    fn cgroup_v1(memsw: bool) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let cg = d.path().join("app");
        fs::create_dir_all(&cg).unwrap();
        fs::write(d.path().join("cgroup.procs"), "").unwrap();
        fs::write(cg.join("cgroup.procs"), "7\n").unwrap();
        fs::write(cg.join(V1_LIMIT), "9223372036854771712\n").unwrap();
        fs::write(cg.join(V1_USAGE), "8388608\n").unwrap();
        fs::write(
            cg.join(V1_OOM_CONTROL),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        if memsw {
            fs::write(cg.join(V1_MEMSW_LIMIT), "9223372036854771712\n").unwrap();
        }
        d
    }

    #[test]
    fn on_cgroup_v1_the_limit_memsw_and_oom_control_are_set_and_written_back() {
        let d = cgroup_v1(true);
        let cg = d.path().join("app");
        let (plan, note) = MemcgPlan::prepare(&cg, 12 << 20, 64 << 20).unwrap();
        let note = note.unwrap();
        assert!(
            note.contains("cgroup v1") && note.contains("/proc/pressure/memory"),
            "{note}"
        );
        let files: Vec<&str> = plan.limits.iter().map(|l| l.file).collect();
        assert_eq!(files, [V1_LIMIT, V1_OOM_CONTROL, V1_MEMSW_LIMIT]);
        let changes = plan.changes();
        assert!(
            changes[0].contains("memory.limit_in_bytes to 12582912"),
            "{}",
            changes[0]
        );
        assert!(
            changes[1].contains("pause instead of being killed"),
            "{}",
            changes[1]
        );
        assert!(changes[2].contains(&format!("to {} bytes", (12 << 20) + (64 << 20))));
        let mut set = plan.apply().unwrap();
        assert_eq!(fs::read_to_string(cg.join(V1_LIMIT)).unwrap(), "12582912");
        assert_eq!(fs::read_to_string(cg.join(V1_OOM_CONTROL)).unwrap(), "1");
        assert_eq!(
            fs::read_to_string(cg.join(V1_MEMSW_LIMIT)).unwrap(),
            ((12u64 << 20) + (64 << 20)).to_string()
        );
        assert_eq!(headroom_bytes(&cg), Some(4 << 20));
        // Written back last first: memory and swap together before memory alone.
        let r = set.restore().unwrap();
        assert_eq!(
            r.restored,
            vec![
                (V1_MEMSW_LIMIT, "9223372036854771712".to_string()),
                (V1_OOM_CONTROL, "0".to_string()),
                (V1_LIMIT, "9223372036854771712".to_string()),
            ]
        );
        assert_eq!(fs::read_to_string(cg.join(V1_OOM_CONTROL)).unwrap(), "0");
    }

    #[test]
    fn on_cgroup_v1_without_swap_accounting_the_swap_is_not_limited_and_said() {
        let d = cgroup_v1(false);
        let cg = d.path().join("app");
        let (plan, note) = MemcgPlan::prepare(&cg, 1 << 20, 1 << 24).unwrap();
        assert_eq!(plan.limits.len(), 2);
        assert!(note.unwrap().contains("swapaccount=1"));
        // An oom_control the kernel did not write as v1 does is refused, not guessed at.
        fs::write(cg.join(V1_OOM_CONTROL), "under_oom 0\n").unwrap();
        let e = refusal(&cg);
        assert!(
            e.contains("oom_kill_disable") && e.contains("cgroup v2"),
            "{e}"
        );
        // The v1 root cgroup cannot be limited either.
        fs::write(d.path().join(V1_LIMIT), "9223372036854771712\n").unwrap();
        let e = MemcgPlan::prepare(d.path(), 1 << 20, 1 << 24)
            .unwrap_err()
            .to_string();
        assert!(e.contains("root cgroup"), "{e}");
    }

    #[test]
    fn a_removed_cgroup_has_nothing_to_restore() {
        let d = cgroup("max", Some("max"));
        let cg = d.path().join("app");
        let mut set = MemcgPlan::prepare(&cg, 1 << 20, 1 << 24)
            .unwrap()
            .0
            .apply()
            .unwrap();
        fs::remove_dir_all(&cg).unwrap();
        let r = set.restore().unwrap();
        assert!(r.cgroup_gone && r.restored.is_empty());
    }

    #[test]
    fn a_failed_write_undoes_the_limits_already_set() {
        let d = cgroup("max", Some("max"));
        let cg = d.path().join("app");
        let (plan, _) = MemcgPlan::prepare(&cg, 1 << 20, 1 << 24).unwrap();
        // memory.swap.max cannot be written (a directory in its place).
        fs::remove_file(cg.join(SWAP_MAX)).unwrap();
        fs::create_dir(cg.join(SWAP_MAX)).unwrap();
        let e = plan.apply().unwrap_err().to_string();
        assert!(e.contains("memory.swap.max"), "{e}");
        assert_eq!(fs::read_to_string(cg.join(HIGH)).unwrap(), "max");
    }
}
