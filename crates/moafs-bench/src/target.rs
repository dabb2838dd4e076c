//! Where a workload runs: the moafs engine in-process (on a memory device: no FUSE, no kernel),
//! or any mounted directory (moafs over FUSE, ext4, …) through the standard library.
//!
//! Workloads address files by relative paths of at most one directory level (`"s12/f345"`),
//! which both kinds resolve their own way.

use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::fs::{Caller, MountOptions, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file operations a workload needs. Errors are `io::Error`s (engine errors map to their
/// errno).
pub trait Target {
    /// A short name for reports.
    fn name(&self) -> String;
    fn mkdir(&mut self, path: &str) -> io::Result<()>;
    fn rmdir(&mut self, path: &str) -> io::Result<()>;
    /// Creates (or truncates) `path` and writes `data` in `block`-sized writes.
    fn create(&mut self, path: &str, data: &[u8], block: usize) -> io::Result<()>;
    /// Appends `data` to an existing file in `block`-sized writes.
    fn append(&mut self, path: &str, data: &[u8], block: usize) -> io::Result<()>;
    /// Reads the whole file in `block`-sized reads; returns the bytes read.
    fn read_all(&mut self, path: &str, block: usize) -> io::Result<u64>;
    fn remove(&mut self, path: &str) -> io::Result<()>;
    /// Engine counters, when the target is the engine.
    fn counters(&self) -> Option<serde_json::Value> {
        None
    }
    /// Ends the run: a managed target is unmounted (so everything is written back) and taken
    /// down, and reports what its device saw.
    fn finish(&mut self) -> io::Result<Option<crate::managed::DeviceIo>> {
        Ok(None)
    }
}

const ROOT: Caller = Caller { uid: 0, gid: 0 };

fn engine_err(e: moafs_core::FsError) -> io::Error {
    io::Error::from_raw_os_error(e.to_errno())
}

/// The engine in-process on a memory device of the given size (mkfs defaults).
pub struct EngineTarget {
    fs: Fs,
    dirs: HashMap<String, u64>,
    size: u64,
    /// Device counters after mkfs and mount: the run's I/O is what comes after.
    start: moafs_core::device::DeviceCounters,
}

impl EngineTarget {
    pub fn in_memory(size: u64) -> io::Result<EngineTarget> {
        let dev = Arc::new(MemDevice::new(size));
        mkfs(dev.as_ref(), &MkfsOptions::default()).map_err(engine_err)?;
        let fs =
            Fs::mount(dev as Arc<dyn BlockDevice>, MountOptions::default()).map_err(engine_err)?;
        let start = fs.device_counters();
        Ok(EngineTarget {
            fs,
            dirs: HashMap::new(),
            size,
            start,
        })
    }

    /// (parent inode, file name) of a path with at most one directory level.
    fn split<'a>(&self, path: &'a str) -> io::Result<(u64, &'a str)> {
        match path.split_once('/') {
            None => Ok((ROOT_INO, path)),
            Some((dir, name)) => match self.dirs.get(dir) {
                Some(&ino) => Ok((ino, name)),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no directory {dir}"),
                )),
            },
        }
    }

    fn write_blocks(&self, ino: u64, mut off: u64, data: &[u8], block: usize) -> io::Result<()> {
        for chunk in data.chunks(block.max(1)) {
            let n = self.fs.write(ino, off, chunk).map_err(engine_err)?;
            off += u64::from(n);
        }
        Ok(())
    }

    pub fn unmount(self) -> io::Result<()> {
        self.fs.unmount().map_err(engine_err)
    }
}

impl Target for EngineTarget {
    fn name(&self) -> String {
        format!("engine:mem:{}MiB", self.size >> 20)
    }

    fn mkdir(&mut self, path: &str) -> io::Result<()> {
        let a = self
            .fs
            .mkdir(ROOT_INO, path.as_bytes(), 0o755, ROOT)
            .map_err(engine_err)?;
        self.dirs.insert(path.to_string(), a.ino);
        Ok(())
    }

    fn rmdir(&mut self, path: &str) -> io::Result<()> {
        self.fs
            .rmdir(ROOT_INO, path.as_bytes())
            .map_err(engine_err)?;
        self.dirs.remove(path);
        Ok(())
    }

