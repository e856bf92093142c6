//! `iwarp-rping`: the rdma-core `rping` loop on this stack, wire-compatible with `rping`
//! on Linux siw in both roles.
//!
//! One ping (rping's `rping_test_client` / `rping_test_server`):
//!
//! 1. the client Sends its *source* buffer as an [`RdmaInfo`] (`be64 buf, be32 rkey,
//!    be32 size`, rping's `struct rping_rdma_info`);
//! 2. the server RDMA Reads it;
//! 3. the server Sends "go ahead" (16 octets);
//! 4. the client Sends its *sink* buffer's [`RdmaInfo`];
//! 5. the server RDMA Writes the data it read (`strlen + 1` octets) there;
//! 6. the server Sends "done"; with `-V` the client compares sink and source.
//!
//! [`opts`] parses the rping-style command line, [`client`] and [`server`] run the roles.

pub mod client;
pub mod opts;
pub mod server;

use verbs::{Qp, RemoteBuf, STag};

pub use client::run_client;
pub use opts::{Opts, Role};
pub use server::serve;

/// Boxed error of the rping roles.
pub use crate::Error;
pub(crate) use crate::step;

/// Logs the extensions `qp` agreed to, and says on stderr when they are more than
/// `--extensions` offered (through iwarpd, whose setting applies): that traffic is not
/// all standard iWARP, and Wireshark shows its Read V2 messages as malformed.
pub(crate) fn note_extensions(opts: &Opts, qp: &Qp) {
    let agreed = qp.extensions();
    tracing::info!(extensions = %agreed, "this stack's extensions agreed");
    if (agreed & opts.extensions) != agreed {
        crate::errln!(
            "iwarp-rping: this connection uses this stack's extensions {agreed} (through \
             iwarpd, the daemon's setting applies); Wireshark does not decode them: start \
             iwarpd with --extensions none for standard iWARP traffic"
        );
    }
}

/// rping's `RPING_MSG_FMT` prefix (followed by the ping number and `": "`).
pub const MSG_PREFIX: &str = "rdma-ping-";

/// rping's smallest buffer (`RPING_MIN_BUFSIZE`).
pub const MIN_SIZE: usize = 23;

/// rping's largest buffer (`RPING_BUFSIZE - 1`: rping rejects `-S 65536`).
pub const MAX_SIZE: usize = (64 << 10) - 1;

/// Octets of one receive slot: rping posts a `struct rping_rdma_info` (16 octets).
pub const RECV_SLOT: usize = RdmaInfo::LEN;

/// rping's `struct rping_rdma_info`: where a buffer is, as the peer names it. All fields
/// are big-endian on the wire.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RdmaInfo {
    /// The buffer's tagged offset (rping: its virtual address).
    pub buf: u64,
    /// Its STag (rping: `rkey`).
    pub rkey: u32,
    /// Its length in octets.
    pub size: u32,
}

impl RdmaInfo {
    /// Octets on the wire.
    pub const LEN: usize = 16;

    /// The 16 wire octets.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..8].copy_from_slice(&self.buf.to_be_bytes());
        out[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        out[12..].copy_from_slice(&self.size.to_be_bytes());
        out
    }

    /// Parses the first 16 octets of `data`; `None` if it is shorter.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let buf = u64::from_be_bytes(data.get(..8)?.try_into().ok()?);
        let rkey = u32::from_be_bytes(data.get(8..12)?.try_into().ok()?);
        let size = u32::from_be_bytes(data.get(12..16)?.try_into().ok()?);
        Some(Self { buf, rkey, size })
    }

    /// The advertisement of a whole remote buffer.
    pub fn from_remote(r: RemoteBuf) -> Self {
        Self {
            buf: r.to,
            rkey: r.stag.to_u32(),
            size: r.len,
        }
    }

    /// The buffer as a [`RemoteBuf`] to Read from or Write to.
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            stag: STag::from_u32(self.rkey),
            to: self.buf,
            len: self.size,
        }
    }
}

/// The exact octets rping's client puts in its source buffer for ping number `ping`:
/// `"rdma-ping-<ping>: "`, then a rotating pattern of `A..z` starting one letter later
/// every ping, and a NUL in the last octet.
pub fn ping_buffer(ping: u64, size: usize) -> Vec<u8> {
    let mut b = format!("{MSG_PREFIX}{ping}: ").into_bytes();
    b.truncate(size);
    let mut c = 65 + (ping % 58) as u8;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

/// The text of a NUL-terminated buffer, as rping's `printf("%s")` shows it.
pub fn c_str(data: &[u8]) -> String {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(data.get(..end).unwrap_or_default()).into_owned()
}

#[cfg(test)]
mod tests;
