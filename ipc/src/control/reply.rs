//! Replies: one to each request, answering its transaction. A reply's body starts with a
//! u16 status: 0, then the result; or an error code ([`error`](super::error)), then a
//! length-prefixed UTF-8 text that names the cause and the fix.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes};

use super::header::{finish, start};
use super::listing::{self, QpPage, ServiceCounters};
use super::{Counters, DeviceAttrs, DeviceCounters, MAX_MESSAGE, QpInfo, error, func};
use crate::codec::{Malformed, Reader, put_addr, put_blob};

/// The start of a reply's body.
mod field {
    use crate::layout::Field;

    /// 0 for success, else an error code (u16).
    pub(crate) const STATUS: Field = 0..2;
}

/// The status of a reply that succeeded.
const STATUS_OK: u16 = 0;

/// A reply's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Done, nothing to return.
    Done,
    /// The request failed: a code and a text naming the cause and the fix.
    Error {
        /// One of [`error`].
        code: u16,
        /// For the user.
        text: String,
    },
    /// A Connect the peer rejected, with its private data. On the wire an error with
    /// code [`error::CONNECT_REJECTED`], its text, the private data (a blob), then one
    /// octet of what the peer's answer refused (bit 0: CRC; absent from daemons before
    /// it, read as nothing refused): a client that does not know the code reads the text.
    Rejected {
        /// The peer's private data.
        private_data: Bytes,
        /// What the peer's answer dropped of what the daemon asked for.
        refused: rdmap::Refused,
    },
    /// A number: the daemon's process id for Open; the STag for RegMr, AllocMw, BindMw
    /// and AllocFastRegMr.
    Id(u32),
    /// A protection domain, with its push region (one memory file attached).
    Pd {
        /// The domain.
        pd: u32,
        /// Slots of its push region.
        push_slots: u32,
    },
    /// A listener: its id and the address it bound.
    Listening {
        /// The listener.
        id: u32,
        /// Bound address.
        addr: SocketAddr,
    },
    /// A connected queue pair (three memory files attached).
    Qp(QpInfo),
    /// Queue pair counters.
    QpCounters(Counters),
    /// Device counters.
    Stats(DeviceCounters),
    /// The device's limits and settings.
    Device(DeviceAttrs),
    /// A shared receive queue (its ring's memory file attached).
    Srq {
        /// The queue.
        srq: u32,
        /// Entries its ring holds.
        depth: u32,
    },
    /// The counters of the daemon's other services.
    ServiceStats(Vec<ServiceCounters>),
    /// A page of the daemon's queue pairs.
    QpList(QpPage),
}

impl Reply {
    /// The whole message answering function `func`'s transaction `txn`.
    pub fn encode(&self, func: u16, txn: u64) -> Bytes {
        let mut out = start(func | func::REPLY, txn);
        match self {
            Self::Error { code, text } => {
                out.put_u16_le(*code);
                put_blob(&mut out, text.as_bytes());
                return finish(out);
            }
            Self::Rejected {
                private_data,
                refused,
            } => {
                out.put_u16_le(error::CONNECT_REJECTED);
                put_blob(&mut out, b"the peer rejected the connection");
                put_blob(&mut out, private_data);
                out.put_u8(u8::from(refused.crc));
                return finish(out);
            }
            _ => {}
        }
        out.put_u16_le(STATUS_OK);
        match self {
            Self::Done | Self::Error { .. } | Self::Rejected { .. } => {}
            Self::Id(n) => out.put_u32_le(*n),
            Self::Pd {
                pd: a,
                push_slots: b,
            }
            | Self::Srq { srq: a, depth: b } => {
                out.put_u32_le(*a);
                out.put_u32_le(*b);
            }
            Self::Listening { id, addr } => {
                out.put_u32_le(*id);
                put_addr(&mut out, *addr);
            }
            Self::Qp(q) => q.put(&mut out),
            Self::QpCounters(c) => c.put(&mut out),
            Self::Device(a) => a.put(&mut out),
            Self::Stats(d) => d.put(&mut out),
            Self::ServiceStats(services) => listing::put_services(&mut out, services),
            Self::QpList(page) => listing::put_page(&mut out, page),
        }
        finish(out)
    }

    /// Parses the body of the reply to function `func` (the request's code).
    pub fn decode(func: u16, body: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader::new(body);
        let status = r.u16("status")?;
        if status != 0 {
            let text = r.blob(MAX_MESSAGE, "error text")?;
            if status == error::CONNECT_REJECTED {
                let private = r.blob(MAX_MESSAGE, "private data")?;
                let refused = if r.is_empty() { 0 } else { r.u8("refused")? };
                return Ok(Self::Rejected {
                    private_data: Bytes::copy_from_slice(&private),
                    refused: rdmap::Refused {
                        crc: refused & 1 != 0,
                    },
                });
            }
            return Ok(Self::Error {
                code: status,
                text: String::from_utf8_lossy(&text).into_owned(),
            });
        }
        let reply = match func {
            func::OPEN
            | func::REG_MR
            | func::ALLOC_MW
            | func::BIND_MW
            | func::ALLOC_FAST_REG_MR
            | func::RESERVE_STAG => Self::Id(r.u32("id")?),
            func::ALLOC_PD => Self::Pd {
                pd: r.u32("pd")?,
                push_slots: r.u32("push slots")?,
            },
            func::CREATE_SRQ => Self::Srq {
                srq: r.u32("srq")?,
                depth: r.u32("depth")?,
            },
            func::LISTEN => Self::Listening {
                id: r.u32("id")?,
                addr: r.addr()?,
            },
            func::CONNECT | func::ACCEPT => Self::Qp(QpInfo::read(&mut r)?),
            func::QUERY_QP => Self::QpCounters(Counters::read(&mut r)?),
            func::QUERY_DEVICE => Self::Device(DeviceAttrs::read(&mut r)?),
            func::STATS => Self::Stats(DeviceCounters::read(&mut r)?),
            func::SERVICE_STATS => Self::ServiceStats(listing::read_services(&mut r)?),
            func::LIST_QPS => Self::QpList(listing::read_page(&mut r)?),
            _ => Self::Done,
        };
        if !r.is_empty() {
            return Err(Malformed("octets after the last field"));
        }
        Ok(reply)
    }
}

