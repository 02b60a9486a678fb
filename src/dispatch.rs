//! Routes each request to its handler.
