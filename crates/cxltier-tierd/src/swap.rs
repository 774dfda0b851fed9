//! The NVMe tier's backing: a swap area on the named file or block device, set up when tierd
//! starts and undone when it stops.
//!
//! `--nvme PATH[:SIZE]`: a block device is used whole (or its first SIZE bytes) and gets a swap
//! header; a regular file is created (it must not exist: tierd never overwrites a file it did not
//! make), written in full (a swap file may have no holes), given a swap header, and removed again
//! on stop. Either is turned on with `swapon(2)` at a priority above every other swap area, so
//! the targets' pages go there first. [`SwapPlan::changes`] lists every system-wide change before
//! any is made (`--dry-run` prints them and stops there); [`SwapArea`] undoes them, on
//! [`SwapArea::teardown`] or when dropped.

use crate::TierdError;
use cxltier_topo::size::parse_size;
use serde::Serialize;
use std::fs;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The swap header's magic, at the end of the first page.
const MAGIC: &[u8; 10] = b"SWAPSPACE2";
/// The header's version field, the only version Linux reads.
const VERSION: u32 = 1;
/// The byte offset of the version field (after 1024 bytes of boot block).
const INFO_OFFSET: usize = 1024;
/// The smallest swap area worth setting up: the header page and 9 pages.
const MIN_PAGES: u64 = 10;
/// Filesystems whose files Linux can swap to without extra steps. Btrfs needs a NOCOW file
/// (`chattr +C`) and tmpfs, NFS and overlay cannot hold swap at all.
const SWAP_FILE_FS: &[&str] = &["ext2", "ext3", "ext4", "xfs", "f2fs"];

/// `--nvme PATH[:SIZE]` as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeSpec {
    pub path: PathBuf,
    pub size: Option<u64>,
}

impl NvmeSpec {
    /// Parse `PATH[:SIZE]`; the size is the text after the last `:` when it reads as a size and
    /// the whole text is not an existing path (device names may hold colons).
    pub fn parse(text: &str) -> Result<NvmeSpec, TierdError> {
        let bad = |m: String| TierdError::Setting {
            setting: "--nvme",
            message: m,
        };
        if text.is_empty() {
            return Err(bad(
                "empty: give a block device or a new file, e.g. /dev/nvme0n1p3 or /mnt/nvme/tierd.swap:8G".into(),
            ));
        }
        if Path::new(text).exists() {
            return Ok(NvmeSpec {
                path: PathBuf::from(text),
                size: None,
            });
        }
        if let Some((path, size)) = text.rsplit_once(':') {
            if let Ok(bytes) = parse_size(size) {
                if path.is_empty() {
                    return Err(bad(format!("{text:?}: no path before the size")));
                }
                if bytes == 0 {
                    return Err(bad(format!("{text:?}: the size must be above 0")));
                }
                return Ok(NvmeSpec {
                    path: PathBuf::from(path),
                    size: Some(bytes),
                });
            }
        }
        Ok(NvmeSpec {
            path: PathBuf::from(text),
            size: None,
        })
    }
}

/// The first page of a swap area of `pages` pages of `page_size` bytes (Linux's `union
/// swap_header`: boot block, then version, last_page, nr_badpages; the magic at the page's end).
pub fn swap_header(page_size: usize, pages: u64) -> Result<Vec<u8>, TierdError> {
    if pages < MIN_PAGES {
        return Err(TierdError::Setting {
            setting: "--nvme",
            message: format!(
                "{} bytes is too small for a swap area: give at least {} bytes",
                pages * page_size as u64,
                MIN_PAGES * page_size as u64
            ),
        });
    }
    let last_page = u32::try_from(pages - 1).map_err(|_| TierdError::Setting {
        setting: "--nvme",
        message: format!(
            "{pages} pages is more than one swap area holds (2^32); give a smaller SIZE"
        ),
    })?;
    let mut page = vec![0u8; page_size];
    page[INFO_OFFSET..INFO_OFFSET + 4].copy_from_slice(&VERSION.to_ne_bytes());
    page[INFO_OFFSET + 4..INFO_OFFSET + 8].copy_from_slice(&last_page.to_ne_bytes());
    // nr_badpages stays 0; the uuid and label stay blank.
    page[page_size - MAGIC.len()..].copy_from_slice(MAGIC);
    Ok(page)
}

/// One line of `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveSwap {
    pub path: PathBuf,
    pub size_bytes: u64,
    pub used_bytes: u64,
    pub priority: i32,
}

