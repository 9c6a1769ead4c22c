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
    client_port: u16,
    peer_port: u16,
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
        let mut server = EtcdServer {
            child: None,
            dir: tempfile::tempdir().expect("a temporary directory"),
            client_port: free_port(),
            peer_port: free_port(),
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd's log file");
        let child = Command::new(etcd_binary())
            .arg("--name=test")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            // Relating applications of many units queues hooks on each in one transaction.
            .arg("--max-txn-ops=10000")
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
        self.wait_healthy();
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
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.client_port)) else {
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
