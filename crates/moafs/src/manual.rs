//! The manual: man pages (moafs(8), mkfs.moafs(8), fsck.moafs(8), mount.moafs(8),
//! umount.moafs(8)) and shell completions, generated from the CLI definition (clap_mangen,
//! clap_complete) and installed by `moafs install-helpers`. The mount options are written
//! once, here ([`MOUNT_OPTIONS`]): `moafs mount --help` and mount.moafs(8) show them, and a
//! test holds the list to what `parse_mount_options` accepts.

use super::*;
use clap::CommandFactory;
use roff::{bold, italic, roman, Roff};

/// One mount option: how it is written, a value that parses (for the test), what it does.
pub(crate) struct MountOption {
    pub(crate) syntax: &'static str,
    /// (read by the test that holds the list to the parser)
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) example: &'static str,
    pub(crate) text: &'static str,
}

const fn opt(syntax: &'static str, example: &'static str, text: &'static str) -> MountOption {
    MountOption {
        syntax,
        example,
        text,
    }
}

/// The mount options, by topic. Anything else is refused, but what mount(8) and mount.fuse3
/// hand back to a helper (`user_id=`, `group_id=`, `rootmode=`, `fsname=`, …).
pub(crate) const MOUNT_OPTIONS: &[(&str, &[MountOption])] = &[
    (
        "Durability",
        &[
            opt(
                "journal=writeback|ordered|data",
                "journal=data",
                "What the journal carries: metadata only; metadata with file data written home \
                 before it (default); or file data too. The durability contract of each is \
                 docs/SEMANTICS.md.",
            ),
            opt(
                "flush_interval_ms=N",
                "flush_interval_ms=5000",
                "How often the write-back timer commits (default 5000).",
            ),
            opt(
                "dirty_expire_ms=N",
                "dirty_expire_ms=0",
                "File data younger than this stays in memory at the timer's commits (default \
                 30000; 0: never held back). A file deleted before then never reaches the device.",
            ),
            opt(
                "checkpoint_interval_ms=N",
                "checkpoint_interval_ms=30000",
                "How long journaled metadata may wait before it is written home (default 30000).",
            ),
            opt(
                "small_commit_blocks=N",
                "small_commit_blocks=64",
                "A commit of at most N dirty data blocks carries them in its transaction with \
                 journal=ordered (default 64; 0: never).",
            ),
            opt(
                "ro",
                "ro",
                "Read-only. A journal to replay is replayed in memory; \
                 mount -o remount,rw writes it home.",
            ),
            opt(
                "norecovery",
                "norecovery",
                "With ro: the image as it lies, the journal not replayed (also noload).",
            ),
        ],
    ),
    (
        "Memory",
        &[
            opt(
                "cache_size=SIZE",
                "cache_size=512M",
                "The block cache's budget (default 40 % of the memory of the machine or of the \
                 daemon's memory cgroup, followed each second as it changes).",
            ),
            opt(
                "dirty_max=SIZE",
                "dirty_max=64M",
                "The budget of dirty file data (default 20 % of that memory, followed too).",
            ),
            opt(
                "write_behind=SIZE",
                "write_behind=16M",
                "New blocks of large files go to the image between commits, outside the engine \
                 lock, once this much is dirty (default 16M; 0: off).",
            ),
        ],
    ),
    (
        "Placement (paper 000)",
        &[
            opt(
                "cowrite=on|off",
                "cowrite=off",
                "Co-writing: at write-back the dirty small files of a directory go to disk \
                 together, smallest first (default on).",
            ),
            opt(
                "cowrite_max=SIZE",
                "cowrite_max=128K",
                "Largest file co-written (8K to 4M; default 128K).",
            ),
            opt(
                "wb_order=address|dirty",
                "wb_order=dirty",
                "Order of the other files' write-back requests (default address).",
            ),
            opt(
                "extents",
                "extents",
                "Convert an image made with mkfs --map pointers (disk version 2) to version 3: \
                 files made from then on map their blocks by extents. Older moafs no longer \
                 mounts it.",
            ),
        ],
    ),
    (
        "Byte log and NVM tier (paper 003)",
        &[
            opt(
                "bytelog=on|off",
                "bytelog=off",
                "An fsync of small overwrites appends just those bytes to the byte log \
                 (default on).",
            ),
            opt(
                "bytelog_threshold=SIZE",
                "bytelog_threshold=2048",
                "A block changed by more than this goes to the log whole (128 to 16384; \
                 default 2048).",
            ),
            opt(
                "bytelog_writeback=on|off",
                "bytelog_writeback=on",
                "Commits log small rewrites too (default off).",
            ),
            opt(
                "bytelog_grow=on|off",
                "bytelog_grow=on",
                "An fsync after an append is served by allocation and slot records instead of \
                 a commit (default off).",
            ),
            opt(
                "nvm=PATH",
                "nvm=/dev/shm/tier",
                "An NVM tier for small fsync batches: an existing file on DAX storage or \
                 /dev/shm, its size the tier's. fsck needs it too (--nvm) after a crash.",
            ),
            opt(
                "nvm_model=optane|none",
                "nvm_model=none",
                "How the tier's persists are charged (default optane).",
            ),
            opt(
                "nvm_threshold=SIZE",
                "nvm_threshold=2048",
                "Batches under this go to the tier (64 to 65536; default 2048).",
            ),
        ],
    ),
    (
        "Reads (paper 001)",
        &[
            opt(
                "readahead=sizeaware|linux|off",
                "readahead=linux",
                "How reads fetch ahead: the paper's request-size-aware readahead (default), \
                 Linux's, or none.",
            ),
            opt(
                "readahead_max_kb=N",
                "readahead_max_kb=256",
                "Largest readahead window (4 to 16384; default 256).",
            ),
            opt(
                "read_ahead_kb=N",
                "read_ahead_kb=1024",
                "The kernel's readahead for the mount (default 1024).",
            ),
            opt(
                "unlocked_reads=on|off",
                "unlocked_reads=off",
                "Cache misses are read with the engine lock released (default on).",
            ),
            opt(
                "direct, nodirect",
                "nodirect",
                "O_DIRECT on the image: the default wherever the image's file system supports \
                 it, but in tmpfs.",
            ),
        ],
    ),
    (
        "FUSE transport",
        &[
            opt(
                "uring=auto|off",
                "uring=off",
                "FUSE over io_uring with one pinned queue thread per CPU; auto (the default) \
                 uses it when the kernel offers it and, as root, turns on fuse.enable_uring.",
            ),
            opt(
                "uring_stream_kb=N",
                "uring_stream_kb=256",
                "Over io_uring, reads of N KiB and more are served by a helper thread on \
                 another CPU (default 256; 0: off).",
            ),
            opt(
                "sync_threads=N",
                "sync_threads=4",
                "Over io_uring, threads per queue serving fsyncs while the queue goes on \
                 (default 4; 0: none).",
            ),
            opt(
                "queue_boost=N|off",
                "queue_boost=-10",
                "Over io_uring, a queue's thread leaves SCHED_IDLE for nice N while callers \
                 take turns changing directories (default -10).",
            ),
            opt(
                "threads=N",
                "threads=4",
                "Threads serving /dev/fuse when io_uring is not used (1 to 64; default 2).",
            ),
            opt(
                "poll_ms=N",
                "poll_ms=5",
                "With /dev/fuse: poll the device while requests keep coming, until N ms \
                 without one (default 5; 0: always sleep).",
            ),
            opt(
                "attr_ttl_ms=N",
                "attr_ttl_ms=1000",
                "How long the kernel may cache attributes and names (default 60000).",
            ),
            opt(
                "writeback_cache=on|off",
                "writeback_cache=off",
                "The kernel's FUSE writeback cache (default on; off: every write(2) is a WRITE \
                 request at once).",
            ),
            opt(
                "forget_pause_ms=N",
                "forget_pause_ms=0",
                "A FORGET waits N ms so that more come with it (default 0).",
            ),
            opt(
                "bdi_strict=0|1",
                "bdi_strict=1",
                "Keep FUSE's strict per-mount dirty limit (default 0).",
            ),
            opt(
                "fuseblk=on|off",
                "fuseblk=off",
                "As root, an image file is mounted through a loop device the daemon attaches, \
                 as fuseblk.moafs, so that sync(1) and syncfs(2) reach it (default on). Off, \
                 and without root: fuse.moafs, which the kernel sends no sync to.",
            ),
            opt(
                "allow_other",
                "allow_other",
                "Users other than the one who mounted may use the mount (without root only \
                 when /etc/fuse.conf has user_allow_other).",
            ),
            opt(
                "default_permissions, nodefault_permissions",
                "nodefault_permissions",
                "The kernel checks permissions (default).",
            ),
            opt(
                "iflags",
                "iflags",
                "Enforce chattr +i and +a (OPEN is then answered: one request per open(2)); \
                 on by itself once an inode carried either flag.",
            ),
        ],
    ),
    (
        "Instruments",
        &[
            opt(
                "stats=PATH",
                "stats=/tmp/s.json",
                "Engine and device counters as JSON at unmount.",
            ),
            opt(
                "record=PATH",
                "record=/tmp/w.log",
                "A write log of every device write, flush and fsync promise (and the NVM \
                 tier's stores with nvm=), for moafs crashcheck PATH; not with ro.",
            ),
            opt(
                "faults=PATH",
                "faults=/tmp/f",
                "Device reads, writes or flushes fail while the file at PATH says so (lines \
                 read OFFSET LEN, write OFFSET LEN, flush): docs/TESTING.md.",
            ),
            opt("log=PATH", "log=/tmp/moafs.log", "The daemon's log."),
            opt(
                "pidfile=PATH",
                "pidfile=/tmp/moafs.pid",
                "The daemon's pid.",
            ),
        ],
    ),
    (
        "Generic",
        &[opt(
            "rw, atime, noatime, relatime, norelatime, strictatime, nostrictatime, diratime, \
               nodiratime, lazytime, nolazytime, dev, nodev, suid, nosuid, exec, noexec, sync, \
               async, dirsync, auto, noauto, user, nouser, nofail, _netdev, defaults, x-*, \
               remount, bind",
            "noatime",
            "mount(8)'s generic options: the VFS flags are passed to the kernel, the rest \
               accepted and ignored. The same image mounted twice is refused (lock).",
        )],
    ),
];

