//! mpa (being built).
#![forbid(unsafe_code)]
