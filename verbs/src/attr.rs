//! [`DeviceAttr`]: what a device can do and how it is set, as `ibv_query_device` answers.

use crate::Extensions;

/// A device's limits and settings, from [`Device::query`](crate::Device::query). A limit
/// of `None` means none but memory (the embedded engine counts no queue pairs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Where the engine runs: `embedded`, or the iwarpd control socket.
    pub backend: String,
    /// This library's version (`fw_ver` in `ibv_devinfo`).
    pub version: &'static str,
    /// Queue pairs this application may have.
    pub max_qp: Option<u32>,
    /// Work requests a send queue holds (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Work requests a receive queue holds.
    pub max_recv_wr: u32,
    /// Gather entries of a send request.
    pub max_send_sge: Option<u32>,
    /// Scatter entries of a receive request.
    pub max_recv_sge: Option<u32>,
    /// Regions and windows this application may have (`max_mr`, `max_mw`: one table).
    pub max_mr: Option<u32>,
    /// Shared receive queues this application may have.
    pub max_srq: Option<u32>,
    /// Inbound RDMA Reads and Atomics outstanding per queue pair it offers
    /// (`max_qp_rd_atom`, IRD).
    pub max_qp_rd_atom: u16,
    /// Outbound ones it asks for (`max_qp_init_rd_atom`, ORD).
    pub max_qp_init_rd_atom: u16,
    /// The largest ULPDU it sends (before the path MSS lowers it per connection).
    pub mulpdu: u16,
    /// MPA revision it offers.
    pub mpa_revision: u8,
    /// CRC32c on FPDUs.
    pub crc: bool,
    /// MPA markers asked for.
    pub markers: bool,
    /// This stack's extensions it offers to a peer of this stack.
    pub extensions: Extensions,
    /// Slots of a protection domain's push region (seed 000); 0 without the push path.
    pub push_slots: u32,
    /// RFC 7306 Atomics (Fetch and Add, Compare and Swap) on 8-octet aligned words.
    pub atomics: bool,
}

impl DeviceAttr {
    pub(crate) fn new(backend: String, a: &ipc::control::DeviceAttrs) -> Self {
        let limit = |n: u32| (n != u32::MAX).then_some(n);
        Self {
            backend,
            version: env!("CARGO_PKG_VERSION"),
            max_qp: limit(a.max_qp),
            max_qp_wr: a.sq_depth,
            max_recv_wr: a.rq_depth,
            max_send_sge: limit(a.max_send_sge),
            max_recv_sge: limit(a.max_recv_sge),
            max_mr: limit(a.max_mr),
            max_srq: limit(a.max_srq),
            max_qp_rd_atom: a.ird,
            max_qp_init_rd_atom: a.ord,
            mulpdu: a.mulpdu,
            mpa_revision: a.mpa_revision,
            crc: a.crc,
            markers: a.markers,
            extensions: Extensions::from_bits_truncate(a.extensions),
            push_slots: a.push_slots,
            atomics: true,
        }
    }

    /// The embedded engine's: its settings, and no limit but memory except the table's.
    #[cfg(feature = "embedded")]
    pub(crate) fn embedded(e: &offload_engine::Engine) -> Self {
        let cfg = e.config();
        let attrs = ipc::control::DeviceAttrs {
            max_mr: u32::try_from(e.tpt().max_entries()).unwrap_or(u32::MAX),
            push_slots: cfg.push.as_ref().map_or(0, |p| p.slots),
            ..ipc::control::DeviceAttrs::settings(&cfg.mpa, &cfg.stream)
        };
        Self::new("embedded".into(), &attrs)
    }
}
