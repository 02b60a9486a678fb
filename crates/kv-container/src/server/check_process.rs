//! The background integrity check of a serving store, run in a process of its own: this
//! program again, as `kv check-pinned`, reading the commit the server holds still.
//!
//! Why a process: every page the check reads is a fresh page-sized allocation, freed soon
//! after, hundreds of thousands a second. In the serving process they went through the one
//! malloc arena `kv serve` keeps (see `cap_malloc_arenas`), whose lock the writer and the
//! request threads take too: at 1 M records, 8 s after a restart, the writer waited on that
//! lock 39,814 times and the check 37,299 times, and new claims beside the check had p50
//! 0.8–1.0 ms against 0.5–0.6 ms after it. A process has its own heap, and a fault in the
//! storage engine's reading stays out of the server.
//!
//! The server holds the commit (see `pin`) and takes the ladder's rungs while the process
//! reads; the process gets the file's path and, on stdin, [`PROTOCOL`], the file's length as
//! of that commit (8 bytes little-endian) and its header (its length, 4 bytes little-endian,
//! then the bytes), then one byte each time the store turns quiet or busy (see `traffic`: the
//! disk reads are paced only while it serves), and answers one JSON line on stdout. Stopping the check (shutdown, a reopen) kills the process.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::disk_pace::DiskPace;
use super::ladder::Ladder;
use super::open::quietly;
use super::traffic::{QuietWatch, Traffic};
use super::verify::{self, Commit, Failed, StopWhen, STOPPED};

/// How often the server looks whether the check ended, is to stop, needs a rung, or is to
/// change its pace.
const POLL: Duration = Duration::from_millis(20);

/// On the check's stdin after the header: the store turned quiet (read at once) or busy (read
/// at the pace).
const QUIET: u8 = b'q';
const BUSY: u8 = b'b';

/// The most header bytes the process takes (redb's header is one page).
const MAX_HEADER: u32 = 1 << 20;

/// What the server sends first. A binary replaced under a running server (an upgrade in
/// place) is started as its check process: one that speaks another version of this stdin
/// refuses it, and the check is reported incomplete, not read as damage. Version 1 sent the
/// header's length first, and its 4 bytes here read as a header too long for version 1.
const PROTOCOL: [u8; 4] = *b"KVC2";

/// `kv serve --check-disk-reads`'s default. At 10 M records on the development machine's
/// disk, new claims right after a restart had p99 3.1–9.4 ms with the check paced at 1,000
/// (six restarts), 3.7–82 ms unpaced (seven), 7.6–196 ms at 3,000 (four), and 2.7–5.6 ms with
/// no check reading (three). The price: where the host's page cache does not hold the file
/// and requests keep coming, the check takes longer (up to 70 min for 17 GB), and it holds its
/// commit that long, so the file grows by what is written meanwhile. A quiet store is checked
/// unpaced.
pub(crate) const DISK_READS_PER_S: u32 = 1000;

/// How to start this program's `kv check-pinned`, read once when `kv serve` starts.
#[derive(Debug, Clone)]
pub(crate) struct CheckProgram {
    exe: PathBuf,
    /// The arguments before `serve` on the command line that started the server (`kv`).
    prefix: Vec<OsString>,
    /// `--check-disk-reads`.
    disk_per_s: u32,
}

impl CheckProgram {
    /// This process's program, started as it was. `/proc/self/exe` still names the program
    /// that runs after its file was replaced (an upgrade in place), so the check is this
    /// version's.
    pub(crate) fn of_this_process(disk_per_s: u32) -> anyhow::Result<CheckProgram> {
        let args: Vec<OsString> = std::env::args_os().collect();
        let at = args.iter().position(|a| a == "serve").context("the command line has no `serve`")?;
        let proc_exe = Path::new("/proc/self/exe");
        let exe = if proc_exe.exists() { proc_exe.to_path_buf() } else { std::env::current_exe()? };
        Ok(CheckProgram { exe, prefix: args[1..at].to_vec(), disk_per_s })
    }
}

/// What `kv check-pinned` answers, one JSON line.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(tag = "verdict", rename_all = "snake_case")]
enum Answer {
    Passed { records: u64 },
    Damaged { reason: String },
    Incomplete { reason: String },
}

