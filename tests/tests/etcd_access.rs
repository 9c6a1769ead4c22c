//! A real etcd serving TLS with client certificates and authentication enabled, its
//! certificates made by the test: a host with the right CA, certificate, user and role opens
//! its model and runs it through the binary's etcdctl-style flags; a wrong CA, an expired
//! client certificate, a wrong password, a user without a role and a user holding another
//! model's role are each refused with an error naming the cause, and write nothing.

#![cfg(feature = "etcd")]

use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

use charm_host::store::{
    EtcdAuth, EtcdConfig, EtcdIdentity, EtcdStore, EtcdTls, StateStore, StoreError,
};
use charm_tests::etcd_pki::{CertFiles, Pki};
use charm_tests::etcd_server::{EtcdServer, ServerTls};
use charm_tests::guests;
use etcd_client::{Client, ConnectOptions, GetOptions, Identity, Permission, TlsOptions};

/// One etcd at a time: two cores, and each test starts its own.
static SERIAL: Mutex<()> = Mutex::new(());

const ROOT_PASSWORD: &str = "root-secret";
const A_PASSWORD: &str = "model-a-secret";
const B_PASSWORD: &str = "model-b-secret";
const NOBODY_PASSWORD: &str = "nobody-secret";

/// An etcd with TLS, client certificates and authentication: users `host-a` (role
/// `model-a`: readwrite on `models/a/`), `host-b` (role `model-b`: `models/b/`) and
/// `nobody` (no role).
struct Secured {
    pki: Pki,
    etcd: EtcdServer,
    host_cert: CertFiles,
    rt: tokio::runtime::Runtime,
    admin: Client,
}

impl Secured {
    fn start() -> Secured {
        let pki = Pki::new("etcd");
        let server = pki.server();
        let etcd = EtcdServer::start_tls(ServerTls {
            cert: server.cert,
            key: server.key,
            trusted_ca: pki.ca_cert(),
            client_cert_auth: true,
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let root_cert = pki.client("root", false);
        let host_cert = pki.client("host", false);
        let tls = |files: &CertFiles| {
            TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(
                    std::fs::read(pki.ca_cert()).unwrap(),
                ))
                .identity(Identity::from_pem(
                    std::fs::read(&files.cert).unwrap(),
                    std::fs::read(&files.key).unwrap(),
                ))
        };
        let endpoint = [etcd.endpoint()];
        let admin = rt.block_on(async {
            let mut c = Client::connect(
                endpoint.clone(),
                Some(ConnectOptions::new().with_tls(tls(&root_cert))),
            )
            .await
            .unwrap();
            c.role_add("root").await.unwrap();
            c.user_add("root", ROOT_PASSWORD, None).await.unwrap();
            c.user_grant_role("root", "root").await.unwrap();
            for (role, user, password, prefix) in [
                ("model-a", "host-a", A_PASSWORD, "models/a/"),
                ("model-b", "host-b", B_PASSWORD, "models/b/"),
            ] {
                c.role_add(role).await.unwrap();
                c.role_grant_permission(role, Permission::read_write(prefix).with_prefix())
                    .await
                    .unwrap();
                c.user_add(user, password, None).await.unwrap();
                c.user_grant_role(user, role).await.unwrap();
            }
            c.user_add("nobody", NOBODY_PASSWORD, None).await.unwrap();
            c.auth_enable().await.unwrap();
            Client::connect(
                endpoint,
                Some(
                    ConnectOptions::new()
                        .with_tls(tls(&root_cert))
                        .with_user("root", ROOT_PASSWORD),
                ),
            )
            .await
            .unwrap()
        });
        Secured {
            pki,
            etcd,
            host_cert,
            rt,
            admin,
        }
    }

    /// The store's config for `prefix`: TLS with the host's certificate, as `user`.
    fn config(&self, prefix: &str, user: &str, password: &str) -> EtcdConfig {
        let mut config = EtcdConfig::parse(&self.etcd.store_spec(prefix)).unwrap();
        config.request_timeout = Duration::from_secs(2);
        config.tls = Some(EtcdTls {
            ca: self.pki.ca_cert(),
            identity: Some(EtcdIdentity {
                cert: self.host_cert.cert.clone(),
                key: self.host_cert.key.clone(),
            }),
        });
        config.auth = Some(EtcdAuth {
            user: user.into(),
            password: password.into(),
        });
        config
    }

    /// Opens the model with `config`, expecting a refusal; returns its message.
    fn refused(&self, config: EtcdConfig) -> String {
        match self.rt.block_on(EtcdStore::connect(config, "default")) {
            Err(StoreError::Denied(why)) => why,
            Err(other) => panic!("not a refusal: {other}"),
            Ok(_) => panic!("opened the model"),
        }
    }

    /// Every key under `models/`, as root sees them.
    fn keys(&self) -> Vec<String> {
        let mut admin = self.admin.clone();
        let resp = self
            .rt
            .block_on(admin.get("models/", Some(GetOptions::new().with_prefix())))
            .unwrap();
        resp.kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect()
    }

    fn assert_nothing_written(&self) {
        assert_eq!(self.keys(), Vec::<String>::new(), "a refused host wrote");
    }
}

#[test]
fn host_with_its_role_opens_its_model() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let store = etcd
        .rt
        .block_on(EtcdStore::connect(
            etcd.config("models/a", "host-a", A_PASSWORD),
            "default",
        ))
        .unwrap();
    let status = etcd.rt.block_on(store.status()).unwrap();
    assert!(status.units.is_empty(), "{status:?}");
    assert_eq!(etcd.keys(), vec!["models/a/meta".to_string()]);
}

