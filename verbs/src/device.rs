//! [`Device`], the entry point: opening one, its counters, and its protection domains,
//! completion queues and shared receive queues. Connections are in `connect`.

use std::sync::Arc;

use ipc::control::{Reply, Request};
#[cfg(feature = "embedded")]
use offload_engine::Engine;

use crate::config::DeviceConfig;
use crate::cq::{Cq, Srq, SrqImpl};
use crate::daemon::srq::DaemonSrq;
use crate::daemon::{Client, DaemonError};
use crate::error::DaemonWhy;
#[cfg(feature = "embedded")]
use crate::stats::QpStats;

/// A device's counters, from [`Device::stats`]: the one struct the daemon's STATS reply
/// carries, filled the same way by an embedded engine (where this application is the
/// device's only client).
pub type DeviceStats = ipc::control::DeviceCounters;

/// Where the engine runs.
#[derive(Clone, Debug)]
pub(crate) enum Backend {
    /// In this process.
    #[cfg(feature = "embedded")]
    Embedded(Engine),
    /// In the local `iwarpd`.
    Daemon(Arc<Client>),
}

/// What a program built without the engine is told when nothing names an iwarpd.
#[cfg(not(feature = "embedded"))]
fn no_engine() -> String {
    format!(
        "this program was built without an engine of its own (verbs without its `embedded` \
         feature), so it runs through an iwarpd: start one (`iwarpd --listen 0.0.0.0:4791`) \
         and set IWARP_DEVICE=unix (its default socket, {}) or IWARP_DEVICE=unix:PATH; or \
         build with verbs' default features to run the engine in this process",
        ipc::default_control_path().display()
    )
}

/// An RDMA device: the entry point of the API. Cheap to clone; clones share the device.
///
/// A device is either
/// - an **embedded engine**: a software RNIC running inside the application's process on
///   its tokio runtime (every connection is a task), the default; or
/// - the host's **`iwarpd`** (daemon mode, seed 002's split driver): the engine runs in the
///   daemon, shared by every process of the host; work requests and completions cross in
///   shared-memory rings, and the daemon places received data straight into the
///   application's regions. Chosen with [`DeviceConfig::daemon`] or by setting
///   `IWARP_DEVICE=unix:PATH` (or `IWARP_DEVICE=unix` for iwarpd's default socket) in the
///   environment, so the same binary runs either way.
///
/// Through iwarpd the daemon's settings (CRC, markers, IRD/ORD, timeouts) apply, not
/// `cfg`'s.
#[derive(Clone, Debug)]
pub struct Device {
    backend: Backend,
}

