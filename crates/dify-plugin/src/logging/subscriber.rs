//! The `tracing` subscriber of the `logging` feature: a stderr layer, and the layer that turns
//! records into the daemon's `log` events while a session loop is attached.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{filter, Layer};

use super::LogRoute;
use crate::protocol::LogPort;

struct Attached {
    port: LogPort,
    tee: bool,
    generation: u64,
}

static ATTACHED: RwLock<Option<Attached>> = RwLock::new(None);
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Installs the logger with `filter` (`tracing_subscriber`'s `EnvFilter` directives: `info`,
/// `warn,dify_plugin=debug`, …), the host's setting; without one, `RUST_LOG`, else `info`.
pub fn init(filter: Option<&str>) {
    let filter = match filter {
        Some(filter) => filter.to_owned(),
        None => std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()),
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_filter(filter::filter_fn(|_| writes_stderr()));
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new(filter))
        .with(stderr)
        .with(ProtocolLayer)
        .try_init();
}

/// Sends log records to `port` (per `route`) until the guard is dropped.
pub(crate) fn attach(port: LogPort, route: LogRoute) -> Option<AttachGuard> {
    if route == LogRoute::Stderr {
        return None;
    }
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    let tee = route == LogRoute::ProtocolAndStderr;
    *ATTACHED.write().unwrap_or_else(|p| p.into_inner()) = Some(Attached { port, tee, generation });
    Some(AttachGuard { generation })
}

/// Detaches on drop (unless a later session loop attached since).
pub(crate) struct AttachGuard {
    generation: u64,
}

impl Drop for AttachGuard {
    fn drop(&mut self) {
        let mut slot = ATTACHED.write().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|a| a.generation == self.generation) {
            *slot = None;
        }
    }
}

fn writes_stderr() -> bool {
    ATTACHED.read().unwrap_or_else(|p| p.into_inner()).as_ref().is_none_or(|a| a.tee)
}

/// The daemon's level names (it maps `debug`, `warn`/`warning`, `error`, else info).
pub(crate) fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG | Level::TRACE => "DEBUG",
    }
}

struct ProtocolLayer;

impl<S: Subscriber> Layer<S> for ProtocolLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let slot = ATTACHED.read().unwrap_or_else(|p| p.into_inner());
        let Some(attached) = slot.as_ref() else { return };
        let mut text = Text::default();
        event.record(&mut text);
        let level = level_name(event.metadata().level());
        if !attached.port.try_log(level, &text.0) && !attached.tee {
            // The queue is full (the daemon is not reading) or the writer is gone: the record
            // is not lost, it goes where logs go when the protocol is down.
            eprintln!("{level} {}", text.0);
        }
    }
}

/// The message, then `name=value` for every other field (what the stderr format shows).
#[derive(Default)]
struct Text(String);

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_use_the_names_the_daemon_maps() {
        assert_eq!(level_name(&Level::WARN), "WARNING");
        assert_eq!(level_name(&Level::TRACE), "DEBUG");
        assert_eq!(level_name(&Level::ERROR), "ERROR");
    }
}
