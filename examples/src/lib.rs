//! Runnable example programs built on [`verbs`], and the small helpers they share.
//!
//! Binaries:
//!
//! * `demo`: two embedded engines in one process over loopback: connect with private
//!   data, register, RDMA Write, RDMA Read back and verify, Send/Recv ping-pong, with the
//!   measured throughput. `cargo run --release -p examples --bin demo -- --help`.
//!
//! * `iwarp-rping`: rdma-core's `rping` on this stack, interoperating with `rping` on
//!   Linux siw in both roles (see [`rping`]). `iwarp-rping --help`.
//!
//! * `iwperf`: perftest's `ib_write_bw -R` / `ib_read_bw -R` / `ib_send_bw -R`, interoperating with
//!   perftest on Linux siw (see [`perf`]). `iwperf --help`.
#![forbid(unsafe_code)]

pub mod args;
pub mod perf;
pub mod rping;

pub use verbs;
