//! `moafs fsck` (`fsck.moafs`): checks and repairs an image.

use super::*;

#[derive(Args, Debug)]
pub(crate) struct FsckArgs {
    /// Check only; open the image read-only.
    #[arg(short = 'n', conflicts_with = "yes")]
    pub(crate) no: bool,
    /// Repair what can be repaired.
    #[arg(short = 'y')]
    pub(crate) yes: bool,
    /// e2fsck compatibility: -a and -p mean -y, -f is accepted and ignored.
    #[arg(short = 'a', hide = true)]
    pub(crate) auto: bool,
    #[arg(short = 'p', hide = true)]
    pub(crate) preen: bool,
    #[arg(short = 'f', hide = true)]
    pub(crate) force: bool,
    /// The image's NVM tier (`-o nvm=` of its mount): needed when the image was not cleanly
    /// unmounted and acknowledged updates may be in it.
    #[arg(long)]
    pub(crate) nvm: Option<PathBuf>,
    pub(crate) image: PathBuf,
}

/// Exit code as e2fsck's: 0 clean, 1 errors corrected, 4 errors left uncorrected (5: both),
/// 8 an operational error (the image cannot be opened or read).
pub(crate) fn cmd_fsck(a: &FsckArgs) -> u8 {
    let repair = (a.yes || a.auto || a.preen) && !a.no;
    let _ = a.force;
    let dev = match open_image(
        &a.image,
        FileDeviceOptions {
            read_only: !repair,
            direct: false,
            lock: true,
        },
    ) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fsck.moafs: {e}");
            return 8;
        }
    };
    let tier = match a
        .nvm
        .as_deref()
        .map(|p| mount::open_tier(p, Default::default()))
    {
        None => None,
        Some(Ok(t)) => Some(t.0),
        Some(Err(e)) => {
            eprintln!("fsck.moafs: {e}");
            return 8;
        }
    };
    let rep = match moafs_core::fsck::fsck_with(&dev, repair, tier.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fsck.moafs: {}", fs_error(&a.image, e));
            return 8;
        }
    };
    for w in &rep.warnings {
        say!("warning: {w}");
    }
    for r in &rep.repaired {
        say!("repaired: {r} ({})", r.repair().unwrap_or("rebuilt"));
    }
    for e in &rep.errors {
        match e.repair() {
            Some(how) if !repair => say!("error: {e} (-y: {how})"),
            _ => say!("error: {e}"),
        }
    }
    say!("{}: {}", a.image.display(), rep.summary);
    if rep.errors.iter().any(|e| e.repair().is_some()) && !repair {
        say!("run `moafs fsck -y {}` to repair", a.image.display());
    }
    rep.exit_code().clamp(0, 255) as u8
}
