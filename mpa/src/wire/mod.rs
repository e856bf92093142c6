//! Typed views over MPA wire formats (the smoltcp model).
//!
//! Each format has a `Packet<T: AsRef<[u8]>>` view with field getters (and setters when
//! `T: AsMut<[u8]>`) and a `Repr` with `parse`/`emit`/`buffer_len`:
//!
//! * `Packet::new_unchecked` wraps a buffer; `check_len` proves that no accessor can
//!   panic; `new_checked` is both and is the one to use on untrusted input.
//! * `Repr::parse` never panics; `Repr::emit` never panics on a buffer of at least
//!   `buffer_len()` octets. Emitting does not use `new_checked` (a reused buffer may pass the
//!   check by accident).
//!
//! Modules:
//! * [`frame`]: the MPA Request/Reply frame (RFC 5044 §7.1, RFC 6581 §6).
//! * [`enhanced`]: the RFC 6581 IRD/ORD word at the start of the private data.
//! * [`extensions`]: the block of a Reply that agrees to this stack's extensions.
//! * [`marker`]: the 4-octet marker (RFC 5044 §4.2).
//! * [`fpdu`]: FPDU constants, the on-wire length rule with markers, and a view over an
//!   FPDU without markers.

pub mod enhanced;
pub mod extensions;
pub mod fpdu;
pub mod frame;
pub mod marker;

/// A byte range of a field inside a header.
pub(crate) type Field = core::ops::Range<usize>;
