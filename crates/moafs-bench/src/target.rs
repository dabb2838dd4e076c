//! Where a workload runs: the moafs engine in-process (on a memory device: no FUSE, no kernel),
//! or any mounted directory (moafs over FUSE, ext4, …) through the standard library.
//!
//! Workloads address files by relative paths (`"d3/d17/f345"`) and work through open handles,
//! as the tools they model do (open, read/write at offsets or append, fsync, close). A target is
//! shared by a workload's threads (Filebench runs many).

use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::fs::{Caller, MountOptions, SetAttr, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::collections::HashMap;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// How [`Target::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Create the file, or truncate it when it exists; writable.
    Create,
    /// An existing file, every write goes to its end (`O_APPEND`).
    Append,
    /// An existing file, read only.
    Read,
    /// An existing file, read and write at offsets.
    ReadWrite,
}

/// An open file of a target (close it with [`Target::close`]).
#[derive(Debug)]
pub struct Fh(Inner);

#[derive(Debug)]
enum Inner {
    File { file: std::fs::File, append: bool },
    Engine { ino: u64, append: bool },
}

/// The file operations a workload needs. Errors are `io::Error`s (engine errors map to their
/// errno). Every method takes `&self`: a target is shared by a workload's threads.
pub trait Target: Send + Sync {
    /// A short name for reports.
    fn name(&self) -> String;
    fn mkdir(&self, path: &str) -> io::Result<()>;
    fn rmdir(&self, path: &str) -> io::Result<()>;
    fn remove(&self, path: &str) -> io::Result<()>;
    /// The size of `path` (`stat`).
    fn stat(&self, path: &str) -> io::Result<u64>;
    fn open(&self, path: &str, mode: Mode) -> io::Result<Fh>;
    /// Writes all of `data` at `off` (at the end of the file for a handle opened to append).
    fn write_at(&self, fh: &Fh, off: u64, data: &[u8]) -> io::Result<()>;
    /// Reads at `off` into `buf`; returns the bytes read (0 at the end of the file).
    fn read_at(&self, fh: &Fh, off: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Makes the file durable (`fsync`).
    fn fsync(&self, fh: &Fh) -> io::Result<()>;
    fn close(&self, fh: Fh) -> io::Result<()>;
    /// Writes everything back and flushes the device (`syncfs`).
    fn sync(&self) -> io::Result<()>;
    /// Drops the file system's own cache, beyond the kernel's (scenario A): moafs's block
    /// cache; nothing for other file systems.
    fn drop_own_cache(&self) -> io::Result<()> {
        Ok(())
    }
    /// The directory the target lives in, for workloads that need a real path (SQLite);
    /// `None` for the engine.
    fn dir(&self) -> Option<&Path> {
        None
    }
    /// The FUSE daemon serving the target, if any (its CPU time and I/O are measured).
    fn daemon_pid(&self) -> Option<i32> {
        None
    }
    /// Engine counters: the engine's, or a managed moafs's once it is taken down.
    fn counters(&self) -> Option<serde_json::Value> {
        None
    }
    /// Ends the run: a managed target is unmounted (so everything is written back) and taken
    /// down, and reports what its device saw (a managed target: its loop device).
    fn finish(&mut self) -> io::Result<Option<crate::managed::DeviceIo>> {
        Ok(None)
    }
    /// A managed moafs's own device counters (its `stats=`), once it is taken down.
    fn engine_device(&self) -> Option<crate::managed::DeviceIo> {
        None
    }
    /// The options the target is mounted with, read while it is mounted (before `finish`).
    fn mount_options(&self) -> Option<String> {
        None
    }
}

/// Creates (or truncates) `path` and writes `data` in `block`-sized writes.
pub fn create_file(t: &dyn Target, path: &str, data: &[u8], block: usize) -> io::Result<()> {
    let fh = t.open(path, Mode::Create)?;
    let res = write_blocks(t, &fh, 0, data, block);
    let closed = t.close(fh);
    res.and(closed)
}

/// Writes `data` at `off` in `block`-sized writes.
pub fn write_blocks(
    t: &dyn Target,
    fh: &Fh,
    off: u64,
    data: &[u8],
    block: usize,
) -> io::Result<()> {
    let mut at = off;
    for chunk in data.chunks(block.max(1)) {
        t.write_at(fh, at, chunk)?;
        at += chunk.len() as u64;
    }
    Ok(())
}

/// Creates `path` of `size` bytes: `pattern` over and over, one write of `pattern.len()`
/// bytes at a time (the last one shorter). Returns the bytes written.
pub fn create_repeated(t: &dyn Target, path: &str, pattern: &[u8], size: u64) -> io::Result<u64> {
    let fh = t.open(path, Mode::Create)?;
    let block = pattern.len().max(1) as u64;
    let mut off = 0;
    let mut res = Ok(());
    while off < size && res.is_ok() {
        let len = (size - off).min(block) as usize;
        res = t.write_at(&fh, off, &pattern[..len]);
        off += len as u64;
    }
    let closed = t.close(fh);
    res.and(closed).map(|_| off)
}

/// Appends `data` to an existing file in `block`-sized writes.
pub fn append_file(t: &dyn Target, path: &str, data: &[u8], block: usize) -> io::Result<()> {
    let fh = t.open(path, Mode::Append)?;
    let res = write_blocks(t, &fh, 0, data, block);
    let closed = t.close(fh);
    res.and(closed)
}

/// Reads an open file from its start to its end in `block`-sized reads; returns the bytes.
pub fn read_whole(t: &dyn Target, fh: &Fh, buf: &mut [u8]) -> io::Result<u64> {
    let mut off = 0u64;
    loop {
        match t.read_at(fh, off, buf)? {
            0 => return Ok(off),
            n => off += n as u64,
        }
    }
}

/// Opens `path`, reads it whole in `block`-sized reads and closes it; returns the bytes.
pub fn read_file(t: &dyn Target, path: &str, block: usize) -> io::Result<u64> {
    let fh = t.open(path, Mode::Read)?;
    let mut buf = vec![0u8; block.max(1)];
    let res = read_whole(t, &fh, &mut buf);
    let closed = t.close(fh);
    let n = res?;
    closed.map(|()| n)
}

const ROOT: Caller = Caller::ROOT;

fn engine_err(e: moafs_core::FsError) -> io::Error {
    io::Error::from_raw_os_error(e.to_errno())
}

fn dev_err(e: moafs_core::device::DeviceError) -> io::Error {
    io::Error::other(e.to_string())
}

/// Numbers the image files of `engine:file` targets within this process.
static NEXT_IMAGE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The device under an in-process engine target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EngineDevice {
    /// DRAM (a memory device).
    Memory,
    /// An image file (made fresh in the given directory, removed afterwards).
    File,
    /// A memory device charged as the paper 000 disk (7200 RPM, 9 ms average seek): the
    /// modelled time is in the run's device counters.
    Hdd,
    /// A memory device charged as a SATA SSD at queue depth 1.
    Ssd,
    /// The same, with the modelled time slept while the request holds the device (so
    /// concurrent callers queue as on the real disk and wall time feels flush latency).
    SsdLive,
}

impl EngineDevice {
    pub fn parse(s: &str) -> Option<EngineDevice> {
        Some(match s {
            "engine" | "engine:mem" => EngineDevice::Memory,
            "engine:file" => EngineDevice::File,
            "engine:hdd" => EngineDevice::Hdd,
            "engine:ssd" => EngineDevice::Ssd,
            "engine:ssd-live" => EngineDevice::SsdLive,
            _ => return None,
        })
    }
}

/// The engine in-process on a device (mkfs defaults).
pub struct EngineTarget {
    fs: Fs,
    /// Directory path → inode, for the directories made through this target.
    dirs: RwLock<HashMap<String, u64>>,
    /// Appends look up the size and write there: one at a time, as `O_APPEND` is atomic.
    append: Mutex<()>,
    label: String,
    /// Device counters after mkfs and mount: the run's I/O is what comes after.
    start: moafs_core::device::DeviceCounters,
    /// The image file of an `EngineDevice::File` target, removed on drop.
    image: Option<PathBuf>,
}

impl Drop for EngineTarget {
    fn drop(&mut self) {
        if let Some(img) = &self.image {
            let _ = self.fs.unmount();
            let _ = std::fs::remove_file(img);
        }
    }
}

impl EngineTarget {
    pub fn in_memory(size: u64) -> io::Result<EngineTarget> {
        Self::on(EngineDevice::Memory, size, Path::new("."))
    }