/// `kv check-pinned` (started by `kv serve`, not by hand): the file, and the server's pid.
#[derive(clap::Args)]
pub struct CheckPinnedArgs {
    /// The data file, open in the running server that started this process.
    #[arg(long)]
    file: PathBuf,
    /// The server's pid: the check ends if the server does.
    #[arg(long)]
    parent: u32,
    /// Pages a second it may read from the disk (`kv serve --check-disk-reads`).
    #[arg(long, default_value_t = 0)]
    disk_reads: u32,
}

/// Server side: checks `commit` in a process of `program`, taking `ladder`'s rungs and
/// telling it whether `traffic` is quiet meanwhile; `ended` stops it.
pub(crate) fn check(
    program: &CheckProgram,
    file: &Path,
    commit: Commit<'_>,
    ladder: &Ladder,
    traffic: &Traffic,
    ended: &StopWhen,
) -> Result<u64, Failed> {
    let mut command = Command::new(&program.exe);
    command.args(&program.prefix).arg("check-pinned").arg("--file").arg(file);
    command.arg("--parent").arg(std::process::id().to_string());
    command.arg("--disk-reads").arg(program.disk_per_s.to_string());
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = command.spawn().map_err(|e| Failed::Incomplete(format!("cannot start the check process: {e}")))?;
    tracing::info!("kv: integrity check reading in process {} (kv check-pinned)", child.id());
    let answer = watch(&mut child, commit, ladder, traffic, ended);
    if answer.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    tracing::info!(
        "kv: integrity check process {} ended ({}); the largest check process so far held {} MB",
        child.id(),
        status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
        children_peak_rss_kib() / 1024
    );
    answer
}

/// The peak RSS of the largest child this server waited for: only check processes are.
fn children_peak_rss_kib() -> u64 {
    // SAFETY: getrusage fills the struct it is given; zeroes are a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    match unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } {
        0 => u64::try_from(usage.ru_maxrss).unwrap_or(0),
        _ => 0,
    }
}

fn watch(
    child: &mut Child,
    commit: Commit<'_>,
    ladder: &Ladder,
    traffic: &Traffic,
    ended: &StopWhen,
) -> Result<u64, Failed> {
    let io = |e: std::io::Error| Failed::Incomplete(format!("the check process: {e}"));
    let mut stdin = child.stdin.take().ok_or_else(|| Failed::Incomplete("no stdin".into()))?;
    let Commit { header, len: file_len } = commit;
    let len = u32::try_from(header.len()).ok().filter(|&n| n <= MAX_HEADER);
    let len = len.ok_or_else(|| Failed::Incomplete(format!("a header of {} bytes", header.len())))?;
    let mut sent = PROTOCOL.to_vec();
    sent.extend_from_slice(&file_len.to_le_bytes());
    sent.extend_from_slice(&len.to_le_bytes());
    sent.extend_from_slice(header);
    stdin.write_all(&sent).map_err(io)?;
    let (mut quiet_watch, mut told_quiet) = (QuietWatch::new(traffic.seen(), Instant::now()), false);
    let status = loop {
        if ended() {
            return Err(Failed::Incomplete(STOPPED.into()));
        }
        ladder.keep_up();
        let quiet = quiet_watch.quiet(traffic.seen(), Instant::now());
        if quiet != told_quiet {
            // A failed write means the process ended: `try_wait` below sees it.
            let _ = stdin.write_all(&[if quiet { QUIET } else { BUSY }]);
            told_quiet = quiet;
        }
        match child.try_wait().map_err(io)? {
            Some(status) => break status,
            None => std::thread::sleep(POLL),
        }
    };
    let mut out = String::new();
    child.stdout.take().map(|mut s| s.read_to_string(&mut out)).transpose().map_err(io)?;
    match serde_json::from_str::<Answer>(out.trim()) {
        Ok(Answer::Passed { records }) => Ok(records),
        Ok(Answer::Damaged { reason }) => Err(Failed::Damaged(reason)),
        Ok(Answer::Incomplete { reason }) => Err(Failed::Incomplete(reason)),
        Err(_) => Err(Failed::Incomplete(format!("the check process ended without an answer ({status})"))),
    }
}

