//! The OCI distribution client: `oci-client` with berth's retry, resume,
//! credential lookup and error messages around it.
//!
//! `oci-client` is async; berth's pipeline is threads and pipes. A small
//! tokio runtime owned by [`Registry`] runs the HTTP work, and blobs reach the
//! caller as a blocking [`Read`] fed through a bounded channel, so a slow
//! consumer applies back-pressure instead of buffering a layer in memory.

use std::io::Read;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::Client;

use crate::auth::Credentials;
use crate::error::{Error, Result};
use crate::reference::ImageRef;

mod blob;
mod errors;
mod proxy;

pub use blob::BlobFetcher;
use errors::{annotate_attempts, classify, Transience};

/// Manifest media types berth accepts.
pub const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// How to reach a registry.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Allow plain HTTP and unverified certificates.
    pub insecure: bool,
    /// Credentials, if any (else anonymous, or the registry's token flow).
    pub credentials: Option<Credentials>,
    /// Attempts per request for transient failures.
    pub attempts: u32,
    /// First back-off delay; doubles each retry.
    pub backoff: Duration,
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Time without data before a transfer counts as stalled.
    pub read_timeout: Duration,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        Self {
            insecure: false,
            credentials: None,
            attempts: 5,
            backoff: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(20),
            read_timeout: Duration::from_secs(60),
        }
    }
}

/// A client for one registry.
pub struct Registry {
    client: Client,
    rt: tokio::runtime::Runtime,
    auth: RegistryAuth,
    registry: String,
    options: RegistryOptions,
    authenticated: std::cell::Cell<bool>,
    /// Whether tokens must carry the push scope (a push is under way).
    pushing: std::cell::Cell<bool>,
}