/// Parse `/proc/swaps` (sizes are in KiB; a path with spaces is written with `\040`).
pub fn parse_proc_swaps(text: &str) -> Vec<ActiveSwap> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 5 {
                return None;
            }
            Some(ActiveSwap {
                path: PathBuf::from(f[0].replace("\\040", " ")),
                size_bytes: f[2].parse::<u64>().ok()? * 1024,
                used_bytes: f[3].parse::<u64>().ok()? * 1024,
                priority: f[4].parse().ok()?,
            })
        })
        .collect()
}

/// The swap areas active now.
pub fn active_swaps(proc_root: &Path) -> Result<Vec<ActiveSwap>, TierdError> {
    let path = proc_root.join("swaps");
    let text = fs::read_to_string(&path).map_err(|e| TierdError::io("reading", &path, e))?;
    Ok(parse_proc_swaps(&text))
}

/// The filesystem type holding `path`, from a `/proc/self/mountinfo` text: the mount with the
/// longest mount point that is a prefix of `path` (already canonical).
pub fn fs_type_of(mountinfo: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(dash) = f.iter().position(|&x| x == "-") else {
            continue;
        };
        let (Some(mount), Some(fstype)) = (f.get(4), f.get(dash + 1)) else {
            continue;
        };
        let mount = mount.replace("\\040", " ");
        if path.starts_with(&mount) && best.as_ref().is_none_or(|(len, _)| mount.len() >= *len) {
            best = Some((mount.len(), fstype.to_string()));
        }
    }
    best.map(|(_, t)| t)
}

/// What the backing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackingKind {
    /// A new swap file tierd creates and removes.
    NewFile,
    /// A block device given a swap header.
    BlockDevice,
}

/// The validated plan: what will be written and turned on.
#[derive(Debug, Clone)]
pub struct SwapPlan {
    pub path: PathBuf,
    pub kind: BackingKind,
    pub size_bytes: u64,
    pub priority: u16,
    pub page_size: usize,
}

