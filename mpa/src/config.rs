//! Handshake parameters: what the local side asks for, what the peer said, what was agreed.

use std::time::Duration;

use bytes::Bytes;

use crate::{Extensions, RtrFlags};

/// The MPA role of one side (RFC 5044 §2). It need not match the TCP active/passive side.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Role {
    /// Sends the MPA Request and, in FPDU mode, the first FPDU.
    Initiator,
    /// Answers with the MPA Reply and sends no FPDU before it received one.
    Responder,
}

/// What the local side asks for.
///
/// Defaults ([`MpaConfig::default`]): revision 2 with the enhanced block (S bit and the
/// IRD/ORD word, as siw sends it), `crc = true`, `markers = false`, `ird = ord = 16`
/// ([`MpaConfig::DEFAULT_IRD_ORD`]; siw's maximum is 128), `p2p = false`,
/// `rtr = WRITE | READ`, `extensions = ALL`, `timeout` = 10 s (siw's Initiator value; use
/// [`MpaConfig::for_role`] to get 5 s for a Responder).
///
/// Fields:
/// * `rev`: 1 (RFC 5044 only, no enhanced block) or 2 (RFC 6581). A Responder with `rev = 1`
///   rejects Rev 2 Requests as malformed (the RFC 5044 behaviour); with `rev = 2` it accepts
///   both.
/// * `crc`: the C bit sent. CRCs are used when either side sets C.
/// * `markers`: "I require the peer to insert markers in what it sends to me" (the M bit
///   sent).
/// * `ird`, `ord`: 14-bit values, [`wire::enhanced::NO_NEGOTIATION`](crate::wire::enhanced::NO_NEGOTIATION)
///   (0x3FFF) means "the ULP negotiates". Initiator: `ird` is the most inbound Reads it can
///   queue, `ord` the outbound Reads it wants. Responder: starting values, adjusted by the
///   negotiation (see [`Handshake`](crate::Handshake)).
/// * `p2p`: Initiator only: request peer-to-peer mode (A bit). A Responder always copies
///   the peer's A bit (RFC 6581 §9.2), so this field is ignored there.
/// * `rtr`: Initiator: the RTR types it can generate (offered when `p2p`). Responder: the
///   types it accepts (an empty set is treated as `WRITE`, since an RFC 6581 Responder must
///   support at least one).
/// * `timeout`: how long to wait for the peer's frame.
/// * `large_fpdus`: offer (Initiator) or accept (Responder) FPDUs larger than one TCP
///   segment with Linux siw's experimental bit
///   ([`FLAG_LARGE_FPDUS`](crate::wire::frame::FLAG_LARGE_FPDUS)). Default off: RFC 5044
///   wants every FPDU to fit one segment so that hardware can place segments as they come
///   (Intel and Marvell RNICs rely on it); between two software stacks, FPDUs of up to
///   64 KiB cost a CRC call, a header and a gather entry per 64 KiB instead of per 1.4 KiB.
/// * `extensions`: this stack's extensions to offer or accept, default
///   [`Extensions::ALL`]: the offer is two reserved bits that standard peers ignore, and
///   nothing else changes unless the peer is this stack and agrees.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MpaConfig {
    /// Revision sent: 1 or 2.
    pub rev: u8,
    /// C bit sent: ask for CRCs.
    pub crc: bool,
    /// M bit sent: require the peer to insert markers in what it sends to us.
    pub markers: bool,
    /// Local IRD (14 bits, 0x3FFF = no negotiation).
    pub ird: u16,
    /// Local ORD (14 bits, 0x3FFF = no negotiation).
    pub ord: u16,
    /// Initiator: ask for peer-to-peer mode.
    pub p2p: bool,
    /// Initiator: RTR types it can send. Responder: RTR types it accepts.
    pub rtr: RtrFlags,
    /// How long to wait for the peer's Request or Reply.
    pub timeout: Duration,
    /// Offer or accept FPDUs larger than one TCP segment (siw's experimental bit).
    pub large_fpdus: bool,
    /// This stack's extensions to offer (Initiator) or accept (Responder); see
    /// [`Extensions`] for how they are negotiated.
    pub extensions: Extensions,
}