#[test]
fn wrong_ca_is_refused_naming_the_ca() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let other = Pki::new("other");
    let mut config = etcd.config("models/a", "host-a", A_PASSWORD);
    config.tls.as_mut().unwrap().ca = other.ca_cert();
    let why = etcd.refused(config);
    assert!(
        why.contains("not signed by the CA")
            && why.contains(&other.ca_cert().display().to_string()),
        "{why}"
    );
    etcd.assert_nothing_written();
}

#[test]
fn expired_client_certificate_is_refused_naming_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let expired = etcd.pki.client("expired", true);
    let mut config = etcd.config("models/a", "host-a", A_PASSWORD);
    config.tls.as_mut().unwrap().identity = Some(EtcdIdentity {
        cert: expired.cert.clone(),
        key: expired.key,
    });
    let why = etcd.refused(config);
    assert!(
        why.contains("it expired on 2021-01-01")
            && why.contains(&expired.cert.display().to_string()),
        "{why}"
    );
    etcd.assert_nothing_written();
}

#[test]
fn client_certificate_of_another_ca_or_none_is_refused_naming_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let other_ca = Pki::new("other");
    let other = other_ca.client("stranger", false);
    let mut config = etcd.config("models/a", "host-a", A_PASSWORD);
    config.tls.as_mut().unwrap().identity = Some(EtcdIdentity {
        cert: other.cert.clone(),
        key: other.key,
    });
    let why = etcd.refused(config.clone());
    assert!(
        why.contains("not signed by a CA etcd trusts")
            && why.contains(&other.cert.display().to_string()),
        "{why}"
    );
    config.tls.as_mut().unwrap().identity = None;
    let why = etcd.refused(config);
    assert!(why.contains("none was given (--etcd-cert"), "{why}");
    etcd.assert_nothing_written();
}

#[test]
fn wrong_password_is_refused_naming_the_user() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let why = etcd.refused(etcd.config("models/a", "host-a", "not-the-password"));
    assert!(
        why.contains("authentication failed") && why.contains("host-a"),
        "{why}"
    );
    etcd.assert_nothing_written();
}

#[test]
fn user_without_a_role_is_refused_naming_the_prefix() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let why = etcd.refused(etcd.config("models/a", "nobody", NOBODY_PASSWORD));
    assert!(
        why.contains("`nobody`") && why.contains("no role") && why.contains("models/a/"),
        "{why}"
    );
    etcd.assert_nothing_written();
}

/// A login by client certificate alone is the user its common name names: a refusal
/// names that user.
#[test]
fn certificate_only_login_is_refused_naming_the_certificates_user() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    // `nobody` exists and holds no role.
    let nobody = etcd.pki.client("nobody", false);
    let mut config = etcd.config("models/a", "unused", "unused");
    config.auth = None;
    config.tls = Some(EtcdTls {
        ca: etcd.pki.ca_cert(),
        identity: Some(EtcdIdentity {
            cert: nobody.cert.clone(),
            key: nobody.key.clone(),
        }),
    });
    let why = etcd.refused(config);
    assert!(
        why.contains("etcd user `nobody`") && why.contains("models/a/"),
        "{why}"
    );
    etcd.assert_nothing_written();
}

#[test]
fn host_holding_another_models_role_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    // host-b's role covers models/b/ alone.
    let why = etcd.refused(etcd.config("models/a", "host-b", B_PASSWORD));
    assert!(
        why.contains("`host-b`") && why.contains("models/a/"),
        "{why}"
    );
    etcd.assert_nothing_written();
    // Its own model it opens.
    etcd.rt
        .block_on(EtcdStore::connect(
            etcd.config("models/b", "host-b", B_PASSWORD),
            "default",
        ))
        .unwrap();
    assert_eq!(etcd.keys(), vec!["models/b/meta".to_string()]);
}

