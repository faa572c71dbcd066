//! `berth pull`.

use std::process::ExitCode;

use anyhow::Result;
use berth_image::auth::{AuthFiles, Credentials};
use berth_image::pipeline::ConvertOptions;
use berth_image::platform::Platform;
use berth_image::reference::ImageRef;
use berth_image::registry::{Registry, RegistryOptions};

use super::Context;
use crate::cli::PullArgs;
use crate::progress::Reporter;

/// Registry options for `reference`: TLS from the flag or the config,
/// credentials from `--creds` or the auth files.
pub fn registry_options(
    reference: &ImageRef,
    tls_verify: bool,
    creds: Option<&str>,
    config: &berth_config::Config,
) -> Result<RegistryOptions> {
    let insecure = !tls_verify || config.is_insecure(reference.registry());
    let credentials = match creds {
        Some(c) => {
            let (u, p) = c
                .split_once(':')
                .ok_or_else(|| berth_image::Error::Reference {
                    reference: "--creds".to_string(),
                    reason: "expected USER:PASSWORD".to_string(),
                })?;
            Some(Credentials {
                username: u.to_string(),
                password: p.to_string(),
            })
        }
        None => AuthFiles::from_env().lookup(reference.registry(), reference.repository())?,
    };
    let net = &config.network;
    Ok(RegistryOptions {
        insecure,
        credentials,
        attempts: net.attempts.max(1),
        backoff: std::time::Duration::from_millis(net.backoff_ms),
        connect_timeout: std::time::Duration::from_secs(net.connect_timeout_seconds.max(1)),
        read_timeout: std::time::Duration::from_secs(net.read_timeout_seconds.max(1)),
    })
}

/// Pulls `reference` into `store` under its name, reporting progress
/// (the body of `berth pull`, and of `berth run`'s pull of an unknown image).
/// The system's registries configuration (registries.conf: a blocked
/// prefix, a rewritten location, its mirrors) applies first; then the
/// mirrors of berth.toml's `registry_mirrors` are tried, in order; the
/// registry itself is tried when every mirror failed.
pub fn pull_into(
    config: &berth_config::Config,
    store: &berth_image::store::Store,
    reference: &ImageRef,
    platform: &Platform,
    tls_verify: bool,
    creds: Option<&str>,
    quiet: bool,
) -> Result<berth_image::store::StoredImage> {
    let full = format!(
        "{}/{}{}",
        reference.registry(),
        reference.repository(),
        pin(reference)
    );
    let site = berth_config::registries::Registries::load();
    let mut sources = site
        .sources(&full)
        .map_err(|b| berth_image::Error::Reference {
            reference: full.clone(),
            reason: b.to_string(),
        })?;
    let primary = sources
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no source for {full}"))?;
    let primary_ref = ImageRef::parse(&primary.reference)?;
    let mut tries: Vec<(String, ImageRef, bool)> = Vec::new();
    for s in sources {
        match ImageRef::parse(&s.reference) {
            Ok(r) => tries.push((s.reference.clone(), r, s.insecure)),
            Err(e) => tracing::warn!("registries.conf mirror {:?}: {e}", s.reference),
        }
    }
    for mirror in config.mirrors_of(primary_ref.registry()) {
        match mirrored(&primary_ref, mirror) {
            Ok(r) => tries.push((mirror.clone(), r, false)),
            Err(e) => tracing::warn!(
                "registry mirror {mirror:?} of {}: {e}",
                primary_ref.registry()
            ),
        }
    }
    for (mirror, from, insecure) in tries {
        // --creds are for the registry named; a mirror's come from the auth files.
        match pull_from(
            config,
            store,
            reference,
            &from,
            platform,
            tls_verify && !insecure,
            None,
            quiet,
        ) {
            Ok(image) => return Ok(image),
            Err(e) => eprintln!(
                "berth: warning: mirror {mirror} of {}: {}; trying the next",
                primary_ref.registry(),
                crate::exit::message(&e)
            ),
        }
    }
    let creds = creds.filter(|_| primary_ref.registry() == reference.registry());
    pull_from(
        config,
        store,
        reference,
        &primary_ref,
        platform,
        tls_verify && !primary.insecure,
        creds,
        quiet,
    )
}

/// `:tag` or `@digest` of `reference` (nothing for neither).
fn pin(reference: &ImageRef) -> String {
    match (reference.digest(), reference.tag()) {
        (Some(d), _) => format!("@{d}"),
        (None, Some(t)) => format!(":{t}"),
        (None, None) => String::new(),
    }
}

/// `reference`'s repository and tag or digest at the registry `mirror`.
fn mirrored(reference: &ImageRef, mirror: &str) -> Result<ImageRef> {
    Ok(ImageRef::parse(&format!(
        "{mirror}/{}{}",
        reference.repository(),
        pin(reference)
    ))?)
}

/// Pulls `from` (the registry's reference or a mirror's) into `store`,
/// named as `reference`.
#[allow(clippy::too_many_arguments)]
fn pull_from(
    config: &berth_config::Config,
    store: &berth_image::store::Store,
    reference: &ImageRef,
    from: &ImageRef,
    platform: &Platform,
    tls_verify: bool,
    creds: Option<&str>,
    quiet: bool,
) -> Result<berth_image::store::StoredImage> {
    let options = registry_options(from, tls_verify, creds, config)?;
    let registry = Registry::new(from, options)?;
    let reporter = Reporter::new(quiet, &reference.to_string());
    let opts = ConvertOptions {
        squashfs: &config.squashfs,
        jobs: super::jobs(),
        names: vec![reference.store_name()],
        progress: &reporter,
    };
    let image = berth_image::pull::pull(store, &registry, from, platform, &opts)?;
    reporter.done(&image);
    Ok(image)
}

/// Runs `berth pull`.
pub fn run(ctx: &Context, args: PullArgs) -> Result<ExitCode> {
    let reference = ImageRef::parse(&args.reference)?;
    let platform = match &args.platform {
        Some(p) => Platform::parse(p)?,
        None => Platform::host(),
    };
    let config = ctx.config()?;
    let store = ctx.store(&config)?;
    let tls = args.tls.tls_verify;
    let image = pull_into(
        &config,
        &store,
        &reference,
        &platform,
        tls,
        args.creds.as_deref(),
        args.quiet,
    )?;
    println!("{}", image.record.id);
    Ok(ExitCode::SUCCESS)
}
