//! The OCI distribution client: `oci-client` with berth's retry, resume,
//! credential lookup and error messages around it.
//!
//! `oci-client` is async; berth's pipeline is threads and pipes. A small
//! tokio runtime owned by [`Registry`] runs the HTTP work, and blobs reach the
//! caller as a blocking [`Read`] fed through a bounded channel, so a slow
//! consumer applies back-pressure instead of buffering a layer in memory.

use std::io::{self, Read};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use oci_client::client::{BlobResponse, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::Client;

use crate::auth::Credentials;
use crate::error::{Error, Result};
use crate::reference::ImageRef;

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

/// Whether an error is worth another try.
#[derive(Debug, PartialEq, Eq)]
enum Transience {
    Transient,
    Permanent,
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
            .worker_threads(1)
            .thread_name("berth-http")
            .enable_all()
            .build()
            .map_err(|e| Error::HostTool(format!("cannot start the HTTP runtime: {e}")))?;
        let auth = match &options.credentials {
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
        let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<Bytes, Error>>(64);
        let task = BlobTask {
            client: self.client.clone(),
            auth: self.auth.clone(),
            reference: reference.clone(),
            desc: OciDescriptor {
                digest: digest.to_string(),
                size: size as i64,
                ..OciDescriptor::default()
            },
            size,
            options: self.options.clone(),
            registry: self.registry.clone(),
            what: what.to_string(),
        };
        self.rt.spawn(async move { task.run(tx).await });
        let reader = ChannelReader {
            rx,
            current: Bytes::new(),
        };
        Ok(crate::layer::VerifyingReader::new(
            reader,
            &format!("{what} {digest}"),
            digest,
            Some(size),
        ))
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

fn classify(registry: &str, reference: &str, e: &OciDistributionError) -> (Transience, Error) {
    use Transience::*;
    let registry = registry.to_string();
    let auth = |detail: String| Error::Auth {
        registry: registry.clone(),
        detail,
    };
    let not_found = |detail: String| Error::RegistryNotFound {
        reference: reference.to_string(),
        detail,
    };
    let network = |detail: String| Error::Network {
        registry: registry.clone(),
        detail,
    };
    match e {
        OciDistributionError::AuthenticationFailure(m) => (Permanent, auth(m.clone())),
        OciDistributionError::UnauthorizedError { url } => (Permanent, auth(format!("401 Unauthorized for {url}"))),
        OciDistributionError::ImageManifestNotFoundError(m) => (Permanent, not_found(m.clone())),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|x| &x.code).collect();
            let detail = envelope
                .errors
                .iter()
                .map(|x| format!("{:?}: {}", x.code, x.message))
                .collect::<Vec<_>>()
                .join("; ");
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                (Permanent, not_found(detail))
            } else if codes.iter().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                (Permanent, auth(detail))
            } else if codes.iter().any(|c| matches!(c, OciErrorCode::Toomanyrequests)) {
                (Transient, network(format!("rate limited: {detail}; try again later")))
            } else {
                (Permanent, Error::BadImage(format!("registry error: {detail}")))
            }
        }
        OciDistributionError::ServerError { code, url, message } => match code {
            401 | 403 => (Permanent, auth(format!("HTTP {code} for {url}: {message}"))),
            404 => (Permanent, not_found(format!("HTTP 404 for {url}"))),
            408 | 425 | 429 | 500..=599 => (
                Transient,
                network(format!("HTTP {code} for {url}: {message}; the registry is failing, try again later")),
            ),
            _ => (Permanent, network(format!("HTTP {code} for {url}: {message}"))),
        },
        // A status the client turned into a request error (a HEAD for a
        // blob, say): 401/403 are a login problem, not the network.
        OciDistributionError::RequestError(re)
            if matches!(re.status().map(|s| s.as_u16()), Some(401 | 403)) =>
        {
            (Permanent, auth(format!("{re}")))
        }
        OciDistributionError::RequestError(re) => {
            let mut msg = format!("{re}");
            let mut src: Option<&dyn std::error::Error> = std::error::Error::source(re);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            let hint = if msg.contains("InvalidContentType") || msg.contains("invalid HTTP version") || msg.contains("record overflow") || msg.contains("CorruptMessage") {
                "; if the registry speaks plain HTTP, pass --tls-verify=false or list it in insecure_registries"
            } else if re.is_connect() {
                "; check the address and that the registry is up"
            } else {
                ""
            };
            (Transient, network(format!("{msg}{hint}")))
        }
        OciDistributionError::IoError(io) => (Transient, network(io.to_string())),
        OciDistributionError::DigestError(d) => (
            Permanent,
            Error::Integrity {
                what: reference.to_string(),
                detail: d.to_string(),
            },
        ),
        OciDistributionError::UnsupportedSchemaVersionError(1) => (
            Permanent,
            Error::BadImage(format!(
                "{reference} uses a Docker schema 1 manifest, which is deprecated and unsupported; re-push it with a current docker, podman or skopeo"
            )),
        ),
        other => (Permanent, Error::BadImage(format!("{reference}: {other}"))),
    }
}

