//! Finding the image a run asked for: the node's copy of its record (a
//! full id), else the stores, with the run configuration taken from the
//! config whose digest is the id.

use std::fs::File;

use berth_config::Config;
use berth_image::image_file::{self, ImageFile};
use berth_image::reference::{self, ImageRef};
use berth_image::store::{Store, StoredImage};

use crate::error::{Error, Result};
use crate::node_cache::{self, NodeLock};

/// The image found, with what the run holds for it.
pub struct Found {
    /// The image.
    pub image: StoredImage,
    /// Its squashfs file, when the store was read now (handed to a keeper
    /// started now instead of a path to walk again).
    pub file: Option<File>,
    /// The node's lock of the id's record, when this run read the store:
    /// other ranks wait until its keeper is there.
    pub lock: Option<NodeLock>,
}

/// Finds `image`; `trust_cache: false` ignores the node's copy of its
/// record (it named an image file that is gone).
pub fn find(config: &Config, image: &str, trust_cache: bool) -> Result<Found> {
    // A SIF or squashfs file: served where it lies, its settings read from
    // it.
    if image_file::names_a_file(image) {
        let f = ImageFile::open(std::path::Path::new(image))?;
        let img = f.in_place()?;
        return Ok(Found {
            image: img,
            file: Some(f.file),
            lock: None,
        });
    }
    // enroot's REGISTRY#IMAGE and docker://REF, as Docker's grammar.
    let image: &str =
        &reference::canonical(image).map_err(|reason| berth_image::Error::Reference {
            reference: image.to_string(),
            reason,
        })?;
    let cached = || {
        if trust_cache {
            node_cache::cached(image, config)
        } else {
            None
        }
    };
    if let Some(img) = cached() {
        return Ok(Found {
            image: img,
            file: None,
            lock: None,
        });
    }
    // Ranks of a node starting at once: one reads the store and starts the
    // keeper, the others wait and use its copy.
    let lock = node_cache::lock(image);
    if let Some(img) = cached() {
        return Ok(Found {
            image: img,
            file: None,
            lock: None,
        });
    }
    let (mut img, file) = match Store::open_id(&config.store, &config.shared_stores, image) {
        Some((img, file)) => (img, Some(file)),
        None => (from_store(config, image)?, None),
    };
    // Env, Entrypoint, Cmd from the config whose digest is the id, not from
    // meta.json beside it (a store writer could edit that); the node's
    // record keeps them.
    img.record.run = img.verified_run_config()?;
    node_cache::remember(&img);
    Ok(Found {
        image: img,
        file,
        lock,
    })
}

/// `image` looked up by name, id or prefix in the configured stores.
fn from_store(config: &Config, image: &str) -> Result<StoredImage> {
    let store = Store::open(&config.store, &config.shared_stores)?;
    match store.find(image) {
        Ok(img) => Ok(img),
        Err(berth_image::Error::ImageNotInStore(_)) => Err(Error::NotInStore {
            image: image.to_string(),
            // A reference is pulled first, as podman and Docker do: one
            // naming a registry from there, a short name (`ubuntu:24.04`)
            // from Docker Hub (or its mirrors); an id never.
            pullable: match reference::names_registry(image) {
                true => Some(Box::new(ImageRef::parse(image)?)),
                false if reference::looks_like_id(image) => None,
                false => ImageRef::parse(image).ok().map(Box::new),
            },
        }),
        Err(e) => Err(e.into()),
    }
}