impl Device {
    /// Opens a device configured by `cfg`: embedded, or through iwarpd when `cfg` or
    /// `IWARP_DEVICE` says so.
    ///
    /// Opening needs no runtime; connecting and listening need a tokio runtime.
    ///
    /// # Errors
    ///
    /// In daemon mode, if iwarpd cannot be reached or refuses this application (the
    /// message names the socket, the cause and the fix); and if `IWARP_DEVICE` names no
    /// device this library knows (the message lists the forms it takes).
    pub fn open(cfg: DeviceConfig) -> Result<Self, DaemonError> {
        let backend = match cfg.daemon_path()? {
            Some(path) => Backend::Daemon(Client::connect(
                &path,
                (cfg.push_enabled(), cfg.push_socket_wanted()),
                cfg.queue_depths_wanted(),
                cfg.rtr_wanted(),
            )?),
            #[cfg(feature = "embedded")]
            None => Backend::Embedded(Engine::new(cfg.into_engine())),
            #[cfg(not(feature = "embedded"))]
            None => return Err(DaemonError::NoSuchDevice(no_engine())),
        };
        Ok(Self { backend })
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The embedded engine, if the device is one.
    #[cfg(feature = "embedded")]
    pub(crate) fn engine(&self) -> Option<&Engine> {
        match &self.backend {
            Backend::Embedded(e) => Some(e),
            Backend::Daemon(_) => None,
        }
    }

    /// The control socket of the iwarpd this device goes through, if it does.
    pub fn daemon_path(&self) -> Option<&std::path::Path> {
        match &self.backend {
            #[cfg(feature = "embedded")]
            Backend::Embedded(_) => None,
            Backend::Daemon(c) => Some(c.path()),
        }
    }

    /// The memory error for `op` failing in the daemon with `e`.
    pub(crate) fn daemon_mem_error(&self, op: &'static str, e: &DaemonError) -> crate::MemError {
        tracing::warn!(op, error = %e, "iwarpd");
        let why = match (e, &self.backend) {
            (DaemonError::Unreachable(_), Backend::Daemon(c)) => {
                DaemonWhy::Unreachable(c.path_str())
            }
            (e, _) => DaemonWhy::Refused(e.to_string().into()),
        };
        crate::MemError::Daemon { op, why }
    }

    /// The device's counters. Through iwarpd these are the daemon's (every application
    /// attached to it), asked for on the control socket.
    pub fn stats(&self) -> DeviceStats {
        match &self.backend {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => {
                let st = e.stats();
                let live = u32::try_from(e.qps().len()).unwrap_or(u32::MAX);
                DeviceStats {
                    queue_pairs: live,
                    memory_entries: u32::try_from(e.tpt().len()).unwrap_or(u32::MAX),
                    clients: 1,
                    device_queue_pairs: live,
                    connections: st.connections,
                    connections_closed: st.connections_closed,
                    totals: QpStats {
                        traffic: st.traffic,
                        push: st.push,
                    },
                }
            }
            Backend::Daemon(c) => match c.call(&Request::Stats) {
                Ok(Reply::Stats(d)) => d,
                _ => DeviceStats::default(),
            },
        }
    }

    /// Its limits and settings (`ibv_query_device`). Through iwarpd, the daemon's: an
    /// error if it cannot be asked.
    pub fn query(&self) -> Result<crate::DeviceAttr, DaemonError> {
        match &self.backend {
            #[cfg(feature = "embedded")]
            Backend::Embedded(e) => Ok(crate::DeviceAttr::embedded(e)),
            Backend::Daemon(c) => match c.call(&Request::QueryDevice)? {
                Reply::Device(a) => {
                    let at = self
                        .daemon_path()
                        .map_or_else(String::new, |p| p.display().to_string());
                    Ok(crate::DeviceAttr::new(format!("iwarpd at {at}"), &a))
                }
                other => Err(DaemonError::Refused(format!(
                    "iwarpd answered the device query with {other:?}: is it an older daemon?"
                ))),
            },
        }
    }

    /// True if `other` is this device (or a clone of it).
    pub fn same_device(&self, other: &Self) -> bool {
        match (&self.backend, &other.backend) {
            #[cfg(feature = "embedded")]
            (Backend::Embedded(a), Backend::Embedded(b)) => Arc::ptr_eq(a.tpt(), b.tpt()),
            (Backend::Daemon(a), Backend::Daemon(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Creates a completion queue holding at most `depth` completions. One CQ may serve
    /// many queue pairs. A CQ that overflows reports
    /// [`CqError::Overrun`](crate::CqError::Overrun).
    pub fn create_cq(&self, depth: usize) -> Cq {
        Cq::new(depth)
    }

    /// Creates a shared receive queue holding at most `depth` receive buffers: buffers
    /// any queue pair created with it draws on when its own receive queue is empty.
    /// Through iwarpd the depth is rounded up to a power of two (at most 65,536), and the
    /// call fails if the daemon cannot be reached or refuses.
    pub fn create_srq(&self, depth: usize) -> Result<Srq, crate::MemError> {
        match &self.backend {
            #[cfg(feature = "embedded")]
            Backend::Embedded(_) => Ok(Srq::embedded(depth)),
            Backend::Daemon(c) => match DaemonSrq::create(c, depth) {
                Ok(q) => Ok(Srq {
                    inner: SrqImpl::Daemon(Arc::new(q)),
                }),
                Err(e) => Err(self.daemon_mem_error("create_srq", &e)),
            },
        }
    }

    /// Gracefully disconnects every queue pair of this device and waits until all have
    /// ended: for an orderly shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the disconnects are started at the first poll and go on regardless.
    pub async fn shutdown(&self) {
        #[cfg(feature = "embedded")]
        if let Backend::Embedded(e) = &self.backend {
            e.shutdown().await;
        }
    }
}
