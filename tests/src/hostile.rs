//! An independent iWARP peer for hostile tests: every octet it sends is laid out here by
//! hand from RFC 5044/5041/5040/7306 (MPA frames, FPDUs with PAD and CRC32c, DDP and RDMAP
//! headers), not through the stack's encoders, and the Terminate it gets back is parsed
//! by hand too. What it sends may be anything; the tests decide what is wrong with it.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// RDMAP opcodes (RFC 5040 §4.2, RFC 7306).
#[allow(missing_docs)]
pub mod op {
    pub const WRITE: u8 = 0x0;
    pub const READ_REQUEST: u8 = 0x1;
    pub const READ_RESPONSE: u8 = 0x2;
    pub const SEND: u8 = 0x3;
    pub const SEND_INV: u8 = 0x4;
    pub const SEND_SE: u8 = 0x5;
    pub const SEND_SE_INV: u8 = 0x6;
    pub const TERMINATE: u8 = 0x7;
    pub const IMMEDIATE: u8 = 0x8;
    pub const IMMEDIATE_SE: u8 = 0x9;
    pub const ATOMIC_REQUEST: u8 = 0xA;
    pub const ATOMIC_RESPONSE: u8 = 0xB;
}

/// Untagged queue numbers (RFC 5040 §5.1, RFC 7306 §9).
#[allow(missing_docs)]
pub mod qn {
    pub const SEND: u32 = 0;
    pub const READ: u32 = 1;
    pub const TERMINATE: u32 = 2;
    pub const ATOMIC: u32 = 3;
}

/// An MPA Request or Reply frame: key, flags (M 0x80, C 0x40, R 0x20, S 0x10), Rev,
/// PD_Length, then the RFC 6581 IRD/ORD block when `ird_ord` is given, then `pd`.
/// `pd_length` overrides the length field (to lie about it).
pub fn mpa_frame(
    key: &[u8; 16],
    flags: u8,
    rev: u8,
    ird_ord: Option<(u16, u16)>,
    pd: &[u8],
    pd_length: Option<u16>,
) -> Vec<u8> {
    let mut v = key.to_vec();
    let block = ird_ord.map(|(ird, ord)| {
        let mut b = ird.to_be_bytes().to_vec();
        b.extend(ord.to_be_bytes());
        b
    });
    let flags = if block.is_some() { flags | 0x10 } else { flags };
    let len = block.as_ref().map_or(0, Vec::len) + pd.len();
    v.push(flags);
    v.push(rev);
    v.extend(pd_length.unwrap_or(len as u16).to_be_bytes());
    v.extend(block.unwrap_or_default());
    v.extend(pd);
    v
}

/// "MPA ID Req Frame".
pub const REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// "MPA ID Rep Frame".
pub const REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";

/// A Request as the stack's default peer would send it: Rev 2, C=1, IRD/ORD 16.
pub fn plain_request(pd: &[u8]) -> Vec<u8> {
    mpa_frame(REQ_KEY, 0x40, 2, Some((16, 16)), pd, None)
}

/// The parts of a received MPA frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The 16-octet key.
    pub key: [u8; 16],
    /// The flags octet.
    pub flags: u8,
    /// Rev.
    pub rev: u8,
    /// The whole private data (the IRD/ORD block included when S=1).
    pub pd: Vec<u8>,
}

impl Frame {
    /// The ULP private data after the IRD/ORD block (Rev 2, S=1).
    pub fn ulp_data(&self) -> &[u8] {
        if self.rev == 2 && self.flags & 0x10 != 0 {
            self.pd.get(4..).unwrap_or_default()
        } else {
            &self.pd
        }
    }

    /// (IRD, ORD) of the block, 14 bits each.
    pub fn ird_ord(&self) -> Option<(u16, u16)> {
        (self.rev == 2 && self.flags & 0x10 != 0 && self.pd.len() >= 4).then(|| {
            (
                u16::from_be_bytes([self.pd[0], self.pd[1]]) & 0x3fff,
                u16::from_be_bytes([self.pd[2], self.pd[3]]) & 0x3fff,
            )
        })
    }
}

