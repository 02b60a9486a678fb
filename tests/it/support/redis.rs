//! A real `redis-server` on an ephemeral loopback port, owned by one test.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How clients reach a server: plain or TLS only (certificates from
/// [`super::redis_tls::Certs`]), and its password (also the one it replicates with).
#[derive(Clone, Debug, Default)]
pub(crate) struct Access {
    /// The directory holding `ca.pem`, `server.pem`, `server.key`: TLS only, no plain port.
    pub tls: Option<PathBuf>,
    pub password: Option<String>,
}

impl Access {
    /// The server arguments for TLS (`--port 0`, so nothing listens in plain text) and the
    /// password; `port` is the TLS port.
    pub(crate) fn server_args(&self, port: u16) -> Vec<String> {
        let mut a: Vec<String> = vec![];
        if let Some(dir) = &self.tls {
            let f = |n: &str| dir.join(n).display().to_string();
            a.extend(["--port".into(), "0".into(), "--tls-port".into(), port.to_string()]);
            a.extend(["--tls-cert-file".into(), f("server.pem"), "--tls-key-file".into(), f("server.key")]);
            a.extend(["--tls-ca-cert-file".into(), f("ca.pem"), "--tls-auth-clients".into(), "no".into()]);
            a.extend(["--tls-replication".into(), "yes".into()]);
        }
        if let Some(pw) = &self.password {
            a.extend(["--requirepass".into(), pw.clone(), "--masterauth".into(), pw.clone()]);
        }
        a
    }

    /// A client for the node at `port`, with this access's TLS and password.
    pub(crate) fn client(&self, port: u16) -> redis::Client {
        let auth = self.password.as_ref().map(|p| format!(":{p}@")).unwrap_or_default();
        match &self.tls {
            None => redis::Client::open(format!("redis://{auth}127.0.0.1:{port}/0")).unwrap(),
            Some(dir) => redis::Client::build_with_tls(
                format!("rediss://{auth}127.0.0.1:{port}/0"),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(std::fs::read(dir.join("ca.pem")).unwrap()),
                },
            )
            .unwrap(),
        }
    }
}

pub(crate) struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    pub access: Access,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl RedisServer {
    /// Starts redis-server (no persistence unless `extra` asks for it).
    pub(crate) fn start(extra: &[&str]) -> RedisServer {
        Self::start_as(Access::default(), extra)
    }

    /// Starts redis-server reached as `access` says (TLS only, and/or with a password).
    pub(crate) fn start_as(access: Access, extra: &[&str]) -> RedisServer {
        let mut s = RedisServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            access,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()));
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        cmd.arg("--dir").arg(self.dir.path());
        // Later arguments win: TLS turns the plain port off.
        cmd.args(self.access.server_args(self.port));
        cmd.args(&self.extra);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server); .ci/run installs it");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Up when it answers at all (a NOAUTH refusal counts: it is listening).
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                match self.client().get_connection().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c)) {
                    Ok(_) => return,
                    Err(e) if e.code() == Some("NOAUTH") || e.kind() == redis::ErrorKind::AuthenticationFailed => {
                        return
                    }
                    Err(_) => {}
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A client for this server (TLS and password as it is reached).
    pub(crate) fn client(&self) -> redis::Client {
        self.access.client(self.port)
    }

    pub(crate) fn conn(&self) -> redis::Connection {
        self.client().get_connection().unwrap()
    }

    /// Keys matching `pattern` (test data sets are small).
    pub(crate) fn keys(&self, pattern: &str) -> Vec<String> {
        redis::cmd("KEYS").arg(pattern).query(&mut self.conn()).unwrap()
    }

    pub(crate) fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET").arg(key).query(&mut self.conn()).unwrap()
    }

    /// One `INFO <section>` field, if the server answers.
    pub(crate) fn info_field(&self, section: &str, name: &str) -> Option<String> {
        let mut c = self.client().get_connection().ok()?;
        let info: String = redis::cmd("INFO").arg(section).query(&mut c).ok()?;
        info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(|v| v.trim().to_owned())
    }

    /// False after [`RedisServer::kill9`] until relaunched.
    pub(crate) fn is_up(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again after [`RedisServer::kill9`], on the same port and data
    /// directory (what a supervisor does after a crash).
    pub(crate) fn relaunch(&mut self) {
        assert!(self.child.is_none(), "relaunch only after kill9");
        self.spawn();
    }

    /// Restarts on the same port and data directory.
    pub(crate) fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An async connection that waits for answers as long as a loaded machine may need: the
/// client's own default gives up after 500 ms, which is a test's failure, not the store's.
pub(crate) async fn multiplexed(client: &redis::Client) -> redis::aio::MultiplexedConnection {
    let wait = Some(Duration::from_secs(30));
    let config = redis::AsyncConnectionConfig::new().set_connection_timeout(wait).set_response_timeout(wait);
    client.get_multiplexed_async_connection_with_config(&config).await.unwrap()
}
