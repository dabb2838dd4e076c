//! The manual as a user meets it: `moafs install-helpers --prefix P` puts the helper links,
//! the man pages and the shell completions under P, `man -l` shows each page with its
//! options, and bash loads the completion. Also `mkfs --root-owner`.

mod common;
use common::{moafs, p, text};
use std::process::Command;

/// `man -l PAGE`, formatted as plain text, wide enough that no option name is hyphenated.
fn man(page: &std::path::Path) -> String {
    let out = Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANWIDTH", "200")
        .env("MAN_KEEP_FORMATTING", "")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .expect("man(1) is missing: apt-get install man-db (./run test installs it)");
    assert!(
        out.status.success(),
        "man -l {}: {}",
        page.display(),
        text(&out.stderr)
    );
    // man prints bold as overstrikes when it thinks it writes to a terminal; plain text only
    let t = text(&out.stdout);
    let mut plain = String::new();
    for c in t.chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    plain
}

#[test]
fn install_helpers_puts_pages_and_completions_under_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("usr");
    let out = moafs(&[
        "install-helpers",
        "--prefix",
        p(&prefix),
        "--exe",
        "/usr/bin/moafs",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // the links point where --exe says, the mount helpers beside mkfs with --prefix
    for name in ["mkfs.moafs", "fsck.moafs", "mount.moafs", "umount.moafs"] {
        let link = prefix.join("sbin").join(name);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            std::path::Path::new("/usr/bin/moafs"),
            "{name}"
        );
    }
    // with --exe (a package's tree) no PREFIX/bin/moafs: the package has the binary there
    assert!(!prefix.join("bin/moafs").exists());
    let man8 = prefix.join("share/man/man8");
    let want: &[(&str, &[&str])] = &[
        (
            "moafs.8",
            &["SUBCOMMANDS", "install-helpers", "moafs-bench(8)"],
        ),
        ("mkfs.moafs.8", &["--block-size", "--root-owner", "--map"]),
        ("fsck.moafs.8", &["-y", "--nvm", "EXIT STATUS"]),
        (
            "mount.moafs.8",
            &[
                "MOUNT OPTIONS",
                "journal=writeback|ordered|data",
                "cache_size=SIZE",
                "uring=auto|off",
                "user_allow_other",
                "/etc/fstab",
            ],
        ),
        ("umount.moafs.8", &["-l", "Lazy"]),
        ("moafs-bench.8", &["--workload", "--target", "--reps"]),
    ];
    for (page, words) in want {
        let shown = man(&man8.join(page));
        for w in *words {
            assert!(
                shown.contains(w),
                "man -l {page} does not show {w}:\n{shown}"
            );
        }
    }
    // bash loads the completion and completes the subcommands
    let bash = prefix.join("share/bash-completion/completions/moafs");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=(moafs mo); COMP_CWORD=1; COMP_LINE='moafs mo'; \
             COMP_POINT=8; _moafs moafs mo moafs; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            p(&bash)
        ))
        .output()
        .unwrap();
    let words = text(&out.stdout);
    assert!(
        words.lines().any(|w| w == "mount") && !words.lines().any(|w| w == "mkfs"),
        "bash completion of `moafs mo`: {words:?} {}",
        text(&out.stderr)
    );
    assert!(prefix.join("share/zsh/vendor-completions/_moafs").exists());
    assert!(prefix
        .join("share/fish/vendor_completions.d/moafs.fish")
        .exists());
}

#[test]
fn install_helpers_puts_moafs_itself_on_the_path_of_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("local");
    let out = moafs(&["install-helpers", "--prefix", p(&prefix), "--links-only"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bin = std::fs::read_link(prefix.join("bin/moafs")).unwrap();
    assert_eq!(
        bin.canonicalize().unwrap(),
        std::path::Path::new(common::BIN).canonicalize().unwrap()
    );
    // --links-only: no pages
    assert!(!prefix.join("share/man").exists());
}

#[test]
fn mount_help_lists_the_mount_options() {
    let out = moafs(&["mount", "--help"]);
    let t = text(&out.stdout);
    for w in [
        "journal=writeback|ordered|data",
        "nvm=PATH",
        "fuseblk=on|off",
    ] {
        assert!(t.contains(w), "moafs mount --help lacks {w}");
    }
}

#[test]
fn mkfs_gives_the_root_directory_to_the_owner_asked() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let out = moafs(&["mkfs", "--size", "16M", "--root-owner", "1234:567", p(&img)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("root owner:  1234:567"));
    let dev = moafs_core::device::MemDevice::from_bytes(std::fs::read(&img).unwrap());
    let fs = moafs_core::Fs::mount(
        std::sync::Arc::new(dev),
        moafs_core::fs::MountOptions::default(),
    )
    .unwrap();
    let root = fs.getattr(moafs_core::fs::ROOT_INO).unwrap();
    assert_eq!((root.uid, root.gid), (1234, 567));
    let img2 = dir.path().join("img2");
    for bad in ["1234", "a:b", "1:2:3", ":5"] {
        let out = moafs(&["mkfs", "--size", "16M", "--root-owner", bad, p(&img2)]);
        assert_eq!(out.status.code(), Some(1), "--root-owner {bad}");
        assert!(
            text(&out.stderr).contains("UID:GID"),
            "{}",
            text(&out.stderr)
        );
    }
}