/// Process side: reads the commit's file length and header from stdin, checks every page and
/// record of that commit, answers on stdout.
pub(crate) fn check_pinned(args: &CheckPinnedArgs) -> anyhow::Result<ExitCode> {
    follow_parent(args.parent);
    lower_priority();
    tracing::info!("kv: integrity check process {} reading {}", std::process::id(), args.file.display());
    let mut stdin = std::io::stdin();
    let (len, header) = read_commit(&mut stdin).context("reading the commit's length and header from stdin")?;
    let pace = DiskPace::per_second(args.disk_reads).map(Arc::new);
    let told = pace.clone();
    // Reads the server's quiet/busy bytes for as long as it sends them, paced or not: a pipe
    // left to fill up would block the server's next write.
    std::thread::spawn(move || follow_pace(stdin, told.as_deref()));
    let never: StopWhen = Arc::new(|| false);
    let checked = quietly(|| {
        let checked = verify::verify_pages(
            &args.file,
            never.clone(),
            verify::View::Running(Commit { header: &header, len }),
            verify::Reads::Asked(pace),
        )?;
        verify::read_records(checked.db(), &never)
    });
    let answer = match checked {
        Ok(Ok(records)) => Answer::Passed { records },
        Ok(Err(Failed::Damaged(reason))) | Err(reason) => Answer::Damaged { reason },
        Ok(Err(Failed::Incomplete(reason))) => Answer::Incomplete { reason },
    };
    println!("{}", serde_json::to_string(&answer)?);
    Ok(ExitCode::SUCCESS)
}

/// What the server sends first: [`PROTOCOL`], the file's length (8 bytes, little-endian),
/// then the header's length (4 bytes, little-endian) and its bytes.
fn read_commit(from: &mut impl Read) -> std::io::Result<(u64, Vec<u8>)> {
    let mut protocol = [0u8; 4];
    from.read_exact(&mut protocol)?;
    if protocol != PROTOCOL {
        return Err(std::io::Error::other(
            "the server speaks another version of this check's stdin (the binary was replaced under it?)",
        ));
    }
    let mut file_len = [0u8; 8];
    from.read_exact(&mut file_len)?;
    let mut len = [0u8; 4];
    from.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_HEADER {
        return Err(std::io::Error::other(format!("a header of {len} bytes")));
    }
    let mut header = vec![0u8; len as usize];
    from.read_exact(&mut header)?;
    Ok((u64::from_le_bytes(file_len), header))
}

/// Sets `pace` quiet or busy as the server says, until its end of the pipe closes.
fn follow_pace(mut from: impl Read, pace: Option<&DiskPace>) {
    let mut said = [0u8; 64];
    while let Ok(n @ 1..) = from.read(&mut said) {
        // Only the last word counts.
        let last = said[..n].iter().rev().find(|b| [QUIET, BUSY].contains(b));
        if let (Some(&word), Some(pace)) = (last, pace) {
            pace.set_quiet(word == QUIET);
        }
    }
}

/// Ends this process with the server's thread that started it (Linux), and at once if the
/// server is already gone.
fn follow_parent(parent: u32) {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() as u32 != parent {
            std::process::exit(1);
        }
    }
}

