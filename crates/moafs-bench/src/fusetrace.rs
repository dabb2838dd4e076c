//! Counting the FUSE requests the kernel sends a mount, by opcode, at the kernel's own
//! tracepoint (`fuse:fuse_request_send`, Linux 6.15 and later).
//!
//! `perf stat` counts the tracepoint once per opcode, each event filtered to the opcode and
//! to the mount's connection (`opcode == N && connection == D`, where D is the FUSE mount's
//! device number: major 0, so the kernel's and user space's encodings agree), plus once
//! unfiltered by opcode for the total. Counting (no trace buffer, no reader) costs a filter
//! evaluation per event and request in the kernel: small, but not nothing, so `moafs bench`
//! counts only when asked (`--fuse-requests`), and counted runs are not timed results.

use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The opcodes counted one by one (`include/uapi/linux/fuse.h`); the rest is `OTHER`.
pub const OPCODES: &[(u32, &str)] = &[
    (1, "LOOKUP"),
    (2, "FORGET"),
    (3, "GETATTR"),
    (4, "SETATTR"),
    (5, "READLINK"),
    (6, "SYMLINK"),
    (8, "MKNOD"),
    (9, "MKDIR"),
    (10, "UNLINK"),
    (11, "RMDIR"),
    (12, "RENAME"),
    (13, "LINK"),
    (14, "OPEN"),
    (15, "READ"),
    (16, "WRITE"),
    (17, "STATFS"),
    (18, "RELEASE"),
    (20, "FSYNC"),
    (21, "SETXATTR"),
    (22, "GETXATTR"),
    (23, "LISTXATTR"),
    (24, "REMOVEXATTR"),
    (25, "FLUSH"),
    (27, "OPENDIR"),
    (28, "READDIR"),
    (29, "RELEASEDIR"),
    (30, "FSYNCDIR"),
    (34, "ACCESS"),
    (35, "CREATE"),
    (36, "INTERRUPT"),
    (42, "BATCH_FORGET"),
    (43, "FALLOCATE"),
    (44, "READDIRPLUS"),
    (45, "RENAME2"),
    (46, "LSEEK"),
    (52, "STATX"),
];

/// Requests by opcode name (those counted zero times left out), `OTHER` for the opcodes not
/// in [`OPCODES`] and `TOTAL` for all.
pub type Counts = BTreeMap<String, u64>;

/// Where the kernel's tracepoints are (tracefs), mounted there if it is not yet.
const TRACEFS: &str = "/sys/kernel/tracing";

/// Whether this kernel has the FUSE tracepoints and `perf` can count them; mounts tracefs when
/// needed. The error says what is missing.
pub fn available() -> Result<(), String> {
    let event = Path::new(TRACEFS).join("events/fuse/fuse_request_send");
    if !event.exists() && !Path::new(TRACEFS).join("events").exists() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    if !event.exists() {
        return Err(format!(
            "{} is missing: the kernel has no FUSE tracepoints (Linux 6.15 and later), or \
             tracefs cannot be mounted",
            event.display()
        ));
    }
    match Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        _ => Err("perf is not installed (Debian: apt-get install linux-perf)".into()),
    }
}

/// A `perf stat` counting one mount's FUSE requests until [`Counter::stop`].
pub struct Counter {
    child: Option<Child>,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

/// The FUSE connection of the mount at `dir`, as the tracepoint names it: the kernel's encoding
/// of its superblock's device number (major << 20 | minor) — an anonymous device (major 0)
/// for a `fuse` mount, the block device's for a `fuseblk` one.
fn connection(dir: &Path) -> io::Result<u64> {
    let fuse = nix::sys::statfs::statfs(dir)
        .map_err(io::Error::from)?
        .filesystem_type()
        == nix::sys::statfs::FUSE_SUPER_MAGIC;
    let dev = std::fs::metadata(dir)?.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    if !fuse {
        return Err(io::Error::other(format!(
            "{} is not a FUSE mount (device {major}:{minor})",
            dir.display()
        )));
    }
    Ok((major << 20) | minor)
}

/// Whether `dir` is on a FUSE mount (`fuse` or `fuseblk`: statfs says FUSE).
pub fn is_fuse_mount(dir: &Path) -> bool {
    connection(dir).is_ok()
}

impl Counter {
    /// Starts counting the requests sent to the FUSE mount at `dir`.
    pub fn start(dir: &Path) -> io::Result<Counter> {
        available().map_err(io::Error::other)?;
        let conn = connection(dir)?;
        let tmp = tempfile::tempdir()?;
        let out = tmp.path().join("perf.csv");
        // perf opens its events with counting off (-D -1) and turns them on when told on
        // its control FIFO, answering on the other: counting starts exactly then
        let (ctl, ack) = (tmp.path().join("ctl"), tmp.path().join("ack"));
        for f in [&ctl, &ack] {
            nix::unistd::mkfifo(
                f,
                nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
            )
            .map_err(io::Error::from)?;
        }
        let mut cmd = Command::new("perf");
        cmd.args(["stat", "-a", "-x", ",", "-D", "-1"])
            .arg("-o")
            .arg(&out)
            .arg("--control")
            .arg(format!("fifo:{},{}", ctl.display(), ack.display()));
        for (op, _) in OPCODES {
            cmd.args(["-e", "fuse:fuse_request_send", "--filter"])
                .arg(format!("opcode == {op} && connection == {conn}"));
        }
        cmd.args(["-e", "fuse:fuse_request_send", "--filter"])
            .arg(format!("connection == {conn}"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("perf: {e}")))?;
        let mut c = Counter {
            child: Some(child),
            out,
            _dir: tmp,
        };
        if let Err(e) = c.enable(&ctl, &ack) {
            let mut err = String::new();
            if let Some(mut child) = c.child.take() {
                let _ = child.kill();
                let _ = child.wait();
                if let Some(mut e) = child.stderr.take() {
                    let _ = io::Read::read_to_string(&mut e, &mut err);
                }
            }
            return Err(io::Error::other(format!("perf stat: {e} {}", err.trim())));
        }
        Ok(c)
    }

