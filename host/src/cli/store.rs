//! Which store a command opens, and how it reaches etcd: the `--store` flag and the etcd
//! access flags every command that opens a store shares.
//!
//! The etcd flags and their environment variables are etcdctl's, so an operator's etcdctl
//! setup works as it is: `ETCDCTL_CACERT`, `ETCDCTL_CERT`, `ETCDCTL_KEY`, `ETCDCTL_USER`
//! (`NAME` or `NAME:PASSWORD`), `ETCDCTL_PASSWORD`. A password is never taken from the
//! command line, where `ps` and shell histories show it: it comes from `ETCDCTL_PASSWORD`,
//! from `ETCDCTL_USER`, or from the file `--etcd-password-file` names.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use charm_host::store::{MemoryStore, OpenMode, SqliteStore, Store};

/// The embedded default: a SQLite file under the current directory.
pub const DEFAULT_STORE: &str = "sqlite:.charm-host/model.db";

/// The environment variable holding the etcd user's password, as etcdctl's.
#[cfg(feature = "etcd")]
const PASSWORD_ENV: &str = "ETCDCTL_PASSWORD";
/// The environment variable holding the etcd user (`NAME` or `NAME:PASSWORD`), as etcdctl's.
#[cfg(feature = "etcd")]
const USER_ENV: &str = "ETCDCTL_USER";

/// The store, and the credentials for an etcd one.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreArgs {
    /// The store: `sqlite:PATH` (durable, the default), `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`
    /// (shared by hosts on several machines) or `memory` (this process only).
    #[arg(long, env = "CHARM_HOST_STORE", default_value = DEFAULT_STORE)]
    pub store: String,
    /// etcd over TLS: the CA that signed the etcd members' certificates (PEM).
    #[arg(long, env = "ETCDCTL_CACERT", value_name = "FILE")]
    pub etcd_cacert: Option<PathBuf>,
    /// etcd over TLS: this host's client certificate (PEM), for an etcd started with
    /// --client-cert-auth.
    #[arg(long, env = "ETCDCTL_CERT", value_name = "FILE")]
    pub etcd_cert: Option<PathBuf>,
    /// etcd over TLS: the client certificate's private key (PEM).
    #[arg(long, env = "ETCDCTL_KEY", value_name = "FILE")]
    pub etcd_key: Option<PathBuf>,
    /// The etcd user [env: ETCDCTL_USER, as NAME or NAME:PASSWORD]. Its password comes
    /// from ETCDCTL_PASSWORD or --etcd-password-file, never from the command line.
    #[arg(long, value_name = "NAME")]
    pub etcd_user: Option<String>,
    /// A file whose first line is the etcd user's password.
    #[arg(long, env = "CHARM_HOST_ETCD_PASSWORD_FILE", value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
    /// How often to compact etcd's history; set by `run`, the one command that lives on.
    #[arg(skip)]
    pub etcd_compaction: Option<Duration>,
}

impl StoreArgs {
    /// Whether the store is a SQLite file.
    pub fn is_sqlite(&self) -> bool {
        self.store.starts_with("sqlite:")
    }

    /// Opens the store as `mode` says: only [`OpenMode::Create`] makes a missing SQLite
    /// file (and its directory) or an etcd model, and [`OpenMode::ReadOnly`] writes nothing.
    /// An etcd request that takes longer than `request_timeout` fails as unavailable.
    pub async fn open(&self, mode: OpenMode, request_timeout: Duration) -> Result<Arc<dyn Store>> {
        let spec = &self.store;
        if spec == "memory" {
            return Ok(Arc::new(MemoryStore::new("default")));
        }
        if spec.starts_with("etcd://") {
            return self.open_etcd(mode, request_timeout).await;
        }
        let Some(path) = spec.strip_prefix("sqlite:") else {
            bail!("--store {spec}: unknown store; use sqlite:PATH, etcd://HOST:PORT or memory");
        };
        let path = PathBuf::from(path);
        if mode != OpenMode::Create && !path.exists() {
            bail!(
                "--store {spec}: {} does not exist: `charm-host deploy` or `charm-host run BUNDLE` creates it",
                path.display()
            );
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--store {spec}: cannot create {}", dir.display()))?;
        }
        let store = match mode {
            OpenMode::ReadOnly => SqliteStore::open_read_only(&path, "default"),
            OpenMode::Create | OpenMode::Existing => SqliteStore::open(&path, "default"),
        }
        .with_context(|| format!("--store {spec}"))?;
        Ok(Arc::new(store))
    }

