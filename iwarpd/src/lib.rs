//! `iwarpd`'s library half: the local service that serves applications attached to the
//! daemon over its control socket ([`local`]), which the binary runs and the tests of
//! other crates start in-process. The daemon itself (the remote-memory target, `check`,
//! `stat`, metrics, upgrades) is the binary, `src/main.rs`.

#![forbid(unsafe_code)]

pub mod local;
