//! Runnable example programs built on [`verbs`], and the small helpers they share.
//!
//! Binaries:
//!
//! * `demo`: two embedded engines in one process over loopback: connect with private
//!   data, register, RDMA Write, RDMA Read back and verify, Send/Recv ping-pong, with the
//!   measured throughput. `cargo run --release -p examples --bin demo -- --help`.
//!
//! Still to come: `iwarp-rping` and the perftest-style `iwperf`.
#![forbid(unsafe_code)]

pub mod args;

pub use verbs;