/// `charm-host` with etcdctl's TLS flags and environment, and `args`.
fn charm_host(etcd: &Secured, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(charm_tests::charm_host_binary());
    command
        .args(args)
        .args(["--etcd-cacert", etcd.pki.ca_cert().to_str().unwrap()])
        .args(["--etcd-cert", etcd.host_cert.cert.to_str().unwrap()])
        .args(["--etcd-key", etcd.host_cert.key.to_str().unwrap()])
        .env_remove("ETCDCTL_USER")
        .env_remove("ETCDCTL_PASSWORD")
        .env_remove("CHARM_HOST_STORE");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn binary_runs_a_model_over_tls_with_a_user_and_refuses_passwords_on_the_command_line() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
    let bundle = dir.path().join("bundle.yaml");
    std::fs::write(
        &bundle,
        "applications:\n  postgresql: {charm: postgresql.wasm, num_units: 2}\n",
    )
    .unwrap();
    let store = etcd.etcd.store_spec("models/a");

    // A password on the command line is refused before anything is opened.
    let out = charm_host(
        &etcd,
        &[
            "status",
            "--store",
            &store,
            "--etcd-user",
            &format!("host-a:{A_PASSWORD}"),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("a password on the command line is refused")
            && !stderr(&out).contains(A_PASSWORD),
        "{}",
        stderr(&out)
    );
    etcd.assert_nothing_written();

    // The user with its password in the environment, as etcdctl takes it: `run` deploys.
    let out = charm_host(
        &etcd,
        &[
            "run",
            bundle.to_str().unwrap(),
            "--until-idle",
            "--timeout",
            "60",
            "--store",
            &store,
            "--etcd-user",
            "host-a",
            "--etcd-compaction-interval",
            "0.2",
        ],
        &[("ETCDCTL_PASSWORD", A_PASSWORD)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // Compaction would drop model b's history too: a user of model a's role does not.
    assert!(
        stderr(&out).contains("not compacting etcd's history")
            && stderr(&out).contains("etcd user `host-a` is not root"),
        "{}",
        stderr(&out)
    );
    assert!(
        !etcd.keys().contains(&"models/a/compaction".to_string()),
        "{:?}",
        etcd.keys()
    );

    // The password from a file: `status` and `pod-spec` read the model.
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, format!("{A_PASSWORD}\n")).unwrap();
    let read = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend([
            "--store",
            &store,
            "--etcd-user",
            "host-a",
            "--etcd-password-file",
            password_file.to_str().unwrap(),
            "--format",
            "json",
        ]);
        charm_host(&etcd, &all, &[])
    };
    let out = read(&["status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["units"].as_array().unwrap().len(), 2, "{status}");
    // postgresql's leader set its pod spec.
    let out = read(&["pod-spec", "postgresql"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let spec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(spec["application"], "postgresql", "{spec}");
    assert!(spec["revision"].as_u64().is_some(), "{spec}");

    // Another model's user, from ETCDCTL_USER in etcdctl's NAME:PASSWORD form: refused,
    // at once (not retried as etcd being away), with the cause.
    let out = charm_host(
        &etcd,
        &["status", "--store", &store],
        &[("ETCDCTL_USER", &format!("host-b:{B_PASSWORD}"))],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("`host-b` may not read and write keys under `models/a/`"),
        "{}",
        stderr(&out)
    );
    assert!(etcd.keys().iter().all(|k| k.starts_with("models/a/")));
}

/// A command given no TLS flags against an etcd that speaks TLS says so, naming the flag,
/// and a host exits rather than wait for an outage that is not one.
#[test]
fn plaintext_to_a_tls_etcd_is_refused_naming_the_flag() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = Secured::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
    std::fs::write(
        dir.path().join("bundle.yaml"),
        "applications:\n  postgresql: {charm: postgresql.wasm, num_units: 1}\n",
    )
    .unwrap();
    let store = etcd.etcd.store_spec("models/a");
    for args in [
        vec!["status", "--store", &store],
        vec![
            "run",
            "bundle.yaml",
            "--until-idle",
            "--timeout",
            "30",
            "--store",
            &store,
        ],
    ] {
        let out = Command::new(charm_tests::charm_host_binary())
            .args(&args)
            .current_dir(dir.path())
            .env_remove("ETCDCTL_CACERT")
            .env_remove("ETCDCTL_CERT")
            .env_remove("ETCDCTL_KEY")
            .env_remove("CHARM_HOST_STORE")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let stderr = stderr(&out);
        assert!(
            stderr.contains(&format!("etcd at {} speaks TLS", etcd.etcd.endpoint()))
                && stderr.contains("--etcd-cacert"),
            "{args:?}: {stderr}"
        );
    }
    etcd.assert_nothing_written();
}
