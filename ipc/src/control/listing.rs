//! What `iwarpd stat` asks besides the local service's totals: the counters of the
//! daemon's other services (its built-in remote-memory target), and every queue pair
//! the daemon holds, one line each as `rdma res show qp` lists them.
//!
//! On the wire (little-endian, after the reply's status):
//!
//! ```text
//! SERVICE_STATS reply: u16 count, then per service: name (u16 length, UTF-8), then the
//!                      counters as the STATS reply carries them
//! LIST_QPS request:    u32 after (the page starts at the first queue pair numbered
//!                      above it; 0 for the first page)
//! LIST_QPS reply:      u8 more (1: ask again from the last number), u16 count, then per
//!                      queue pair: u32 number, service (u16 length, UTF-8: `local` for
//!                      an application's), u8 state (QpStateCode), local address, peer
//!                      address (family, port, 16 octets), u8 owner flags (bit 0: pid,
//!                      bit 1: uid), u32 pid, u32 uid, the 47 counters
//! ```

use std::net::SocketAddr;

use bytes::{BufMut, BytesMut};

use super::{Counters, DeviceCounters};
use crate::codec::{Malformed, Reader, put_addr, put_blob};

/// Queue pairs in one `LIST_QPS` reply at most (a page stays well below the message
/// limit); the client asks again from the last one while `more` is set.
pub const MAX_QPS_PER_PAGE: usize = 128;
/// The longest service name.
pub const MAX_SERVICE_NAME: usize = 32;
/// The service name of the queue pairs of local applications.
pub const LOCAL_SERVICE: &str = "local";

/// A service of the daemon and its counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceCounters {
    /// Its name (the `service` label of the metrics endpoint: `remote_memory`).
    pub name: String,
    /// Its counters; of the per-client fields, only the device's are set.
    pub counters: DeviceCounters,
}

/// A queue pair's state on the wire: RFC 5040's, as [`rdmap::QpState`] names them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QpStateCode(pub u8);

impl QpStateCode {
    /// The code of `state`.
    pub fn of(state: rdmap::QpState) -> Self {
        use rdmap::QpState as S;
        Self(match state {
            S::Idle => 0,
            S::Rts => 1,
            S::Closing => 2,
            S::Terminate => 3,
            S::Error => 4,
        })
    }

    /// Its name, as `rdma res show qp` prints states (`RTS`, `ERR`, ...).
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "IDLE",
            1 => "RTS",
            2 => "CLOSING",
            3 => "TERMINATE",
            4 => "ERR",
            _ => "UNKNOWN",
        }
    }
}

/// One queue pair of the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpListing {
    /// The engine's queue pair number.
    pub num: u32,
    /// The service it belongs to: [`LOCAL_SERVICE`] for a local application's.
    pub service: String,
    /// Its state.
    pub state: QpStateCode,
    /// The address of the daemon's end of its connection.
    pub local: SocketAddr,
    /// The peer's address.
    pub peer: SocketAddr,
    /// The owning application's process id (what it said when it opened the device).
    pub pid: Option<u32>,
    /// The owning application's user (its socket's peer credentials).
    pub uid: Option<u32>,
    /// Its traffic counters.
    pub counters: Counters,
}

/// A page of [`QpListing`]s, in increasing queue pair number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QpPage {
    /// The queue pairs.
    pub qps: Vec<QpListing>,
    /// More follow: ask again from the last number.
    pub more: bool,
}

fn read_name(r: &mut Reader<'_>) -> Result<String, Malformed> {
    let name = r.blob(MAX_SERVICE_NAME, "service name")?;
    String::from_utf8(name.to_vec()).map_err(|_| Malformed("service name"))
}

fn put_name(out: &mut BytesMut, name: &str) {
    let end = (0..=name.len().min(MAX_SERVICE_NAME))
        .rev()
        .find(|&i| name.is_char_boundary(i))
        .unwrap_or(0);
    put_blob(out, &name.as_bytes()[..end]);
}

