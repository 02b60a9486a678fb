//! A real PostgreSQL cluster (Debian's binaries) on an ephemeral loopback port, owned by one
//! test: copied from a template initdb made once per build directory, run as the `postgres`
//! user when the tests run as root, killed (the whole process group) on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The superuser of every test cluster, and its password.
pub(crate) const ADMIN: &str = "admin";
pub(crate) const ADMIN_PASSWORD: &str = "admin-pw";

/// The server binaries: `$PG_BIN`, else the newest /usr/lib/postgresql/<version>/bin.
fn bin(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Ok(dir) = std::env::var("PG_BIN") {
            return dir.into();
        }
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL must be installed (scripts/ensure-postgres.sh)")
            .filter_map(|e| e.ok())
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
            .collect();
        versions.sort();
        versions.pop().expect("no /usr/lib/postgresql/<version>/bin (scripts/ensure-postgres.sh)").1
    })
    .join(name)
}

fn as_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// `program` run as the `postgres` user when we are root (PostgreSQL refuses to run as root).
fn server_command(program: PathBuf) -> Command {
    if as_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"]).arg(program);
        // Not root's home: libpq would try to read ~/.postgresql there.
        c.env("HOME", std::env::temp_dir());
        c
    } else {
        Command::new(program)
    }
}

/// Gives `path` to the `postgres` user (when root), so the server may use it.
pub(crate) fn give(path: &Path) {
    if as_root() {
        let ok = Command::new("chown").arg("-R").arg("postgres:postgres").arg(path).status().unwrap().success();
        assert!(ok, "chown {path:?}");
    }
}

/// An initdb'd data directory, made once per build directory and copied by every test.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let done = root.join("pg-template-1");
        if done.join("PG_VERSION").exists() {
            return done;
        }
        let work = root.join(format!("pg-template-{}", std::process::id()));
        std::fs::create_dir_all(&work).unwrap();
        let pwfile = work.join("pw");
        std::fs::write(&pwfile, ADMIN_PASSWORD).unwrap();
        give(&work);
        let out = server_command(bin("initdb"))
            .arg("-D")
            .arg(work.join("data"))
            .args(["-U", ADMIN, "--auth=scram-sha-256", "--no-sync", "--no-locale", "-E", "UTF8"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .expect("initdb");
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        // Another test process may have won the race: either copy is as good.
        let _ = std::fs::rename(work.join("data"), &done);
        let _ = std::fs::remove_dir_all(&work);
        done
    })
}

pub(crate) struct PgServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    settings: Vec<String>,
    /// Extra environment of the server processes (e.g. a [`super::store_time::StoreTime`]).
    env: Vec<(&'static str, String)>,
}

impl PgServer {
    /// A fresh cluster with `settings` (`name=value`, as `postgres -c`).
    pub(crate) fn start(settings: &[&str]) -> PgServer {
        Self::start_prepared(settings, |_| {})
    }

    /// Like [`PgServer::start`], after `prepare` has changed the data directory (pg_hba.conf,
    /// certificates).
    pub(crate) fn start_prepared(settings: &[&str], prepare: impl FnOnce(&Path)) -> PgServer {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("cp").arg("-a").arg(template()).arg(dir.path().join("data")).output().unwrap();
        assert!(out.status.success(), "copying the template: {}", String::from_utf8_lossy(&out.stderr));
        prepare(&dir.path().join("data"));
        Self::launch(dir, settings, vec![])
    }