fn annotate_attempts(err: Error, attempts: u32) -> Error {
    match err {
        Error::Network { registry, detail } if attempts > 1 => Error::Network {
            registry,
            detail: format!("{detail} (gave up after {attempts} attempts)"),
        },
        other => other,
    }
}

struct BlobTask {
    client: Client,
    auth: RegistryAuth,
    reference: ImageRef,
    desc: OciDescriptor,
    size: u64,
    options: RegistryOptions,
    registry: String,
    what: String,
}

impl BlobTask {
    async fn run(self, tx: tokio::sync::mpsc::Sender<std::result::Result<Bytes, Error>>) {
        let oci = self.reference.as_oci().clone();
        self.client
            .store_auth_if_needed(oci.resolve_registry(), &self.auth)
            .await;
        let mut offset: u64 = 0;
        let mut attempt = 1;
        let mut reauthed = false;
        let mut delay = self.options.backoff;
        let name = format!("{} {}", self.what, self.desc.digest);
        'retry: loop {
            let failure: (Transience, Error) = 'attempt: {
                let stream = if offset == 0 {
                    self.client
                        .pull_blob_stream(&oci, &self.desc)
                        .await
                        .map(|s| (s, 0u64))
                } else {
                    match self
                        .client
                        .pull_blob_stream_partial(
                            &oci,
                            &self.desc,
                            offset,
                            Some(self.size - offset),
                        )
                        .await
                    {
                        Ok(BlobResponse::Partial(s)) => Ok((s, 0)),
                        // The registry ignored the range: skip what we have.
                        Ok(BlobResponse::Full(s)) => Ok((s, offset)),
                        Err(e) => Err(e),
                    }
                };
                let (mut stream, mut skip) = match stream {
                    Ok(s) => s,
                    Err(OciDistributionError::UnauthorizedError { .. }) if !reauthed => {
                        // An expired token: a new one, once, then again.
                        reauthed = true;
                        let _ = self
                            .client
                            .auth(&oci, &self.auth, oci_client::RegistryOperation::Pull)
                            .await;
                        continue 'retry;
                    }
                    Err(e) => break 'attempt classify(&self.registry, &name, &e),
                };
                while let Some(chunk) = stream.stream.next().await {
                    match chunk {
                        Ok(mut bytes) => {
                            if skip > 0 {
                                let n = skip.min(bytes.len() as u64);
                                skip -= n;
                                bytes = bytes.slice(n as usize..);
                                if bytes.is_empty() {
                                    continue;
                                }
                            }
                            offset += bytes.len() as u64;
                            attempt = 1;
                            delay = self.options.backoff;
                            if tx.send(Ok(bytes)).await.is_err() {
                                return; // The reader went away.
                            }
                        }
                        Err(e) => {
                            let is_digest = e
                                .get_ref()
                                .is_some_and(|r| r.is::<oci_client::errors::DigestError>());
                            // oci-client checks the digest when the body
                            // ends: a body that ended short (a truncated
                            // response) is incomplete, not wrong, and the
                            // rest is fetched with a range request.
                            if is_digest && offset >= self.size {
                                break 'attempt (
                                    Transience::Permanent,
                                    Error::Integrity {
                                        what: name.clone(),
                                        detail: e.to_string(),
                                    },
                                );
                            }
                            break 'attempt (
                                Transience::Transient,
                                Error::Network {
                                    registry: self.registry.clone(),
                                    detail: format!(
                                        "{name}: connection failed after {offset} bytes: {e}"
                                    ),
                                },
                            );
                        }
                    }
                }
                if offset >= self.size {
                    return; // Complete; the reader checks the digest.
                }
                (
                    Transience::Transient,
                    Error::Network {
                        registry: self.registry.clone(),
                        detail: format!(
                            "{name}: the registry closed the connection after {offset} of {} bytes",
                            self.size
                        ),
                    },
                )
            };
            let (transience, err) = failure;
            if transience == Transience::Permanent || attempt >= self.options.attempts {
                let _ = tx.send(Err(annotate_attempts(err, attempt))).await;
                return;
            }
            tracing::info!("{err}; resuming at byte {offset} in {delay:?} (attempt {attempt})");
            tokio::time::sleep(delay).await;
            delay *= 2;
            attempt += 1;
        }
    }
}

/// A blocking reader over the download task's channel.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<std::result::Result<Bytes, Error>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(crate::layer::to_io(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}