    /// The engine on a fresh device of `size` bytes; an image file is made in `backing`.
    pub fn on(kind: EngineDevice, size: u64, backing: &Path) -> io::Result<EngineTarget> {
        use moafs_core::device::{
            FileDevice, FileDeviceOptions, HddModel, ModelDevice, ModelKind, SsdModel,
        };
        let mut image = None;
        let dev: Arc<dyn BlockDevice> = match kind {
            EngineDevice::Memory => Arc::new(MemDevice::new(size)),
            EngineDevice::File => {
                let path = backing.join(format!(
                    "moafs-bench-engine-{}-{}.img",
                    std::process::id(),
                    NEXT_IMAGE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                ));
                FileDevice::create(&path, size).map_err(dev_err)?;
                image = Some(path.clone());
                match FileDevice::open(&path, FileDeviceOptions::default()) {
                    Ok(d) => Arc::new(d),
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        return Err(dev_err(e));
                    }
                }
            }
            EngineDevice::Hdd | EngineDevice::Ssd | EngineDevice::SsdLive => {
                let model = if kind == EngineDevice::Hdd {
                    ModelKind::Hdd(HddModel::paper())
                } else {
                    ModelKind::Ssd(SsdModel::default())
                };
                Arc::new(
                    ModelDevice::new(Arc::new(MemDevice::new(size)), model)
                        .with_sleep(kind == EngineDevice::SsdLive),
                )
            }
        };
        let made = mkfs(dev.as_ref(), &MkfsOptions::default())
            .map_err(engine_err)
            .and_then(|_| Fs::mount(dev, MountOptions::default()).map_err(engine_err));
        let fs = match made {
            Ok(fs) => fs,
            Err(e) => {
                if let Some(p) = &image {
                    let _ = std::fs::remove_file(p);
                }
                return Err(e);
            }
        };
        let what = match kind {
            EngineDevice::Memory => "mem",
            EngineDevice::File => "file",
            EngineDevice::Hdd => "hdd",
            EngineDevice::Ssd => "ssd",
            EngineDevice::SsdLive => "ssd-live",
        };
        let mut t = EngineTarget::from_fs(fs, format!("engine:{what}:{}MiB", size >> 20));
        t.image = image;
        Ok(t)
    }

