//! What the daemon tells a client in its MPA Reply private data.
//!
//! ```text
//!  0               16          20          24
//!  +---------------+-----------+-----------+
//!  | RemoteBuf     | credits   | recv_size |
//!  | (encode(), 16)| u32 BE    | u32 BE    |
//!  +---------------+-----------+-----------+
//! ```
//!
//! The first 16 octets are [`RemoteBuf::encode`] of the connection's region, so any client
//! that only knows RemoteBuf can use it. `credits` is how many Sends the client may have
//! unanswered at once (the receives the daemon keeps posted); `recv_size` the largest Send
//! it accepts. A Reply of exactly 16 octets means one credit of [`DEFAULT_RECV_SIZE`].

use rdmap::RemoteBuf;

/// Octets of the private data the daemon sends.
pub(crate) const LEN: usize = RemoteBuf::ENCODED_LEN + 8;
/// The receive size assumed when the peer does not say.
pub(crate) const DEFAULT_RECV_SIZE: u32 = 1024;

/// The decoded private data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServiceInfo {
    /// The connection's region on the daemon.
    pub(crate) remote: RemoteBuf,
    /// Sends the client may have unanswered at once.
    pub(crate) credits: u32,
    /// The largest Send the daemon accepts.
    pub(crate) recv_size: u32,
}

impl ServiceInfo {
    /// The private data form.
    pub(crate) fn encode(&self) -> [u8; LEN] {
        let mut b = [0; LEN];
        let (buf, rest) = b.split_at_mut(RemoteBuf::ENCODED_LEN);
        buf.copy_from_slice(&self.remote.encode());
        let (credits, size) = rest.split_at_mut(4);
        credits.copy_from_slice(&self.credits.to_be_bytes());
        size.copy_from_slice(&self.recv_size.to_be_bytes());
        b
    }

    /// Reads private data; `None` when it is shorter than a RemoteBuf.
    pub(crate) fn decode(src: &[u8]) -> Option<Self> {
        let remote = RemoteBuf::decode(src)?;
        let word = |at: usize| {
            src.get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
        };
        Some(Self {
            remote,
            credits: word(16).unwrap_or(1).max(1),
            recv_size: word(20).unwrap_or(DEFAULT_RECV_SIZE).max(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmap::STag;

    #[test]
    fn round_trip_and_short_forms() {
        let info = ServiceInfo {
            remote: RemoteBuf {
                stag: STag::from_u32(0x0000_0105),
                to: 0,
                len: 0x0040_0000,
            },
            credits: 16,
            recv_size: 0x1_0000,
        };
        let b = info.encode();
        assert_eq!(
            b,
            [
                0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 16, 0, 1, 0, 0
            ]
        );
        assert_eq!(ServiceInfo::decode(&b), Some(info));
        let bare = ServiceInfo::decode(&b[..16]).unwrap();
        assert_eq!(
            (bare.remote, bare.credits, bare.recv_size),
            (info.remote, 1, DEFAULT_RECV_SIZE)
        );
        assert_eq!(ServiceInfo::decode(&b[..15]), None);
        // Zero credits would deadlock a client: treated as one.
        let mut z = b;
        z[16..20].fill(0);
        assert_eq!(ServiceInfo::decode(&z).unwrap().credits, 1);
    }
}
