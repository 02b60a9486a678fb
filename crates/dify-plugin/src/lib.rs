//! dify-plugin: the Dify plugin daemon's protocol and runtimes, for a plugin written in Rust.
//!
//! A plugin implements [`Handler`]: it receives each request's `data`, read into its own type
//! ([`Handler::Data`], borrowing from the request line, in the same pass as the line), on its
//! own [`Session`], and answers it (stream messages, then exactly one `end`). [`run`] serves
//! it on the runtime the daemon's environment chooses (`INSTALL_METHOD`):
//! [`runtime::stdio`] (how the daemon starts an installed plugin: newline-delimited JSON on
//! stdin/stdout), [`runtime::remote`] (remote debugging over TCP, with the registration) or
//! [`runtime::serverless`] (HTTP); [`run_with`] takes the settings and the host's knobs
//! ([`RunOptions`]). It returns how it ended ([`Exit`], [`Error`]) and leaves printing and
//! exit codes to the host. [`protocol`] holds the wire format and describes the protocol as
//! this crate speaks it (`docs/protocol.md`); [`logging`] turns `tracing` records into the
//! daemon's `log` events. The crate knows nothing of what a plugin does.
//!
//! Typed interfaces over [`Handler`], as the Python SDK has them: a tool provider writes
//! each tool as a [`tool::Tool`] (its parameters read into its own type) and serves a
//! [`tool::ToolProvider`]; a trigger writes a [`trigger::Trigger`] (the webhook delivery in
//! as a decoded HTTP request, typed answers out) and serves a [`trigger::TriggerProvider`].
//! Both check credentials through [`provider::ValidateCredentials`]. `examples/tool.rs` and
//! `examples/webhook.rs` show one each.
//!
//! A handler calls back into Dify on its session (backwards invocation: [`Session::call`],
//! [`Session::invoke`]) and keeps data in Dify's storage ([`Session::storage`]), on the duplex
//! runtimes (stdio, remote debugging).
//!
//! Features (both default):
//!
//! - `http`: the serverless and aws_lambda runtimes ([`runtime::serverless`], through axum).
//!   Without it a plugin has stdio and remote debugging only, and `INSTALL_METHOD=serverless`
//!   is refused with an [`Error::Setting`].
//! - `logging`: [`logging::init`], the `tracing` subscriber that writes stderr and turns records
//!   into the daemon's `log` events while a session loop runs (through `tracing-subscriber`).
//!   Without it the runtimes' `tracing` records go to whatever subscriber the host installs,
//!   never as `log` events.
//!
//! Platforms: the stdio runtime ([`runtime::stdio`]) is Unix-only (`cfg(unix)`: it drives the
//! daemon's pipes as non-blocking file descriptors and watches the parent process); elsewhere `INSTALL_METHOD=local` is refused
//! with an [`Error::Setting`], and remote debugging and HTTP work.
//!
//! Not yet: backwards invocation in the serverless runtimes ([`BackwardsError::Unsupported`]),
//! typed wrappers for invocation types other than storage, files and blobs, i18n
//! declarations.
//!
//! A plugin that answers every request with one `stream` message, driven here over a byte
//! slice as the daemon would drive it over stdin (`examples/tool.rs` is a fuller plugin as a
//! program, served by [`run`]):
//!
//! ```
//! use std::sync::Arc;
//! use dify_plugin::runtime::{session_loop::serve, ServeOptions};
//! use dify_plugin::{Handler, RequestData, Session};
//! use serde_json::{json, Value};
//!
//! struct Echo;
//!
//! #[derive(serde::Deserialize)]
//! struct Request<'a> {
//!     action: &'a str, // borrowed from the request's text
//! }
//!
//! impl Handler for Echo {
//!     type Data<'a> = Request<'a>;
//!
//!     async fn handle<'a>(&'a self, session: Session, data: Request<'a>, _: &'a RequestData) {
//!         session.stream(&json!({"action": data.action})).await;
//!         session.finish(None).await;
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let input = concat!(
//!     r#"{"session_id":"s1","event":"request","data":{"type":"tool","action":"invoke_tool"}}"#,
//!     "\n",
//! );
//! let mut output = Vec::new();
//! serve(input.as_bytes(), &mut output, Arc::new(Echo), ServeOptions::default()).await.unwrap();
//! let lines: Vec<Value> =
//!     String::from_utf8(output).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
//! assert_eq!(lines[0]["event"], "heartbeat"); // the daemon's sign that the plugin is up
//! assert_eq!(lines[1]["data"], json!({"type": "stream", "data": {"action": "invoke_tool"}}));
//! assert_eq!(lines[2]["data"], json!({"type": "end", "data": {}}));
//! # });
//! ```

#![deny(missing_docs)]

mod error;
pub mod handler;
pub mod logging;
pub mod protocol;
pub mod provider;
mod run;
pub mod runtime;
pub mod tool;
pub mod trigger;

pub use error::{Error, Exit};
pub use handler::{ErrorMessage, Handler, Oversize, OversizeLine};
pub use protocol::{BackwardsError, RequestData, Session, Storage};
pub use run::{run, run_with, serve, InstallMethod, RunOptions, Transport};
