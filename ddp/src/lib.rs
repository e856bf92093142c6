//! Sans-IO Direct Data Placement (RFC 5041).
//!
//! This crate owns no memory and performs no IO. It gives the layers above it
//! (RDMAP) and below it (MPA) what DDP defines on the wire and nothing more:
//!
//! ```text
//!   rdmap      RDMAP control octet in RsvdULP, Read Request / Terminate headers
//!     |
//!   ddp        tagged / untagged headers, segmentation, placement checks   <- this crate
//!     |
//!   mpa        FPDU framing: ULPDU_Length, markers, PAD, CRC32c
//! ```
//!
//! * [`wire`]: smoltcp-style views over header bytes ([`TaggedPacket`],
//!   [`UntaggedPacket`]) and their parsed forms ([`TaggedRepr`], [`UntaggedRepr`]),
//!   plus the control octet ([`wire::control`]).
//! * [`SegmentRepr`]: parse any DDP header at the start of an MPA ULPDU, dispatching
//!   on the T bit.
//! * [`tagged_offset`] / [`check_untagged`]: the receive-side validation of RFC 5041
//!   §7.2, each failure being a [`DdpError`] that carries its Terminate error type and
//!   code. (Segmentation is the sender's, in `rdmap`'s transmit path.)
//! * [`STag`] and [`Access`]: the steering tag and the access rights shared by the
//!   memory-management layers above.
//!
//! # Quick start
//!
//! ```
//! use ddp::{STag, SegmentRepr, TaggedRepr};
//!
//! // The DDP header of an RDMA Write (RDMAP control octet 0x40) with one payload octet.
//! let repr = SegmentRepr::Tagged(TaggedRepr {
//!     last: true,
//!     rsvd_ulp: 0x40,
//!     stag: STag::new(0x123456, 0x78),
//!     to: 0x1000,
//! });
//! let mut ulpdu = vec![0u8; repr.header_len() + 1];
//! repr.emit(&mut ulpdu);
//! ulpdu[repr.header_len()] = 0xaa;
//!
//! let (parsed, payload) = SegmentRepr::parse(&ulpdu).unwrap();
//! assert_eq!(parsed, repr);
//! assert_eq!(payload, &[0xaa]);
//! ```
#![forbid(unsafe_code)]

mod access;
mod error;
mod segment;
mod stag;
mod validate;
pub mod wire;

pub use access::Access;
pub use error::DdpError;
pub use segment::SegmentRepr;
pub use stag::{Base, STag};
pub use validate::{check_untagged, tagged_offset};
pub use wire::tagged::{TaggedPacket, TaggedRepr};
pub use wire::untagged::{UntaggedPacket, UntaggedRepr};

/// The DDP version this crate speaks (the DV field of the control octet). Version 0 is
/// the pre-IETF RDMAC dialect and is rejected.
pub const DDP_VERSION: u8 = 1;

/// Length of a tagged (T=1) DDP header in octets.
pub const TAGGED_HEADER_LEN: usize = 14;

/// Length of an untagged (T=0) DDP header in octets.
pub const UNTAGGED_HEADER_LEN: usize = 18;