impl SwapPlan {
    /// Check `spec` against the machine (under `proc_root`) and decide; writes nothing.
    /// The priority is one above every active swap area's, so the targets' pages go here first.
    pub fn prepare(spec: &NvmeSpec, proc_root: &Path) -> Result<SwapPlan, TierdError> {
        let page_size = cxltier_sys::page_size();
        let active = active_swaps(proc_root)?;
        let priority = active
            .iter()
            .map(|s| s.priority)
            .max()
            .map_or(10, |p| (p + 1).clamp(0, 32767)) as u16;
        let setting = |m: String| TierdError::Setting {
            setting: "--nvme",
            message: m,
        };
        match fs::metadata(&spec.path) {
            Ok(meta) if meta.file_type().is_block_device() => {
                let canon = fs::canonicalize(&spec.path)
                    .map_err(|e| TierdError::io("resolving", &spec.path, e))?;
                if active
                    .iter()
                    .any(|s| s.path == canon || s.path == spec.path)
                {
                    return Err(setting(format!(
                        "{} is already in use as swap (see /proc/swaps): `swapoff {}` first, or \
                         name another device",
                        spec.path.display(),
                        spec.path.display()
                    )));
                }
                let mounts = proc_root.join("self/mounts");
                let mounted = fs::read_to_string(&mounts).unwrap_or_default();
                if mounted.lines().any(|l| {
                    l.split_whitespace()
                        .next()
                        .is_some_and(|dev| Path::new(dev) == canon || Path::new(dev) == spec.path)
                }) {
                    return Err(setting(format!(
                        "{} is mounted: tierd writes a swap header over it; unmount it or name \
                         an unused device or partition",
                        spec.path.display()
                    )));
                }
                let mut f = fs::File::open(&spec.path)
                    .map_err(|e| TierdError::io("opening", &spec.path, e))?;
                let device_bytes = f
                    .seek(SeekFrom::End(0))
                    .map_err(|e| TierdError::io("sizing", &spec.path, e))?;
                let size = match spec.size {
                    Some(s) if s > device_bytes => {
                        return Err(setting(format!(
                            "{}: SIZE {s} is larger than the device ({device_bytes} bytes)",
                            spec.path.display()
                        )))
                    }
                    Some(s) => s,
                    None => device_bytes,
                };
                SwapPlan::checked(
                    spec.path.clone(),
                    BackingKind::BlockDevice,
                    size,
                    priority,
                    page_size,
                )
            }
            Ok(meta) if meta.is_file() => Err(setting(format!(
                "{} exists: tierd creates its swap file itself and removes it when it stops, and \
                 never overwrites a file; name a new path (e.g. {}.new:8G) or remove it",
                spec.path.display(),
                spec.path.display()
            ))),
            Ok(_) => Err(setting(format!(
                "{} is neither a block device nor a new file",
                spec.path.display()
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let Some(size) = spec.size else {
                    return Err(setting(format!(
                        "{} does not exist: give the size of the swap file to create, e.g. \
                         --nvme {}:8G",
                        spec.path.display(),
                        spec.path.display()
                    )));
                };
                let parent = match spec.path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                let dir = fs::canonicalize(&parent).map_err(|e| {
                    TierdError::io("resolving the directory of the swap file", &parent, e)
                })?;
                let info = proc_root.join("self/mountinfo");
                let mountinfo =
                    fs::read_to_string(&info).map_err(|e| TierdError::io("reading", &info, e))?;
                let fstype = fs_type_of(&mountinfo, &dir).unwrap_or_else(|| "unknown".into());
                if !SWAP_FILE_FS.contains(&fstype.as_str()) {
                    return Err(TierdError::Unsupported(format!(
                        "--nvme {}: {} is on {fstype}, which cannot hold a swap file here \
                         (supported: {}); put the file on an NVMe filesystem of one of those \
                         types, or give a block device (a partition) instead",
                        spec.path.display(),
                        dir.display(),
                        SWAP_FILE_FS.join(", ")
                    )));
                }
                SwapPlan::checked(
                    dir.join(spec.path.file_name().unwrap_or_default()),
                    BackingKind::NewFile,
                    size,
                    priority,
                    page_size,
                )
            }
            Err(e) => Err(TierdError::io("examining", &spec.path, e)),
        }
    }

    /// The plan for `size` bytes of `path` rounded down to whole pages, refused where a swap
    /// header cannot describe that many pages ([`swap_header`]).
    fn checked(
        path: PathBuf,
        kind: BackingKind,
        size: u64,
        priority: u16,
        page_size: usize,
    ) -> Result<SwapPlan, TierdError> {
        let plan = SwapPlan {
            path,
            kind,
            size_bytes: size / page_size as u64 * page_size as u64,
            priority,
            page_size,
        };
        swap_header(page_size, plan.pages())?;
        Ok(plan)
    }

    fn pages(&self) -> u64 {
        self.size_bytes / self.page_size as u64
    }

    /// Every system-wide change [`SwapPlan::apply`] makes, in words, in order.
    pub fn changes(&self) -> Vec<String> {
        let p = self.path.display();
        let mut out = Vec::new();
        match self.kind {
            BackingKind::NewFile => out.push(format!(
                "create the swap file {p} ({} bytes, written in full) with a swap header",
                self.size_bytes
            )),
            BackingKind::BlockDevice => out.push(format!(
                "write a swap header on the block device {p} ({} bytes used; its contents are \
                 overwritten)",
                self.size_bytes
            )),
        }
        out.push(format!(
            "swapon {p} with priority {} (above any other swap area: the targets' pages go here \
             first)",
            self.priority
        ));
        out
    }

    /// Create/format and turn on the swap area. A failure undoes what was done.
    pub fn apply(self) -> Result<SwapArea, TierdError> {
        let header = swap_header(self.page_size, self.pages())?;
        match self.kind {
            BackingKind::NewFile => {
                if let Err(e) = write_swap_file(&self.path, &header, self.size_bytes) {
                    let _ = fs::remove_file(&self.path);
                    return Err(e);
                }
            }
            BackingKind::BlockDevice => {
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .open(&self.path)
                    .map_err(|e| TierdError::io("opening for writing", &self.path, e))?;
                f.write_all(&header)
                    .and_then(|()| f.sync_all())
                    .map_err(|e| TierdError::io("writing the swap header on", &self.path, e))?;
            }
        }
        if let Err(e) = cxltier_sys::swap::swapon(&self.path, self.priority) {
            if self.kind == BackingKind::NewFile {
                let _ = fs::remove_file(&self.path);
            }
            return Err(e.into());
        }
        Ok(SwapArea {
            plan: self,
            on: true,
        })
    }
}

/// Write the header page, then zeros up to `size` (no holes: swapon refuses files with holes),
/// and flush. A full disk is reported as [`TierdError::NoSpace`].
fn write_swap_file(path: &Path, header: &[u8], size: u64) -> Result<(), TierdError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| TierdError::io("creating", path, e))?;
    use std::os::unix::fs::PermissionsExt;
    // Swapped pages are other processes' memory: readable by root only.
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|e| TierdError::io("restricting the permissions of", path, e))?;
    let to_err = |e: io::Error| {
        if e.raw_os_error() == Some(libc_enospc()) {
            TierdError::NoSpace {
                path: path.to_path_buf(),
                wanted: size,
            }
        } else {
            TierdError::io("writing", path, e)
        }
    };
    f.write_all(header).map_err(to_err)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = size - header.len() as u64;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n]).map_err(to_err)?;
        left -= n as u64;
    }
    f.sync_all().map_err(to_err)
}

