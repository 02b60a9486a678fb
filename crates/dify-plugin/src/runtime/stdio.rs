//! Local mode: the protocol over the stdin/stdout pipes the daemon started us with.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::session_loop::serve;
use super::ServeOptions;
use crate::error::{Error, Exit};
use crate::handler::Handler;

type Input = Box<dyn AsyncRead + Unpin + Send>;
type Output = Box<dyn AsyncWrite + Unpin + Send>;

/// stdin/stdout for the protocol. When they are pipes (how the daemon starts us) they are
/// set non-blocking and driven by the runtime's event loop like sockets, so reading a request
/// or writing an answer costs no round trip through a blocking thread (those round trips
/// were most of the plugin's CPU per request). The pipe ends are ours alone: the daemon
/// holds the other ends, and the shim exec'd us. Anything else (a file, a terminal) goes
/// through tokio's blocking wrappers.
fn protocol_streams() -> (Input, Output) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let input: Input = match std::io::stdin().as_fd().try_clone_to_owned().and_then(pipe::Receiver::from_owned_fd) {
        Ok(rx) => Box::new(rx),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let output: Output = match std::io::stdout().as_fd().try_clone_to_owned().and_then(pipe::Sender::from_owned_fd) {
        Ok(tx) => Box::new(tx),
        Err(_) => Box::new(tokio::io::stdout()),
    };
    (input, output)
}

/// Local mode: stdin/stdout. Ends with [`Exit::InputClosed`] at stdin EOF (every session
/// answered), [`Exit::DaemonGone`] when the daemon that started the plugin is gone (it only
/// ever sends SIGKILL, so orphaning is the only sign), or [`Error::OutputClosed`] when stdout
/// breaks. Sessions still in flight when the daemon is gone are abandoned: nobody can read
/// their answers.
pub async fn run_stdio<H: Handler>(app: Arc<H>, opts: ServeOptions) -> Result<Exit, Error> {
    let parent = std::os::unix::process::parent_id();
    let orphaned = async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            if std::os::unix::process::parent_id() != parent {
                return;
            }
        }
    };
    let (input, output) = protocol_streams();
    let stdin = tokio::io::BufReader::with_capacity(64 * 1024, input);
    tokio::select! {
        served = serve(stdin, output, app, opts) => match served {
            Ok(()) => Ok(Exit::InputClosed),
            Err(e) => Err(Error::serving("serving the protocol on stdin/stdout", e)),
        },
        () = orphaned => {
            tracing::warn!("the daemon that started this plugin is gone; exiting");
            Ok(Exit::DaemonGone)
        }
    }
}
