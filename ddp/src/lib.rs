//! ddp (being built).
#![forbid(unsafe_code)]