/// `ENOSPC`, without a libc dependency here.
fn libc_enospc() -> i32 {
    28
}

/// A swap area tierd turned on. [`SwapArea::teardown`] (or dropping it) turns it off and removes
/// the file tierd created.
#[derive(Debug)]
pub struct SwapArea {
    plan: SwapPlan,
    on: bool,
}

/// What teardown did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teardown {
    pub swapped_off: bool,
    pub removed_file: bool,
}

/// The `swap_teardown` JSON line of docs/tierd.md: what memory mode's teardown did to its area.
#[derive(Debug, Clone, Serialize)]
pub struct TeardownReport<'a> {
    pub path: &'a Path,
    pub removed_file: bool,
    pub swapped_off: bool,
}

impl Teardown {
    /// The `swap_teardown` line for the area at `path`.
    pub fn report<'a>(&self, path: &'a Path) -> TeardownReport<'a> {
        TeardownReport {
            path,
            removed_file: self.removed_file,
            swapped_off: self.swapped_off,
        }
    }
}

impl SwapArea {
    pub fn path(&self) -> &Path {
        &self.plan.path
    }

    pub fn size_bytes(&self) -> u64 {
        self.plan.size_bytes
    }

    pub fn priority(&self) -> u16 {
        self.plan.priority
    }

    pub fn kind(&self) -> BackingKind {
        self.plan.kind
    }

    /// Turn the area off (its pages are read back into memory: the targets keep all their data)
    /// and remove the file tierd made. Runs once; later calls do nothing.
    pub fn teardown(&mut self) -> Result<Teardown, TierdError> {
        if !self.on {
            return Ok(Teardown {
                swapped_off: false,
                removed_file: false,
            });
        }
        cxltier_sys::swap::swapoff(&self.plan.path)?;
        self.on = false;
        let removed_file = if self.plan.kind == BackingKind::NewFile {
            fs::remove_file(&self.plan.path)
                .map_err(|e| TierdError::io("removing the swap file", &self.plan.path, e))?;
            true
        } else {
            false
        };
        Ok(Teardown {
            swapped_off: true,
            removed_file,
        })
    }
}

impl Drop for SwapArea {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_takes_an_optional_size_after_the_last_colon() {
        assert_eq!(
            NvmeSpec::parse("/mnt/n/t.swap:8G").unwrap(),
            NvmeSpec {
                path: "/mnt/n/t.swap".into(),
                size: Some(8 << 30)
            }
        );
        assert_eq!(NvmeSpec::parse("/dev/vda").unwrap().size, None);
        // A colon that is part of an existing name is kept.
        let dir = tempfile::tempdir().unwrap();
        let by_path = dir.path().join("pci-0000:00:04.0");
        fs::write(&by_path, b"").unwrap();
        assert_eq!(
            NvmeSpec::parse(by_path.to_str().unwrap()).unwrap(),
            NvmeSpec {
                path: by_path.clone(),
                size: None
            }
        );
        assert!(NvmeSpec::parse("").is_err());
        assert!(NvmeSpec::parse(":8G").is_err());
        // A size that is not one leaves the text a path: a later check says it does not exist.
        assert_eq!(NvmeSpec::parse("/x:0").unwrap().size, None);
    }

