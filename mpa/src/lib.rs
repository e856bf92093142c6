//! Sans-IO MPA: Marker PDU Aligned framing for TCP (RFC 5044) with the enhanced connection
//! setup of RFC 6581.
//!
//! This crate performs no IO and reads no clock. It gives the layer above (DDP) and the IO
//! driver below exactly what MPA defines:
//!
//! ```text
//!   ddp        ULPDUs (DDP segments)
//!     |
//!   mpa        Request/Reply exchange, FPDU framing, markers, CRC32c   <- this crate
//!     |
//!   TCP        bytes, moved by the offload engine
//! ```
//!
//! * [`Handshake`]: the Request/Reply exchange for one side (quinn-proto style:
//!   `handle_input`/`handle_timeout` in, `poll_transmit`/`poll_event`/`poll_timeout` out).
//!   Its outcome, [`Negotiated`], configures the two framing halves.
//! * [`Framer`]: ULPDU -> FPDU for our direction (markers, PAD, CRC in little-endian).
//! * [`Deframer`]: FPDU stream -> ULPDUs for the peer's direction (tokio-util `Decoder`
//!   contract, zero copy without markers).
//! * [`wire`]: smoltcp-style views and `Repr`s of the frame, the enhanced IRD/ORD block,
//!   the marker and the FPDU.
//! * [`MpaError`]: every error, with its Terminate code (Layer 2, EType 0).
//!
//! # Example
//!
//! ```
//! use bytes::BytesMut;
//! use mpa::{Deframer, Framer};
//!
//! let mut tx = Framer::new(false, true);
//! let mut wire = BytesMut::new();
//! tx.encode(&[0xc1, 0x40], b"payload", &mut wire);
//!
//! let mut rx = Deframer::new(false, true);
//! let ulpdu = rx.decode(&mut wire).unwrap().unwrap();
//! assert_eq!(&ulpdu[..], b"\xc1\x40payload");
//! assert!(wire.is_empty());
//! ```
#![forbid(unsafe_code)]

mod config;
mod connect_error;
mod crc;
mod deframer;
mod error;
mod extensions;
mod framer;
mod handshake;
mod negotiate;
mod no_frame;
mod rtr;
pub mod wire;

#[cfg(test)]
mod tests;

pub use config::{Framing, MpaConfig, Negotiated, PeerParams, Role};
pub use connect_error::{ConnectError, Refused};
pub use crc::{crc32c, crc32c_append};
pub use deframer::Deframer;
pub use error::MpaError;
pub use extensions::Extensions;
pub use framer::{Framer, Trailer};
pub use handshake::{Handshake, HandshakeEvent};
pub use no_frame::{NoFrame, PeerEnd};
pub use rtr::{Rtr, RtrFlags};

/// RFC limit on PD_Length (the enhanced block included).
pub const MAX_PRIVATE_DATA: usize = 512;
/// RFC 5044 §3 upper bound for MULPDU: DDP never hands MPA a longer ULPDU.
pub const MAX_ULPDU: u16 = 64768;
/// RFC 5044 §3 lower bound for MULPDU.
pub const MIN_MULPDU: u16 = 128;
/// Minimum FPDU overhead: 2 octets of ULPDU_Length and 4 of CRC (PAD and markers extra).
pub const FPDU_OVERHEAD: usize = 6;
/// Markers start every 512 octets of the stream, counted from SeqStart.
pub const MARKER_PERIOD: u64 = 512;

/// PAD octets after a ULPDU of `ulpdu_len` octets: `(-(len + 2)) & 3`, so that
/// `2 + len + pad` is a multiple of 4.
pub const fn pad_len(ulpdu_len: usize) -> usize {
    0usize.wrapping_sub(ulpdu_len.wrapping_add(2)) & 3
}

/// MULPDU from the effective MSS (RFC 5044 §4.5), clamped to `[128, 64768]`:
/// `EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS % 4)` with markers,
/// `EMSS - (6 + EMSS % 4)` without.
pub fn mulpdu(emss: u32, markers: bool) -> u16 {
    let emss = u64::from(emss);
    let markers_len = if markers {
        4 * emss.div_ceil(MARKER_PERIOD)
    } else {
        0
    };
    let overhead = FPDU_OVERHEAD as u64 + markers_len + emss % 4;
    let m = emss
        .saturating_sub(overhead)
        .clamp(u64::from(MIN_MULPDU), u64::from(MAX_ULPDU));
    m as u16
}

#[cfg(test)]
mod lib_tests {
    use super::*;

    #[test]
    fn pad() {
        assert_eq!(
            [0, 1, 2, 3, 4, 19, 20, 22].map(pad_len),
            [2, 1, 0, 3, 2, 3, 2, 0]
        );
        for len in 0..64 {
            assert_eq!((2 + len + pad_len(len)) % 4, 0);
            assert!(pad_len(len) < 4);
        }
    }

    #[test]
    fn mulpdu_table() {
        // wire-format.md §1.7.
        for (emss, with, without) in [
            (536, 522, 530),
            (1220, 1202, 1214),
            (1448, 1430, 1442),
            (1460, 1442, 1454),
            (8960, 8882, 8954),
            (9000, 8922, 8994),
        ] {
            assert_eq!(mulpdu(emss, true), with, "EMSS {emss} with markers");
            assert_eq!(mulpdu(emss, false), without, "EMSS {emss} without markers");
        }
        assert_eq!(mulpdu(0, true), MIN_MULPDU);
        assert_eq!(mulpdu(100, false), MIN_MULPDU);
        assert_eq!(mulpdu(u32::MAX, false), MAX_ULPDU);
        assert_eq!(mulpdu(u32::MAX, true), MAX_ULPDU);
    }

    #[test]
    fn crc_catalogue() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
    }
}
