//! Child processes (KV container, redis-server), temp dirs, and `/proc` readings.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Linux reports CPU time in USER_HZ, which the kernel ABI fixes at 100 on every platform.
pub(crate) const TICKS_PER_SEC: f64 = 100.0;

/// A private directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new() -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("stateful-tool-bench-{}-{:08x}", std::process::id(), rand_u32()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(TempDir(dir))
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn rand_u32() -> u32 {
    rand::random()
}

/// A child killed (SIGKILL) and reaped on drop, so an error or panic never leaves a store
/// running.
pub(crate) struct Proc {
    child: Child,
    pub addr: SocketAddr,
}

impl Proc {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the exit (a clean stop: the store closes its file); SIGKILL
    /// after `within`.
    pub(crate) fn terminate(&mut self, within: Duration) -> anyhow::Result<std::process::ExitStatus> {
        signal_and_wait(&mut self.child, libc::SIGTERM, within)
    }
}

/// Sends `signal` to `child`, then waits for its exit; SIGKILL after `within`.
pub(crate) fn signal_and_wait(
    child: &mut Child,
    signal: libc::c_int,
    within: Duration,
) -> anyhow::Result<std::process::ExitStatus> {
    // SAFETY: kill(2) on our own child's pid, which is not reaped before this returns.
    unsafe {
        libc::kill(child.id() as libc::pid_t, signal);
    }
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("pid {} did not stop within {within:?} of signal {signal} (killed)", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `kv serve` on an ephemeral loopback port and waits for its `listening on` line.
pub(crate) fn start_kv(exe: &Path, data: &Path, durability: &str, log: &Path) -> anyhow::Result<Proc> {
    start_kv_with(exe, data, durability, &[], log)
}

/// [`start_kv`] with more arguments (`--cache-mb`); the log is appended to.
pub(crate) fn start_kv_with(
    exe: &Path,
    data: &Path,
    durability: &str,
    extra: &[String],
    log: &Path,
) -> anyhow::Result<Proc> {
    let log_file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut child = Command::new(exe)
        .args(["kv", "serve", "--listen", "127.0.0.1:0", "--durability", durability])
        .args(extra)
        .arg("--data")
        .arg(data)
        .env_remove("KV_TOKEN")
        .env("STATEFUL_TOOL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("starting {} kv serve", exe.display()))?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok));
        // Keep draining so the server never blocks on a full pipe.
        for _ in lines {}
    });
    let proc = |child| Proc { child, addr: SocketAddr::from(([127, 0, 0, 1], 0)) };
    let line = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(line)) => line,
        _ => {
            drop(proc(child));
            bail!("kv serve printed no 'listening on' line (see {})", log.display());
        }
    };
    let addr = line
        .strip_prefix("listening on http://")
        .and_then(|a| a.trim().parse().ok())
        .with_context(|| format!("unexpected first line from kv serve: {line:?}"))?;
    Ok(Proc { child, addr })
}

/// How long the bench's Redis clients wait to connect or for an answer. The clients' own
/// defaults (500 ms for a connection, a second for a cluster) failed whole runs ("timed
/// out") on a loaded machine, where `appendfsync always` waits on a busy disk; a Redis that
/// stops answering still ends the run (the bench's budget).
pub(crate) const REDIS_ANSWER_WAIT: Duration = Duration::from_secs(60);

/// Starts redis-server on a free loopback port without persistence (the tests' set-up), and
/// waits until it answers PING.
pub(crate) fn start_redis(bin: &str, dir: &Path) -> anyhow::Result<Proc> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    start_redis_on(bin, dir, port, &["--save", "", "--appendonly", "no"], Duration::from_secs(10))
}