/// The mount options as text, for `moafs mount --help`.
pub(crate) fn mount_options_text() -> String {
    let mut s = String::from(
        "Mount options (-o, comma-separated; others are refused, but those mount(8) hands \
         back to a helper):\n",
    );
    for (topic, opts) in MOUNT_OPTIONS {
        s.push_str(&format!("\n{topic}:\n"));
        for o in *opts {
            s.push_str(&format!("  {}\n", o.syntax));
            s.push_str(&format!("      {}\n", o.text));
        }
    }
    s
}

fn command(name: &str) -> clap::Command {
    Cli::command()
        .find_subcommand(name)
        .cloned()
        .expect("a subcommand of the CLI")
}

/// A page's extra sections: (heading, paragraphs); a paragraph starting with "$ " is an
/// example line (shown in bold).
type Section = (&'static str, Vec<String>);

fn page(cmd: clap::Command, title: &'static str, sections: &[Section]) -> Result<Vec<u8>, String> {
    let has_subcommands = cmd.has_subcommands();
    let man = clap_mangen::Man::new(cmd.name(title).bin_name(title))
        .title(title.to_uppercase())
        .section("8")
        .source(format!("moafs {}", env!("CARGO_PKG_VERSION")))
        .manual("System Administration");
    let mut out = Vec::new();
    let io = |e: std::io::Error| e.to_string();
    man.render_title(&mut out).map_err(io)?;
    man.render_name_section(&mut out).map_err(io)?;
    man.render_synopsis_section(&mut out).map_err(io)?;
    man.render_description_section(&mut out).map_err(io)?;
    man.render_options_section(&mut out).map_err(io)?;
    if has_subcommands {
        man.render_subcommands_section(&mut out).map_err(io)?;
    }
    let mut roff = Roff::new();
    for (heading, paras) in sections {
        roff.control("SH", [*heading]);
        for p in paras {
            roff.control("PP", []);
            match p.strip_prefix("$ ") {
                Some(line) => roff.text([bold(line)]),
                None => roff.text([roman(p.as_str())]),
            };
        }
    }
    out.extend(roff.render().into_bytes());
    Ok(out)
}

fn mount_options_section(roff: &mut Roff) {
    roff.control("SH", ["MOUNT OPTIONS"]);
    roff.text([roman(
        "Given with -o, comma-separated, or in the fourth field of an /etc/fstab line. \
         Other options are refused, but those mount(8) and mount.fuse3 hand back to a \
         helper (user_id=, group_id=, rootmode=, fsname=, subtype=, …).",
    )]);
    for (topic, opts) in MOUNT_OPTIONS {
        roff.control("SS", [*topic]);
        for o in *opts {
            roff.control("TP", []);
            roff.text([bold(o.syntax)]);
            roff.text([roman(o.text)]);
        }
    }
}

/// Every page names the others, and the system's pages a user reads beside them.
const SEE_ALSO: &str = "moafs(8), mkfs.moafs(8), fsck.moafs(8), mount.moafs(8), umount.moafs(8), \
                        mount(8), fstab(5), fusermount3(1), fuse(8)";

fn see_also() -> Section {
    ("SEE ALSO", vec![SEE_ALSO.to_string()])
}

/// Every page: (file name, roff source).
pub(crate) fn pages() -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let top = Cli::command();
    out.push((
        "moafs.8".to_string(),
        page(
            top,
            "moafs",
            &[
                (
                    "DESCRIPTION OF THE FILE SYSTEM",
                    vec![
                        "moafs is a file system in user space (FUSE) for small files and small \
                     updates: a journaled, checksummed on-disk format in an image file or on a \
                     block device, with co-writing of a directory's small files, \
                     request-size-aware readahead, a byte log (optionally on an NVM tier) for \
                     fsyncs of small overwrites, and the three journaling modes of ext4."
                            .into(),
                        "It also answers to the names mkfs.moafs, fsck.moafs, mount.moafs and \
                     umount.moafs (links made by moafs install-helpers), so that mkfs -t moafs, \
                     fsck -t moafs, mount -t moafs and umount work as for any file system."
                            .into(),
                    ],
                ),
                (
                    "EXAMPLES",
                    vec![
                        "$ moafs mkfs --size 4G disk.img".into(),
                        "$ mount -t moafs disk.img /mnt".into(),
                        "$ umount /mnt".into(),
                        "$ fsck -t moafs -n disk.img".into(),
                        "$ moafs bench --target moafs,ext4 --workload varmail".into(),
                    ],
                ),
                (
                    "FILES",
                    vec![
                        "/usr/share/doc/moafs: the design, the on-disk format, the semantics and \
                     the benchmark method (README.md, docs/)."
                            .into(),
                    ],
                ),
                see_also(),
            ],
        )?,
    ));
    out.push((
        "mkfs.moafs.8".to_string(),
        page(
            command("mkfs"),
            "mkfs.moafs",
            &[
                (
                    "NOTES",
                    vec![
                        "The root directory belongs to the user who runs mkfs (as mke2fs's \
                     root_owner); --root-owner UID:GID sets another."
                            .into(),
                    ],
                ),
                (
                    "EXAMPLES",
                    vec![
                        "$ mkfs.moafs --size 1G disk.img".into(),
                        "$ mkfs -t moafs --block-size 16384 --label data /dev/sdb1".into(),
                    ],
                ),
                see_also(),
            ],
        )?,
    ));
    out.push((
        "fsck.moafs.8".to_string(),
        page(
            command("fsck"),
            "fsck.moafs",
            &[
                (
                    "EXIT STATUS",
                    vec![
                        "0: no errors. 1: errors corrected. 4: errors left uncorrected (5: both). \
                     8: operational error (the image cannot be opened or read). 16: usage \
                     error. As e2fsck(8)."
                            .into(),
                    ],
                ),
                (
                    "EXAMPLES",
                    vec![
                        "$ fsck -t moafs -n disk.img".into(),
                        "$ fsck.moafs -y disk.img".into(),
                    ],
                ),
                see_also(),
            ],
        )?,
    ));
    let mut mount = page(
        command("mount"),
        "mount.moafs",
        &[(
            "DESCRIPTION OF THE MOUNT",
            vec![
                "mount(8) runs mount.moafs for mount -t moafs (and for fuse.moafs and \
                 fuseblk.moafs lines of /proc/mounts and /etc/fstab). It returns once the \
                 mount is ready; the daemon serves it until umount, which returns once \
                 everything is committed and the image is free."
                    .into(),
                "Without root the mount goes through fusermount3(1), as for any FUSE file \
                 system: the user must own or be allowed to write the image, and allow_other \
                 needs user_allow_other in /etc/fuse.conf."
                    .into(),
            ],
        )],
    )?;
    let mut roff = Roff::new();
    mount_options_section(&mut roff);
    roff.control("SH", ["EXAMPLES"]);
    for line in [
        "mount -t moafs -o journal=data,cache_size=512M disk.img /mnt",
        "/srv/disk.img  /srv/data  moafs  defaults,noatime  0  2",
    ] {
        roff.control("PP", []);
        roff.text([bold(line)]);
    }
    roff.text([roman(" (an "), italic("/etc/fstab"), roman(" line)")]);
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(SEE_ALSO)]);
    mount.extend(roff.render().into_bytes());
    out.push(("mount.moafs.8".to_string(), mount));
    // moafs-SUBCOMMAND(8), which moafs(8) lists
    for sub in Cli::command().get_subcommands() {
        let name: &'static str = Box::leak(format!("moafs-{}", sub.get_name()).into_boxed_str());
        let helper = match sub.get_name() {
            "mkfs" | "fsck" | "mount" | "umount" => format!(
                "Also run as {0}.moafs by {0}(8): {0}.moafs(8).",
                sub.get_name()
            ),
            _ => String::new(),
        };
        let mut sections = vec![see_also()];
        if !helper.is_empty() {
            sections.insert(0, ("NOTES", vec![helper]));
        }
        if sub.get_name() == "mount" {
            sections.insert(
                0,
                (
                    "MOUNT OPTIONS",
                    vec!["As mount.moafs(8) lists them.".into()],
                ),
            );
        }
        out.push((format!("{name}.8"), page(sub.clone(), name, &sections)?));
    }
    out.push((
        "umount.moafs.8".to_string(),
        page(command("umount"), "umount.moafs", &[see_also()])?,
    ));
    Ok(out)
}