    /// The etcd user and its password, if a user is given.
    #[cfg(feature = "etcd")]
    fn etcd_auth(&self) -> Result<Option<charm_host::store::EtcdAuth>> {
        let env_user = std::env::var(USER_ENV).ok().filter(|u| !u.is_empty());
        let (user, mut password) = match (&self.etcd_user, env_user) {
            (Some(user), _) if user.contains(':') => bail!(
                "--etcd-user {}:...: a password on the command line is refused (ps and shell histories show it); give it in {PASSWORD_ENV} or --etcd-password-file",
                user.split(':').next().unwrap_or_default()
            ),
            (Some(user), _) => (user.clone(), None),
            // etcdctl's form: the password may ride along in the environment.
            (None, Some(env)) => match env.split_once(':') {
                Some((user, password)) => (user.to_string(), Some(password.to_string())),
                None => (env, None),
            },
            (None, None) => {
                if self.etcd_password_file.is_some() {
                    bail!(
                        "--etcd-password-file is given without a user: set --etcd-user or {USER_ENV}"
                    );
                }
                return Ok(None);
            }
        };
        if let Some(file) = &self.etcd_password_file {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--etcd-password-file {}", file.display()))?;
            password = Some(text.lines().next().unwrap_or_default().to_string());
        } else if let Ok(env) = std::env::var(PASSWORD_ENV) {
            password = Some(env);
        }
        let Some(password) = password.filter(|p| !p.is_empty()) else {
            bail!("etcd user {user} has no password: set {PASSWORD_ENV} or --etcd-password-file");
        };
        Ok(Some(charm_host::store::EtcdAuth { user, password }))
    }

    /// TLS towards etcd, if a CA is given.
    #[cfg(feature = "etcd")]
    fn etcd_tls(&self) -> Result<Option<charm_host::store::EtcdTls>> {
        use charm_host::store::{EtcdIdentity, EtcdTls};
        let identity = match (&self.etcd_cert, &self.etcd_key) {
            (Some(cert), Some(key)) => Some(EtcdIdentity {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            (Some(_), None) => bail!("--etcd-cert needs its key: --etcd-key (ETCDCTL_KEY)"),
            (None, Some(_)) => {
                bail!("--etcd-key needs its certificate: --etcd-cert (ETCDCTL_CERT)")
            }
        };
        match &self.etcd_cacert {
            Some(ca) => Ok(Some(EtcdTls {
                ca: ca.clone(),
                identity,
            })),
            None if identity.is_some() => bail!(
                "--etcd-cert needs the CA that signed etcd's certificates: --etcd-cacert (ETCDCTL_CACERT)"
            ),
            None => Ok(None),
        }
    }

    #[cfg(feature = "etcd")]
    async fn open_etcd(&self, mode: OpenMode, request_timeout: Duration) -> Result<Arc<dyn Store>> {
        let spec = &self.store;
        let mut config = charm_host::store::EtcdConfig::parse(spec)
            .with_context(|| format!("--store {spec}"))?;
        config.request_timeout = request_timeout;
        config.tls = self.etcd_tls()?;
        config.auth = self.etcd_auth()?;
        config.compaction = self.etcd_compaction;
        let store = charm_host::store::EtcdStore::connect_with(config, "default", mode)
            .await
            .with_context(|| format!("--store {spec}"))?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "etcd"))]
    async fn open_etcd(
        &self,
        _mode: OpenMode,
        _request_timeout: Duration,
    ) -> Result<Arc<dyn Store>> {
        bail!(
            "--store {}: this charm-host was built without etcd support; build it with `cargo build --release -p charm-host --features etcd`",
            self.store
        )
    }
}
