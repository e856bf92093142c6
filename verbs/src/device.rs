//! [`Device`], the entry point, and connection management: [`Listener`], [`Incoming`],
//! [`Connected`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use offload_engine::Engine;
use tokio::net::ToSocketAddrs;

use crate::config::DeviceConfig;
use crate::cq::{Cq, Srq};
use crate::pd::Pd;
use crate::qp::{Qp, QpConfig};
use mpa::ConnectError;

/// A device's counters, from [`Device::stats`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceStats {
    /// Queue pairs whose connection is still running or whose handle is held.
    pub queue_pairs: usize,
    /// Live entries of the memory table: regions and windows.
    pub memory_entries: usize,
}

/// An RDMA device: the entry point of the API. Cheap to clone; clones share the device.
///
/// Today a device is an **embedded engine**: a software RNIC running inside the
/// application's process on its tokio runtime (every connection is a task). A daemon-mode
/// backend, where the engine runs in a local `iwarpd` shared by every process of the host,
/// will plug in behind this same type later; code written against `Device` keeps working.
#[derive(Clone, Debug)]
pub struct Device {
    engine: Engine,
}

impl Device {
    /// Opens a device with an embedded engine configured by `cfg`.
    ///
    /// Opening needs no runtime; connecting and listening need a tokio runtime.
    pub fn open(cfg: DeviceConfig) -> Self {
        Self {
            engine: Engine::new(cfg.into_engine()),
        }
    }

    /// The engine underneath (the embedded backend; not part of the API).
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The device's counters.
    pub fn stats(&self) -> DeviceStats {
        DeviceStats {
            queue_pairs: self.engine.qps().len(),
            memory_entries: self.engine.tpt().len(),
        }
    }

    /// True if `other` is this device (or a clone of it).
    pub fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(self.engine.tpt(), other.engine.tpt())
    }

    /// Allocates a protection domain: regions, windows and queue pairs of one domain can
    /// reach each other; across domains every access fails.
    pub fn alloc_pd(&self) -> Pd {
        Pd::new(self.clone())
    }

    /// Creates a completion queue holding at most `depth` completions. One CQ may serve
    /// many queue pairs. A CQ that overflows reports
    /// [`CqError::Overrun`](crate::CqError::Overrun).
    pub fn create_cq(&self, depth: usize) -> Cq {
        Cq::new(depth)
    }

    /// Creates a shared receive queue: receive buffers any queue pair created with it
    /// draws on when its own receive queue is empty.
    pub fn create_srq(&self) -> Srq {
        Srq::new()
    }

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
        for a in tokio::net::lookup_host(addr).await? {
            match self.engine.listen(a).await {
                Ok(l) => {
                    bound = Some(l);
                    break;
                }
                Err(e) => last = Some(io::Error::new(e.kind(), format!("{a}: {e}"))),
            }
        }
        let inner = bound.ok_or_else(|| last.unwrap_or_else(nothing_resolved))?;
        Ok(Listener {
            inner: Arc::new(inner),
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
        let mut last = None;
        let mut connected = None;
        for a in tokio::net::lookup_host(addr).await? {
            match self
                .engine
                .connect(a, qp.to_init(pd.engine_id()), private_data)
                .await
            {
                Ok(c) => {
                    connected = Some(c);
                    break;
                }
                // Only TCP failures move on to the next address; an MPA answer is final.
                Err(ConnectError::Io(e)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        let Some((inner, private_data)) = connected else {
            return Err(ConnectError::Io(last.unwrap_or_else(nothing_resolved)));
        };
        Ok(Connected {
            qp: Qp::new(inner, pd.clone()),
            private_data,
        })
    }

    /// Gracefully disconnects every queue pair of this device and waits until all have
    /// ended: for an orderly shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the disconnects are started at the first poll and go on regardless.
    pub async fn shutdown(&self) {
        self.engine.shutdown().await;
    }

    fn check_pd(&self, pd: &Pd) -> Result<(), ConnectError> {
        if self.same_device(pd.device()) {
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
    inner: Arc<offload_engine::Listener>,
    device: Device,
}

impl Listener {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    /// The next connection request whose MPA Request arrived and was valid. Accept it or
    /// reject it; dropping it closes the connection.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a request is handed out only when this future returns it.
    pub async fn accept(&self) -> io::Result<Incoming> {
        let inner = self.inner.accept().await?;
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
    inner: offload_engine::Incoming,
    device: Device,
}

impl Incoming {
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer_addr()
    }

    /// The peer's private data.
    pub fn private_data(&self) -> &Bytes {
        self.inner.private_data()
    }

    /// The peer's IRD and ORD, when it sent them (MPA revision 2).
    pub fn peer_ird_ord(&self) -> (Option<u16>, Option<u16>) {
        self.inner.peer_ird_ord()
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
        let inner = self
            .inner
            .accept(qp.to_init(pd.engine_id()), private_data)
            .await?;
        Ok(Qp::new(inner, pd.clone()))
    }

    /// Rejects: sends an MPA Reply with the reject bit and `private_data`, then closes.
    /// The peer's connect fails with [`ConnectError::Rejected`] carrying `private_data`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that nothing leaks: dropping the future closes the
    /// connection (the peer may then see it fail instead of being rejected).
    pub async fn reject(self, private_data: &[u8]) -> Result<(), ConnectError> {
        self.inner.reject(private_data).await
    }
}

/// The error for a host name that resolved to no address.
fn nothing_resolved() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "the address resolved to nothing",
    )
}
