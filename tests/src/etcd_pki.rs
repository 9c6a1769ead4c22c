//! Certificates for an etcd serving TLS, made by the test: a CA, a server certificate for
//! 127.0.0.1, client certificates (valid or expired), each written as PEM files into a
//! temporary directory that lives as long as the [`Pki`].

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, date_time_ymd,
};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// A certificate authority and the files it issued.
pub struct Pki {
    dir: tempfile::TempDir,
    name: String,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    /// A new CA named `name`, its certificate written as `<name>-ca.pem`.
    pub fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a CA key");
        let ca = CertifiedIssuer::self_signed(params, key).expect("a self-signed CA");
        let pki = Pki {
            dir: tempfile::tempdir().expect("a temporary directory"),
            name: name.to_string(),
            ca,
        };
        std::fs::write(pki.ca_cert(), pki.ca.pem()).expect("writing the CA");
        pki
    }

    /// The CA's certificate (PEM).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join(format!("{}-ca.pem", self.name))
    }

    /// etcd's server certificate: valid for 127.0.0.1 and localhost.
    pub fn server(&self) -> CertFiles {
        self.issue("server", &["127.0.0.1", "localhost"], false)
    }

    /// A client certificate for `who`; `expired` makes one that expired in 2021.
    pub fn client(&self, who: &str, expired: bool) -> CertFiles {
        self.issue(who, &[], expired)
    }

    fn issue(&self, who: &str, names: &[&str], expired: bool) -> CertFiles {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("certificate parameters");
        params.distinguished_name.push(DnType::CommonName, who);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &self.ca)
            .expect("a signed certificate");
        let files = CertFiles {
            cert: self.dir.path().join(format!("{who}.pem")),
            key: self.dir.path().join(format!("{who}-key.pem")),
        };
        std::fs::write(&files.cert, cert.pem()).expect("writing a certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("writing a key");
        files
    }
}
