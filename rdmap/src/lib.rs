//! rdmap (being built).
#![forbid(unsafe_code)]