/// The check yields the cores and the disk to requests: its thread (in `kv serve`, its
/// process's only one) runs in `SCHED_IDLE` (a weight of 3 against a request thread's 1024,
/// so a waking request preempts it at once; on one 1 M store restarted twice, new claims
/// beside the check p99 2.1 ms at `nice` 10 against 1.1 ms in `SCHED_IDLE`, see
/// performance.md), else at `nice` 10; and its reads are in the idle I/O class, which the
/// disk's scheduler serves after every other request (the kernel left a `SCHED_IDLE` thread
/// in no class: `ionice` showed `none`). Under full load it still progresses, slowly.
pub(crate) fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain system calls on this thread (pid 0 and its own id); a failure only
        // leaves the priority as it was.
        let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0;
        if !idle {
            let tid = unsafe { libc::gettid() };
            let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10) };
        }
        // ioprio_set(IOPRIO_WHO_PROCESS, this thread, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT);
        // libc has the call's number, not its constants.
        const WHO_PROCESS: libc::c_long = 1;
        const CLASS_IDLE: libc::c_long = 3 << 13;
        // SAFETY: as above; a failure leaves the class as it was.
        let _ = unsafe { libc::syscall(libc::SYS_ioprio_set, WHO_PROCESS, 0 as libc::c_long, CLASS_IDLE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_then_the_pace_as_the_server_sends_them() {
        let header = vec![0xA5u8; 4096];
        let mut sent = PROTOCOL.to_vec();
        sent.extend_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
        sent.extend_from_slice(&(header.len() as u32).to_le_bytes());
        sent.extend_from_slice(&header);
        sent.extend_from_slice(&[QUIET, BUSY, QUIET]);
        let mut from = std::io::Cursor::new(sent);
        assert_eq!(read_commit(&mut from).unwrap(), (0x0123_4567_89ab_cdef, header));
        let pace = DiskPace::per_second(1).unwrap();
        follow_pace(&mut from, Some(&pace));
        // The last word counts.
        assert!(pace.is_quiet());
        let mut busy = std::io::Cursor::new(vec![BUSY]);
        follow_pace(&mut busy, Some(&pace));
        assert!(!pace.is_quiet());
    }

    #[test]
    fn the_server_sends_the_length_and_header_then_quiet_once_no_request_came_for_a_second() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Arc::new(redb::Database::create(tmp.path().join("db")).unwrap());
        let got = tmp.path().join("stdin");
        // A stand-in for `kv check-pinned`: keeps the commit and the first pace byte, answers.
        let script = format!(
            "head -c {} > '{}'; echo '{{\"verdict\":\"passed\",\"records\":3}}'",
            4 + 8 + 4 + 512 + 1,
            got.display()
        );
        let mut child =
            Command::new("sh").args(["-c", &script]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let (header, never): (Vec<u8>, StopWhen) = (vec![0x5Au8; 512], Arc::new(|| false));
        let traffic = Traffic::default();
        let commit = Commit { header: &header, len: 7 << 30 };
        let records = watch(&mut child, commit, &Ladder::new(db), &traffic, &never).unwrap();
        assert_eq!(records, 3);
        let sent = std::fs::read(&got).unwrap();
        assert_eq!(sent[..4], PROTOCOL);
        assert_eq!(sent[4..12], (7u64 << 30).to_le_bytes());
        assert_eq!(sent[12..16], 512u32.to_le_bytes());
        assert_eq!(sent[16..528], header[..]);
        assert_eq!(sent[528..], [QUIET], "no request came: quiet, and nothing before it");
    }

    #[test]
    fn a_header_longer_than_a_page_could_be_is_refused_before_it_is_allocated() {
        let sent = |rest: &[u8]| {
            let mut sent = PROTOCOL.to_vec();
            sent.extend_from_slice(&4096u64.to_le_bytes());
            sent.extend_from_slice(rest);
            std::io::Cursor::new(sent)
        };
        assert!(read_commit(&mut sent(&(MAX_HEADER + 1).to_le_bytes())).is_err());
        assert!(read_commit(&mut sent(&[8, 0, 0, 0, 1, 2])).is_err(), "a header cut short");
        assert_eq!(read_commit(&mut sent(&[2, 0, 0, 0, 1, 2])).unwrap(), (4096, vec![1, 2]));
    }

    /// Version 1 of this stdin (the header's length, then the header) is refused by this
    /// version, and this version's by version 1 (its tag reads as a header longer than
    /// `MAX_HEADER`): a server and a check process of two builds never take each other's
    /// bytes for a commit.
    #[test]
    fn another_version_of_the_stdin_is_refused_both_ways() {
        let mut v1 = 4096u32.to_le_bytes().to_vec();
        v1.extend_from_slice(&[0x5A; 4096]);
        let why = read_commit(&mut std::io::Cursor::new(v1)).unwrap_err();
        assert!(why.to_string().contains("another version"), "{why}");
        assert!(u32::from_le_bytes(PROTOCOL) > MAX_HEADER, "version 1 reads the tag as a header's length");
    }
}