/// Writes the man pages into `man8` and the completions of bash, zsh and fish under `share`.
/// Returns the files written.
pub(crate) fn install(man8: &Path, share: &Path) -> Result<Vec<PathBuf>, String> {
    use clap_complete::{generate, Shell};
    let mut written = Vec::new();
    std::fs::create_dir_all(man8).map_err(|e| format!("{}: {e}", man8.display()))?;
    for (name, text) in pages()? {
        let path = man8.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    for (shell, dir) in [
        (Shell::Bash, "bash-completion/completions"),
        // Debian's zsh looks in vendor-completions under /usr, site-functions elsewhere
        (
            Shell::Zsh,
            if share.parent().and_then(Path::file_name) == Some("usr".as_ref()) {
                "zsh/vendor-completions"
            } else {
                "zsh/site-functions"
            },
        ),
        (Shell::Fish, "fish/vendor_completions.d"),
    ] {
        let dir = share.join(dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // the names each shell's completion loader looks for
        let path = dir.join(match shell {
            Shell::Bash => "moafs",
            Shell::Zsh => "_moafs",
            _ => "moafs.fish",
        });
        let mut text = Vec::new();
        generate(shell, &mut Cli::command(), "moafs", &mut text);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_mount_option_parses() {
        for (_, opts) in MOUNT_OPTIONS {
            for o in *opts {
                let plan = mount::parse_mount_options(&[o.example.to_string()]);
                assert!(plan.is_ok(), "{}: {:?}", o.example, plan.err());
            }
        }
    }

    /// Every option `parse_mount_options` names in its match is in [`MOUNT_OPTIONS`] (but
    /// those mount(8) and mount.fuse3 hand back, which no user gives).
    #[test]
    fn every_parsed_mount_option_is_documented() {
        let src = include_str!("mount.rs");
        let body = &src[src.find("pub(crate) fn parse_mount_options").unwrap()..];
        let body = &body[..body.find("\n}\n").unwrap()];
        let documented: String = MOUNT_OPTIONS
            .iter()
            .flat_map(|(_, o)| o.iter().map(|o| o.syntax))
            .collect::<Vec<_>>()
            .join(" ");
        let handed_back = [
            "user_id", "group_id", "rootmode", "max_read", "blksize", "uhelper", "fsname",
            "subtype", "bind", "noload",
        ];
        let mut names = Vec::new();
        for line in body.lines() {
            let t = line.trim_start();
            if !t.starts_with('"') || !t.contains("=>") {
                continue;
            }
            let arm = &t[..t.find("=>").unwrap()];
            for piece in arm.split('"').skip(1).step_by(2) {
                names.push(piece.to_string());
            }
        }
        assert!(names.len() > 40, "found only {names:?}");
        for n in names {
            if handed_back.contains(&n.as_str()) {
                continue;
            }
            let word = |w: &str| {
                w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .split(['=', '|'])
                    .next()
                    .unwrap_or("")
                    == n
            };
            assert!(
                documented.split([' ', ',']).any(word),
                "mount option {n} is parsed but not in MOUNT_OPTIONS"
            );
        }
    }

    #[test]
    fn pages_name_their_options() {
        let pages = pages().unwrap();
        let get = |n: &str| {
            String::from_utf8(pages.iter().find(|p| p.0 == n).unwrap().1.clone()).unwrap()
        };
        // the five named pages, and one per subcommand
        assert_eq!(pages.len(), 5 + Cli::command().get_subcommands().count());
        assert!(get("moafs-bench.8").contains("\\-\\-workload"));
        assert!(get("mount.moafs.8").contains("journal=writeback|ordered|data"));
        assert!(get("mkfs.moafs.8").contains("block\\-size"));
        assert!(get("fsck.moafs.8").contains("EXIT STATUS"));
        assert!(get("moafs.8").contains("install\\-helpers"));
    }
}
