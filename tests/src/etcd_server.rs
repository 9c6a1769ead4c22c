//! A real etcd server for tests: started on 127.0.0.1 with free ports and a temporary data
//! directory, stopped (and its directory removed) when dropped.
//!
//! The binary is `$ETCD_BIN`, or `etcd` on the `PATH` (Debian's `etcd-server` package).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running etcd, killed when dropped.
pub struct EtcdServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    name: String,
    client_port: u16,
    peer_port: u16,
    /// Plaintext `/health` for an etcd whose client port speaks TLS.
    metrics_port: u16,
    /// `--initial-cluster`: this member alone, or every member of its cluster.
    initial_cluster: String,
    tls: Option<ServerTls>,
}

/// etcd's TLS on its client port: its certificate and key, and the CA whose client
/// certificates it accepts when it asks for them (`--client-cert-auth`).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// etcd's certificate (PEM).
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    /// The CA etcd trusts for client certificates (PEM).
    pub trusted_ca: PathBuf,
    /// Whether etcd asks every client for a certificate.
    pub client_cert_auth: bool,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

fn etcd_binary() -> PathBuf {
    std::env::var_os("ETCD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("etcd"))
}

impl EtcdServer {
    /// Starts etcd and waits until it answers its health check.
    pub fn start() -> EtcdServer {
        let mut server = EtcdServer::new("test", None);
        server.initial_cluster = server.peer();
        server.launch();
        server
    }

    /// Starts etcd serving TLS on its client port, and waits until it is healthy.
    pub fn start_tls(tls: ServerTls) -> EtcdServer {
        let mut server = EtcdServer::new("test", Some(tls));
        server.initial_cluster = server.peer();
        server.launch();
        server
    }

    fn new(name: &str, tls: Option<ServerTls>) -> EtcdServer {
        EtcdServer {
            child: None,
            dir: tempfile::tempdir().expect("a temporary directory"),
            name: name.to_string(),
            client_port: free_port(),
            peer_port: free_port(),
            metrics_port: free_port(),
            initial_cluster: String::new(),
            tls,
        }
    }

    /// `NAME=PEER_URL`, this member's entry in `--initial-cluster`.
    fn peer(&self) -> String {
        format!("{}=http://127.0.0.1:{}", self.name, self.peer_port)
    }

    fn launch(&mut self) {
        self.spawn();
        self.wait_healthy();
    }

    fn spawn(&mut self) {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd's log file");
        let mut command = Command::new(etcd_binary());
        command
            .arg(format!("--name={}", self.name))
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            // etcd's default limits (128 operations a transaction, 1.5 MiB a request), as
            // operators run it.
            .arg(format!("--initial-cluster={}", self.initial_cluster));
        if let Some(tls) = &self.tls {
            command
                .arg(format!(
                    "--listen-metrics-urls=http://127.0.0.1:{}",
                    self.metrics_port
                ))
                .arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()))
                .arg(format!("--trusted-ca-file={}", tls.trusted_ca.display()));
            if tls.client_cert_auth {
                command.arg("--client-cert-auth");
            }
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd's log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e}; install Debian's etcd-server or set ETCD_BIN",
                    etcd_binary().display()
                )
            });
        self.child = Some(child);
    }

    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.healthy() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("etcd exited with {status}: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "etcd not healthy after 30 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn healthy(&self) -> bool {
        let port = if self.tls.is_some() {
            self.metrics_port
        } else {
            self.client_port
        };
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer.contains("\"health\":\"true\"")
    }

    /// What etcd logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// `HOST:PORT` of its client endpoint.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The `--store` value for a model under `prefix`.
    pub fn store_spec(&self, prefix: &str) -> String {
        format!("etcd://{}/{prefix}", self.endpoint())
    }

    /// Every key it holds, and its revision: what a refused or read-only command must
    /// leave as it was. A plaintext server only.
    #[cfg(feature = "etcd")]
    pub async fn everything(&self) -> (i64, Vec<String>) {
        let mut client = etcd_client::Client::connect([self.endpoint()], None)
            .await
            .unwrap();
        let all = client
            .get(
                "",
                Some(
                    etcd_client::GetOptions::new()
                        .with_all_keys()
                        .with_keys_only(),
                ),
            )
            .await
            .unwrap();
        let keys = all
            .kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect();
        (all.header().unwrap().revision(), keys)
    }

    /// Whether it is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("etcd is running").id()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill -{name} etcd failed");
    }

    /// Freezes etcd (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws etcd (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Kills etcd (SIGKILL) and waits for it to exit; its data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Several etcd members on loopback forming one cluster, each with its own ports and data
/// directory; every member is killed when dropped.
pub struct EtcdCluster {
    /// The members, in the order of `endpoints`.
    pub members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// Starts `size` members and waits until each is healthy (the cluster has a leader).
    pub fn start(size: usize) -> EtcdCluster {
        let mut members: Vec<EtcdServer> = (0..size)
            .map(|i| EtcdServer::new(&format!("member{i}"), None))
            .collect();
        let initial = members
            .iter()
            .map(EtcdServer::peer)
            .collect::<Vec<_>>()
            .join(",");
        // Every member is started before any is waited for: a member alone has no quorum.
        for member in &mut members {
            member.initial_cluster = initial.clone();
            member.spawn();
        }
        for member in &mut members {
            member.wait_healthy();
        }
        EtcdCluster { members }
    }

    /// `HOST:PORT` of every member, comma-separated, as `--store etcd://` takes them.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(EtcdServer::endpoint)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The `--store` value for a model under `prefix`, naming every member.
    pub fn store_spec(&self, prefix: &str) -> String {
        format!("etcd://{}/{prefix}", self.endpoints())
    }

    /// The index of the member that leads the cluster now, as the running members report it
    /// (`/v3/maintenance/status`); `None` while they do not agree on one.
    pub fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for member in &self.members {
            let status = member.status()?;
            ids.push(status.0);
            if member.is_running() {
                leaders.push(status.1);
            }
        }
        let leader = *leaders.first()?;
        if leader == 0 || leaders.iter().any(|l| *l != leader) {
            return None;
        }
        ids.iter().position(|id| *id == leader)
    }

    /// Waits until the running members agree on a leader, and returns it.
    pub fn wait_leader(&self, limit: Duration) -> usize {
        let start = Instant::now();
        loop {
            if let Some(leader) = self.leader() {
                return leader;
            }
            assert!(
                start.elapsed() < limit,
                "the etcd members agree on no leader within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl EtcdServer {
    /// (member id, leader id) from the member's status, remembered once seen so a killed
    /// member's id is still known.
    fn status(&self) -> Option<(u64, u64)> {
        let id_file = self.dir.path().join("member-id");
        if !self.is_running() {
            let id = std::fs::read_to_string(&id_file).ok()?.parse().ok()?;
            return Some((id, 0));
        }
        let mut stream = TcpStream::connect(("127.0.0.1", self.client_port)).ok()?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}";
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        let body = &answer[answer.find("\r\n\r\n")? + 4..];
        let status: serde_json::Value = serde_json::from_str(body).ok()?;
        // The gateway writes 64-bit ids as strings.
        let number = |v: &serde_json::Value| v.as_str()?.parse::<u64>().ok();
        let id = number(&status["header"]["member_id"])?;
        let leader = number(&status["leader"]).unwrap_or(0);
        let _ = std::fs::write(&id_file, id.to_string());
        Some((id, leader))
    }
}