    /// Tells perf to start counting and waits for its acknowledgement (10 s at most, and no
    /// longer than perf runs).
    fn enable(&mut self, ctl: &Path, ack: &Path) -> io::Result<()> {
        use std::io::{Read, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut alive = || -> io::Result<()> {
            let child = self
                .child
                .as_mut()
                .ok_or_else(|| io::Error::other("not running"))?;
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!("ended at once ({status})")));
            }
            if std::time::Instant::now() > deadline {
                return Err(io::Error::other("no answer on its control FIFO in 10 s"));
            }
            std::thread::sleep(Duration::from_millis(5));
            Ok(())
        };
        // opening a FIFO to write fails (ENXIO) until perf has opened it to read
        let mut w = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(ctl)
            {
                Ok(f) => break f,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => alive()?,
                Err(e) => return Err(e),
            }
        };
        let mut r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(ack)?;
        w.write_all(b"enable\n")?;
        let mut got = Vec::new();
        while !got.windows(3).any(|w| w == b"ack") {
            let mut buf = [0u8; 16];
            match r.read(&mut buf) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                Ok(_) => alive()?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => alive()?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Stops counting and returns the counts.
    pub fn stop(mut self) -> io::Result<Counts> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("perf is not running"))?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).map_err(io::Error::from)?;
        child.wait()?;
        parse(&std::fs::read_to_string(&self.out)?)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Reads `perf stat -x ,` output: one line per event, in the order of [`OPCODES`] and then
/// the total.
pub fn parse(text: &str) -> io::Result<Counts> {
    let values: Vec<u64> = text
        .lines()
        .filter(|l| l.contains("fuse:fuse_request_send"))
        .map(|l| {
            let v = l.split(',').next().unwrap_or("");
            v.trim()
                .parse()
                .map_err(|_| io::Error::other(format!("perf stat: no count in {l:?}")))
        })
        .collect::<io::Result<_>>()?;
    if values.len() != OPCODES.len() + 1 {
        return Err(io::Error::other(format!(
            "perf stat gave {} counts, not {}",
            values.len(),
            OPCODES.len() + 1
        )));
    }
    let total = values[OPCODES.len()];
    let mut counts = Counts::new();
    let mut named = 0;
    for ((_, name), &n) in OPCODES.iter().zip(&values) {
        named += n;
        if n > 0 {
            counts.insert(name.to_string(), n);
        }
    }
    if total > named {
        counts.insert("OTHER".into(), total - named);
    }
    counts.insert("TOTAL".into(), total);
    Ok(counts)
}

/// Requests per application operation over the runs that counted them: for each opcode the
/// mean over the runs of count / operations.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PerOp(pub BTreeMap<String, f64>);

impl PerOp {
    pub fn of(runs: &[(&Counts, u64)]) -> Option<PerOp> {
        let runs: Vec<_> = runs.iter().filter(|(_, ops)| *ops > 0).collect();
        if runs.is_empty() {
            return None;
        }
        let mut m = BTreeMap::new();
        for (counts, ops) in &runs {
            for (k, &v) in counts.iter() {
                *m.entry(k.clone()).or_insert(0.0) += v as f64 / *ops as f64;
            }
        }
        for v in m.values_mut() {
            *v /= runs.len() as f64;
        }
        Some(PerOp(m))
    }

    /// `6.02 (LOOKUP 1.00, MKNOD 1.00, …)`: the total, then each opcode, most first.
    pub fn describe(&self) -> String {
        let total = self.0.get("TOTAL").copied().unwrap_or(0.0);
        let mut ops: Vec<_> = self
            .0
            .iter()
            .filter(|(k, _)| k.as_str() != "TOTAL")
            .collect();
        ops.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = ops.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        format!("{total:.2} ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_output_is_read_by_opcode_with_the_rest_as_other() {
        let mut text = String::from("# started on Fri Nov 27\n\n");
        for (op, _) in OPCODES {
            let n = match op {
                1 => 100,
                8 => 100,
                16 => 300,
                _ => 0,
            };
            text += &format!("{n},,fuse:fuse_request_send,30519300,100.00,,\n");
        }
        text += "602,,fuse:fuse_request_send,30519300,100.00,,\n";
        let c = parse(&text).unwrap();
        assert_eq!(c["LOOKUP"], 100);
        assert_eq!(c["MKNOD"], 100);
        assert_eq!(c["WRITE"], 300);
        assert_eq!(c["OTHER"], 102);
        assert_eq!(c["TOTAL"], 602);
        assert!(!c.contains_key("GETATTR"), "zero counts are left out");
        // a line missing, or a count perf could not take
        assert!(parse("1,,fuse:fuse_request_send,1,100.00,,\n").is_err());
        assert!(parse(&text.replace("602,", "<not counted>,")).is_err());

        let p = PerOp::of(&[(&c, 100), (&c, 200), (&c, 0)]).unwrap();
        assert!((p.0["TOTAL"] - (6.02 + 3.01) / 2.0).abs() < 1e-9);
        assert_eq!(
            PerOp::of(&[(&c, 100)]).unwrap().describe(),
            "6.02 (WRITE 3.00, OTHER 1.02, LOOKUP 1.00, MKNOD 1.00)"
        );
        assert!(PerOp::of(&[(&c, 0)]).is_none());
    }
}
