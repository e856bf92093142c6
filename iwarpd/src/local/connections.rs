//! A client's requests about connections: its listeners, the connection requests they
//! hand it (accepted or rejected), and the queue pairs it connects.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use ipc::control::{Header, Reply, error};

use super::admit;
use super::queue_pairs::{NewQp, admit_qp, spawn_establish};
use super::replies::{err, not_found};
use super::session::{Answer, ClientListener, Session, reply};
use super::usage::Usage;

/// `Listen`: a listener of the client on `addr`, if it may have one there. Its connection
/// requests go to the client once the reply did.
pub(super) async fn listen(s: &Arc<Session>, h: Header, addr: SocketAddr) -> Answer {
    if let Some(r) = admit_listener(s, addr) {
        return r.into();
    }
    match s.engine.listen(addr).await {
        Ok(l) => {
            let local = l.local_addr();
            let id = s.objs().id();
            // The reply goes out before the listener's first connection request can
            // (the library routes a listener's requests as it reads the reply).
            reply(s, h, Reply::Listening { id, addr: local }, Vec::new()).await;
            let l = ClientListener::start(s, id, Arc::new(l));
            s.objs().listeners.insert(id, l);
            Answer::Sent
        }
        Err(e) => err(error::REFUSED, format!("listen on {addr}: {e}")).into(),
    }
}

/// `CloseListener`: stops the client's listener `id`.
pub(super) fn close_listener(s: &Session, id: u32) -> Reply {
    match s.objs().listeners.remove(&id) {
        Some(l) => {
            drop(l.stop());
            Reply::Done
        }
        None => not_found("listener", id),
    }
}

/// `Connect`: a queue pair `qp` connected to `addr` (with the MPA private data
/// `private`, offering peer-to-peer mode with the ready-to-receive types `rtr` if not 0),
/// answered once connected (or not).
pub(super) fn connect(
    s: &Arc<Session>,
    h: Header,
    qp: NewQp,
    addr: SocketAddr,
    (private, rtr): (Bytes, u8),
) -> Answer {
    match admit_qp(s, qp.pd, qp.depths) {
        Err(r) => (*r).into(),
        Ok(geo) => {
            let engine = s.engine.clone();
            let mut mpa = engine.config().mpa.clone();
            let rtr = mpa::RtrFlags::from_bits_truncate(rtr);
            if rtr != mpa::RtrFlags::NONE {
                mpa.p2p = true;
                mpa.rtr = rtr;
            }
            spawn_establish(
                s,
                h,
                (qp.pd, qp.srq, geo),
                qp.recvs,
                move |init| async move { engine.connect_with(addr, init, &private, mpa).await },
            );
            Answer::Sent
        }
    }
}

/// `Accept`: the client's connection request `incoming` accepted into a queue pair `qp`
/// (with the MPA private data `private`), answered once connected (or not).
pub(super) fn accept(
    s: &Arc<Session>,
    h: Header,
    incoming: u32,
    qp: NewQp,
    private: Bytes,
) -> Answer {
    // The request first: a queue pair is admitted (and counted) only for a real one.
    let Some(inc) = s.objs().incoming.remove(&incoming) else {
        return not_found("connection request", incoming).into();
    };
    match admit_qp(s, qp.pd, qp.depths) {
        Err(r) => (*r).into(),
        Ok(geo) => {
            spawn_establish(
                s,
                h,
                (qp.pd, qp.srq, geo),
                qp.recvs,
                move |init| async move {
                    let qp = inc.accept(init, &private).await?;
                    Ok((qp, Bytes::new()))
                },
            );
            Answer::Sent
        }
    }
}

/// `Reject`: the client's connection request `incoming` rejected (with the MPA private
/// data `private`), in the background.
pub(super) fn reject(s: &Session, incoming: u32, private: Bytes) -> Reply {
    let inc = s.objs().incoming.remove(&incoming);
    match inc {
        None => not_found("connection request", incoming),
        Some(inc) => {
            tokio::spawn(async move {
                let _ = inc.reject(&private).await;
            });
            Reply::Done
        }
    }
}

/// The refusal of a listener on `addr`: past the client's limit or the daemon's
/// budget, or on a port that needs a privilege the client lacks (iwarpd may run as root;
/// its clients get no more than they would have themselves).
fn admit_listener(s: &Session, addr: SocketAddr) -> Option<Reply> {
    let need = Usage {
        listeners: 1,
        files: 1,
        ..Usage::default()
    };
    if let Some(r) = admit::check(s, need) {
        return Some(r);
    }
    let first_free = unprivileged_port_start();
    (addr.port() != 0 && addr.port() < first_free && s.uid != Some(0)).then(|| {
        err(
            error::REFUSED,
            format!(
                "listen on {addr}: port {} is privileged, and this application runs as an \
                 unprivileged user (uid {}): it may not listen there through iwarpd any more \
                 than it could itself; use port {first_free} or above",
                addr.port(),
                s.uid
                    .map_or_else(|| "unknown".to_owned(), |u| u.to_string()),
            ),
        )
    })
}

/// The lowest port an unprivileged process may bind (`net.ipv4.ip_unprivileged_port_start`,
/// which covers IPv6 too; 1024 where it cannot be read).
fn unprivileged_port_start() -> u16 {
    static START: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1024)
    })
}
