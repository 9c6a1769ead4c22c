//! Access to etcd: TLS (the CA that signed the members' certificates, this host's client
//! certificate) and etcd's user/password authentication, as etcdctl's `--cacert`, `--cert`,
//! `--key` and `--user` set them; and the words for etcd's refusals, which name the cause.
//!
//! One model's prefix is meant to be one etcd role: a role with `readwrite` on the prefix
//! (`etcdctl role grant-permission ROLE --prefix=true readwrite PREFIX/`), granted to the
//! users of the hosts of that model alone. A host whose user has no such role is refused
//! when it opens the model, before it writes anything.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

use super::EtcdConfig;
use crate::store::StoreError;

/// TLS towards etcd: whom to trust, and who this host is when etcd asks for client
/// certificates (`--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM file of the CA that signed the etcd members' server certificates (etcdctl's
    /// `--cacert`).
    pub ca: PathBuf,
    /// This host's client certificate and key, if etcd asks for one.
    pub identity: Option<EtcdIdentity>,
}

/// A client certificate and its private key, both PEM files (etcdctl's `--cert`, `--key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdIdentity {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// An etcd user and its password (etcd's `auth enable`).
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    /// The user's name.
    pub user: String,
    /// The user's password.
    pub password: String,
}

impl std::fmt::Debug for EtcdAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A password in a log line is a password leaked.
        f.debug_struct("EtcdAuth")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

fn read_pem(what: &str, path: &Path, marker: &str) -> Result<Vec<u8>, StoreError> {
    let pem = std::fs::read(path)
        .map_err(|e| StoreError::Invalid(format!("etcd {what} {}: {e}", path.display())))?;
    // Checked here: a file that is not PEM would fail later as an obscure handshake error.
    if !String::from_utf8_lossy(&pem).contains(marker) {
        return Err(StoreError::Invalid(format!(
            "etcd {what} {}: not a PEM file with a `{marker}` block",
            path.display()
        )));
    }
    Ok(pem)
}

impl EtcdTls {
    /// The TLS options, the files read now (so a certificate renewed on disk is used by
    /// the next connection).
    fn options(&self) -> Result<TlsOptions, StoreError> {
        let ca = read_pem("CA", &self.ca, "BEGIN CERTIFICATE")?;
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let Some(identity) = &self.identity {
            let cert = read_pem("client certificate", &identity.cert, "BEGIN CERTIFICATE")?;
            let key = read_pem("client key", &identity.key, "PRIVATE KEY")?;
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        Ok(tls)
    }
}

/// The connection options for `config`: timeouts, TLS, the user.
pub(super) fn connect_options(config: &EtcdConfig) -> Result<ConnectOptions, StoreError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(config.request_timeout)
        .with_timeout(config.request_timeout)
        .with_keep_alive(Duration::from_secs(2), config.request_timeout);
    if let Some(tls) = &config.tls {
        options = options.with_tls(tls.options()?);
    }
    if let Some(auth) = &config.auth {
        // etcd's tokens expire (`--auth-token-ttl`, five minutes by default): a host that
        // runs for days gets a new one when its own lapses.
        options = options
            .with_user(auth.user.clone(), auth.password.clone())
            .with_auto_token_refresh(true);
    }
    Ok(options)
}

/// Every message in `e`'s chain of causes, outermost first.
fn causes(e: &etcd_client::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text += ": ";
            text += &next;
        }
        source = cause.source();
    }
    text
}

/// Why etcd refused this host, if `e` is a refusal (of a certificate, a password or a
/// permission) rather than a failure worth retrying.
pub(super) fn refusal(e: &etcd_client::Error, config: &EtcdConfig) -> Option<String> {
    let text = causes(e);
    let user = config.auth.as_ref().map_or("", |a| a.user.as_str());
    let ca = config
        .tls
        .as_ref()
        .map_or_else(String::new, |t| t.ca.display().to_string());
    let cert = config
        .tls
        .as_ref()
        .and_then(|t| t.identity.as_ref())
        .map(|i| i.cert.display().to_string());
    let why = if text.contains("authentication failed") {
        format!(
            "etcd refused user `{user}`: authentication failed (wrong password, or no such user)"
        )
    } else if text.contains("user name is empty") || text.contains("user name not found") {
        "etcd has authentication enabled and no user was given: set --etcd-user (ETCDCTL_USER) and its password (ETCDCTL_PASSWORD or --etcd-password-file)".to_string()
    } else if text.contains("permission denied") {
        format!(
            "etcd user `{user}` may not read and write keys under `{}/`: it holds no role with readwrite on that prefix (etcdctl role grant-permission ROLE --prefix=true readwrite {}/)",
            config.prefix, config.prefix
        )
    } else if text.contains("UnknownIssuer") || text.contains("BadSignature") {
        format!("etcd's server certificate is not signed by the CA in {ca} (unknown issuer)")
    } else if text.contains("invalid peer certificate: Expired") {
        "etcd's server certificate has expired".to_string()
    } else if text.contains("NotValidForName") {
        format!(
            "etcd's server certificate is not valid for the endpoint's name ({})",
            config.endpoints.join(",")
        )
    } else if let Some(alert) = tls_alert(&text) {
        let ours = cert.map_or_else(
            || "no client certificate was given (--etcd-cert, --etcd-key)".to_string(),
            |c| format!("the client certificate {c}"),
        );
        let cause = match alert {
            "CertificateExpired" => "it has expired",
            "CertificateRequired" => "etcd asks for one",
            "UnknownCA" => "it is not signed by a CA etcd trusts (its --trusted-ca-file)",
            _ => {
                "expired, not yet valid, or not signed by a CA etcd trusts (its --trusted-ca-file)"
            }
        };
        format!("etcd refused {ours} in the TLS handshake ({alert}): {cause}")
    } else if text.contains("InvalidContentType") || text.contains("corrupt message") {
        format!(
            "etcd at {} does not answer TLS: drop --etcd-cacert, or enable TLS on etcd",
            config.endpoints.join(",")
        )
    } else {
        return None;
    };
    Some(why)
}

/// The TLS alert etcd sent, such as `BadCertificate`, if the text reports one.
fn tls_alert(text: &str) -> Option<&str> {
    let rest = &text[text.find("received fatal alert: ")? + "received fatal alert: ".len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}
