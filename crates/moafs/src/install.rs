//! `moafs install-helpers`: the mkfs/fsck/mount/umount helper links, the man pages and the
//! shell completions (`manual.rs`).

use super::*;

#[derive(Args, Debug)]
pub(crate) struct InstallArgs {
    /// mkfs.moafs and fsck.moafs go to PREFIX/sbin.
    #[arg(long, default_value = "/usr/local")]
    pub(crate) prefix: PathBuf,
    /// Where the mount and umount helpers go (mount(8) and umount(8) look in /sbin). Default: /sbin,
    /// or PREFIX/sbin when --prefix is given.
    #[arg(long)]
    pub(crate) mount_helper_dir: Option<PathBuf>,
    /// The binary the links point to (default: this one). A package's staging tree gives the
    /// path the binary will have once installed.
    #[arg(long, value_name = "PATH")]
    pub(crate) exe: Option<PathBuf>,
    /// Make only the links: no man pages (PREFIX/share/man/man8) and no completions of bash,
    /// zsh and fish (under PREFIX/share).
    #[arg(long)]
    pub(crate) links_only: bool,
}

pub(crate) fn cmd_install(a: &InstallArgs) -> Result<(), String> {
    let exe = match &a.exe {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .map_err(|e| format!("cannot find this executable: {e}"))?,
    };
    let sbin = a.prefix.join("sbin");
    let prefix_given = std::env::args_os().any(|x| {
        let s = x.to_string_lossy();
        s == "--prefix" || s.starts_with("--prefix=")
    });
    let helper_dir = match &a.mount_helper_dir {
        Some(d) => d.clone(),
        None if prefix_given => sbin.clone(),
        None => PathBuf::from("/sbin"),
    };
    let bin = a.prefix.join("bin");
    let mut links = vec![
        (sbin.join("mkfs.moafs"), &sbin),
        (sbin.join("fsck.moafs"), &sbin),
        (helper_dir.join("mount.moafs"), &helper_dir),
        (helper_dir.join("mount.fuse.moafs"), &helper_dir),
        // what mount(8) and umount(8) run for a mount whose type reads fuseblk.moafs (root's
        // mounts of block devices and image files): remounts and unmounts
        (helper_dir.join("mount.fuseblk.moafs"), &helper_dir),
        (helper_dir.join("umount.moafs"), &helper_dir),
        (helper_dir.join("umount.fuse.moafs"), &helper_dir),
        (helper_dir.join("umount.fuseblk.moafs"), &helper_dir),
    ];
    // `moafs` itself on the PATH, when installing the binary where it was built (a
    // package's tree has the binary at PREFIX/bin already: --exe)
    if a.exe.is_none() && bin.join("moafs") != exe {
        links.push((bin.join("moafs"), &bin));
    }
    for (link, dir) in links {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                std::fs::remove_file(&link).map_err(|e| format!("{}: {e}", link.display()))?
            }
            Ok(_) => {
                return Err(format!(
                    "{} exists and is not a symlink; not replacing it",
                    link.display()
                ))
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&exe, &link).map_err(|e| format!("{}: {e}", link.display()))?;
        say!("{} -> {}", link.display(), exe.display());
    }
    if !a.links_only {
        let share = a.prefix.join("share");
        for f in crate::manual::install(&share.join("man/man8"), &share)? {
            say!("{}", f.display());
        }
    }
    Ok(())
}
