//! The daemon's line protocol: framing (`wire`), message shapes (`message`), and the session
//! handle tools answer through (`session`).

pub mod caller;
pub mod message;
pub mod outbound;
pub mod request;
pub mod session;
pub mod wire;

pub use caller::Caller;
pub use message::{Inbound, InboundError};
pub use request::{raw_str, Fields, Name, RequestData};
pub use session::Session;
pub(crate) use session::{LogPort, Outbox};
pub use wire::{Line, LineReader};