impl MpaConfig {
    /// Default IRD and ORD.
    pub const DEFAULT_IRD_ORD: u16 = 16;
    /// Default time an Initiator waits for the Reply (siw `MPAREQ_TIMEOUT`).
    pub const INITIATOR_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default time a Responder waits for the Request (siw `MPAREP_TIMEOUT`).
    pub const RESPONDER_TIMEOUT: Duration = Duration::from_secs(5);

    /// The defaults, with the timeout of `role`.
    pub fn for_role(role: Role) -> Self {
        Self {
            timeout: match role {
                Role::Initiator => Self::INITIATOR_TIMEOUT,
                Role::Responder => Self::RESPONDER_TIMEOUT,
            },
            ..Self::default()
        }
    }
}

impl Default for MpaConfig {
    fn default() -> Self {
        Self {
            rev: 2,
            crc: true,
            markers: false,
            ird: Self::DEFAULT_IRD_ORD,
            ord: Self::DEFAULT_IRD_ORD,
            p2p: false,
            rtr: RtrFlags::WRITE | RtrFlags::READ,
            timeout: Self::INITIATOR_TIMEOUT,
            large_fpdus: false,
            extensions: Extensions::ALL,
        }
    }
}

/// The outcome of a successful handshake: the settings of FPDU mode.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Negotiated {
    /// Revision in use (1 or 2): 2 only when the enhanced block was exchanged.
    pub rev: u8,
    /// CRC generated and checked in both directions (C=1 in either frame).
    pub crc: bool,
    /// We must insert markers in what we send (the peer's frame had M=1).
    pub markers_tx: bool,
    /// The peer inserts markers in what we receive (our frame had M=1).
    pub markers_rx: bool,
    /// Local IRD after negotiation.
    pub ird: u16,
    /// Local ORD after negotiation.
    pub ord: u16,
    /// The peer's IRD (0x3FFF when the peer sent no enhanced block).
    pub peer_ird: u16,
    /// The peer's ORD (0x3FFF when the peer sent no enhanced block).
    pub peer_ord: u16,
    /// Peer-to-peer mode (A bit) in force.
    pub p2p: bool,
    /// p2p only. Initiator: exactly the one RTR type it must send as its first FPDU.
    /// Responder: the set it accepts (the first FPDU must be an RTR of one of these).
    /// Empty when not p2p.
    pub rtr: RtrFlags,
    /// Our MPA role.
    pub role: Role,
    /// Both frames carried siw's large-FPDU bit: our FPDUs need not fit one TCP segment.
    pub large_fpdus: bool,
    /// This stack's extensions both sides agreed to (always empty with a standard peer).
    pub extensions: Extensions,
}

/// How the FPDUs of a connection are framed, as the MPA exchange settled it: what a
/// capture of it shows, and what an interop test wants to read back.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Framing {
    /// CRC32c generated and checked both ways (either side asked for it).
    pub crc: bool,
    /// This side inserts markers in what it sends (the peer asked).
    pub markers_tx: bool,
    /// The peer inserts markers in what it sends (this side asked).
    pub markers_rx: bool,
}

impl std::fmt::Display for Framing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = |b| if b { "on" } else { "off" };
        write!(f, "CRC {}, markers ", on(self.crc))?;
        f.write_str(match (self.markers_tx, self.markers_rx) {
            (false, false) => "off",
            (true, true) => "both ways",
            (true, false) => "to the peer",
            (false, true) => "from the peer",
        })
    }
}

/// What the peer's Request or Reply frame said.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerParams {
    /// Revision of the peer's frame.
    pub rev: u8,
    /// M bit: the peer requires markers in what we send.
    pub markers: bool,
    /// C bit: the peer asks for CRCs.
    pub crc: bool,
    /// The frame carried the enhanced block (Rev 2 with S=1).
    pub enhanced: bool,
    /// IRD of the enhanced block.
    pub ird: Option<u16>,
    /// ORD of the enhanced block.
    pub ord: Option<u16>,
    /// A bit of the enhanced block (false without it).
    pub p2p: bool,
    /// RTR flags of the enhanced block (empty when the A bit is clear or there is no block).
    pub rtr: RtrFlags,
    /// siw's large-FPDU bit.
    pub large_fpdus: bool,
    /// This stack's extensions: offered (in a Request) or agreed (in a Reply).
    pub extensions: Extensions,
    /// The ULP private data (without the enhanced block).
    pub private_data: Bytes,
}