/// The `SERVICE_STATS` reply's result.
pub(super) fn put_services(out: &mut BytesMut, services: &[ServiceCounters]) {
    out.put_u16_le(u16::try_from(services.len()).unwrap_or(u16::MAX));
    for s in services.iter().take(usize::from(u16::MAX)) {
        put_name(out, &s.name);
        s.counters.put(out);
    }
}

pub(super) fn read_services(r: &mut Reader<'_>) -> Result<Vec<ServiceCounters>, Malformed> {
    let n = r.u16("service count")?;
    (0..n)
        .map(|_| {
            Ok(ServiceCounters {
                name: read_name(r)?,
                counters: DeviceCounters::read(r)?,
            })
        })
        .collect()
}

/// The `LIST_QPS` reply's result: at most [`MAX_QPS_PER_PAGE`] of `page`'s queue pairs.
pub(super) fn put_page(out: &mut BytesMut, page: &QpPage) {
    let n = page.qps.len().min(MAX_QPS_PER_PAGE);
    out.put_u8(u8::from(page.more || n < page.qps.len()));
    out.put_u16_le(n as u16);
    for q in &page.qps[..n] {
        out.put_u32_le(q.num);
        put_name(out, &q.service);
        out.put_u8(q.state.0);
        put_addr(out, q.local);
        put_addr(out, q.peer);
        out.put_u8(u8::from(q.pid.is_some()) | u8::from(q.uid.is_some()) << 1);
        out.put_u32_le(q.pid.unwrap_or(0));
        out.put_u32_le(q.uid.unwrap_or(0));
        q.counters.put(out);
    }
}

pub(super) fn read_page(r: &mut Reader<'_>) -> Result<QpPage, Malformed> {
    let more = match r.u8("more")? {
        0 => false,
        1 => true,
        _ => return Err(Malformed("more")),
    };
    let n = usize::from(r.u16("queue pair count")?);
    if n > MAX_QPS_PER_PAGE {
        return Err(Malformed("queue pair count"));
    }
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        let num = r.u32("queue pair")?;
        let service = read_name(r)?;
        let state = QpStateCode(r.u8("state")?);
        let local = r.addr()?;
        let peer = r.addr()?;
        let owner = r.u8("owner")?;
        let (pid, uid) = (r.u32("pid")?, r.u32("uid")?);
        qps.push(QpListing {
            num,
            service,
            state,
            local,
            peer,
            pid: (owner & 1 != 0).then_some(pid),
            uid: (owner & 2 != 0).then_some(uid),
            counters: Counters::read(r)?,
        });
    }
    Ok(QpPage { qps, more })
}

#[cfg(test)]
mod tests {
    use super::super::{HEADER_LEN, Header, Reply, Request, func, reply_fds, request_fds};
    use super::*;

