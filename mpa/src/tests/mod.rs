//! Cross-module tests: wire-format.md §5 vectors through the Framer and Deframer, every
//! chunking, property tests and the handshake pair.

mod chunking;
mod frames;
mod handshake;
mod pair;
mod prop;
mod util;
mod vectors;
