//! The software RNIC (not built yet; see the project's open issues).
//!
//! This crate will hold the memory TPT (STags with tag_index/tag_instance, regions,
//! windows), queue pairs and completion queues, the connection manager, one IO driver per
//! connected QP that feeds TCP bytes through the sans-IO [`rdmap`] stream, the inline push
//! path, and the `iwarpd` daemon.
#![forbid(unsafe_code)]

pub use rdmap;
