//! Blob downloads: a task on the client's runtime that fetches a blob,
//! resuming with HTTP ranges after transient failures, and feeds a bounded
//! channel that the caller reads as a blocking [`Read`].

use std::io::{self, Read};

use bytes::Bytes;
use futures_util::StreamExt;
use oci_client::client::BlobResponse;
use oci_client::errors::OciDistributionError;
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::Client;

use super::errors::{annotate_attempts, classify, Transience};
use super::RegistryOptions;
use crate::error::Error;
use crate::reference::ImageRef;

/// Fetches the blobs of one repository from any thread: each blob is a
/// task on the registry client's runtime (see [`super::Registry::fetcher`]).
#[derive(Clone)]
pub struct BlobFetcher {
    pub(super) client: Client,
    pub(super) auth: RegistryAuth,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) reference: ImageRef,
    pub(super) options: RegistryOptions,
    pub(super) registry: String,
}

impl BlobFetcher {
    /// The registry's host, for messages.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// Streams the blob `digest`, resuming with HTTP ranges after
    /// transient failures. The reader verifies size and digest and fails
    /// at the end on a mismatch; `what` names the blob in errors.
    pub fn blob(&self, digest: &str, size: u64, what: &str) -> impl Read + Send + 'static {
        let reader = self.spawn(digest, size, (0, size), None, what.to_string());
        crate::layer::VerifyingReader::new(reader, &format!("{what} {digest}"), digest, Some(size))
    }

    /// Streams bytes `start..end` of the blob `digest` (of `size` bytes)
    /// with an HTTP range request, resuming after transient failures; the
    /// caller verifies the whole blob. A registry that answers a range
    /// request with the whole blob sets `ranges_ignored` and ends the
    /// stream with [`Error::Cancelled`].
    pub fn range(
        &self,
        digest: &str,
        size: u64,
        (start, end): (u64, u64),
        ranges_ignored: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> impl Read + Send + 'static {
        let what = format!("layer {digest} bytes {start}-{end}");
        self.spawn(
            digest,
            size,
            (start, end.min(size)),
            Some(ranges_ignored),
            what,
        )
    }

    /// Starts the download task of `range` of a blob; its reader.
    fn spawn(
        &self,
        digest: &str,
        size: u64,
        (start, end): (u64, u64),
        ranges_ignored: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
        what: String,
    ) -> ChannelReader {
        let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<Bytes, Error>>(64);
        let task = BlobTask {
            client: self.client.clone(),
            auth: self.auth.clone(),
            reference: self.reference.clone(),
            desc: OciDescriptor {
                digest: digest.to_string(),
                size: size as i64,
                ..OciDescriptor::default()
            },
            size,
            start,
            end,
            ranges_ignored,
            options: self.options.clone(),
            registry: self.registry.clone(),
            what,
        };
        self.runtime.spawn(async move { task.run(tx).await });
        ChannelReader {
            rx,
            current: Bytes::new(),
        }
    }
}

/// One blob download: what to fetch, from where, and how often to try.
struct BlobTask {
    client: Client,
    auth: RegistryAuth,
    reference: ImageRef,
    desc: OciDescriptor,
    size: u64,
    /// The bytes wanted: `start..end` (`0..size` for the whole blob).
    start: u64,
    end: u64,
    /// Set when a range request got the whole blob (a ranged part only).
    ranges_ignored: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
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
        let mut offset: u64 = self.start;
        let mut attempt = 1;
        let mut reauthed = false;
        let mut delay = self.options.backoff;
        let name = if self.ranges_ignored.is_some() {
            self.what.clone()
        } else {
            format!("{} {}", self.what, self.desc.digest)
        };
        'retry: loop {
            let failure: (Transience, Error) = 'attempt: {
                let stream = if offset == 0 && self.end == self.size {
                    self.client
                        .pull_blob_stream(&oci, &self.desc)
                        .await
                        .map(|s| (s, 0u64))
                } else {
                    match self
                        .client
                        .pull_blob_stream_partial(&oci, &self.desc, offset, Some(self.end - offset))
                        .await
                    {
                        Ok(BlobResponse::Partial(s)) => Ok((s, 0)),
                        Ok(BlobResponse::Full(_)) if self.ranges_ignored.is_some() => {
                            if let Some(flag) = &self.ranges_ignored {
                                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            let _ = tx.send(Err(Error::Cancelled)).await;
                            return;
                        }
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
                            if offset + bytes.len() as u64 > self.end {
                                bytes = bytes.slice(..(self.end - offset) as usize);
                            }
                            offset += bytes.len() as u64;
                            attempt = 1;
                            delay = self.options.backoff;
                            if tx.send(Ok(bytes)).await.is_err() {
                                return; // The reader went away.
                            }
                            if offset >= self.end {
                                return; // The part is complete.
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
                            if is_digest && offset >= self.end {
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
                if offset >= self.end {
                    return; // Complete; the reader checks the digest.
                }
                (
                    Transience::Transient,
                    Error::Network {
                        registry: self.registry.clone(),
                        detail: format!(
                            "{name}: the registry closed the connection after {offset} of {} bytes",
                            self.end
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