    #[test]
    fn the_requests_are_a_function_code_and_at_most_a_number() {
        let m = Request::ListQps { after: 0x0102_0304 }.encode(5);
        #[rustfmt::skip]
        let want: &[u8] = &[
            20, 0, 0, 0,  0x1b, 0x00,  0x08, 0x00,
            5, 0, 0, 0, 0, 0, 0, 0,
            0x04, 0x03, 0x02, 0x01,
        ];
        assert_eq!(&m[..], want);
        assert_eq!(
            Request::decode(func::LIST_QPS, &m[HEADER_LEN..]),
            Ok(Request::ListQps { after: 0x0102_0304 })
        );
        let m = Request::ServiceStats.encode(6);
        assert_eq!(
            &m[..],
            &[16, 0, 0, 0, 0x1a, 0x00, 0x08, 0x00, 6, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Request::decode(func::SERVICE_STATS, &[]),
            Ok(Request::ServiceStats)
        );
        assert!(Request::decode(func::LIST_QPS, &[1, 2, 3]).is_err());
        assert_eq!(request_fds(func::LIST_QPS), 0);
    }

    #[test]
    fn a_page_lists_each_queue_pair_with_its_owner_and_counters() {
        let qp = QpListing {
            num: 0x0000_0102,
            service: LOCAL_SERVICE.into(),
            state: QpStateCode::of(rdmap::QpState::Rts),
            local: "10.0.0.1:4791".parse().unwrap(),
            peer: "[::1]:7".parse().unwrap(),
            pid: Some(0x0a0b),
            uid: None,
            counters: {
                let mut c = Counters::default();
                c.traffic.fpdus_sent = 3;
                c.push.discards = [0, 0, 0, 0, 0, 9];
                c
            },
        };
        let page = QpPage {
            qps: vec![qp.clone()],
            more: true,
        };
        let m = Reply::QpList(page.clone()).encode(func::LIST_QPS, 2);
        let body = &m[HEADER_LEN..];
        #[rustfmt::skip]
        let head: &[u8] = &[
            0, 0,                                   // status
            1,  1, 0,                               // more, count
            0x02, 0x01, 0, 0,                       // number
            5, 0, b'l', b'o', b'c', b'a', b'l',     // service
            1,                                      // RTS
            4, 0xb7, 0x12, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            6, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
            0b01,  0x0b, 0x0a, 0, 0,  0, 0, 0, 0,   // owner: pid only
            3, 0, 0, 0, 0, 0, 0, 0,                 // the first counter
        ];
        assert_eq!(&body[..head.len()], head);
        assert_eq!(body.len(), head.len() - 8 + 47 * 8);
        assert_eq!(body[body.len() - 8], 9, "the last counter");
        let h = Header::parse(&m).unwrap().unwrap();
        assert_eq!(h.func, func::LIST_QPS | func::REPLY);
        assert_eq!(reply_fds(h.func, body), 0);
        assert_eq!(Reply::decode(func::LIST_QPS, body), Ok(Reply::QpList(page)));
        for cut in 2..body.len() {
            assert!(
                Reply::decode(func::LIST_QPS, &body[..cut]).is_err(),
                "cut {cut}"
            );
        }
        assert_eq!(QpStateCode(1).name(), "RTS");
        assert_eq!(QpStateCode(9).name(), "UNKNOWN");
        // A page never holds more than a message does.
        let full = QpPage {
            qps: vec![qp; MAX_QPS_PER_PAGE + 5],
            more: false,
        };
        let m = Reply::QpList(full).encode(func::LIST_QPS, 3);
        assert!(m.len() <= super::super::MAX_MESSAGE);
        let Ok(Reply::QpList(p)) = Reply::decode(func::LIST_QPS, &m[HEADER_LEN..]) else {
            panic!("a page")
        };
        assert_eq!((p.qps.len(), p.more), (MAX_QPS_PER_PAGE, true));
    }

    #[test]
    fn service_counters_are_a_name_then_the_stats_layout() {
        let services = vec![ServiceCounters {
            name: "remote_memory".into(),
            counters: DeviceCounters {
                device_queue_pairs: 2,
                connections: 5,
                ..DeviceCounters::default()
            },
        }];
        let m = Reply::ServiceStats(services.clone()).encode(func::SERVICE_STATS, 4);
        let body = &m[HEADER_LEN..];
        assert_eq!(&body[..4], &[0, 0, 1, 0]);
        assert_eq!(&body[4..6], &[13, 0]);
        assert_eq!(&body[6..19], b"remote_memory");
        // queue_pairs, memory_entries, clients, device_queue_pairs, then connections.
        assert_eq!(
            &body[19..35],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(body[35], 5);
        assert_eq!(body.len(), 19 + 4 * 4 + 2 * 8 + 47 * 8);
        assert_eq!(
            Reply::decode(func::SERVICE_STATS, body),
            Ok(Reply::ServiceStats(services))
        );
        // The same counters as the STATS reply carries.
        let stats = Reply::Stats(DeviceCounters::default()).encode(func::STATS, 4);
        assert_eq!(stats.len() - HEADER_LEN - 2, body.len() - 19);
    }
}
