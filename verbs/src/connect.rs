//! Connection management: [`Device::listen`] and [`Device::connect`], and what they
//! return: [`Listener`], [`Incoming`], [`Connected`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use ipc::control::{Reply, Request};
use mpa::ConnectError;
use tokio::net::ToSocketAddrs;
use tokio::sync::Mutex as AsyncMutex;

use crate::cq::SrqImpl;
use crate::daemon::{Client, DaemonError, IncomingEvent, qp::DaemonQp};
use crate::device::{Backend, Device};
use crate::pd::Pd;
use crate::qp::{Qp, QpConfig};

impl Device {
    /// Listens for iWARP connections on `addr`: a socket address, or a `"host:port"` whose
    /// host name is resolved (the first address that binds is used), as tokio's
    /// `TcpListener::bind` takes. Port 0 picks a free port; see [`Listener::local_addr`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, no socket stays bound.
    pub async fn listen(&self, addr: impl ToSocketAddrs) -> io::Result<Listener> {
        let mut last = None;
        let mut bound = None;
        for a in lookup(addr).await? {
            let got = match self.backend() {
                #[cfg(feature = "embedded")]
                Backend::Embedded(e) => e
                    .listen(a)
                    .await
                    .map(|l| ListenerInner::Embedded(Arc::new(l))),
                Backend::Daemon(c) => daemon_listen(c, a).await,
            };
            match got {
                Ok(l) => {
                    bound = Some(l);
                    break;
                }
                Err(e) => last = Some(io::Error::new(e.kind(), format!("{a}: {e}"))),
            }
        }
        let inner = bound.ok_or_else(|| last.unwrap_or_else(nothing_resolved))?;
        Ok(Listener {
            inner,
            device: self.clone(),
        })
    }

