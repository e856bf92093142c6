//! Fixed little-endian fields: a writer that appends, a reader that checks every length.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

/// A message that does not parse: too short, a length beyond its end, a code no version
/// of the ABI defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed message: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// Reads fields front to back; every read checks the length left.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if self.buf.len() < n {
            return Err(Malformed(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Malformed> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, Malformed> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, Malformed> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A u16 length, then that many octets, at most `max`.
    pub(crate) fn blob(&mut self, max: usize, what: &'static str) -> Result<Bytes, Malformed> {
        let n = usize::from(self.u16(what)?);
        if n > max {
            return Err(Malformed(what));
        }
        Ok(Bytes::copy_from_slice(self.take(n, what)?))
    }

    /// Family (4 or 6), port, 16 address octets.
    pub(crate) fn addr(&mut self) -> Result<SocketAddr, Malformed> {
        let family = self.u8("address family")?;
        let port = self.u16("port")?;
        let ip: [u8; 16] = self.array("address")?;
        let ip = match family {
            4 => IpAddr::V4(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3])),
            6 => IpAddr::V6(Ipv6Addr::from(ip)),
            _ => return Err(Malformed("address family")),
        };
        Ok(SocketAddr::new(ip, port))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

pub(crate) fn put_blob(out: &mut BytesMut, b: &[u8]) {
    let n = u16::try_from(b.len()).unwrap_or(u16::MAX);
    out.put_u16_le(n);
    out.put_slice(&b[..usize::from(n)]);
}

pub(crate) fn put_addr(out: &mut BytesMut, a: SocketAddr) {
    let mut ip = [0u8; 16];
    let family = match a.ip() {
        IpAddr::V4(v4) => {
            ip[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            ip = v6.octets();
            6
        }
    };
    out.put_u8(family);
    out.put_u16_le(a.port());
    out.put_slice(&ip);
}
