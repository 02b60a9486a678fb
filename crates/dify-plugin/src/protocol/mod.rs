//! The daemon's line protocol: framing (`wire`), message shapes (`message`, `outbound`), and the session handle.
//!
//! What follows is `docs/protocol.md`, the protocol as this crate speaks it.
//!
#![doc = include_str!("../../docs/protocol.md")]

pub mod backwards;
pub mod caller;
pub mod inbound;
pub mod message;
pub mod outbound;
pub mod request;
pub mod session;
pub mod storage;
pub mod wire;

pub use backwards::{BackwardsCall, BackwardsError, BackwardsOptions, RequestIds};
pub use caller::Caller;
pub use inbound::{Inbound, InboundError};
pub use request::{raw_str, Fields, Name, RequestData};
#[cfg(feature = "logging")]
pub(crate) use session::LogPort;
pub(crate) use session::Outbox;
pub use session::Session;
pub use storage::Storage;
pub use wire::{Line, LineReader};