    /// Connects to an iWARP listener at `addr`: TCP, then the MPA Request/Reply carrying
    /// `private_data` (at most 512 octets) each way, then a queue pair of `pd` in RTS.
    /// `addr` is a socket address or a `"host:port"` whose host name is resolved, as
    /// tokio's `TcpStream::connect` takes: each address it resolves to is tried in turn
    /// until a TCP connection is made.
    ///
    /// Private data is the place to hand the peer a [`RemoteBuf`](crate::RemoteBuf)
    /// ([`RemoteBuf::encode`](crate::RemoteBuf::encode), 16 octets).
    ///
    /// In client-server mode (the default) this side must send first: the accepting side
    /// stays silent until this side's first message arrives (see [`Incoming::accept`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future closes the TCP connection; the peer sees the
    /// connection fail.
    pub async fn connect(
        &self,
        pd: &Pd,
        addr: impl ToSocketAddrs,
        qp: QpConfig,
        private_data: &[u8],
    ) -> Result<Connected, ConnectError> {
        self.check_pd(pd)?;
        qp.check_recvs()?;
        let mut last = None;
        let mut connected = None;
        for a in lookup(addr).await? {
            let got = match self.backend() {
                #[cfg(feature = "embedded")]
                Backend::Embedded(e) => e
                    .connect(a, qp.to_init(pd.engine_id())?, private_data)
                    .await
                    .map(|(inner, private)| (Qp::new(inner, pd.clone()), private)),
                Backend::Daemon(c) => {
                    let req = Request::Connect {
                        pd: pd.id().0,
                        srq: daemon_srq(c, &qp)?,
                        depths: c.depths(),
                        addr: a,
                        private: Bytes::copy_from_slice(private_data),
                        recvs: qp.recvs.clone(),
                        rtr: c.rtr(),
                    };
                    daemon_qp(c, &req, pd, &qp).await
                }
            };
            match got {
                Ok(c) => {
                    connected = Some(c);
                    break;
                }
                // Only TCP failures move on to the next address; an MPA answer is final.
                Err(ConnectError::Io(e)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        let Some((qp, private_data)) = connected else {
            return Err(ConnectError::Io(last.unwrap_or_else(nothing_resolved)));
        };
        Ok(Connected { qp, private_data })
    }

    fn check_pd(&self, pd: &Pd) -> Result<(), ConnectError> {
        if self.same_device(&pd.home()) {
            Ok(())
        } else {
            Err(ConnectError::Invalid(format!(
                "protection domain {} belongs to another Device; allocate it from this one",
                pd.id()
            )))
        }
    }
}

/// The outcome of [`Device::connect`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Connected {
    /// The connected queue pair.
    pub qp: Qp,
    /// The private data of the peer's MPA Reply.
    pub private_data: Bytes,
}

/// A listening socket. Cheap to clone; clones share it, and it stops listening when the
/// last clone is dropped.
#[derive(Clone, Debug)]
pub struct Listener {
    inner: ListenerInner,
    device: Device,
}

#[derive(Clone, Debug)]
enum ListenerInner {
    #[cfg(feature = "embedded")]
    Embedded(Arc<offload_engine::Listener>),
    Daemon(Arc<DaemonListener>),
}

/// A listener in iwarpd: its id, the address it bound, and its connection requests.
#[derive(Debug)]
struct DaemonListener {
    client: Arc<Client>,
    id: u32,
    addr: SocketAddr,
    events: AsyncMutex<tokio::sync::mpsc::UnboundedReceiver<IncomingEvent>>,
}

impl Drop for DaemonListener {
    fn drop(&mut self) {
        self.client.drop_listener(self.id);
    }
}

async fn daemon_listen(c: &Arc<Client>, addr: SocketAddr) -> io::Result<ListenerInner> {
    match c.call_async(&Request::Listen { addr }).await? {
        (Reply::Listening { id, addr }, _) => Ok(ListenerInner::Daemon(Arc::new(DaemonListener {
            client: c.clone(),
            events: AsyncMutex::new(c.listener_events(id)),
            id,
            addr,
        }))),
        _ => Err(io::Error::other("iwarpd answered Listen with no listener")),
    }
}

/// The daemon's handle of the shared receive queue `cfg` names (0: none); an error if it
/// is not one of this daemon session's.
fn daemon_srq(c: &Arc<Client>, cfg: &QpConfig) -> Result<u32, ConnectError> {
    match cfg.srq.as_ref().map(|s| &s.inner) {
        None => Ok(0),
        Some(SrqImpl::Daemon(q)) if q.is_of(c) => Ok(q.id()),
        Some(_) => Err(crate::qp::other_device_srq()),
    }
}

/// Runs a Connect or Accept in iwarpd and maps the queue pair it returns.
async fn daemon_qp(
    c: &Arc<Client>,
    req: &Request,
    pd: &Pd,
    cfg: &QpConfig,
) -> Result<(Qp, Bytes), ConnectError> {
    let to_connect = |e: DaemonError| match e {
        DaemonError::Unreachable(m) => {
            ConnectError::Io(io::Error::new(io::ErrorKind::NotConnected, m))
        }
        DaemonError::Refused(m) | DaemonError::NoSuchDevice(m) => ConnectError::Daemon(m),
        // Read as the same failure of an embedded engine: the user's words, no prefix.
        DaemonError::Tcp(kind, _) => ConnectError::Io(io::Error::from(kind)),
        DaemonError::Rejected(private_data, refused) => ConnectError::Rejected {
            private_data,
            refused,
        },
    };
    let (reply, fds) = c.call_async(req).await.map_err(to_connect)?;
    let dq = DaemonQp::start(
        c,
        reply,
        fds,
        cfg.send_cq.inner.clone(),
        cfg.recv_cq.inner.clone(),
        pd.push_region().cloned(),
        cfg.recvs.iter().map(|wr| wr.wr_id),
    )
    .map_err(to_connect)?;
    let private = dq.private_data().clone();
    Ok((Qp::from_daemon(dq, pd.clone()), private))
}

impl Listener {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.inner {
            #[cfg(feature = "embedded")]
            ListenerInner::Embedded(l) => l.local_addr(),
            ListenerInner::Daemon(l) => l.addr,
        }
    }

    /// The next connection request whose MPA Request arrived and was valid. Accept it or
    /// reject it; dropping it closes the connection.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a request is handed out only when this future returns it.
    pub async fn accept(&self) -> io::Result<Incoming> {
        let inner = match &self.inner {
            #[cfg(feature = "embedded")]
            ListenerInner::Embedded(l) => IncomingInner::Embedded(Box::new(l.accept().await?)),
            ListenerInner::Daemon(l) => {
                let ev = l.events.lock().await.recv().await.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotConnected,
                        format!(
                            "the listener stopped: iwarpd at {} went away",
                            l.client.path().display()
                        ),
                    )
                })?;
                IncomingInner::Daemon(DaemonIncoming {
                    client: l.client.clone(),
                    ev,
                    answered: false,
                })
            }
        };
        Ok(Incoming {
            inner,
            device: self.device.clone(),
        })
    }
}

/// A connection request: the peer's MPA Request arrived. [`accept`](Self::accept) or
/// [`reject`](Self::reject) consumes it, so a request is answered once:
///
/// ```compile_fail
/// # async fn answer(listener: verbs::Listener, pd: verbs::Pd, cfg: verbs::QpConfig) {
/// let incoming = listener.accept().await.unwrap();
/// let qp = incoming.accept(&pd, cfg, b"").await;
/// let again = incoming.reject(b"no").await; // error[E0382]: use of moved value
/// # }
/// ```
#[derive(Debug)]
pub struct Incoming {
    inner: IncomingInner,
    device: Device,
}

#[derive(Debug)]
enum IncomingInner {
    #[cfg(feature = "embedded")]
    Embedded(Box<offload_engine::Incoming>),
    Daemon(DaemonIncoming),
    /// Taken by `accept` or `reject`.
    Answered,
}

/// A connection request waiting in iwarpd.
#[derive(Debug)]
struct DaemonIncoming {
    client: Arc<Client>,
    ev: IncomingEvent,
    /// Accepted or rejected; otherwise dropping rejects it.
    answered: bool,
}