/// Memory files the reply to function `func` (or an event) carries, judged from its
/// header: a successful queue pair reply carries three, a shared socket's one.
pub fn reply_fds(func: u16, body: &[u8]) -> usize {
    let ok = body.get(field::STATUS) == Some(&STATUS_OK.to_le_bytes()[..]);
    let f = func & !func::REPLY;
    match f {
        _ if func & func::REPLY == 0 || !ok => 0,
        func::CONNECT | func::ACCEPT => 3,
        func::ALLOC_PD | func::CREATE_SRQ | func::SHARE_TX => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::control::{HEADER_LEN, Header, OPCODES};

    /// A queue pair reply's result, every framing bit but one set.
    fn qp_info() -> QpInfo {
        QpInfo {
            qp: 1,
            num: 77,
            ird: 16,
            ord: 16,
            mulpdu: 1448,
            extensions: 1,
            private: Bytes::from_static(b"advert"),
            geometry: crate::qpseg::Geometry::default(),
            framing: rdmap::Framing {
                crc: true,
                markers_tx: false,
                markers_rx: true,
            },
        }
    }

    #[test]
    fn a_queue_pair_reply_ends_with_its_framing_octet() {
        let info = qp_info();
        // A daemon from before the framing octet: the same reply without it reads as all
        // off.
        let m = Reply::Qp(info.clone()).encode(func::CONNECT, 1);
        assert_eq!(m[m.len() - 1], 0b101);
        assert_eq!(
            Reply::decode(func::CONNECT, &m[HEADER_LEN..m.len() - 1]).unwrap(),
            Reply::Qp(QpInfo {
                framing: rdmap::Framing::default(),
                ..info
            })
        );
    }

    #[test]
    fn replies_round_trip() {
        let info = qp_info();
        let cases = [
            (
                func::ALLOC_PD,
                Reply::Pd {
                    pd: 3,
                    push_slots: 32,
                },
            ),
            (func::OPEN, Reply::Id(3)),
            (
                func::QUERY_DEVICE,
                Reply::Device(DeviceAttrs {
                    max_qp: 4096,
                    max_mr: u32::MAX,
                    max_srq: 1024,
                    sq_depth: 256,
                    rq_depth: 128,
                    max_send_sge: 3,
                    max_recv_sge: 2,
                    ird: 16,
                    ord: 8,
                    mulpdu: 1448,
                    mpa_revision: 2,
                    crc: true,
                    markers: false,
                    extensions: 3,
                    push_slots: 32,
                }),
            ),
            (func::CREATE_SRQ, Reply::Srq { srq: 5, depth: 128 }),
            (func::DEREG_MR, Reply::Done),
            (
                func::LISTEN,
                Reply::Listening {
                    id: 2,
                    addr: "127.0.0.1:1".parse().unwrap(),
                },
            ),
            (func::CONNECT, Reply::Qp(info)),
            (
                func::QUERY_QP,
                Reply::QpCounters({
                    let mut c = Counters::default();
                    c.traffic.fpdus_sent = 1;
                    c.traffic.octets_received = [7; OPCODES];
                    c.push.discards = [1, 2, 3, 4, 5, 6];
                    c
                }),
            ),
            (
                func::STATS,
                Reply::Stats(DeviceCounters {
                    queue_pairs: 1,
                    memory_entries: 2,
                    clients: 3,
                    connections: 9,
                    totals: {
                        let mut c = Counters::default();
                        c.traffic.terminates_received = 4;
                        c
                    },
                    ..DeviceCounters::default()
                }),
            ),
            (
                func::REG_MR,
                Reply::Error {
                    code: error::NOT_FOUND,
                    text: "no such protection domain".into(),
                },
            ),
            (
                func::CONNECT,
                Reply::Rejected {
                    private_data: Bytes::from_static(b"go away"),
                    refused: rdmap::Refused { crc: true },
                },
            ),
        ];
        for (f, reply) in cases {
            let m = reply.encode(f, 9);
            let h = Header::parse(&m).unwrap().unwrap();
            assert_eq!((h.func, h.txn), (f | func::REPLY, 9));
            assert_eq!(Reply::decode(f, &m[HEADER_LEN..]).unwrap(), reply);
        }
        assert_eq!(
            &Reply::Id(3).encode(func::ALLOC_PD, 9)[HEADER_LEN..],
            &[0, 0, 3, 0, 0, 0]
        );
        let srq = Reply::Srq { srq: 5, depth: 128 }.encode(func::CREATE_SRQ, 9);
        assert_eq!(&srq[HEADER_LEN..], &[0, 0, 5, 0, 0, 0, 128, 0, 0, 0]);
        assert_eq!(
            reply_fds(func::CREATE_SRQ | func::REPLY, &srq[HEADER_LEN..]),
            1
        );
    }
}
