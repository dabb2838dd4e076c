//! Aging reaches its targets, leaves a consistent file system, and depends on the seed only.
use moafs_bench::aging::{age, AgingConfig};
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::fs::MountOptions;
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::Arc;

fn aged(seed: u64, cfg: &AgingConfig) -> (moafs_bench::aging::AgingResult, Arc<MemDevice>) {
    let dev = Arc::new(MemDevice::new(64 << 20));
    mkfs(dev.as_ref(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    let r = age(
        &fs,
        dev.as_ref(),
        &AgingConfig {
            seed,
            ..cfg.clone()
        },
    )
    .unwrap();
    fs.unmount().unwrap();
    (r, dev)
}

#[test]
fn aging_reaches_utilisation_and_layout_and_is_reproducible() {
    let cfg = AgingConfig {
        utilisation: 0.3,
        layout: 0.85,
        ..AgingConfig::default()
    };
    let (r, dev) = aged(7, &cfg);
    assert!(r.reached, "{r:?}");
    assert!(r.utilisation >= 0.3 && r.utilisation < 0.35, "{r:?}");
    assert!(r.layout.score <= 0.85 && r.layout.files > 100, "{r:?}");
    let rep = moafs_core::fsck::fsck(dev.as_ref(), false).unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
    // what fsck scores is what aging reported
    assert_eq!(rep.layout, r.layout);
    // the same seed: the same history, the same layout; another seed: another one
    let (again, _) = aged(7, &cfg);
    assert_eq!((again.steps, again.layout), (r.steps, r.layout));
    let (other, _) = aged(8, &cfg);
    assert_ne!(other.layout, r.layout);
}

#[test]
fn aging_refuses_bad_targets_and_stops_at_max_steps() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    mkfs(dev.as_ref(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    for (u, l) in [(0.99, 0.8), (-0.1, 0.8), (0.5, 1.5), (f64::NAN, 0.8)] {
        let cfg = AgingConfig {
            utilisation: u,
            layout: l,
            ..AgingConfig::default()
        };
        assert!(age(&fs, dev.as_ref(), &cfg).is_err(), "{u} {l}");
    }
    let cfg = AgingConfig {
        max_steps: 50,
        ..AgingConfig::default()
    };
    let r = age(&fs, dev.as_ref(), &cfg).unwrap();
    assert!(!r.reached && r.steps == 50, "{r:?}");
    fs.unmount().unwrap();
    assert!(moafs_core::fsck::fsck(dev.as_ref(), false)
        .unwrap()
        .is_clean());
}
