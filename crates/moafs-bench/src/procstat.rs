//! CPU time and I/O of processes from `/proc` (the harness itself, a FUSE daemon).

use serde::Serialize;

/// CPU seconds of a process (all its threads): user and system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cpu {
    pub user_s: f64,
    pub sys_s: f64,
}

impl Cpu {
    /// `self - earlier`.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            sys_s: (self.sys_s - earlier.sys_s).max(0.0),
        }
    }
}

/// The process's I/O counters (`/proc/PID/io`): bytes through read/write calls (`rchar`,
/// `wchar`) and bytes the block layer moved for it (`read_bytes`, `write_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcIo {
    pub rchar: u64,
    pub wchar: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl ProcIo {
    pub fn since(self, e: ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(e.rchar),
            wchar: self.wchar.saturating_sub(e.wchar),
            read_bytes: self.read_bytes.saturating_sub(e.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(e.write_bytes),
        }
    }
}

fn ticks_per_sec() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

/// Parses `/proc/PID/stat` text: fields 14–17 (utime, stime, and cutime, cstime of the
/// children waited for — a tool the harness ran —, in clock ticks) counted after the command
/// name, which may hold spaces and parentheses.
pub fn parse_stat(text: &str, ticks: f64) -> Option<Cpu> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14
    let n = |i: usize| -> Option<f64> { f.get(i)?.parse().ok() };
    Some(Cpu {
        user_s: (n(11)? + n(13)?) / ticks,
        sys_s: (n(12)? + n(14)?) / ticks,
    })
}

/// Parses `/proc/PID/io` text.
pub fn parse_io(text: &str) -> Option<ProcIo> {
    let mut io = ProcIo::default();
    let mut seen = 0;
    for line in text.lines() {
        let (k, v) = line.split_once(':')?;
        let v: u64 = v.trim().parse().ok()?;
        match k.trim() {
            "rchar" => io.rchar = v,
            "wchar" => io.wchar = v,
            "read_bytes" => io.read_bytes = v,
            "write_bytes" => io.write_bytes = v,
            _ => continue,
        }
        seen += 1;
    }
    (seen == 4).then_some(io)
}

/// CPU time of process `pid` (`None`: the harness itself); `None` when it cannot be read.
pub fn cpu(pid: Option<i32>) -> Option<Cpu> {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    parse_stat(&std::fs::read_to_string(path).ok()?, ticks_per_sec())
}

/// I/O counters of process `pid`; `None` when they cannot be read (another user's process
/// without root).
pub fn io(pid: i32) -> Option<ProcIo> {
    parse_io(&std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?)
}

/// What a run cost in CPU, and what the FUSE daemon moved, from just before the workload to
/// just after it (the unmount not included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RunCost {
    /// The harness process: the workload's threads and the system calls they made (kernel
    /// file systems do most of their work there).
    pub harness: Cpu,
    /// The FUSE daemon (moafs, fuse2fs), when the target has one.
    pub daemon: Option<Cpu>,
    pub daemon_io: Option<ProcIo>,
}

/// Readings taken before a run.
#[derive(Debug, Clone, Copy)]
pub struct Before {
    harness: Option<Cpu>,
    daemon: Option<(i32, Option<Cpu>, Option<ProcIo>)>,
}

pub fn before(daemon: Option<i32>) -> Before {
    Before {
        harness: cpu(None),
        daemon: daemon.map(|p| (p, cpu(Some(p)), io(p))),
    }
}

pub fn after(b: &Before) -> RunCost {
    let harness = match (cpu(None), b.harness) {
        (Some(now), Some(then)) => now.since(then),
        _ => Cpu::default(),
    };
    let (daemon, daemon_io) = match b.daemon {
        Some((p, c, i)) => (
            cpu(Some(p)).zip(c).map(|(now, then)| now.since(then)),
            io(p).zip(i).map(|(now, then)| now.since(then)),
        ),
        None => (None, None),
    };
    RunCost {
        harness,
        daemon,
        daemon_io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_name_with_spaces_and_parens() {
        let text = "1234 (moafs (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 10 5 20 0 3 0";
        let c = parse_stat(text, 100.0).unwrap();
        assert_eq!((c.user_s, c.sys_s), (2.6, 0.8));
        assert!(parse_stat("garbage", 100.0).is_none());
        // this process's own line parses
        assert!(cpu(None).is_some());
    }

    #[test]
    fn io_counters() {
        let text = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        let io = parse_io(text).unwrap();
        assert_eq!(
            (io.rchar, io.wchar, io.read_bytes, io.write_bytes),
            (10, 20, 4096, 8192)
        );
        assert!(parse_io("rchar: 1\n").is_none());
        let later = ProcIo { rchar: 15, ..io };
        assert_eq!(later.since(io).rchar, 5);
    }
}