    /// A target over an engine already mounted (any device, any options); paths start at
    /// its root, and directories already on it are not known to the target.
    pub fn from_fs(fs: Fs, label: String) -> EngineTarget {
        let start = fs.device_counters();
        EngineTarget {
            fs,
            dirs: RwLock::new(HashMap::new()),
            append: Mutex::new(()),
            label,
            start,
            image: None,
        }
    }

    /// (parent inode, file name) of a path whose directories were made through this target.
    fn split<'a>(&self, path: &'a str) -> io::Result<(u64, &'a str)> {
        match path.rsplit_once('/') {
            None => Ok((ROOT_INO, path)),
            Some((dir, name)) => match self.dirs.read().unwrap_or_else(|e| e.into_inner()).get(dir)
            {
                Some(&ino) => Ok((ino, name)),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no directory {dir}"),
                )),
            },
        }
    }

    /// The inode of `path`, without keeping the lookup reference the engine counts.
    fn lookup(&self, path: &str) -> io::Result<moafs_core::fs::Attr> {
        let (parent, name) = self.split(path)?;
        let a = self
            .fs
            .lookup(parent, name.as_bytes())
            .map_err(engine_err)?;
        self.fs.forget(a.ino, 1);
        Ok(a)
    }

    pub fn unmount(self) -> io::Result<()> {
        self.fs.unmount().map_err(engine_err)
    }

    /// The engine (for tests and experiments that look inside).
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    /// Fails once `moafs bench` was interrupted (Ctrl-C), so the run unwinds.
    fn check() -> io::Result<()> {
        if crate::interrupted() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
        }
        Ok(())
    }

    fn ino(fh: &Fh) -> io::Result<(u64, bool)> {
        match fh.0 {
            Inner::Engine { ino, append } => Ok((ino, append)),
            Inner::File { .. } => Err(io::Error::other("a file handle of another target")),
        }
    }
}

