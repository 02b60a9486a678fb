//! The binary's own commands: what they print and how they exit (the libraries only return errors).

pub(crate) mod call;
pub(crate) mod package;

use std::error::Error;
use std::fmt;

/// An error and its causes on one line, `: `-separated (what `{:#}` of `anyhow` prints), for
/// errors the CLI prints itself instead of returning.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}
