//! The ground floor: element types and their arithmetic, host buffers and typed views of them,
//! element-wise casts. Arrays (`ndarray`), kernels (`reduce`, `compression`) and the engine
//! stand on it; it imports nothing of the crate but `error`.

pub(crate) mod affinity;
pub mod buffer;
mod cast;
mod context;
mod dtype;
pub mod element;
pub(crate) mod id_hasher;
mod padded;
pub(crate) mod prefetch;

pub use cast::cast;
pub use context::{Context, DeviceType};
pub use dtype::{DType, ALL_DTYPES};
pub use padded::CachePadded;
