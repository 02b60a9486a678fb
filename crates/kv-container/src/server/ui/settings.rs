//! The status page's `kv serve` flags and the state it keeps between requests.

use std::time::Duration;

use crate::server::census::Census;

/// `kv serve` flags of the status page.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct UiArgs {
    /// A `processing` record without a lease counts as stuck once it is this old (default:
    /// Dify's default workflow time limit). One with a lease is stuck once the lease ran out.
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) stuck_after_seconds: u64,
    /// Least time between two census scans (the status counts); a scan that took longer
    /// raises it to 20× the scan's own duration.
    #[arg(long, default_value_t = 5000, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) census_interval_ms: u64,
}

impl UiArgs {
    /// The census these flags ask for (the status counts, kept between requests).
    pub(crate) fn census(&self) -> Census {
        Census::new(self.stuck_after_seconds * 1000, Duration::from_millis(self.census_interval_ms))
    }
}
