//! The async verbs API (not built yet; see the project's open issues).
//!
//! This crate will hold `Device`, `Pd`, `Mr`, `Mw`, `Cq`, `Qp`, `Srq` and `Listener`: cheap
//! `Clone + Send + Sync` handles over the [`offload_engine`], with owned buffers.
#![forbid(unsafe_code)]

pub use offload_engine;
