//! Connection limits of the KV container (flags, defaults) and the file-descriptor budget.

use std::time::Duration;

/// `kv serve` flags that bound what clients can hold open.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ConnArgs {
    /// Most open client connections. At the cap, the connection that has been quiet the
    /// longest (and is not serving a request) is closed to make room.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) max_connections: u32,
    /// A request head (and on a new connection, the first request) must arrive within this.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) header_timeout_ms: u64,
    /// A connection with no traffic either way for this long is closed.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) idle_timeout_ms: u64,
    /// Largest request head (HTTP/1.1 read buffer, HTTP/2 header list), in bytes.
    #[arg(long, default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(8192..=1_048_576))]
    pub(crate) max_header_bytes: u64,
    /// Most concurrent requests on one HTTP/2 connection.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) h2_max_streams: u32,
}

/// The limits the accept loop enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_header_bytes: usize,
    pub(crate) h2_max_streams: u32,
}

/// Descriptors kept for the data file, the listener, logging and the blocking pool.
const RESERVED_FDS: u64 = 64;

impl Limits {
    /// Connections closed to make room take a moment to go; this many may be open meanwhile.
    pub(crate) fn hard_ceiling(&self) -> usize {
        self.max_connections + (self.max_connections / 8).max(16)
    }

    /// The limits from the flags, with the cap lowered (and a warning) if the process may
    /// not open that many descriptors even after raising its soft limit.
    pub(crate) fn from_args(args: &ConnArgs) -> Limits {
        let mut limits = Limits {
            max_connections: args.max_connections as usize,
            header_timeout: Duration::from_millis(args.header_timeout_ms),
            idle_timeout: Duration::from_millis(args.idle_timeout_ms),
            max_header_bytes: args.max_header_bytes as usize,
            h2_max_streams: args.h2_max_streams,
        };
        let wanted = limits.hard_ceiling() as u64 + RESERVED_FDS;
        let available = raise_fd_limit(wanted);
        if available < wanted {
            let fit = (available.saturating_sub(RESERVED_FDS) * 8 / 9).max(1) as usize;
            tracing::warn!(
                "kv: --max-connections {} needs {wanted} file descriptors but the limit is {available}; \
                 using {fit} (raise `ulimit -n` to allow more)",
                limits.max_connections
            );
            limits.max_connections = fit;
        }
        limits
    }
}

/// Raises the soft `RLIMIT_NOFILE` towards `wanted` (up to the hard limit); returns the
/// soft limit in force afterwards.
fn raise_fd_limit(wanted: u64) -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return wanted;
        }
        if lim.rlim_cur < wanted as libc::rlim_t {
            let target = (wanted as libc::rlim_t).min(lim.rlim_max);
            let raised = libc::rlimit { rlim_cur: target, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = target;
            }
        }
    }
    lim.rlim_cur
}