    /// Like [`PgServer::start`], every server process with `env` added.
    pub(crate) fn start_with_env(settings: &[&str], env: Vec<(&'static str, String)>) -> PgServer {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("cp").arg("-a").arg(template()).arg(dir.path().join("data")).output().unwrap();
        assert!(out.status.success(), "copying the template: {}", String::from_utf8_lossy(&out.stderr));
        Self::launch(dir, settings, env)
    }

    /// A streaming standby of `primary` (pg_basebackup), reporting itself as `name`, with
    /// `settings` too (the primary's own are not copied).
    pub(crate) fn standby_of(primary: &PgServer, name: &str, settings: &[&str]) -> PgServer {
        let dir = tempfile::tempdir().unwrap();
        give(dir.path());
        let out = server_command(bin("pg_basebackup"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                ADMIN,
                "-X",
                "stream",
                "--no-sync",
                "-c",
                "fast",
                "-D",
            ])
            .arg(dir.path().join("data"))
            .env("PGPASSWORD", ADMIN_PASSWORD)
            .output()
            .expect("pg_basebackup");
        assert!(out.status.success(), "pg_basebackup: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(dir.path().join("data/standby.signal"), "").unwrap();
        let conninfo = format!(
            "primary_conninfo=host=127.0.0.1 port={} user={ADMIN} password={ADMIN_PASSWORD} application_name={name}",
            primary.port
        );
        Self::launch(dir, &[&[conninfo.as_str()], settings].concat(), vec![])
    }

    fn launch(dir: tempfile::TempDir, settings: &[&str], env: Vec<(&'static str, String)>) -> PgServer {
        give(dir.path());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let settings = settings.iter().map(|s| s.to_string()).collect();
        let mut s = PgServer { child: None, port, dir, settings, env };
        s.spawn();
        s
    }

    pub(crate) fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&mut self) {
        // Extra environment is set by `env` after the switch to the postgres user, so that a
        // preloaded library (libfaketime) starts in the server, not in setpriv as root.
        let mut cmd = if self.env.is_empty() {
            server_command(bin("postgres"))
        } else {
            let mut c = server_command("/usr/bin/env".into());
            c.args(self.env.iter().map(|(k, v)| format!("{k}={v}"))).arg(bin("postgres"));
            c
        };
        cmd.arg("-D").arg(self.data()).args(["-p", &self.port.to_string()]);
        // No fsync: the tests kill processes, not machines; the page cache survives a kill -9.
        for s in ["listen_addresses=127.0.0.1", "unix_socket_directories=", "fsync=off", "max_connections=200"]
            .iter()
            .map(|s| s.to_string())
            .chain(self.settings.iter().cloned())
        {
            cmd.arg("-c").arg(s);
        }
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().expect("postgres");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.sql("postgres", "SELECT 1").is_err() {
            assert!(Instant::now() < deadline, "postgres did not start on port {}: {}", self.port, self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's log so far (for assertion messages).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Runs `sql` in `db` as the superuser; the rows as psql's unaligned text.
    pub(crate) fn sql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new("psql")
            .arg(format!("host=127.0.0.1 port={} user={ADMIN} dbname={db} connect_timeout=5", self.port))
            .args(["-v", "ON_ERROR_STOP=1", "-tAqX", "-c", sql])
            .env("PGPASSWORD", ADMIN_PASSWORD)
            .output()
            .expect("psql must be installed (scripts/ensure-postgres.sh)");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() {
            Ok(text)
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Like [`PgServer::sql`], failing the test on error.
    pub(crate) fn must(&self, db: &str, sql: &str) -> String {
        self.sql(db, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// A login role `user` (password `{user}-pw`) owning a new database `db`; its kv_url.
    pub(crate) fn app(&self, user: &str, db: &str) -> String {
        self.must("postgres", &format!("CREATE ROLE {user} LOGIN PASSWORD '{user}-pw'"));
        self.must("postgres", &format!("CREATE DATABASE {db} OWNER {user}"));
        self.url(user, db)
    }

    pub(crate) fn url(&self, user: &str, db: &str) -> String {
        format!("postgres://{user}:{user}-pw@127.0.0.1:{}/{db}", self.port)
    }

    /// kill -9 of the postmaster and every process it started (each backend runs in its own
    /// session, so not a process group): a machine dying, as far as clients see.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let children = children_of(c.id());
            let _ = c.kill();
            for pid in children {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = c.wait();
        }
    }
}

/// The processes whose parent is `pid`, from /proc.
fn children_of(pid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![] };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            // /proc/<p>/stat: "pid (comm) state ppid …"; comm may hold spaces, so split after ')'.
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
            after.split_whitespace().nth(1).and_then(|pp| pp.parse::<u32>().ok()) == Some(pid)
        })
        .collect()
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill9();
    }
}
