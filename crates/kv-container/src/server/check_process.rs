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
//! reads; the process gets the file's path and that commit's header (on stdin), and answers
//! one JSON line on stdout. Stopping the check (shutdown, a reopen) kills the process.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::ladder::Ladder;
use super::open::quietly;
use super::verify::{self, Failed, StopWhen, STOPPED};

/// How often the server looks whether the check ended, is to stop, or needs a rung.
const POLL: Duration = Duration::from_millis(20);

/// `kv serve --check-disk-reads`'s default. At 10 M records on the development machine's
/// disk, new claims right after a restart had p99 3.1–9.4 ms with the check paced at 1,000
/// (six restarts), 3.7–82 ms unpaced (seven), 7.6–196 ms at 3,000 (four), and 2.7–5.6 ms with
/// no check reading (three). The price: where the host's page cache does not hold the file
/// the check takes longer (up to 70 min for 17 GB), and it holds its commit that long, so the
/// file grows by what is written meanwhile.
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

/// Server side: checks the commit whose first page is `header`, in a process of `program`,
/// taking `ladder`'s rungs meanwhile; `ended` stops it.
pub(crate) fn check(
    program: &CheckProgram,
    file: &Path,
    header: &[u8],
    ladder: &Ladder,
    ended: &StopWhen,
) -> Result<u64, Failed> {
    let mut command = Command::new(&program.exe);
    command.args(&program.prefix).arg("check-pinned").arg("--file").arg(file);
    command.arg("--parent").arg(std::process::id().to_string());
    command.arg("--disk-reads").arg(program.disk_per_s.to_string());
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = command.spawn().map_err(|e| Failed::Incomplete(format!("cannot start the check process: {e}")))?;
    tracing::info!("kv: integrity check reading in process {} (kv check-pinned)", child.id());
    let answer = watch(&mut child, header, ladder, ended);
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

fn watch(child: &mut Child, header: &[u8], ladder: &Ladder, ended: &StopWhen) -> Result<u64, Failed> {
    let io = |e: std::io::Error| Failed::Incomplete(format!("the check process: {e}"));
    let mut stdin = child.stdin.take().ok_or_else(|| Failed::Incomplete("no stdin".into()))?;
    stdin.write_all(header).map_err(io)?;
    drop(stdin);
    let status = loop {
        if ended() {
            return Err(Failed::Incomplete(STOPPED.into()));
        }
        ladder.keep_up();
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

/// Process side: reads the header from stdin, checks every page and record of that commit,
/// answers on stdout.
pub(crate) fn check_pinned(args: &CheckPinnedArgs) -> anyhow::Result<ExitCode> {
    follow_parent(args.parent);
    lower_priority();
    tracing::info!("kv: integrity check process {} reading {}", std::process::id(), args.file.display());
    let mut header = Vec::new();
    std::io::stdin().read_to_end(&mut header).context("reading the header from stdin")?;
    let never: StopWhen = Arc::new(|| false);
    let checked = quietly(|| {
        let checked = verify::verify_pages(
            &args.file,
            never.clone(),
            verify::View::Running(&header),
            verify::Reads::Asked { disk_per_s: args.disk_reads },
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