/// One FPDU without markers: ULPDU_Length, the ULPDU, PAD, CRC32c (LSB first) over all of
/// that, or four zero octets when `crc` is false.
pub fn fpdu(ulpdu: &[u8], crc: bool) -> Vec<u8> {
    let mut v = (ulpdu.len() as u16).to_be_bytes().to_vec();
    v.extend(ulpdu);
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    let c = if crc { crc32c::crc32c(&v) } else { 0 };
    v.extend(c.to_le_bytes());
    v
}

/// The RDMAP control octet: RV=1 in the two high bits, the opcode in the low four.
fn rdmap_ctrl(opcode: u8) -> u8 {
    0x40 | (opcode & 0x0f)
}

/// A tagged DDP segment (14-octet header: control T=1 L=last DV=1, RDMAP control, STag,
/// TO), then `payload`.
pub fn tagged(opcode: u8, last: bool, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![
        0x80 | if last { 0x40 } else { 0 } | 0x01,
        rdmap_ctrl(opcode),
    ];
    v.extend(stag.to_be_bytes());
    v.extend(to.to_be_bytes());
    v.extend(payload);
    v
}

/// An untagged DDP segment (18-octet header: control T=0 L DV=1, RDMAP control, the
/// 32-bit RsvdULP field `ext` (Invalidate STag or Immediate), QN, MSN, MO), then `payload`.
pub fn untagged(opcode: u8, qn: u32, msn: u32, mo: u32, ext: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x40 | 0x01, rdmap_ctrl(opcode)];
    v.extend(ext.to_be_bytes());
    v.extend(qn.to_be_bytes());
    v.extend(msn.to_be_bytes());
    v.extend(mo.to_be_bytes());
    v.extend(payload);
    v
}

/// The 28-octet RDMA Read Request header (sink STag and TO, RDMARDSZ, source STag and TO).
pub fn read_request(sink: u32, sink_to: u64, len: u32, src: u32, src_to: u64) -> Vec<u8> {
    let mut v = sink.to_be_bytes().to_vec();
    v.extend(sink_to.to_be_bytes());
    v.extend(len.to_be_bytes());
    v.extend(src.to_be_bytes());
    v.extend(src_to.to_be_bytes());
    v
}

/// The 52-octet FetchAdd Atomic Request header (RFC 7306 §5.2.1): AOpCode 0, Request
/// Identifier, remote STag and TO, Add Data, Add Mask 0, Compare Data 0, Compare Mask
/// all ones.
pub fn fetch_add(req_id: u32, stag: u32, to: u64, add: u64) -> Vec<u8> {
    let mut v = 0u32.to_be_bytes().to_vec();
    v.extend(req_id.to_be_bytes());
    v.extend(stag.to_be_bytes());
    v.extend(to.to_be_bytes());
    v.extend(add.to_be_bytes());
    v.extend(0u64.to_be_bytes());
    v.extend(0u64.to_be_bytes());
    v.extend(u64::MAX.to_be_bytes());
    v
}

/// A Terminate as received: its control octets and the copied headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// Terminate Control octets 0 and 1: `layer << 4 | etype`, code.
    pub code: [u8; 2],
    /// Octet 2: M (0x80), D (0x40), R (0x20).
    pub hdrct: u8,
    /// The copied DDP Segment Length and DDP header, when D is set.
    pub ddp: Vec<u8>,
    /// The copied RDMA header (after the DDP header), when R is set.
    pub rdma: Vec<u8>,
}

/// Reads from `sock` (blocking, up to `limit`) into `buf` at least `n` octets in all.
fn fill(sock: &mut TcpStream, buf: &mut Vec<u8>, n: usize, limit: Instant) -> io::Result<bool> {
    let mut chunk = [0u8; 4096];
    while buf.len() < n {
        let left = limit.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        sock.set_read_timeout(Some(left))?;
        let k = match sock.read(&mut chunk) {
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
            Err(e) => return Err(e),
        };
        if k == 0 {
            return Ok(false);
        }
        buf.extend_from_slice(&chunk[..k]);
    }
    Ok(true)
}

/// One side of a hostile connection.
#[derive(Debug)]
pub struct Peer {
    /// The connection.
    pub sock: TcpStream,
    /// Octets read and not yet parsed.
    pub rx: Vec<u8>,
    /// CRC on (both frames' C bits).
    pub crc: bool,
}

/// How long a hostile test waits for the stack's answer.
pub const ANSWER: Duration = Duration::from_secs(10);

