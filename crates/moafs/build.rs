//! Records the commit the binary is built from as `MOAFS_COMMIT` (result files carry it):
//! `git rev-parse HEAD`, with `-dirty` when tracked files differ from it, or "unknown" outside
//! a git checkout (or without git).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(head) if !head.is_empty() => {
            // changes to tracked files (untracked ones do not count); `git status` refreshes
            // the index's stat data first, so a touched but unchanged file is not dirt
            let changes = git(&["status", "--porcelain", "--untracked-files=no"]);
            if changes.is_none_or(|c| c.is_empty()) {
                head
            } else {
                format!("{head}-dirty")
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=MOAFS_COMMIT={commit}");
    // Again when HEAD moves or the index changes, and when any source of the workspace
    // changes (which can make the tree dirty or clean). Directories are scanned whole.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        println!("cargo:rerun-if-changed={common}/refs/heads");
        println!("cargo:rerun-if-changed={common}/packed-refs");
    }
    for p in [
        "../../crates",
        "../../Cargo.toml",
        "../../Cargo.lock",
        "build.rs",
    ] {
        println!("cargo:rerun-if-changed={p}");
    }
}
