//! Runnable example programs (not built yet; see the project's open issues).
//!
//! This crate will hold `iwarp-rping`, the perftest-style `iwperf` and small API demos built
//! on [`verbs`].
#![forbid(unsafe_code)]

pub use verbs;
