//! Thin FUSE adapter for the moafs engine (fuser 0.18).
//!
//! [`MoafsFuse`] converts between fuser's types and the engine's, maps
//! [`FsError`](moafs_core::FsError) to errno and keeps little state of its own: lookup counts,
//! open counts and everything else of the file system live in [`Fs`](moafs_core::Fs). What
//! the adapter keeps is the directory streams (OPENDIR hands out a handle per stream, numbered
//! from 1, under which the end of a listing is fixed when it starts) and the write-back errors
//! a writer has yet to see (`late.rs`). Files get no handles: OPEN is declined, or answered
//! with handle 0 when inode flags are enforced, as an O_TMPFILE open is.
//!
//! [`serve`] is the transport, shared with the FUSE floor target ([`passthrough`]) and the
//! in-memory ceiling ([`memfs`]): it mounts, negotiates FUSE_INIT through the adapter's
//! [`Transport`], serves requests on `threads` threads or over io_uring, polls, tunes the bdi
//! and unmounts cleanly on SIGINT, SIGTERM or SIGHUP. [`mount_blocking`] is `serve` with
//! [`MoafsFuse`] plus the engine's write-back timer (`Fs::tick` every second) and write-behind
//! thread.
//!
//! One idea a file: `config.rs` (mount options), `transport.rs` (what the adapters share),
//! `serve.rs` (mounting and serving), `adapter.rs` and `adapter/requests.rs` (moafs's
//! adapter), `convert.rs` (fuser's types and the engine's), `reply.rs` (replies the adapters
//! share), `background.rs` (the engine's threads while mounted).

// First: its `declined_requests!` is used by the adapters below.
#[macro_use]
mod transport;

mod adapter;
mod background;
mod config;
mod convert;
mod ioctl;
mod late;
pub mod memfs;
pub mod passthrough;
pub mod poll;
mod reply;
mod serve;
mod statx;
pub mod synctime;
pub mod uring;

pub use adapter::{MoafsFuse, DROP_CACHES_XATTR};
pub use background::mount_atime_policy;
pub use config::{
    fuser_config, is_vfs_option, vfs_mount_option, MountConfig, UringMode, QUEUE_BOOST,
    SYNC_THREADS,
};
pub use convert::{file_attr, file_type, from_system_time, to_system_time};
pub use ioctl::WRITABLE as MOAFS_IOC_WRITABLE;
pub use serve::{mount_blocking, serve};
pub use transport::{Adapter, Transport, FORGET_PAUSE};
