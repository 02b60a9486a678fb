//! A child process's stderr routed through the test harness's output capture.
//!
//! An inherited stderr writes straight to the terminal: every passing test that provokes an
//! error on purpose (a full disk, a crash, a refused token) would print the child's `ERROR`
//! and `WARN` lines into `make test`'s output. Through [`captured`], those lines go where the
//! test's own `eprintln!` goes: shown under the failing test's name when it fails (and live
//! with `--nocapture`), kept quiet when it passes. Tests that assert on a log still write it
//! to a file of their own (`KvServer::start_logged`, `Plugin::spawn_logged`).

use std::io::{BufRead, BufReader};
use std::process::Stdio;

/// A `Stdio` for a child's stderr whose lines a thread re-prints with `eprintln!`, each
/// prefixed `[label]`. The thread is spawned from the calling thread and so inherits its
/// output capture (std passes a test's capture on to the threads it spawns); it keeps
/// reading until every holder of the pipe's write end has exited, so the child never blocks
/// on a full pipe.
pub(crate) fn captured(label: &str) -> Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe for a child's stderr");
    let label = label.to_owned();
    std::thread::Builder::new()
        .name(format!("{label} stderr"))
        .spawn(move || {
            let mut reader = BufReader::new(reader);
            let mut line = Vec::new();
            // Bytes, not `lines()`: a line that is not UTF-8 must not stop the draining.
            while let Ok(1..) = reader.read_until(b'\n', &mut line) {
                eprintln!("[{label}] {}", String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']));
                line.clear();
            }
        })
        .expect("spawn the stderr reader thread");
    writer.into()
}
