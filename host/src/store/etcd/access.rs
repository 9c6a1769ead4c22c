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

/// The store error for `e`, a failure to open the model: [`StoreError::Denied`] naming the
/// cause if etcd refused this host, [`StoreError::Unavailable`] otherwise.
pub(super) async fn explain(e: etcd_client::Error, config: &EtcdConfig) -> StoreError {
    if let Some(why) = refusal(&e, config) {
        return StoreError::Denied(why);
    }
    // With TLS 1.3 the server judges the client's certificate after the client finished its
    // handshake: the client may be writing when the alert comes, and see only a broken
    // pipe. A handshake of our own that reads the server's verdict tells which.
    if config.tls.is_some() {
        let probe_config = config.clone();
        if let Ok(Some(alert)) =
            tokio::task::spawn_blocking(move || handshake_alert(&probe_config)).await
            && let Some(why) = refusal_text(&format!("received fatal alert: {alert}"), config)
        {
            return StoreError::Denied(why);
        }
    }
    // Plaintext to a member that speaks TLS fails as a reset connection, which would be
    // retried for ever as an outage: a handshake of our own tells.
    if config.tls.is_none() {
        let endpoints = config.endpoints.clone();
        let timeout = config.request_timeout;
        if let Ok(Some(endpoint)) =
            tokio::task::spawn_blocking(move || speaks_tls(&endpoints, timeout)).await
        {
            return StoreError::Denied(format!(
                "etcd at {endpoint} speaks TLS, and no CA was given: pass --etcd-cacert (ETCDCTL_CACERT) with the CA that signed its certificate, and --etcd-cert and --etcd-key if it asks for a client certificate"
            ));
        }
    }
    StoreError::Unavailable(format!("etcd at {}: {e}", config.endpoints.join(",")))
}

/// A connection to `endpoint` (`HOST:PORT`) made within `timeout`, at its first address
/// that takes one: a member that drops packets costs the timeout, not the system's two
/// minutes.
fn connect_within(endpoint: &str, timeout: std::time::Duration) -> Option<std::net::TcpStream> {
    use std::net::ToSocketAddrs as _;
    endpoint
        .to_socket_addrs()
        .ok()?
        .find_map(|addr| std::net::TcpStream::connect_timeout(&addr, timeout).ok())
}

/// The first of `endpoints` that answers a TLS handshake with a certificate: one trusting
/// no CA at all fails there, and only there, against a server that speaks TLS.
fn speaks_tls(endpoints: &[String], timeout: std::time::Duration) -> Option<String> {
    use std::io::Read;
    use std::sync::Arc;

    use rustls_pki_types::ServerName;

    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    );
    endpoints.iter().find_map(|endpoint| {
        let (host, _) = endpoint.rsplit_once(':')?;
        let name = ServerName::try_from(host.to_string()).ok()?;
        let mut connection = rustls::ClientConnection::new(client.clone(), name).ok()?;
        let mut socket = connect_within(endpoint, timeout)?;
        let _ = socket.set_read_timeout(Some(timeout));
        let _ = socket.set_write_timeout(Some(timeout));
        let mut stream = rustls::Stream::new(&mut connection, &mut socket);
        let error = stream.read(&mut [0u8; 1]).err()?;
        error
            .to_string()
            .contains("invalid peer certificate")
            .then(|| endpoint.clone())
    })
}

/// The TLS alert an etcd member answers a handshake with this host's TLS settings with, if
/// any: a handshake made here, then a read, which waits for the server's verdict.
fn handshake_alert(config: &EtcdConfig) -> Option<String> {
    use std::io::Read;
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    let tls = config.tls.as_ref()?;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(&tls.ca).ok()?)
        .ok()?;
    // The provider etcd-client's TLS (tonic's `tls-ring`) uses: the probe speaks as it does.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let client = Arc::new(match &tls.identity {
        Some(identity) => {
            let certs = CertificateDer::pem_file_iter(&identity.cert)
                .ok()?
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            let key = PrivateKeyDer::from_pem_file(&identity.key).ok()?;
            builder.with_client_auth_cert(certs, key).ok()?
        }
        None => builder.with_no_client_auth(),
    });
    for endpoint in &config.endpoints {
        let Some((host, _)) = endpoint.rsplit_once(':') else {
            continue;
        };
        let Ok(name) = ServerName::try_from(host.to_string()) else {
            continue;
        };
        let Ok(mut connection) = rustls::ClientConnection::new(client.clone(), name) else {
            continue;
        };
        let Some(mut socket) = connect_within(endpoint, config.request_timeout) else {
            continue;
        };
        let _ = socket.set_read_timeout(Some(config.request_timeout));
        let _ = socket.set_write_timeout(Some(config.request_timeout));
        let mut stream = rustls::Stream::new(&mut connection, &mut socket);
        let mut byte = [0u8; 1];
        if let Err(e) = stream.read(&mut byte) {
            let text = e.to_string();
            if let Some(alert) = tls_alert(&text) {
                return Some(alert.to_string());
            }
        }
    }
    None
}

