//! Shared helpers of the cargo-fuzz targets in `fuzz_targets/`.
//!
//! * [`chunk_size`]: how a selector octet from the input turns into a TCP read size.
//! * [`connect`]: a real MPA handshake in memory, giving the [`mpa::Negotiated`] of both
//!   ends (the type cannot be built any other way outside `mpa`).
//! * [`StreamHarness`]: one [`rdmap::Stream`] with registered memory, posted receives and
//!   posted send work, driven the way the offload engine drives it, with invariants on
//!   everything it transmits.
//! * [`run_fpdus`] / [`run_ulpdus`]: the bodies of the two stream targets.
//! * [`run_pair`]: the body of `rdmap_pair`, two streams and a wire the input drives.
//!
//! The daemon's input surface (issue 31):
//!
//! * [`run_control`]: the body of `ipc_control`, control frames through `ipc`'s inbox
//!   over a real socket pair with real descriptors attached, then the decoders.
//! * [`run_entries`]: the body of `ipc_wqe`, send, receive and completion entries.
//! * [`run_rings`]: the body of `ipc_rings`, push slots, a shared receive queue's ring and
//!   a queue pair's segment, scribbled on through a second mapping.
//! * [`servant::run_servant`]: the body of `iwarpd_servant`, iwarpd's local service in
//!   this process and a hostile client writing fuzzed entries, indices and slots into
//!   one queue pair's shared memory.
#![forbid(unsafe_code)]

mod books;
mod connect;
mod control;
mod entries;
mod harness;
mod input;
mod pair;
mod rings;
mod run;
#[cfg(test)]
mod seeds;
pub mod servant;

pub use connect::{Setup, connect};
pub use control::run_control;
pub use entries::run_entries;
pub use harness::{Plan, StreamHarness, regions};
pub use pair::run_pair;
pub use rings::run_rings;
pub use run::{run_fpdus, run_ulpdus};

/// A TCP read size from a selector octet: `1..=32` for the low half of the 6-bit value,
/// then multiples of 128 up to 4224, so both byte-at-a-time and bulk reads are covered.
pub fn chunk_size(selector: u8) -> usize {
    let v = usize::from(selector & 0x3f);
    if v < 32 { v + 1 } else { (v - 31) * 128 }
}

/// Splits `data` into its first octet (0 when empty) and the rest.
pub fn take_byte(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_cover_small_and_bulk() {
        assert_eq!(chunk_size(0), 1);
        assert_eq!(chunk_size(31), 32);
        assert_eq!(chunk_size(32), 128);
        assert_eq!(chunk_size(63), 32 * 128);
        // Only the low 6 bits count.
        assert_eq!(chunk_size(0x40), chunk_size(0));
    }

    #[test]
    fn take_byte_handles_empty() {
        assert_eq!(take_byte(&[]), (0, &[][..]));
        assert_eq!(take_byte(&[7, 8]), (7, &[8][..]));
    }
}
