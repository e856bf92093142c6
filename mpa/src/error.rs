//! MPA errors and their Terminate codes (RFC 5044 §8, RFC 6581 §8, RFC 6580 §3.3).

use core::fmt;

/// An MPA error. Each maps to a Terminate code of Layer 2 (LLP), Error Type 0 (MPA); see
/// [`MpaError::code`], [`MpaError::LAYER`] and [`MpaError::ETYPE`].
///
/// After MPA reports an error it delivers no further FPDUs on that half connection
/// (RFC 5044 §8): the [`Deframer`](crate::Deframer) returns the same error forever.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MpaError {
    /// Code 1: the TCP connection was closed, reset or lost. Also reported when the
    /// handshake times out waiting for the peer's frame.
    ConnectionLost,
    /// Code 2: the received CRC differs from the CRC computed over the FPDU.
    Crc {
        /// The CRC-32C value computed locally.
        expected: u32,
        /// The CRC-32C value found in the FPDU (`u32::from_le_bytes` of the wire octets).
        received: u32,
    },
    /// Code 3: a marker's FPDUPTR disagrees with the framing given by ULPDU_Length.
    Marker {
        /// The FPDUPTR value the framing requires.
        expected: u16,
        /// The FPDUPTR found on the wire (as received, low two bits included).
        received: u16,
    },
    /// Code 4: invalid MPA Request or Reply frame (bad key, unsupported revision,
    /// PD_Length above 512, Initiator/Initiator start, ...). The text names the problem.
    InvalidFrame(&'static str),
    /// Code 5 (RFC 6581): local catastrophic error during enhanced connection setup.
    /// Also returned when [`Handshake::accept`](crate::Handshake::accept) or
    /// [`Handshake::reject`](crate::Handshake::reject) is called in the wrong state.
    LocalCatastrophic,
    /// Code 6 (RFC 6581): the local IRD cannot cover the ORD the peer announced.
    InsufficientIrd,
    /// Code 7 (RFC 6581): no RTR type both sides can use in peer-to-peer mode.
    NoMatchingRtr,
    /// A received ULPDU_Length is above the receiver's limit
    /// ([`Deframer::set_max_ulpdu`](crate::Deframer::set_max_ulpdu)).
    ///
    /// MPA has no dedicated code for this. It maps to code 4 ("invalid MPA frame"), the
    /// generic "malformed MPA" code: the FPDU framing cannot be trusted any more.
    UlpduTooLong {
        /// The ULPDU_Length that was received.
        len: u16,
        /// The receiver's limit.
        max: u16,
    },
    /// Bytes of a partial FPDU remained when the TCP stream ended (code 1).
    TrailingBytes,
    /// The peer's first 16 octets are neither MPA key: it is not an iWARP endpoint (a web
    /// server's answer, an SSH banner, ...). Code 4, as any invalid frame.
    NotMpa {
        /// What it sent instead of a key.
        sent: [u8; 16],
    },
}

impl MpaError {
    /// Terminate Layer of every MPA error: 2 (LLP).
    pub const LAYER: u8 = 2;
    /// Terminate Error Type of every MPA error: 0 (MPA).
    pub const ETYPE: u8 = 0;

    /// The MPA error code carried in a Terminate message (Layer 2, EType 0).
    pub fn code(&self) -> u8 {
        match self {
            Self::ConnectionLost | Self::TrailingBytes => 0x01,
            Self::Crc { .. } => 0x02,
            Self::Marker { .. } => 0x03,
            Self::InvalidFrame(_) | Self::UlpduTooLong { .. } | Self::NotMpa { .. } => 0x04,
            Self::LocalCatastrophic => 0x05,
            Self::InsufficientIrd => 0x06,
            Self::NoMatchingRtr => 0x07,
        }
    }
}

impl fmt::Display for MpaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConnectionLost => f.write_str("MPA: TCP connection closed, lost or timed out"),
            Self::Crc { expected, received } => write!(
                f,
                "MPA: CRC mismatch (computed {expected:#010x}, received {received:#010x})"
            ),
            Self::Marker { expected, received } => write!(
                f,
                "MPA: marker FPDUPTR {received:#06x} disagrees with framing (expected {expected:#06x})"
            ),
            Self::InvalidFrame(why) => write!(f, "MPA: invalid Request/Reply frame: {why}"),
            Self::LocalCatastrophic => f.write_str("MPA: local catastrophic error"),
            Self::InsufficientIrd => f.write_str("MPA: insufficient IRD resources"),
            Self::NoMatchingRtr => f.write_str("MPA: no matching RTR option"),
            Self::UlpduTooLong { len, max } => {
                write!(f, "MPA: ULPDU_Length {len} above the receive limit {max}")
            }
            Self::TrailingBytes => f.write_str("MPA: partial FPDU at end of stream"),
            Self::NotMpa { sent } => {
                let text: String = sent
                    .iter()
                    .map(|&b| match b {
                        0x20..=0x7e => char::from(b),
                        _ => '.',
                    })
                    .collect();
                write!(
                    f,
                    "the peer answered but is not an iWARP MPA endpoint (it sent: \"{text}\"): \
                     check the address and port"
                )
            }
        }
    }
}

impl std::error::Error for MpaError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(MpaError::ConnectionLost.code(), 1);
        assert_eq!(
            MpaError::Crc {
                expected: 0,
                received: 1
            }
            .code(),
            2
        );
        assert_eq!(
            MpaError::Marker {
                expected: 0,
                received: 4
            }
            .code(),
            3
        );
        assert_eq!(MpaError::InvalidFrame("x").code(), 4);
        assert_eq!(MpaError::LocalCatastrophic.code(), 5);
        assert_eq!(MpaError::InsufficientIrd.code(), 6);
        assert_eq!(MpaError::NoMatchingRtr.code(), 7);
        assert_eq!(MpaError::UlpduTooLong { len: 2, max: 1 }.code(), 4);
        assert_eq!(MpaError::TrailingBytes.code(), 1);
        assert_eq!((MpaError::LAYER, MpaError::ETYPE), (2, 0));
    }

    #[test]
    fn display_mentions_values() {
        let s = MpaError::Crc {
            expected: 0x1234,
            received: 0x5678,
        }
        .to_string();
        assert!(s.contains("0x00001234") && s.contains("0x00005678"), "{s}");
    }
}
