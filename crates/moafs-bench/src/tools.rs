//! Drivers for the Debian tools (`postmark`, `sysbench`, `fio`, `bonnie++`): each runs the real
//! program in the target's directory and reads its own result from its output. They need a
//! mounted target and the tool installed (`moafs bench` says which is missing).

use crate::target::Target;
use crate::workload::Outcome;
use serde::Serialize;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// postmark 1.53 with the FSL configuration (scaled).
    Postmark,
    /// sysbench fileio `rndrd`.
    Sysbench,
    /// fio random reads (psync engine).
    Fio,
    /// bonnie++ block phases (no small-file tests).
    Bonnie,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolConfig {
    pub tool: Tool,
    /// postmark: files and transactions; sysbench and fio: requests; bonnie++: MiB.
    pub files: usize,
    pub transactions: usize,
    /// Bytes of the data set (sysbench, fio, bonnie++).
    pub total: u64,
    pub block: usize,
    pub seed: u64,
}

impl Tool {
    pub fn program(self) -> &'static str {
        match self {
            Tool::Postmark => "postmark",
            Tool::Sysbench => "sysbench",
            Tool::Fio => "fio",
            Tool::Bonnie => "bonnie++",
        }
    }
}

/// Whether `program` is on the PATH.
pub fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs `cmd` (in `dir`), returns stdout; a failure is an error with its stderr.
fn output(cmd: &mut Command, dir: &Path) -> io::Result<String> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    if crate::interrupted() {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
    }
    let out = cmd
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{prog}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{prog} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn unparsed(tool: &str, what: &str, text: &str) -> io::Error {
    let head: String = text.chars().take(400).collect();
    io::Error::other(format!("{tool}: no {what} in its output: {head}"))
}

/// postmark's "N seconds of transactions (R per second)".
pub fn parse_postmark(text: &str) -> Option<(f64, f64)> {
    let line = text
        .lines()
        .find(|l| l.contains("seconds of transactions"))?;
    let secs: f64 = line.split_whitespace().next()?.parse().ok()?;
    let rate: f64 = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((secs, rate))
}