impl Peer {
    /// A peer on `sock`; `crc`: FPDUs carry and are checked for a CRC.
    pub fn new(sock: TcpStream, crc: bool) -> Self {
        sock.set_nodelay(true).ok();
        Self {
            sock,
            rx: Vec::new(),
            crc,
        }
    }

    /// Sends raw octets; a peer that already closed is not an error here.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let _ = self.sock.write_all(bytes);
    }

    /// Sends one FPDU carrying `ulpdu`.
    pub fn send(&mut self, ulpdu: &[u8]) {
        let f = fpdu(ulpdu, self.crc);
        self.send_raw(&f);
    }

    /// Reads the stack's MPA frame (Request or Reply); `None` if it closed instead.
    pub fn read_frame(&mut self) -> io::Result<Option<Frame>> {
        let limit = Instant::now() + ANSWER;
        if !fill(&mut self.sock, &mut self.rx, 20, limit)? {
            return Ok(None);
        }
        let pd_len = usize::from(u16::from_be_bytes([self.rx[18], self.rx[19]]));
        if !fill(&mut self.sock, &mut self.rx, 20 + pd_len, limit)? {
            return Ok(None);
        }
        let mut key = [0u8; 16];
        key.copy_from_slice(&self.rx[..16]);
        let f = Frame {
            key,
            flags: self.rx[16],
            rev: self.rx[17],
            pd: self.rx[20..20 + pd_len].to_vec(),
        };
        self.rx.drain(..20 + pd_len);
        Ok(Some(f))
    }

    /// Reads one FPDU, checks its CRC when CRC is on, and returns its ULPDU (`None`:
    /// closed, or nothing within [`ANSWER`]).
    pub fn read_ulpdu(&mut self) -> io::Result<Option<Vec<u8>>> {
        let limit = Instant::now() + ANSWER;
        if !fill(&mut self.sock, &mut self.rx, 2, limit)? {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([self.rx[0], self.rx[1]]));
        let total = (2 + len).div_ceil(4) * 4 + 4;
        if !fill(&mut self.sock, &mut self.rx, total, limit)? {
            return Ok(None);
        }
        let f: Vec<u8> = self.rx.drain(..total).collect();
        if self.crc {
            let want = crc32c::crc32c(&f[..total - 4]).to_le_bytes();
            assert_eq!(&f[total - 4..], &want, "the stack's FPDU has a bad CRC");
        }
        Ok(Some(f[2..2 + len].to_vec()))
    }

    /// Reads FPDUs until the stack's Terminate (or until it closes or `ANSWER` passes).
    /// `Ok(None)`: closed without a Terminate.
    pub fn read_terminate(&mut self) -> io::Result<Option<Term>> {
        while let Some(u) = self.read_ulpdu()? {
            // Untagged, opcode 7, QN 2.
            if u.len() >= 22 && u[0] & 0x80 == 0 && u[1] & 0x0f == op::TERMINATE {
                assert_eq!(&u[6..10], &qn::TERMINATE.to_be_bytes(), "Terminate on QN 2");
                let t = &u[18..];
                let hdrct = t[2];
                let mut rest = &t[4..];
                let mut ddp = Vec::new();
                if hdrct & 0x40 != 0 && rest.len() >= 2 {
                    let hdr_len = if rest.get(2).is_some_and(|c| c & 0x80 != 0) {
                        14
                    } else {
                        18
                    };
                    let n = (2 + hdr_len).min(rest.len());
                    ddp = rest[..n].to_vec();
                    rest = &rest[n..];
                }
                let rdma = if hdrct & 0x20 != 0 {
                    rest.to_vec()
                } else {
                    Vec::new()
                };
                return Ok(Some(Term {
                    code: [t[0], t[1]],
                    hdrct,
                    ddp,
                    rdma,
                }));
            }
        }
        Ok(None)
    }

    /// True if the stack closed the connection (EOF or reset) within `ANSWER`, with
    /// nothing but whole FPDUs before it.
    pub fn closed(&mut self) -> bool {
        let limit = Instant::now() + ANSWER;
        let mut buf = std::mem::take(&mut self.rx);
        let n = buf.len() + 1;
        matches!(fill(&mut self.sock, &mut buf, n, limit), Ok(false))
            || matches!(self.sock.read(&mut [0u8; 1]), Ok(0) | Err(_))
    }
}