    #[test]
    fn the_header_is_what_linux_reads() {
        let h = swap_header(4096, 256).unwrap();
        assert_eq!(h.len(), 4096);
        assert_eq!(&h[4086..], b"SWAPSPACE2");
        assert_eq!(u32::from_ne_bytes(h[1024..1028].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(h[1028..1032].try_into().unwrap()), 255);
        assert_eq!(u32::from_ne_bytes(h[1032..1036].try_into().unwrap()), 0);
        assert!(h[..1024].iter().all(|&b| b == 0));
        let small = swap_header(4096, 3).unwrap_err().to_string();
        assert!(
            small.contains("too small") && small.contains("40960"),
            "{small}"
        );
    }

    #[test]
    fn the_header_matches_mkswap_where_it_is_installed() {
        let mkswap = ["/usr/sbin/mkswap", "/sbin/mkswap"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        let Some(mkswap) = mkswap else { return };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s");
        fs::write(&file, vec![0u8; 64 * 4096]).unwrap();
        let out = std::process::Command::new(mkswap)
            .args(["-p", "4096", "-U", "clear", "-L", ""])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let theirs = fs::read(&file).unwrap();
        let ours = swap_header(4096, 64).unwrap();
        // Version, last_page, nr_badpages and the magic agree (mkswap may set a uuid).
        assert_eq!(theirs[1024..1036], ours[1024..1036]);
        assert_eq!(theirs[4086..4096], ours[4086..4096]);
    }

    #[test]
    fn proc_swaps_is_read_in_bytes() {
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                    /dev/vda                                partition\t1048572\t\t2048\t\t10\n\
                    /mnt/my\\040swap file\t65532\t0\t-2\n";
        let s = parse_proc_swaps(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].path, PathBuf::from("/dev/vda"));
        assert_eq!(s[0].size_bytes, 1048572 * 1024);
        assert_eq!(s[0].used_bytes, 2048 * 1024);
        assert_eq!(s[0].priority, 10);
        assert_eq!(s[1].path, PathBuf::from("/mnt/my swap"));
        assert_eq!(s[1].priority, -2);
    }

    #[test]
    fn the_filesystem_is_the_longest_mount_above_the_path() {
        let info = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    30 22 0:25 / /tmp rw shared:5 - tmpfs tmpfs rw\n\
                    31 22 259:1 / /mnt/nvme rw - xfs /dev/nvme0n1p1 rw\n\
                    32 22 0:26 / /mnt/tmpx rw - tmpfs tmpfs rw\n";
        for (path, fs) in [
            ("/tmp/x", "tmpfs"),
            ("/mnt/nvme/a", "xfs"),
            ("/var/lib", "ext4"),
            // /mnt/tmpx is not a parent of /mnt/tmp.
            ("/mnt/tmp", "ext4"),
        ] {
            assert_eq!(
                fs_type_of(info, Path::new(path)).as_deref(),
                Some(fs),
                "{path}"
            );
        }
    }

    /// A scratch /proc with the given swaps and a mountinfo naming `fstype` at `/`.
    fn proc_tree(swaps: &str, fstype: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("swaps"), swaps).unwrap();
        fs::create_dir_all(d.path().join("self")).unwrap();
        fs::write(
            d.path().join("self/mountinfo"),
            format!("22 1 8:1 / / rw - {fstype} /dev/sda1 rw\n"),
        )
        .unwrap();
        fs::write(d.path().join("self/mounts"), "").unwrap();
        d
    }

    const NO_SWAPS: &str = "Filename\tType\tSize\tUsed\tPriority\n";

    #[test]
    fn a_new_file_on_a_swap_capable_fs_is_planned_above_other_areas() {
        let proc = proc_tree(
            "Filename\tType\tSize\tUsed\tPriority\n/dev/sdb partition 100 0 5\n",
            "ext4",
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.swap");
        let spec = NvmeSpec::parse(&format!("{}:1M", path.display())).unwrap();
        let plan = SwapPlan::prepare(&spec, proc.path()).unwrap();
        assert_eq!(plan.kind, BackingKind::NewFile);
        assert_eq!(plan.size_bytes, 1 << 20);
        assert_eq!(plan.priority, 6);
        let changes = plan.changes();
        assert!(
            changes[0].starts_with("create the swap file"),
            "{changes:?}"
        );
        assert!(changes[1].contains("priority 6"), "{changes:?}");
        // Nothing was written.
        assert!(!path.exists());
    }

    #[test]
    fn bad_backings_are_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let tmpfs = proc_tree(NO_SWAPS, "tmpfs");
        let new = dir.path().join("t.swap");
        let e = SwapPlan::prepare(
            &NvmeSpec::parse(&format!("{}:1M", new.display())).unwrap(),
            tmpfs.path(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("on tmpfs") && e.to_string().contains("block device"),
            "{e}"
        );
        assert_eq!(crate::Classify::class(&e), crate::Class::Unsupported);

        let ext4 = proc_tree(NO_SWAPS, "ext4");
        let e = SwapPlan::prepare(
            &NvmeSpec::parse(new.to_str().unwrap()).unwrap(),
            ext4.path(),
        )
        .unwrap_err();
        assert!(e.to_string().contains(":8G"), "{e}");

        fs::write(&new, b"data").unwrap();
        let e = SwapPlan::prepare(
            &NvmeSpec::parse(&format!("{}:1M", new.display())).unwrap(),
            ext4.path(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("never overwrites"), "{e}");
        assert_eq!(fs::read(&new).unwrap(), b"data");

        let e = SwapPlan::prepare(
            &NvmeSpec::parse(&format!("{}/t:8K", new.display())).unwrap(),
            ext4.path(),
        );
        assert!(e.is_err());
    }
}