/// sysbench's "reads/s: R".
pub fn parse_sysbench(text: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.trim_start().starts_with("reads/s:"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// fio's JSON: the first job's read IOPS and runtime (ms).
pub fn parse_fio(text: &str) -> Option<(f64, f64)> {
    // fio may print notes before the JSON document
    let v: serde_json::Value = serde_json::from_str(&text[text.find('{')?..]).ok()?;
    let read = &v["jobs"][0]["read"];
    Some((read["iops"].as_f64()?, read["runtime"].as_f64()?))
}

/// bonnie++ `-q` CSV (format 1.98, as `bon_csv2txt` reads it): block write, rewrite and block
/// read in KiB/s (fields 11, 13 and 17, counting from 0); `+++++` (too fast to measure) is
/// `None`.
pub fn parse_bonnie(text: &str) -> Option<[Option<f64>; 3]> {
    let line = text.lines().rev().find(|l| l.starts_with("1.98,"))?;
    let f: Vec<&str> = line.split(',').collect();
    let k = |i: usize| f.get(i).and_then(|s| s.trim().parse::<f64>().ok());
    f.get(17)?;
    Some([k(11), k(13), k(17)])
}

pub fn run(
    t: &dyn Target,
    cfg: &ToolConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<Outcome> {
    let prog = cfg.tool.program();
    let Some(dir) = t.dir() else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{prog} needs a mounted target (a directory), not the in-process engine"),
        ));
    };
    if !installed(prog) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{prog} is not installed (apt-get install {})", prog),
        ));
    }
    let start = Instant::now();
    match cfg.tool {
        Tool::Postmark => {
            let work = dir.join("pm");
            std::fs::create_dir(&work)?;
            let conf =
                std::env::temp_dir().join(format!("moafs-postmark-{}.cfg", std::process::id()));
            std::fs::write(
                &conf,
                format!(
                    "set location {}\nset number {}\nset subdirectories 200\nset size 512 10240\n\
                     set read 4096\nset write 4096\nset buffering false\nset transactions {}\n\
                     set seed {}\nrun\nquit\n",
                    work.display(),
                    cfg.files,
                    cfg.transactions,
                    cfg.seed
                ),
            )?;
            between()?;
            let measured = Instant::now();
            let text = output(Command::new(prog).arg(&conf), dir);
            let secs = measured.elapsed().as_secs_f64();
            let _ = std::fs::remove_file(&conf);
            let text = text?;
            std::fs::remove_dir_all(&work)?;
            let (_, rate) = parse_postmark(&text).ok_or_else(|| unparsed(prog, "rate", &text))?;
            // postmark's own rate (1-second timer); our wall clock for the whole program
            let tx = cfg.transactions as f64;
            let mut o = Outcome::new(tx, "transactions", tx / rate.max(1e-9), start)
                .count("transactions", cfg.transactions as u64)
                .count("files", cfg.files as u64);
            o.rate = rate;
            Ok(o.detail(serde_json::json!({ "program_secs": secs })))
        }
        Tool::Sysbench => {
            let args = |mode: &str| {
                let mut c = Command::new(prog);
                c.args([
                    "fileio",
                    "--file-num=16",
                    &format!("--file-total-size={}", cfg.total),
                    &format!("--file-block-size={}", cfg.block),
                    "--file-test-mode=rndrd",
                    "--time=0",
                    &format!("--events={}", cfg.transactions),
                    &format!("--rand-seed={}", cfg.seed.max(1)),
                    mode,
                ]);
                c
            };
            output(&mut args("prepare"), dir)?;
            between()?;
            let measured = Instant::now();
            let text = output(&mut args("run"), dir);
            let secs = measured.elapsed().as_secs_f64();
            let cleaned = output(&mut args("cleanup"), dir);
            let text = text?;
            cleaned?;
            let rate = parse_sysbench(&text).ok_or_else(|| unparsed(prog, "reads/s", &text))?;
            let mut o = Outcome::new(cfg.transactions as f64, "reads", secs, start)
                .count("reads", cfg.transactions as u64);
            o.rate = rate;
            Ok(o)
        }
        Tool::Fio => {
            let job = |extra: &[&str]| {
                let mut c = Command::new(prog);
                c.args([
                    "--name=randread",
                    "--directory=.",
                    "--rw=randread",
                    "--ioengine=psync",
                    &format!("--bs={}", cfg.block),
                    &format!("--size={}", cfg.total),
                    &format!("--number_ios={}", cfg.transactions),
                    &format!("--randseed={}", cfg.seed),
                    // fio drops its files' pages before a run by default: leave the cache
                    // state to the harness, as for every other workload
                    "--invalidate=0",
                    "--output-format=json",
                ]);
                c.args(extra);
                c
            };
            output(&mut job(&["--create_only=1"]), dir)?;
            between()?;
            let measured = Instant::now();
            let text = output(&mut job(&[]), dir);
            let secs = measured.elapsed().as_secs_f64();
            for e in std::fs::read_dir(dir)? {
                let p = e?.path();
                if p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("randread."))
                {
                    std::fs::remove_file(p)?;
                }
            }
            let text = text?;
            let (iops, _) = parse_fio(&text).ok_or_else(|| unparsed(prog, "read IOPS", &text))?;
            let mut o = Outcome::new(cfg.transactions as f64, "reads", secs, start)
                .count("reads", cfg.transactions as u64);
            o.rate = iops;
            Ok(o)
        }
        Tool::Bonnie => {
            let mib = (cfg.total >> 20).max(1);
            between()?;
            let measured = Instant::now();
            let text = output(
                Command::new(prog).args([
                    "-d",
                    ".",
                    "-s",
                    &format!("{mib}M"),
                    "-r",
                    &format!("{}", (mib / 2).max(1)),
                    "-n",
                    "0",
                    "-u",
                    "root",
                    "-q",
                    "-f",
                    &format!("-z{}", cfg.seed),
                ]),
                dir,
            )?;
            let secs = measured.elapsed().as_secs_f64();
            let phases = parse_bonnie(&text).ok_or_else(|| unparsed(prog, "CSV line", &text))?;
            let rates: Vec<f64> = phases.iter().flatten().map(|k| k / 1024.0).collect();
            if rates.is_empty() {
                return Err(io::Error::other(format!(
                    "bonnie++: every phase took under 0.5 s (+++++): too fast to measure; \
                     use a larger --scale (the file is {mib} MiB)"
                )));
            }
            let mean = rates.iter().sum::<f64>() / rates.len() as f64;
            let mut o =
                Outcome::new(mean * secs, "MiB", secs, start).count("phases", rates.len() as u64);
            o.rate = mean;
            Ok(o.detail(serde_json::json!({
                "write_mib_per_sec": phases[0].map(|k| k / 1024.0),
                "rewrite_mib_per_sec": phases[1].map(|k| k / 1024.0),
                "read_mib_per_sec": phases[2].map(|k| k / 1024.0),
            })))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_tools_outputs() {
        let pm = "Time:\n\t73 seconds total\n\t71 seconds of transactions (2816 per second)\n";
        assert_eq!(parse_postmark(pm), Some((71.0, 2816.0)));
        assert_eq!(parse_postmark("nothing"), None);
        let sb =
            "File operations:\n    reads/s:                      61234.56\n    writes/s: 0.00\n";
        assert_eq!(parse_sysbench(sb), Some(61234.56));
        let fio = "note: both iodepth >= 1 and synchronous I/O engine are selected\n\
                   {\"jobs\": [{\"read\": {\"iops\": 1234.5, \"runtime\": 810}}]}";
        assert_eq!(parse_fio(fio), Some((1234.5, 810.0)));
        assert_eq!(parse_fio("{}"), None);
        // bonnie++ 2.00a -f output: per-char phases empty, seeks too fast (+++++)
        let bonnie = "1.98,2.00a,vm,1,42,1G,,8192,5,,,512000,50,256000,30,,,1024000,60,\
                      +++++,+++,,,,,,,,,,,,,,,,,,,83us,74us,,61us,9222us,,,,,,";
        let p = parse_bonnie(bonnie).unwrap();
        assert_eq!(p, [Some(512000.0), Some(256000.0), Some(1024000.0)]);
        let too_fast = "1.98,2.00a,vm,1,42,25M,,8192,5,,,+++++,+++,+++++,+++,,,+++++,+++,\
                        +++++,+++,,,,,,,,,,,,,,,,,,,83us,74us,,61us,9222us,,,,,,";
        assert_eq!(parse_bonnie(too_fast), Some([None, None, None]));
        assert_eq!(parse_bonnie("Using uid:0, gid:0."), None);
    }
}
