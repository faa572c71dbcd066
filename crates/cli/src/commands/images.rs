//! `berth images`, `inspect`, `rmi`, `prune`, `check`.

use std::io::Read;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use berth_image::store::StoredImage;
use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::Context;
use crate::cli::{ImagesArgs, InspectArgs, RmiArgs};

fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    &hex[..hex.len().min(12)]
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn age(stored_at: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(stored_at);
    let s = now.saturating_sub(stored_at);
    match s {
        0..=59 => format!("{s} seconds ago"),
        60..=3599 => format!("{} minutes ago", s / 60),
        3600..=86399 => format!("{} hours ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}

fn split_name(name: &str) -> (String, String) {
    if let Some((repo, digest)) = name.split_once('@') {
        return (repo.to_string(), format!("@{}", short_id(digest)));
    }
    match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (name.to_string(), "<none>".to_string()),
    }
}

fn summary(img: &StoredImage) -> serde_json::Value {
    json!({
        "id": img.record.id,
        "names": img.names,
        "platform": img.record.platform,
        "size": img.record.squashfs.size,
        "stored_at": img.record.stored_at,
        "shared": img.shared,
        "squashfs": img.squashfs_path(),
    })
}

/// `berth images`.
pub fn list(ctx: &Context, args: ImagesArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let images = store.list()?;
    if args.quiet {
        for img in &images {
            println!("{}", short_id(&img.record.id));
        }
    } else if args.format == "json" {
        let all: Vec<serde_json::Value> = images.iter().map(summary).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        println!(
            "{:<48} {:<16} {:<14} {:<16} {:>10}",
            "REPOSITORY", "TAG", "IMAGE ID", "STORED", "SIZE"
        );
        for img in &images {
            let names = if img.names.is_empty() {
                vec!["<none>:<none>".to_string()]
            } else {
                img.names.clone()
            };
            for n in names {
                let (repo, tag) = split_name(&n);
                let repo = if img.shared {
                    format!("{repo} (shared)")
                } else {
                    repo
                };
                println!(
                    "{:<48} {:<16} {:<14} {:<16} {:>10}",
                    repo,
                    tag,
                    short_id(&img.record.id),
                    age(img.record.stored_at),
                    human_size(img.record.squashfs.size)
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `berth inspect`.
pub fn inspect(ctx: &Context, args: InspectArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let img = store.find(&args.image)?;
    let config_bytes = std::fs::read(img.config_path())
        .with_context(|| format!("reading {}", img.config_path().display()))?;
    let oci_config: serde_json::Value = serde_json::from_slice(&config_bytes)?;
    let r = &img.record;
    let out = json!({
        "id": r.id,
        "digest": r.id,
        "manifest_digest": r.manifest_digest,
        "names": img.names,
        "source": r.source,
        "platform": r.platform,
        "stored_at": r.stored_at,
        "shared_store": img.shared,
        "config": oci_config,
        "run": r.run,
        "layers": r.layers,
        "squashfs": {
            "path": img.squashfs_path(),
            "size": r.squashfs.size,
            "sha256": r.squashfs.sha256,
            "compressor": r.squashfs.compressor,
            "block_size": r.squashfs.block_size,
        },
        "dropped_devices": r.dropped_devices,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

/// `berth rmi`.
pub fn remove(ctx: &Context, args: RmiArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    // Each failure said once, as it happens; the last one's code is the
    // exit code.
    let mut status = ExitCode::SUCCESS;
    for name in &args.images {
        match store.remove(name) {
            Ok(ids) => {
                println!("Untagged: {name}");
                for id in ids {
                    println!("Deleted: {id}");
                }
            }
            Err(e) => {
                let (code, msg) = crate::exit::describe(&e.into());
                eprintln!("berth: error: {msg}");
                status = code.into();
            }
        }
    }
    Ok(status)
}

/// `berth prune`.
pub fn prune(ctx: &Context) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let pruned = store.prune()?;
    for id in &pruned.images {
        println!("Deleted: {id}");
    }
    if pruned.blobs > 0 || pruned.cache_entries > 0 {
        println!(
            "Deleted: {} unused blobs ({}) and {} build-cache entries",
            pruned.blobs,
            human_size(pruned.blob_bytes),
            pruned.cache_entries
        );
    }
    if pruned.cached_layers > 0 {
        println!(
            "Deleted: {} cached layers no image lists ({})",
            pruned.cached_layers,
            human_size(pruned.cached_layer_bytes)
        );
    }
    if let Some(why) = &pruned.blobs_kept_because {
        eprintln!("berth: note: blobs, cached layers and the build cache were not pruned: {why}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `berth check`: recompute every image file's sha256.
pub fn check(ctx: &Context) -> Result<ExitCode> {
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let mut bad = 0;
    let images = store.list()?;
    for img in &images {
        let path = img.squashfs_path();
        let result = (|| -> std::io::Result<String> {
            let mut f = std::fs::File::open(&path)?;
            let mut h = Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
            Ok(format!("sha256:{}", hex_encode(&h.finalize())))
        })();
        let config_ok = std::fs::read(img.config_path())
            .map(|b| format!("sha256:{}", hex_encode(&Sha256::digest(&b))) == img.record.id)
            .unwrap_or(false);
        match result {
            Ok(d) if d == img.record.squashfs.sha256 && config_ok => {
                println!("ok       {}", img.record.id)
            }
            Ok(_) => {
                bad += 1;
                println!("CORRUPT  {} ({})", img.record.id, path.display());
            }
            Err(e) => {
                bad += 1;
                println!("UNREADABLE {} ({}: {e})", img.record.id, path.display());
            }
        }
    }
    println!("{} images checked, {} bad", images.len(), bad);
    if bad > 0 {
        eprintln!("berth: error: {bad} image(s) failed verification: remove them with `berth rmi` and pull again");
        return Ok(ExitCode::from(13));
    }
    Ok(ExitCode::SUCCESS)
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