impl Drop for DaemonIncoming {
    fn drop(&mut self) {
        if !self.answered {
            self.client.tell(&Request::Reject {
                incoming: self.ev.id,
                private: Bytes::new(),
            });
        }
    }
}

impl Incoming {
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        match &self.inner {
            #[cfg(feature = "embedded")]
            IncomingInner::Embedded(i) => i.peer_addr(),
            IncomingInner::Daemon(d) => d.ev.peer,
            IncomingInner::Answered => unreachable!("an answered Incoming is gone"),
        }
    }

    /// The peer's private data.
    pub fn private_data(&self) -> &Bytes {
        match &self.inner {
            #[cfg(feature = "embedded")]
            IncomingInner::Embedded(i) => i.private_data(),
            IncomingInner::Daemon(d) => &d.ev.private,
            IncomingInner::Answered => unreachable!("an answered Incoming is gone"),
        }
    }

    /// The peer's IRD and ORD, when it sent them (MPA revision 2). Through iwarpd: not
    /// reported (`None`); the negotiated values are on the queue pair.
    pub fn peer_ird_ord(&self) -> (Option<u16>, Option<u16>) {
        match &self.inner {
            #[cfg(feature = "embedded")]
            IncomingInner::Embedded(i) => i.peer_ird_ord(),
            IncomingInner::Daemon(_) | IncomingInner::Answered => (None, None),
        }
    }

    /// Accepts: sends the MPA Reply with `private_data` and returns the connected queue
    /// pair of `pd`.
    ///
    /// In client-server mode (the default) the accepting side sends nothing until the
    /// connecting side's first message has arrived (RFC 5044: the Initiator always sends
    /// first): its requests wait in the send queue until then. Enable peer-to-peer mode
    /// ([`DeviceConfig::p2p`](crate::DeviceConfig::p2p)) on both sides to let either side
    /// send first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that nothing leaks: dropping the future closes the
    /// connection, and the request is gone.
    pub async fn accept(
        self,
        pd: &Pd,
        qp: QpConfig,
        private_data: &[u8],
    ) -> Result<Qp, ConnectError> {
        self.device.check_pd(pd)?;
        qp.check_recvs()?;
        let mut this = self;
        match &mut this.inner {
            #[cfg(feature = "embedded")]
            IncomingInner::Embedded(_) => {
                let init = qp.to_init(pd.engine_id())?;
                let IncomingInner::Embedded(inc) =
                    std::mem::replace(&mut this.inner, IncomingInner::Answered)
                else {
                    unreachable!()
                };
                let inner = inc.accept(init, private_data).await?;
                Ok(Qp::new(inner, pd.clone()))
            }
            IncomingInner::Daemon(d) => {
                let srq = daemon_srq(&d.client, &qp)?;
                d.answered = true;
                let client = d.client.clone();
                let req = Request::Accept {
                    incoming: d.ev.id,
                    pd: pd.id().0,
                    srq,
                    depths: client.depths(),
                    private: Bytes::copy_from_slice(private_data),
                    recvs: qp.recvs.clone(),
                };
                daemon_qp(&client, &req, pd, &qp).await.map(|(qp, _)| qp)
            }
            IncomingInner::Answered => unreachable!("an Incoming is answered once"),
        }
    }

    /// Rejects: sends an MPA Reply with the reject bit and `private_data`, then closes.
    /// The peer's connect fails with [`ConnectError::Rejected`] carrying `private_data`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that nothing leaks: dropping the future closes the
    /// connection (the peer may then see it fail instead of being rejected).
    pub async fn reject(self, private_data: &[u8]) -> Result<(), ConnectError> {
        let mut this = self;
        match std::mem::replace(&mut this.inner, IncomingInner::Answered) {
            #[cfg(feature = "embedded")]
            IncomingInner::Embedded(inc) => inc.reject(private_data).await,
            IncomingInner::Daemon(mut d) => {
                d.answered = true;
                d.client
                    .call_async(&Request::Reject {
                        incoming: d.ev.id,
                        private: Bytes::copy_from_slice(private_data),
                    })
                    .await
                    .map(|_| ())
                    .map_err(|e| ConnectError::Io(e.into()))
            }
            IncomingInner::Answered => unreachable!("an Incoming is answered once"),
        }
    }
}

/// The addresses `addr` resolves to; a failure says what form an address takes (tokio's
/// own words, "invalid socket address", name neither the form nor the port).
pub(crate) async fn lookup(
    addr: impl ToSocketAddrs,
) -> io::Result<impl Iterator<Item = SocketAddr>> {
    tokio::net::lookup_host(addr).await.map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            io::Error::new(
                e.kind(),
                format!(
                    "{e}: give an address with its port, as IP:PORT, HOST:PORT or [IPv6]:PORT \
                     (iWARP listeners usually use port 4791)"
                ),
            )
        } else {
            e
        }
    })
}

/// The error for a host name that resolved to no address.
fn nothing_resolved() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "the address resolved to nothing",
    )
}
