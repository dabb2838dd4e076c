//! Faults switched on in a running daemon (`-o faults=PATH`, a test instrument): a device
//! that passes every request through unless a line of the control file at PATH says it
//! fails. The file is re-read when its modification time or length changes, checked at most
//! every few milliseconds; missing or empty, nothing fails. Lines (`#` starts a comment):
//!
//! ```text
//! read OFFSET LEN     reads touching bytes OFFSET..OFFSET+LEN fail (EIO)
//! write OFFSET LEN    writes touching them fail
//! flush               every flush fails (writes still succeed)
//! ```
//!
//! Sizes take K/M/G suffixes; `all` as OFFSET means the whole device. A line it cannot
//! parse is logged and ignored (a test that writes one finds its fault never fires).

use super::fault::in_ranges as touches;
use super::{check_range, iov_len, BlockDevice, DevResult, DeviceCounters, DeviceError};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How long a read control file is trusted before its metadata is looked at again.
const RECHECK: Duration = Duration::from_millis(5);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Faults {
    reads: Vec<(u64, u64)>,
    writes: Vec<(u64, u64)>,
    flush: bool,
}

fn size(s: &str) -> Option<u64> {
    crate::units::parse_size(s).ok()
}

impl Faults {
    fn parse(text: &str, device_size: u64) -> Faults {
        let mut f = Faults::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let words: Vec<&str> = line.split_whitespace().collect();
            let range = |w: &[&str]| -> Option<(u64, u64)> {
                match w {
                    ["all"] => Some((0, device_size)),
                    [o, l] => Some((size(o)?, size(l)?)),
                    _ => None,
                }
            };
            match words.as_slice() {
                [] => {}
                ["flush"] => f.flush = true,
                ["read", rest @ ..] if range(rest).is_some() => {
                    f.reads.push(range(rest).expect("checked"))
                }
                ["write", rest @ ..] if range(rest).is_some() => {
                    f.writes.push(range(rest).expect("checked"))
                }
                _ => log::warn!("faults: cannot parse {line:?}; ignored"),
            }
        }
        f
    }
}

struct Control {
    checked: Instant,
    seen: Option<(SystemTime, u64)>,
    faults: Faults,
}

/// A device whose faults a control file switches on and off while it is in use.
pub struct SwitchDevice {
    inner: Arc<dyn BlockDevice>,
    path: PathBuf,
    control: Mutex<Control>,
}

impl SwitchDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, path: PathBuf) -> SwitchDevice {
        SwitchDevice {
            inner,
            path,
            control: Mutex::new(Control {
                checked: Instant::now() - RECHECK * 2,
                seen: None,
                faults: Faults::default(),
            }),
        }
    }

    /// Whether `pick` says the faults in force now (the control file re-read if it changed)
    /// fail a request.
    fn fails(&self, pick: impl FnOnce(&Faults) -> bool) -> bool {
        let mut c = self.control.lock().unwrap_or_else(|e| e.into_inner());
        if c.checked.elapsed() >= RECHECK {
            c.checked = Instant::now();
            let meta = std::fs::metadata(&self.path)
                .ok()
                .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
            if meta != c.seen {
                c.seen = meta;
                let text = std::fs::read_to_string(&self.path).unwrap_or_default();
                let faults = Faults::parse(&text, self.inner.size());
                if faults != c.faults {
                    log::warn!("faults: now {faults:?} (from {})", self.path.display());
                    c.faults = faults;
                }
            }
        }
        pick(&c.faults)
    }
}

impl BlockDevice for SwitchDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        check_range(offset, buf.len() as u64, self.size())?;
        if self.fails(|f| touches(&f.reads, offset, buf.len() as u64)) {
            return Err(DeviceError::Injected { offset });
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.writev_at(offset, &[buf])
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        if self.fails(|f| touches(&f.writes, offset, iov_len(bufs))) {
            return Err(DeviceError::Injected { offset });
        }
        self.inner.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        if self.fails(|f| f.flush) {
            return Err(DeviceError::Injected { offset: 0 });
        }
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.inner.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }
    fn records(&self) -> bool {
        self.inner.records()
    }
    fn note(&self, note: super::Note) {
        self.inner.note(note)
    }
}

#[cfg(test)]
mod tests {
    use super::super::MemDevice;
    use super::*;

    #[test]
    fn a_control_file_switches_faults_on_and_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults");
        let mem = Arc::new(MemDevice::new(1 << 20));
        let d = SwitchDevice::new(mem, path.clone());
        let mut buf = [0u8; 4096];
        d.read_at(8192, &mut buf).unwrap();
        d.write_at(8192, &buf).unwrap();
        d.flush().unwrap();
        std::fs::write(&path, "read 8K 4K # one block\nflush\nbogus line\n").unwrap();
        std::thread::sleep(RECHECK * 2);
        assert!(d.read_at(8192, &mut buf).is_err());
        assert!(d.read_at(8192 + 4095, &mut buf[..1]).is_err());
        d.read_at(12288, &mut buf).unwrap();
        d.write_at(8192, &buf).unwrap();
        assert!(d.flush().is_err());
        std::fs::write(&path, "write all\n").unwrap();
        std::thread::sleep(RECHECK * 2);
        d.read_at(8192, &mut buf).unwrap();
        d.flush().unwrap();
        assert!(d.write_at(1 << 19, &buf).is_err());
        std::fs::remove_file(&path).unwrap();
        std::thread::sleep(RECHECK * 2);
        d.write_at(1 << 19, &buf).unwrap();
        assert_eq!(size("3M"), Some(3 << 20));
        assert_eq!(size("x"), None);
    }
}
