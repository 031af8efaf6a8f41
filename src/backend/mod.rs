//! Execution backends, one per context kind.

pub(crate) mod host;
