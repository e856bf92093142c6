//! Why a capture could not be read to its end, worded as tshark and capinfos word it: a
//! file cut short in the middle of a packet, or one damaged or corrupt (a block length
//! no writer would produce, a trailer that does not match). What was read before stays
//! usable; the report says how far reading got.

use std::fmt;

/// The largest pcapng block tshark reads (`total block length N is too large (>
/// 16777216)` beyond it): a length above it is corruption, not a packet still arriving.
pub const MAX_BLOCK_LEN: u32 = 16 << 20;

/// The largest pcap record tshark reads (262144 octets, its standard maximum).
pub const MAX_PACKET_LEN: u32 = 256 << 10;

/// What stopped the reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamageKind {
    /// The file ends inside a block or record: a writer stopped (or was stopped) in the
    /// middle of one.
    CutShort,
    /// A block or record that cannot be: the format's complaint.
    Corrupt(String),
}

/// Where a capture stopped being readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// What is wrong.
    pub kind: DamageKind,
    /// The file offset of the block or record that could not be read.
    pub offset: usize,
    /// The file's length.
    pub file_len: usize,
    /// Frames read before it.
    pub frames: u64,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DamageKind::CutShort => write!(
                f,
                "the capture appears to have been cut short in the middle of a packet \
                 (the last {} octets, from octet {}, are an incomplete block)",
                self.file_len - self.offset,
                self.offset
            )?,
            DamageKind::Corrupt(why) => write!(
                f,
                "the capture appears to be damaged or corrupt ({why}, at octet {} of {})",
                self.offset, self.file_len
            )?,
        }
        write!(
            f,
            ": an error occurred after reading {} frames; the analysis covers those only",
            self.frames
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_of_tshark_and_capinfos() {
        let cut = Damage {
            kind: DamageKind::CutShort,
            offset: 90,
            file_len: 100,
            frames: 3,
        };
        let s = cut.to_string();
        assert!(s.contains("cut short in the middle of a packet"), "{s}");
        assert!(s.contains("the last 10 octets, from octet 90"), "{s}");
        assert!(s.contains("after reading 3 frames"), "{s}");
        let bad = Damage {
            kind: DamageKind::Corrupt("pcapng: total block length 1861917376 is too large".into()),
            ..cut
        };
        let s = bad.to_string();
        assert!(
            s.contains("damaged or corrupt (pcapng: total block length"),
            "{s}"
        );
        assert!(s.contains("at octet 90 of 100"), "{s}");
    }
}