    fn create(&mut self, path: &str, data: &[u8], block: usize) -> io::Result<()> {
        let (parent, name) = self.split(path)?;
        let a = self
            .fs
            .create(parent, name.as_bytes(), 0o644, ROOT)
            .map_err(engine_err)?;
        self.write_blocks(a.ino, 0, data, block)
    }

    fn append(&mut self, path: &str, data: &[u8], block: usize) -> io::Result<()> {
        let (parent, name) = self.split(path)?;
        let a = self
            .fs
            .lookup(parent, name.as_bytes())
            .map_err(engine_err)?;
        self.write_blocks(a.ino, a.size, data, block)
    }

    fn read_all(&mut self, path: &str, block: usize) -> io::Result<u64> {
        let (parent, name) = self.split(path)?;
        let a = self
            .fs
            .lookup(parent, name.as_bytes())
            .map_err(engine_err)?;
        let block = u32::try_from(block.max(1)).unwrap_or(u32::MAX);
        let mut off = 0u64;
        loop {
            let got = self.fs.read(a.ino, off, block).map_err(engine_err)?;
            if got.is_empty() {
                return Ok(off);
            }
            off += got.len() as u64;
        }
    }

    fn remove(&mut self, path: &str) -> io::Result<()> {
        let (parent, name) = self.split(path)?;
        self.fs.unlink(parent, name.as_bytes()).map_err(engine_err)
    }

    fn counters(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self.fs.counters()).ok()
    }

    /// Unmounts (writing everything back) and reports the memory device's I/O of the run.
    fn finish(&mut self) -> io::Result<Option<crate::managed::DeviceIo>> {
        self.fs.unmount().map_err(engine_err)?;
        let (end, s) = (self.fs.device_counters(), &self.start);
        Ok(Some(crate::managed::DeviceIo {
            reads: end.reads - s.reads,
            read_bytes: end.read_bytes - s.read_bytes,
            writes: end.writes - s.writes,
            write_bytes: end.write_bytes - s.write_bytes,
            flushes: Some(end.flushes - s.flushes),
        }))
    }
}

/// Any directory (a mount point, or a plain directory) through the standard library, one
/// `open`/`close` per operation as the tools do (unbuffered `write`/`read` calls).
pub struct DirTarget {
    root: PathBuf,
    /// A scratch directory this target made: removed (with what is left in it) on drop, also
    /// when the run failed.
    scratch: bool,
    /// The managed file system the directory lives on; dropped (taken down) after the
    /// directory target.
    managed: Option<crate::managed::Managed>,
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
        })
    }

    /// The root of a managed file system; taking the target down takes the file system down.
    pub fn managed(m: crate::managed::Managed) -> DirTarget {
        DirTarget {
            root: m.mount_point().to_path_buf(),
            scratch: false,
            managed: Some(m),
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
        })
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
            return m.kind().name().to_string();
        }
        let shown = if self.scratch {
            self.root.parent().unwrap_or(&self.root)
        } else {
            &self.root
        };
        format!("dir:{}", shown.display())
    }

    fn mkdir(&mut self, path: &str) -> io::Result<()> {
        self.check()?;
        std::fs::create_dir(self.root.join(path))
    }

    fn rmdir(&mut self, path: &str) -> io::Result<()> {
        self.check()?;
        std::fs::remove_dir(self.root.join(path))
    }

    fn create(&mut self, path: &str, data: &[u8], block: usize) -> io::Result<()> {
        self.check()?;
        let mut f = std::fs::File::create(self.root.join(path))?;
        for chunk in data.chunks(block.max(1)) {
            f.write_all(chunk)?;
        }
        Ok(())
    }

    fn append(&mut self, path: &str, data: &[u8], block: usize) -> io::Result<()> {
        self.check()?;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.root.join(path))?;
        for chunk in data.chunks(block.max(1)) {
            f.write_all(chunk)?;
        }
        Ok(())
    }

    fn read_all(&mut self, path: &str, block: usize) -> io::Result<u64> {
        self.check()?;
        let mut f = std::fs::File::open(self.root.join(path))?;
        let mut buf = vec![0u8; block.max(1)];
        let mut total = 0u64;
        loop {
            match f.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    }

    fn remove(&mut self, path: &str) -> io::Result<()> {
        self.check()?;
        std::fs::remove_file(self.root.join(path))
    }

    fn finish(&mut self) -> io::Result<Option<crate::managed::DeviceIo>> {
        match self.managed.take() {
            Some(m) => m.finish(),
            None => Ok(None),
        }
    }
}