impl Target for EngineTarget {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn mkdir(&self, path: &str) -> io::Result<()> {
        Self::check()?;
        let (parent, name) = self.split(path)?;
        let a = self
            .fs
            .mkdir(parent, name.as_bytes(), 0o755, ROOT)
            .map_err(engine_err)?;
        self.fs.forget(a.ino, 1);
        self.dirs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_string(), a.ino);
        Ok(())
    }

    fn rmdir(&self, path: &str) -> io::Result<()> {
        let (parent, name) = self.split(path)?;
        self.fs.rmdir(parent, name.as_bytes()).map_err(engine_err)?;
        self.dirs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(path);
        Ok(())
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        Self::check()?;
        let (parent, name) = self.split(path)?;
        self.fs.unlink(parent, name.as_bytes()).map_err(engine_err)
    }

    fn stat(&self, path: &str) -> io::Result<u64> {
        Ok(self.lookup(path)?.size)
    }

    fn open(&self, path: &str, mode: Mode) -> io::Result<Fh> {
        Self::check()?;
        let ino = if mode == Mode::Create {
            let (parent, name) = self.split(path)?;
            match self.fs.create(parent, name.as_bytes(), 0o644, ROOT) {
                Ok(a) => {
                    self.fs.open(a.ino).map_err(engine_err)?;
                    self.fs.forget(a.ino, 1);
                    a.ino
                }
                Err(moafs_core::FsError::Exists) => {
                    let a = self.lookup(path)?;
                    self.fs.open(a.ino).map_err(engine_err)?;
                    let trunc = SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    };
                    self.fs.setattr(a.ino, &trunc).map_err(engine_err)?;
                    a.ino
                }
                Err(e) => return Err(engine_err(e)),
            }
        } else {
            let (parent, name) = self.split(path)?;
            let a = self
                .fs
                .lookup(parent, name.as_bytes())
                .map_err(engine_err)?;
            let opened = self.fs.open(a.ino).map_err(engine_err);
            self.fs.forget(a.ino, 1);
            opened?;
            a.ino
        };
        Ok(Fh(Inner::Engine {
            ino,
            append: mode == Mode::Append,
        }))
    }

    fn write_at(&self, fh: &Fh, off: u64, data: &[u8]) -> io::Result<()> {
        Self::check()?;
        let (ino, append) = Self::ino(fh)?;
        let _one = append.then(|| self.append.lock().unwrap_or_else(|e| e.into_inner()));
        let mut at = if append {
            self.fs.getattr(ino).map_err(engine_err)?.size
        } else {
            off
        };
        let mut rest = data;
        while !rest.is_empty() {
            let n = self.fs.write(ino, at, rest).map_err(engine_err)? as usize;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "engine wrote nothing",
                ));
            }
            at += n as u64;
            rest = &rest[n..];
        }
        Ok(())
    }

    fn read_at(&self, fh: &Fh, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        Self::check()?;
        let (ino, _) = Self::ino(fh)?;
        self.fs.read_into(ino, off, buf).map_err(engine_err)
    }

    fn fsync(&self, fh: &Fh) -> io::Result<()> {
        let (ino, _) = Self::ino(fh)?;
        self.fs.fsync(ino, false).map_err(engine_err)
    }

    fn close(&self, fh: Fh) -> io::Result<()> {
        let (ino, _) = Self::ino(&fh)?;
        self.fs.release(ino).map_err(engine_err)
    }

    fn sync(&self) -> io::Result<()> {
        self.fs.sync().map_err(engine_err)
    }

    fn drop_own_cache(&self) -> io::Result<()> {
        self.fs.drop_caches().map(drop).map_err(engine_err)
    }

    fn counters(&self) -> Option<serde_json::Value> {
        let mut e = serde_json::to_value(self.fs.counters()).ok()?;
        e["fsync_phases"] = serde_json::to_value(self.fs.fsync_report()).ok()?;
        Some(e)
    }

    /// Unmounts (writing everything back) and reports the memory device's I/O of the run.
    fn finish(&mut self) -> io::Result<Option<crate::managed::DeviceIo>> {
        self.fs.unmount().map_err(engine_err)?;
        let (end, s) = (self.fs.device_counters(), &self.start);
        Ok(Some(crate::managed::DeviceIo {
            source: "engine",
            reads: end.reads - s.reads,
            read_bytes: end.read_bytes - s.read_bytes,
            writes: end.writes - s.writes,
            write_bytes: end.write_bytes - s.write_bytes,
            flushes: Some(end.flushes - s.flushes),
            modelled_secs: (end.modelled_ns > 0)
                .then(|| (end.modelled_ns - s.modelled_ns) as f64 / 1e9),
            seek_distance_bytes: (end.seek_distance_bytes > 0)
                .then(|| end.seek_distance_bytes - s.seek_distance_bytes),
        }))
    }

    /// Not mounted in the kernel: the engine's own mount options.
    fn mount_options(&self) -> Option<String> {
        Some(format!("in-process {:?}", self.fs.options()))
    }
}

