//! Logs: on stderr until the protocol is up, then as protocol `log` events at their level.
//!
//! The daemon logs every stderr line of a plugin as `WARN plugin stderr`, whatever it says,
//! but logs a `log` event at the level it carries. So while a session loop talks to the
//! daemon, every log record becomes a `log` event queued to the one protocol writer; before
//! (start-up failures) and after (exit reasons) it goes to stderr. The remote-debugging
//! daemon drops `log` events ("logs stay on the client side"), so there they are also
//! written to stderr, the developer's terminal. Secrets are kept out at the call sites:
//! nothing here adds request data to a message.
//!
//! All of that is [`init`]'s subscriber, behind the `logging` feature (default; it brings
//! `tracing-subscriber`). Without the feature the runtimes still emit `tracing` records, and
//! they go to whatever subscriber the host installs, never as `log` events; [`LogRoute`] then
//! has no effect.

#[cfg(feature = "logging")]
mod subscriber;

#[cfg(feature = "logging")]
pub(crate) use subscriber::attach;
#[cfg(feature = "logging")]
pub use subscriber::init;

/// Where a session loop's log records go while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRoute {
    /// stderr only (tests, the HTTP runtime, anything not driven by the daemon's stream).
    Stderr,
    /// `log` events only (stdio under the daemon).
    Protocol,
    /// `log` events, and stderr too (remote debugging: the daemon drops the events).
    ProtocolAndStderr,
}
