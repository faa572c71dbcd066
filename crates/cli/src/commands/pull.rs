//! `berth pull`.

use std::process::ExitCode;

use anyhow::Result;
use berth_image::auth::{AuthFiles, Credentials};
use berth_image::downloads::DownloadOptions;
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
/// A short name (no registry) is its registries.conf alias, else looked
/// for in each `unqualified-search-registries` entry in order (stored under
/// both names), else Docker Hub's. Then the system's registries
/// configuration (a blocked prefix, a rewritten location, its mirrors)
/// applies; then the mirrors of berth.toml's `registry_mirrors` are tried,
/// in order; the registry itself is tried when every mirror failed.
pub fn pull_into(
    config: &berth_config::Config,
    store: &berth_image::store::Store,
    reference: &ImageRef,
    platform: &Platform,
    tls_verify: bool,
    creds: Option<&str>,
    quiet: bool,
) -> Result<berth_image::store::StoredImage> {
    pull_with(
        config,
        store,
        reference,
        platform,
        tls_verify,
        creds,
        quiet,
        config.layer_cache.enabled,
    )
}

/// [`pull_into`], keeping downloaded layers in the layer cache or not.
#[allow(clippy::too_many_arguments)]
fn pull_with(
    config: &berth_config::Config,
    store: &berth_image::store::Store,
    reference: &ImageRef,
    platform: &Platform,
    tls_verify: bool,
    creds: Option<&str>,
    quiet: bool,
    keep_layers: bool,
) -> Result<berth_image::store::StoredImage> {
    let pull = Pull {
        config,
        store,
        platform,
        tls_verify,
        quiet,
        site: berth_config::registries::Registries::load(),
        downloads: DownloadOptions {
            connections: config.network.max_connections.max(1),
            keep: keep_layers,
            cache_max: config.layer_cache.max_size,
        },
    };
    if reference.is_short() {
        let repo = reference.repository();
        let name = repo.strip_prefix("library/").unwrap_or(repo);
        let candidates = pull.site.short_name_candidates(name, &pin(reference));
        let mut last = None;
        for c in &candidates {
            let full = ImageRef::parse(c)?;
            match pull.resolved(reference, &full, creds) {
                Ok(image) => return Ok(image),
                Err(e) => {
                    eprintln!(
                        "berth: {c}: {}{}",
                        crate::exit::message(&e),
                        if candidates.len() > 1 {
                            "; trying the next search registry"
                        } else {
                            ""
                        }
                    );
                    last = Some(e);
                }
            }
        }
        if let Some(e) = last {
            return Err(e);
        }
    }
    pull.resolved(reference, reference, creds)
}

/// One pull's settings.
struct Pull<'a> {
    config: &'a berth_config::Config,
    store: &'a berth_image::store::Store,
    platform: &'a Platform,
    tls_verify: bool,
    quiet: bool,
    site: berth_config::registries::Registries,
    downloads: DownloadOptions,
}

impl Pull<'_> {
    /// Pulls the fully qualified `full` (through the registries
    /// configuration and the mirrors), named as `reference` and `full`.
    fn resolved(
        &self,
        reference: &ImageRef,
        full: &ImageRef,
        creds: Option<&str>,
    ) -> Result<berth_image::store::StoredImage> {
        let text = format!("{}/{}{}", full.registry(), full.repository(), pin(full));
        let mut sources = self
            .site
            .sources(&text)
            .map_err(|b| berth_image::Error::Reference {
                reference: text.clone(),
                reason: b.to_string(),
            })?;
        let primary = sources
            .pop()
            .ok_or_else(|| anyhow::anyhow!("no source for {text}"))?;
        let primary_ref = ImageRef::parse(&primary.reference)?;
        let mut tries: Vec<(String, ImageRef, bool)> = Vec::new();
        for s in sources {
            match ImageRef::parse(&s.reference) {
                Ok(r) => tries.push((s.reference.clone(), r, s.insecure)),
                Err(e) => tracing::warn!("registries.conf mirror {:?}: {e}", s.reference),
            }
        }
        for mirror in self.config.mirrors_of(primary_ref.registry()) {
            match mirrored(&primary_ref, mirror) {
                Ok(r) => tries.push((mirror.clone(), r, false)),
                Err(e) => tracing::warn!(
                    "registry mirror {mirror:?} of {}: {e}",
                    primary_ref.registry()
                ),
            }
        }
        let mut names = vec![reference.store_name()];
        if full.store_name() != names[0] {
            names.push(full.store_name());
        }
        for (mirror, from, insecure) in tries {
            // --creds are for the registry named; a mirror's come from the auth files.
            match self.from(&names, &from, !insecure, None) {
                Ok(image) => return Ok(image),
                Err(e) => eprintln!(
                    "berth: warning: mirror {mirror} of {}: {}; trying the next",
                    primary_ref.registry(),
                    crate::exit::message(&e)
                ),
            }
        }
        let creds = creds.filter(|_| primary_ref.registry() == reference.registry());
        self.from(&names, &primary_ref, !primary.insecure, creds)
    }

    /// Pulls `from` (a registry's reference or a mirror's) into the store
    /// under `names`; `verify` false allows plain HTTP there.
    fn from(
        &self,
        names: &[String],
        from: &ImageRef,
        verify: bool,
        creds: Option<&str>,
    ) -> Result<berth_image::store::StoredImage> {
        let options = registry_options(from, self.tls_verify && verify, creds, self.config)?;
        let registry = Registry::new(from, options)?;
        // Where it comes from, when that is not the name it gets (an
        // alias, a registries.conf location, a mirror).
        let source = format!("{}/{}{}", from.registry(), from.repository(), pin(from));
        let what = match source == names[0] {
            true => source,
            false => format!("{} from {source}", names[0]),
        };
        let reporter = Reporter::new(self.quiet, &what);
        let opts = ConvertOptions {
            squashfs: &self.config.squashfs,
            jobs: super::jobs(),
            names: names.to_vec(),
            progress: &reporter,
        };
        let image = berth_image::pull::pull(
            self.store,
            &registry,
            from,
            self.platform,
            &opts,
            &self.downloads,
        )?;
        reporter.done(&image);
        Ok(image)
    }
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
    let image = pull_with(
        &config,
        &store,
        &reference,
        &platform,
        tls,
        args.creds.as_deref(),
        args.quiet,
        config.layer_cache.enabled && !args.no_layer_cache,
    )?;
    println!("{}", image.record.id);
    Ok(ExitCode::SUCCESS)
}