fn install_crypto() {
    // rustls needs a process-wide provider; ring builds faster than aws-lc.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Registry {
    /// A client for `reference`'s registry.
    pub fn new(reference: &ImageRef, options: RegistryOptions) -> Result<Self> {
        install_crypto();
        let registry = reference.resolve_registry().to_string();
        let protocol = if options.insecure {
            ClientProtocol::HttpsExcept(vec![registry.clone(), reference.registry().to_string()])
        } else {
            ClientProtocol::Https
        };
        let config = ClientConfig {
            protocol,
            accept_invalid_certificates: options.insecure,
            connect_timeout: Some(options.connect_timeout),
            read_timeout: Some(options.read_timeout),
            ..ClientConfig::default()
        };
        // try_from, not new: new() falls back to a default client on error,
        // and that one panics where no CA certificates can be loaded.
        let client = Client::try_from(config).map_err(|e| {
            Error::HostTool(format!(
                "cannot set up the HTTPS client: {e} (install the system's CA certificates: apt-get install ca-certificates, dnf install ca-certificates)"
            ))
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("berth-http")
            .enable_all()
            .build()
            .map_err(|e| Error::HostTool(format!("cannot start the HTTP runtime: {e}")))?;
        let auth = match &options.credentials {
            Some(c) if c.is_identity_token() => RegistryAuth::IdentityToken(c.password.clone()),
            Some(c) => RegistryAuth::Basic(c.username.clone(), c.password.clone()),
            None => RegistryAuth::Anonymous,
        };
        Ok(Self {
            client,
            rt,
            auth,
            registry,
            options,
            authenticated: std::cell::Cell::new(false),
            pushing: std::cell::Cell::new(false),
        })
    }

    fn classify(&self, reference: &str, e: &OciDistributionError) -> (Transience, Error) {
        classify(&self.registry, reference, e)
    }

    fn with_retries<T, F, Fut>(&self, what: &str, reauth: Option<&ImageRef>, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, OciDistributionError>>,
    {
        let mut delay = self.options.backoff;
        let mut attempt = 1;
        let mut reauthed = false;
        loop {
            match self.rt.block_on(op()) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    // A token that expired during a long pull: ask for a new
                    // one, once, and try again.
                    if let (OciDistributionError::UnauthorizedError { .. }, Some(r), false) =
                        (&e, reauth, reauthed)
                    {
                        reauthed = true;
                        tracing::info!("{what}: 401 Unauthorized; asking for a new token");
                        let oci = r.as_oci().clone();
                        let operation = if self.pushing.get() {
                            oci_client::RegistryOperation::Push
                        } else {
                            oci_client::RegistryOperation::Pull
                        };
                        let _ = self
                            .rt
                            .block_on(self.client.auth(&oci, &self.auth, operation));
                        continue;
                    }
                    let (transience, err) = self.classify(what, &e);
                    if transience == Transience::Permanent || attempt >= self.options.attempts {
                        return Err(annotate_attempts(err, attempt));
                    }
                    tracing::info!("{what}: {err}; retrying in {delay:?} (attempt {attempt})");
                    std::thread::sleep(delay);
                    delay *= 2;
                    attempt += 1;
                }
            }
        }
    }

    /// Fetches a manifest or index: its bytes, its digest (verified against a
    /// pinned reference) and its media type.
    pub fn manifest(&self, reference: &ImageRef) -> Result<(Vec<u8>, String)> {
        self.authenticate_once(reference)?;
        let oci = reference.as_oci().clone();
        let (bytes, digest) = self.with_retries(&reference.to_string(), Some(reference), || {
            self.client
                .pull_manifest_raw(&oci, &self.auth, MANIFEST_TYPES)
        })?;
        let actual = crate::layer::sha256_digest(&bytes);
        if let Some(pinned) = reference.digest() {
            if pinned != actual {
                return Err(Error::Integrity {
                    what: format!("manifest of {reference}"),
                    detail: format!("expected {pinned}, got {actual}"),
                });
            }
        }
        if digest != actual {
            tracing::debug!("registry digest header {digest} differs from content digest {actual}");
        }
        Ok((bytes.to_vec(), actual))
    }

    /// Fetches a small blob (a config) into memory and verifies it.
    pub fn small_blob(&self, reference: &ImageRef, digest: &str, size: u64) -> Result<Vec<u8>> {
        const LIMIT: u64 = 64 << 20;
        if size > LIMIT {
            return Err(Error::BadImage(format!(
                "config blob {digest} is {size} bytes, over the {LIMIT}-byte limit"
            )));
        }
        let mut out = Vec::with_capacity(size as usize);
        let mut reader = self.blob(reference, digest, size, "config")?;
        reader.read_to_end(&mut out).map_err(|e| {
            crate::layer::from_io(e, |e| Error::Network {
                registry: self.registry.clone(),
                detail: e.to_string(),
            })
        })?;
        Ok(out)
    }

    /// Streams a blob, resuming with HTTP ranges after transient failures.
    /// The reader verifies size and digest and fails at the end on mismatch.
    pub fn blob(
        &self,
        reference: &ImageRef,
        digest: &str,
        size: u64,
        what: &str,
    ) -> Result<impl Read + Send + 'static> {
        Ok(self.fetcher(reference).blob(digest, size, what))
    }

    /// A handle that fetches `reference`'s blobs from any thread, for
    /// parallel downloads; valid while this client lives.
    pub fn fetcher(&self, reference: &ImageRef) -> BlobFetcher {
        BlobFetcher {
            client: self.client.clone(),
            auth: self.auth.clone(),
            runtime: self.rt.handle().clone(),
            reference: reference.clone(),
            options: self.options.clone(),
            registry: self.registry.clone(),
        }
    }

    /// Checks that the credentials work (for `berth login`). On a token
    /// registry, the token server answers for them (as `docker login`
    /// does: a token request with the credentials); on a basic-auth
    /// registry, a manifest request for `reference` must be authorised,
    /// and "not found" means the credentials were accepted.
    pub fn check_login(&self, reference: &ImageRef) -> Result<()> {
        let oci = reference.as_oci().clone();
        let token = self.with_retries(&reference.to_string(), None, || {
            self.client
                .auth(&oci, &self.auth, oci_client::RegistryOperation::Pull)
        })?;
        if token.is_some() {
            return Ok(());
        }
        match self.manifest(reference) {
            Ok(_) | Err(Error::RegistryNotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// With credentials on a token registry, asks the token server first:
    /// its refusal ("invalid user name or password") is the message worth
    /// showing, which a later 401 of the registry would hide.
    /// Authenticates for pushing to `reference`'s repository (a token with
    /// the push scope; anonymous registries need none).
    pub fn authenticate_push(&self, reference: &ImageRef) -> Result<()> {
        self.pushing.set(true);
        let oci = reference.as_oci().clone();
        self.with_retries(&reference.to_string(), None, || {
            self.client
                .auth(&oci, &self.auth, oci_client::RegistryOperation::Push)
        })?;
        self.authenticated.set(true);
        Ok(())
    }

    /// Whether the repository of `reference` has the blob `digest`.
    pub fn has_blob(&self, reference: &ImageRef, digest: &str) -> Result<bool> {
        let oci = reference.as_oci().clone();
        self.with_retries(digest, Some(reference), || {
            self.client.blob_exists(&oci, digest)
        })
    }

    /// Asks the registry to link the blob `digest` of repository `from`
    /// (on the same registry) into `reference`'s, so that it need not be
    /// uploaded (a cross-repository mount); whether it did. A registry that
    /// will not (or a token without pull access to `from`) says so by
    /// starting an upload instead, which is left to expire.
    pub fn mount_blob(&self, reference: &ImageRef, from: &ImageRef, digest: &str) -> bool {
        if from.registry() != reference.registry() || from.repository() == reference.repository() {
            return false;
        }
        let result = self.rt.block_on(self.client.mount_blob(
            reference.as_oci(),
            from.as_oci(),
            digest,
        ));
        if let Err(e) = &result {
            tracing::debug!("{digest}: no mount from {}: {e}", from.repository());
        }
        result.is_ok()
    }

    /// Uploads the blob in `path` (its digest `digest`), streaming it in
    /// chunks; a failed upload starts over (registries do not resume one
    /// upload session across failures).
    pub fn push_blob_file(
        &self,
        reference: &ImageRef,
        path: &std::path::Path,
        digest: &str,
        size: u64,
    ) -> Result<()> {
        let oci = reference.as_oci().clone();
        self.with_retries(digest, Some(reference), || {
            let file = std::fs::File::open(path);
            let client = &self.client;
            let oci = oci.clone();
            async move {
                let file = file.map_err(OciDistributionError::IoError)?;
                let stream = futures_util::stream::unfold(Some(file), |state| async move {
                    let mut f = state?;
                    let mut buf = vec![0u8; 4 << 20];
                    match std::io::Read::read(&mut f, &mut buf) {
                        Ok(0) => None,
                        Ok(n) => {
                            buf.truncate(n);
                            Some((Ok(bytes::Bytes::from(buf)), Some(f)))
                        }
                        Err(e) => Some((Err(OciDistributionError::IoError(e)), None)),
                    }
                });
                client
                    .push_blob_stream(&oci, stream, digest, Some(size))
                    .await
                    .map(|_| ())
            }
        })
    }

    /// Uploads a manifest (by the reference's tag); returns its URL.
    pub fn push_manifest(
        &self,
        reference: &ImageRef,
        bytes: &[u8],
        media_type: &str,
    ) -> Result<String> {
        let oci = reference.as_oci().clone();
        let content_type = http::HeaderValue::from_str(media_type)
            .map_err(|e| Error::BadImage(format!("media type {media_type:?}: {e}")))?;
        self.with_retries(&reference.to_string(), Some(reference), || {
            self.client
                .push_manifest_raw(&oci, bytes.to_vec(), content_type.clone())
        })
    }

    fn authenticate_once(&self, reference: &ImageRef) -> Result<()> {
        if self.options.credentials.is_none() || self.authenticated.get() {
            return Ok(());
        }
        let oci = reference.as_oci().clone();
        self.with_retries(&reference.to_string(), None, || {
            self.client
                .auth(&oci, &self.auth, oci_client::RegistryOperation::Pull)
        })?;
        self.authenticated.set(true);
        Ok(())
    }
}
