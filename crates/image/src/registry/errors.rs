//! What a registry error means for berth: worth another try or not, and
//! the message and exit class the user sees.

use oci_client::errors::{OciDistributionError, OciErrorCode};

use crate::error::Error;

/// Whether an error is worth another try.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Transience {
    Transient,
    Permanent,
}

pub(super) fn classify(
    registry: &str,
    reference: &str,
    e: &OciDistributionError,
) -> (Transience, Error) {
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
                let through = re.url().and_then(|u| {
                    super::proxy::proxy_for(u.scheme() == "https", u.host_str()?)
                        .map(|p| (p, u.host_str().unwrap_or_default().to_string()))
                });
                if let Some(((var, proxy), host)) = through {
                    return (
                        Transient,
                        network(format!(
                            "{msg}; the request went through the proxy {proxy} ({var}): \
                             check that it is up, or add {host} to NO_PROXY to go direct"
                        )),
                    );
                }
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

pub(super) fn annotate_attempts(err: Error, attempts: u32) -> Error {
    match err {
        Error::Network { registry, detail } if attempts > 1 => Error::Network {
            registry,
            detail: format!("{detail} (gave up after {attempts} attempts)"),
        },
        other => other,
    }
}
