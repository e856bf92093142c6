//! Cross-crate integration tests live in `tests/tests/`; this library holds their shared
//! helpers: [`netns`], two hosts on one machine in network namespaces.
#![forbid(unsafe_code)]

pub mod netns;