/// Starts redis-server on `port` with `config` (persistence settings), and waits up to
/// `wait` until it answers PING (it answers `-LOADING` while it reads its data back).
pub(crate) fn start_redis_on(
    bin: &str,
    dir: &Path,
    port: u16,
    config: &[&str],
    wait: Duration,
) -> anyhow::Result<Proc> {
    let child = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(config)
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {bin} (apt-get install redis-server)"))?;
    let proc = Proc { child, addr: SocketAddr::from(([127, 0, 0, 1], port)) };
    let deadline = Instant::now() + wait;
    while !pings(proc.addr) {
        if Instant::now() > deadline {
            bail!("redis-server did not answer on port {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(proc)
}

fn pings(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// utime + stime of a whole process (all its threads), in ticks.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    stat_ticks(&format!("/proc/{pid}/stat"))
}

pub(crate) fn own_cpu_ticks() -> u64 {
    stat_ticks("/proc/self/stat")
}

fn stat_ticks(path: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(path) else { return 0 };
    // Fields after the parenthesised command name (which may contain spaces): utime, stime
    // are fields 14 and 15 of the line, i.e. 11 and 12 after the state field.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|v| v.parse().ok()).collect();
    f.iter().sum()
}

/// Busy ticks of the whole machine (all CPUs), to see how much CPU other processes took.
pub(crate) fn machine_busy_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else { return 0 };
    let line = stat.lines().next().unwrap_or("");
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: everything but idle and iowait.
    [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum()
}

/// The most a process and its children (the KV container and its integrity check's
/// process) held together, their `VmRSS` summed at the same instant every 100 ms while this
/// lives.
pub(crate) struct FamilyRss {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl FamilyRss {
    pub(crate) fn start(pid: u32) -> FamilyRss {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut most = 0;
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                let children: u64 = children(pid).into_iter().map(|c| vm_kib(c, "VmRSS")).sum();
                most = most.max(vm_kib(pid, "VmRSS") + children);
                std::thread::sleep(Duration::from_millis(100));
            }
            most
        });
        FamilyRss { stop, thread }
    }

    /// Stops sampling; the most, in KiB.
    pub(crate) fn most_kib(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap_or(0)
    }
}

/// The processes whose parent is `pid` (started by any of its threads).
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let procs = std::fs::read_dir("/proc").into_iter().flatten();
    procs
        .filter_map(|e| {
            let p: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == pid).then_some(p)
        })
        .collect()
}

/// A `VmXxx:` line of /proc/<pid>/status, in KiB.
pub(crate) fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim_start_matches(':').split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The proportional set of a process (`Pss:` of /proc/<pid>/smaps_rollup) in KiB: its private
/// pages and its share of each shared one, so a sum over processes that share memory (the
/// shared buffers of PostgreSQL's backends) counts that memory once. 0 when unreadable.
pub(crate) fn pss_kib(pid: u32) -> u64 {
    kib_line(&std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default(), "Pss:")
}

/// The value of the line starting with `name` (colon included, so `Pss:` is not `Pss_Anon:`)
/// in a /proc `name:   1234 kB` listing.
fn kib_line(text: &str, name: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// The 1-minute load average.
pub(crate) fn load1() -> f64 {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(-1.0)
}

/// nproc, CPU model, kernel and redis-server version, for the summary.
pub(crate) fn machine(redis_bin: &str) -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model =
        cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|v| v.trim_start_matches([' ', '\t', ':']));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let redis =
        Command::new(redis_bin).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    serde_json::json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model.unwrap_or("unknown"),
        "kernel": kernel.trim(),
        "mem_total_kib": std::fs::read_to_string("/proc/meminfo").ok()
            .and_then(|m| m.lines().next()?.split_whitespace().nth(1)?.parse::<u64>().ok()),
        "redis": redis.unwrap_or_default().trim(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kib_lines_are_read_by_their_whole_name() {
        let rollup = "Rss:                2048 kB\nPss:                1234 kB\nPss_Anon:            512 kB\n";
        assert_eq!(kib_line(rollup, "Pss:"), 1234);
        assert_eq!(kib_line(rollup, "Pss_Anon:"), 512);
        assert_eq!(kib_line(rollup, "Pss_File:"), 0);
    }
}