/// Any directory (a mount point, or a plain directory) through the standard library: one
/// system call per operation, as the tools do (unbuffered `read`/`write` calls).
pub struct DirTarget {
    root: PathBuf,
    /// A scratch directory this target made: removed (with what is left in it) on drop, also
    /// when the run failed.
    scratch: bool,
    /// The managed file system the directory lives on; dropped (taken down) after the
    /// directory target.
    managed: Option<crate::managed::Managed>,
    /// moafs's engine counters, once a managed moafs has been taken down.
    engine: Option<serde_json::Value>,
    /// moafs's own device counters, once a managed moafs has been taken down.
    engine_device: Option<crate::managed::DeviceIo>,
}

impl DirTarget {
    /// `root` must exist and be a directory.
    pub fn new(root: &Path) -> io::Result<DirTarget> {
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(DirTarget {
            root: root.to_path_buf(),
            scratch: false,
            managed: None,
            engine: None,
            engine_device: None,
        })
    }

    /// The root of a managed file system; taking the target down takes the file system down.
    pub fn managed(m: crate::managed::Managed) -> DirTarget {
        DirTarget {
            root: m.mount_point().to_path_buf(),
            scratch: false,
            managed: Some(m),
            engine: None,
            engine_device: None,
        }
    }

    fn check(&self) -> io::Result<()> {
        if crate::interrupted() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
        }
        Ok(())
    }

    /// A fresh subdirectory `name` of `parent` (which must exist), removed on drop.
    pub fn scratch(parent: &Path, name: &str) -> io::Result<DirTarget> {
        DirTarget::new(parent)?;
        let root = parent.join(name);
        std::fs::create_dir(&root)?;
        Ok(DirTarget {
            root,
            scratch: true,
            managed: None,
            engine: None,
            engine_device: None,
        })
    }

    fn file(fh: &Fh) -> io::Result<(&std::fs::File, bool)> {
        match &fh.0 {
            Inner::File { file, append } => Ok((file, *append)),
            Inner::Engine { .. } => Err(io::Error::other("a file handle of another target")),
        }
    }
}

