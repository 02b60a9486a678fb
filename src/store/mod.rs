//! Store layer.
#[derive(Debug, thiserror::Error)]
#[error("store error")]
pub struct StoreError;
