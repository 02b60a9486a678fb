//! How a runtime ends: an [`Exit`] when it stopped as the protocol says it should, an [`Error`] otherwise.

use std::io;

/// Why a runtime stopped cleanly; a host exits 0 on any of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exit {
    /// The daemon closed the protocol input (stdin at EOF) and every session was answered.
    InputClosed,
    /// The daemon that started the plugin is gone: the plugin was orphaned (the daemon only
    /// ever stops a plugin with SIGKILL, so this is the only sign it gives).
    DaemonGone,
}

/// Why a runtime could not start or had to stop. The host decides what each means for its
/// exit code; the runtime neither prints nor exits.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting the runtime reads (`INSTALL_METHOD`, `REMOTE_INSTALL_*`, …) is missing or
    /// not what it must be; the message names it.
    #[error("{0}")]
    Setting(String),
    /// Remote debugging: the daemon refused the registration (a bad key, an invalid
    /// declaration) or closed the first connection without a word. Retrying cannot help.
    #[error("{0}")]
    Refused(String),
    /// Remote debugging: the daemon stayed out of reach for the configured number of attempts.
    #[error("gave up after {attempts} failed attempts to register with the daemon at {addr}: {why}")]
    GaveUp {
        /// Failed attempts in a row.
        attempts: u32,
        /// The daemon's address.
        addr: String,
        /// What the last attempt ran into.
        why: String,
    },
    /// The protocol output (stdout or the daemon's socket) closed: nobody reads the answers.
    #[error("the protocol output closed")]
    OutputClosed(#[source] io::Error),
    /// Any other I/O failure: building the async runtime, binding the HTTP listener, reading
    /// the protocol input.
    #[error("{context}")]
    Io {
        /// What the runtime was doing.
        context: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }

    /// A broken pipe is the reader gone; anything else is an I/O failure while `context`.
    pub(crate) fn serving(context: &str, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::BrokenPipe => Error::OutputClosed(e),
            _ => Error::io(context, e),
        }
    }
}