impl Drop for DirTarget {
    fn drop(&mut self) {
        if self.scratch {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

impl Target for DirTarget {
    fn name(&self) -> String {
        if let Some(m) = &self.managed {
            return m.label().to_string();
        }
        let shown = if self.scratch {
            self.root.parent().unwrap_or(&self.root)
        } else {
            &self.root
        };
        format!("dir:{}", shown.display())
    }

    fn mkdir(&self, path: &str) -> io::Result<()> {
        self.check()?;
        std::fs::create_dir(self.root.join(path))
    }

    fn rmdir(&self, path: &str) -> io::Result<()> {
        self.check()?;
        std::fs::remove_dir(self.root.join(path))
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        self.check()?;
        std::fs::remove_file(self.root.join(path))
    }

    fn stat(&self, path: &str) -> io::Result<u64> {
        self.check()?;
        Ok(std::fs::metadata(self.root.join(path))?.len())
    }

    fn open(&self, path: &str, mode: Mode) -> io::Result<Fh> {
        self.check()?;
        let mut o = std::fs::OpenOptions::new();
        match mode {
            Mode::Create => o.write(true).create(true).truncate(true),
            Mode::Append => o.append(true),
            Mode::Read => o.read(true),
            Mode::ReadWrite => o.read(true).write(true),
        };
        Ok(Fh(Inner::File {
            file: o.open(self.root.join(path))?,
            append: mode == Mode::Append,
        }))
    }

    fn write_at(&self, fh: &Fh, off: u64, data: &[u8]) -> io::Result<()> {
        match Self::file(fh)? {
            (mut f, true) => f.write_all(data),
            (f, false) => f.write_all_at(data, off),
        }
    }

    fn read_at(&self, fh: &Fh, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        Self::file(fh)?.0.read_at(buf, off)
    }

    fn fsync(&self, fh: &Fh) -> io::Result<()> {
        Self::file(fh)?.0.sync_all()
    }

    fn close(&self, fh: Fh) -> io::Result<()> {
        drop(fh);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.check()?;
        let root = std::fs::File::open(&self.root)?;
        nix::unistd::syncfs(std::os::fd::AsRawFd::as_raw_fd(&root)).map_err(io::Error::from)
    }

    fn daemon_pid(&self) -> Option<i32> {
        self.managed
            .as_ref()
            .and_then(crate::managed::Managed::daemon_pid)
    }

    fn drop_own_cache(&self) -> io::Result<()> {
        match &self.managed {
            Some(m) if m.kind() == crate::managed::Kind::Moafs => {
                // moafs's adapter answers this name on its root (DROP_CACHES_XATTR)
                xattr::set(&self.root, "trusted.moafs.drop_caches", b"1")
            }
            _ => Ok(()),
        }
    }

    fn dir(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn counters(&self) -> Option<serde_json::Value> {
        self.engine.clone()
    }

    fn engine_device(&self) -> Option<crate::managed::DeviceIo> {
        self.engine_device
    }

    fn finish(&mut self) -> io::Result<Option<crate::managed::DeviceIo>> {
        match self.managed.take() {
            Some(m) => {
                let f = m.finish()?;
                self.engine = f.engine;
                self.engine_device = f.engine_device;
                Ok(f.device)
            }
            None => Ok(None),
        }
    }

    /// The /proc/mounts entry of the file system holding the directory: `TYPE SOURCE
    /// OPTIONS` (a managed target: its own mount).
    fn mount_options(&self) -> Option<String> {
        crate::env::mount_of(&self.root)
            .map(|m| format!("{} {} {}", m.fs_type, m.source, m.options))
    }
}
