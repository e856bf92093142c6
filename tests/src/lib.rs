//! Cross-crate integration tests live in `tests/tests/`; this library holds their shared
//! helpers: [`netns`], two hosts on one machine in network namespaces, and [`hostile`], a
//! peer that frames every octet itself.
#![forbid(unsafe_code)]

pub mod hostile;
pub mod netns;