/// Why etcd refused this host, if `e` is a refusal (of a certificate, a password or a
/// permission) rather than a failure worth retrying.
pub(super) fn refusal(e: &etcd_client::Error, config: &EtcdConfig) -> Option<String> {
    refusal_text(&causes(e), config)
}

/// Why etcd refused this host, if `text` (an error and its causes) says it did.
fn refusal_text(text: &str, config: &EtcdConfig) -> Option<String> {
    // Without a user, etcd takes the client certificate's common name as the user.
    let user = match &config.auth {
        Some(auth) => auth.user.clone(),
        None => config
            .tls
            .as_ref()
            .and_then(|t| t.identity.as_ref())
            .and_then(|i| certificate_common_name(&i.cert))
            .unwrap_or_else(|| "(the client certificate's common name)".to_string()),
    };
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
    } else if let Some(alert) = tls_alert(text) {
        let Some(cert) = cert else {
            return Some(format!(
                "etcd refused the TLS handshake ({alert}): it asks for a client certificate, and none was given (--etcd-cert, --etcd-key)"
            ));
        };
        // etcd answers any certificate it rejects with the same alert (`BadCertificate`):
        // the certificate's own dates tell an expired one from one signed by another CA.
        let cause = match validity(Path::new(&cert), Path::new(&ca)) {
            Validity::Expired(when) => format!("it expired on {when}"),
            Validity::NotYet(when) => format!("it is not valid before {when}"),
            Validity::Unknown => {
                "it is not signed by a CA etcd trusts (its --trusted-ca-file)".to_string()
            }
        };
        format!(
            "etcd refused the client certificate {cert} in the TLS handshake ({alert}): {cause}"
        )
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

/// Where now stands in a certificate's validity period.
enum Validity {
    /// Expired on this date.
    Expired(String),
    /// Valid from this date.
    NotYet(String),
    /// Current, or unreadable.
    Unknown,
}

/// The validity of the client certificate in the PEM file `cert`, as webpki finds it when
/// checking it against `ca` (its dates are checked before its issuer).
fn validity(cert: &Path, ca: &Path) -> Validity {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, UnixTime};
    let (Ok(cert), Ok(ca)) = (
        CertificateDer::from_pem_file(cert),
        CertificateDer::from_pem_file(ca),
    ) else {
        return Validity::Unknown;
    };
    let (Ok(end_entity), Ok(anchor)) = (
        webpki::EndEntityCert::try_from(&cert),
        webpki::anchor_from_trusted_cert(&ca),
    ) else {
        return Validity::Unknown;
    };
    let anchors = [anchor];
    let verdict = end_entity.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &anchors,
        &[],
        UnixTime::now(),
        webpki::KeyUsage::client_auth(),
        None,
        None,
    );
    match verdict {
        Err(webpki::Error::CertExpired { not_after, .. }) => {
            Validity::Expired(date(not_after.as_secs()))
        }
        Err(webpki::Error::CertNotValidYet { not_before, .. }) => {
            Validity::NotYet(date(not_before.as_secs()))
        }
        _ => Validity::Unknown,
    }
}

/// `YYYY-MM-DD` (UTC) of a Unix time (the civil-from-days algorithm of H. Hinnant).
fn date(secs: u64) -> String {
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The common name of the subject of the certificate in the PEM file at `path`: the user
/// etcd takes a certificate-only login for. `None` if it has none, or cannot be read.
fn certificate_common_name(path: &std::path::Path) -> Option<String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    // The DER of the attribute type id-at-commonName (2.5.4.3).
    const COMMON_NAME: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
    let der = CertificateDer::from_pem_file(path).ok()?;
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
    // serialNumber, signature, issuer, validity, subject, ... }, ... }
    let (_, certificate, _) = der_element(der.as_ref())?;
    let (_, tbs, _) = der_element(certificate)?;
    let mut rest = tbs;
    let (tag, _, after) = der_element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        rest = der_element(rest)?.2;
    }
    let (_, subject, _) = der_element(rest)?;
    let at = subject
        .windows(COMMON_NAME.len())
        .position(|w| w == COMMON_NAME)?
        + COMMON_NAME.len();
    let (_, name, _) = der_element(subject.get(at..)?)?;
    std::str::from_utf8(name).ok().map(str::to_string)
}

/// The first DER element of `bytes`: its tag, its contents, and what follows it.
fn der_element(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let octets = (first & 0x7f) as usize;
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (len, after) = rest.split_at(octets);
        rest = after;
        len.iter().fold(0usize, |n, &b| (n << 8) | b as usize)
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::date;

    #[test]
    fn dates_of_unix_times() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(1_609_459_200), "2021-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
    }
}
