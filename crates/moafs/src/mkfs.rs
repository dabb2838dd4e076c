//! `moafs mkfs` (`mkfs.moafs`): makes a file system on an image.

use super::*;

#[derive(Args, Debug)]
pub(crate) struct MkfsArgs {
    /// Size of the file system, e.g. 64M, 10G (bytes without a suffix; K/M/G/T are powers of
    /// 1024). An image file is created or grown to it; on a block device or a larger image
    /// the file system takes the first SIZE bytes. Default: the whole device or image.
    #[arg(long)]
    pub(crate) size: Option<String>,
    /// Block size: 4096 or 16384.
    #[arg(long, default_value_t = 4096)]
    pub(crate) block_size: u32,
    /// Number of allocation groups.
    #[arg(long)]
    pub(crate) groups: Option<u32>,
    /// Bytes of the image per inode (as mkfs.ext4 -i): 1024 or more; smaller makes more
    /// inodes (at most one per 4 blocks of a group). Default: 16384.
    #[arg(long, short = 'i', value_name = "BYTES")]
    pub(crate) bytes_per_inode: Option<String>,
    /// Label (at most 32 bytes).
    #[arg(long, default_value = "")]
    pub(crate) label: String,
    /// Journal size in blocks (default: 1/64 of the image, 64 to 16384 blocks; 0: no journal).
    #[arg(long)]
    pub(crate) journal_blocks: Option<u32>,
    /// Byte-log size in blocks (default: 1/8 of the journal, 16 to 2048 blocks; 0: none,
    /// and so no per-file fsync of small overwrites).
    #[arg(long)]
    pub(crate) bytelog_blocks: Option<u32>,
    /// How files map their blocks: `extents` (disk version 3) or `pointers` (12 direct
    /// pointers and indirect blocks: disk version 2, which older moafs mounts).
    #[arg(long, value_enum, default_value_t = MapKind::Extents)]
    pub(crate) map: MapKind,
    /// Owner and group of the root directory, as numbers (mke2fs's `-E root_owner`).
    /// Default: the user and group running mkfs, so that a user's own image is writable.
    #[arg(long, value_name = "UID:GID", value_parser = parse_owner)]
    pub(crate) root_owner: Option<(u32, u32)>,
    pub(crate) image: PathBuf,
}

/// `--root-owner UID:GID`.
fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{s:?} is not UID:GID (two numbers, e.g. 1000:1000)");
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

/// `mkfs --map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MapKind {
    Extents,
    Pointers,
}

pub(crate) fn cmd_mkfs(a: &MkfsArgs) -> Result<(), String> {
    let size = a.size.as_deref().map(moafs_core::parse_size).transpose()?;
    match size {
        Some(s) => {
            if s < MIN_IMAGE_BYTES {
                return Err(format!(
                    "--size {} is too small: moafs needs at least {} bytes ({})",
                    a.size.as_deref().unwrap_or_default(),
                    MIN_IMAGE_BYTES,
                    human(MIN_IMAGE_BYTES)
                ));
            }
            FileDevice::create(&a.image, s).map_err(|e| dev_error(&a.image, e))?;
        }
        None if !a.image.exists() => {
            return Err(format!(
                "{} does not exist; give --size to create it (e.g. --size 1G)",
                a.image.display()
            ));
        }
        None => {}
    }
    let dev = open_image(
        &a.image,
        FileDeviceOptions {
            read_only: false,
            direct: false,
            lock: true,
        },
    )?;
    if dev.size() < MIN_IMAGE_BYTES {
        return Err(format!(
            "{} is too small ({} bytes): moafs needs at least {} bytes ({})",
            a.image.display(),
            dev.size(),
            MIN_IMAGE_BYTES,
            human(MIN_IMAGE_BYTES)
        ));
    }
    let bytes_per_inode = match a.bytes_per_inode.as_deref() {
        None => MkfsOptions::default().bytes_per_inode,
        Some(t) => match moafs_core::parse_size(t)? {
            n if n < 1024 => {
                return Err(format!(
                    "--bytes-per-inode {t} is too small: at least 1024 bytes per inode"
                ))
            }
            n => n,
        },
    };
    let opts = MkfsOptions {
        block_size: a.block_size,
        bytes_per_inode,
        groups: a.groups,
        label: a.label.clone(),
        journal_blocks: a.journal_blocks,
        bytelog_blocks: a.bytelog_blocks,
        size_bytes: size,
        pointer_maps: a.map == MapKind::Pointers,
        root_owner: a.root_owner.unwrap_or_else(|| {
            (
                nix::unistd::getuid().as_raw(),
                nix::unistd::getgid().as_raw(),
            )
        }),
    };
    let sb = moafs_core::mkfs::mkfs(&dev, &opts).map_err(|e| match e {
        FsError::Invalid { detail } => detail,
        e => fs_error(&a.image, e),
    })?;
    let geo = Geometry::from_superblock(&sb);
    let bytes = geo.total_blocks * u64::from(geo.block_size);
    say!("moafs created on {}", a.image.display());
    say!(
        "  size:        {} ({} bytes, {} blocks)",
        human(bytes),
        bytes,
        geo.total_blocks
    );
    say!("  block size:  {}", geo.block_size);
    say!(
        "  block maps:  {} (disk version {})",
        if sb.has_extents() {
            "extents"
        } else {
            "pointers"
        },
        sb.format_version
    );
    say!(
        "  groups:      {} of {} blocks",
        geo.group_count,
        geo.blocks_per_group
    );
    say!(
        "  inodes:      {} ({} per group)",
        geo.total_inodes(),
        geo.inodes_per_group
    );
    say!(
        "  free:        {} in {} blocks",
        human(sb.free_blocks * u64::from(geo.block_size)),
        sb.free_blocks
    );
    if sb.has_journal() {
        say!(
            "  journal:     {} in {} blocks at block {}",
            human(u64::from(sb.journal_blocks) * u64::from(geo.block_size)),
            sb.journal_blocks,
            sb.journal_start
        );
    } else {
        say!("  journal:     none");
    }
    if sb.has_bytelog() {
        say!(
            "  byte log:    {} in {} blocks at block {}",
            human(u64::from(sb.bytelog_blocks) * u64::from(geo.block_size)),
            sb.bytelog_blocks,
            sb.bytelog_start
        );
    } else {
        say!("  byte log:    none");
    }
    if !a.label.is_empty() {
        say!("  label:       {}", a.label);
    }
    let (uid, gid) = opts.root_owner;
    say!("  root owner:  {uid}:{gid}");
    Ok(())
}
