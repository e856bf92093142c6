//! Function codes: a request's, its reply's (the request's with [`REPLY`] set) and the
//! events'.

/// Open the device: the first request.
pub const OPEN: u16 = 0x0001;
/// Allocate a protection domain.
pub const ALLOC_PD: u16 = 0x0002;
/// Deallocate a protection domain.
pub const DEALLOC_PD: u16 = 0x0003;
/// Register a memory region (one memory file attached).
pub const REG_MR: u16 = 0x0004;
/// Deregister a memory region: the reply means the daemon no longer touches it.
pub const DEREG_MR: u16 = 0x0005;
/// Listen for connections.
pub const LISTEN: u16 = 0x0006;
/// Stop listening.
pub const CLOSE_LISTENER: u16 = 0x0007;
/// Connect a queue pair.
pub const CONNECT: u16 = 0x0008;
/// Accept a connection request.
pub const ACCEPT: u16 = 0x0009;
/// Reject a connection request.
pub const REJECT: u16 = 0x000a;
/// Start a graceful close.
pub const DISCONNECT: u16 = 0x000b;
/// Destroy a queue pair: the reply means its work is flushed and its rings unused.
pub const DESTROY_QP: u16 = 0x000c;
/// A queue pair's state and counters.
pub const QUERY_QP: u16 = 0x000d;
/// The device's counters.
pub const STATS: u16 = 0x000e;
/// Create a shared receive queue (its ring's memory file comes with the reply).
pub const CREATE_SRQ: u16 = 0x000f;
/// Destroy a shared receive queue.
pub const DESTROY_SRQ: u16 = 0x0010;
/// Allocate a memory window.
pub const ALLOC_MW: u16 = 0x0011;
/// Deallocate a memory window.
pub const DEALLOC_MW: u16 = 0x0012;
/// Bind a type 1 memory window.
pub const BIND_MW: u16 = 0x0013;
/// Invalidate a window or a fast-registration region.
pub const INVALIDATE: u16 = 0x0014;
/// Allocate a region for fast registration (one memory file attached).
pub const ALLOC_FAST_REG_MR: u16 = 0x0015;
/// Change one setting of a queue pair ([`QpChange`](super::QpChange)).
pub const MODIFY_QP: u16 = 0x0016;
/// Reserve an STag for a queued registration: it names a pending region until
/// [`REG_MR_AT`] registers memory under it (seed 003's pipelined registration).
pub const RESERVE_STAG: u16 = 0x0017;
/// Register a memory region under a reserved STag (one memory file attached). The
/// client does not wait for the reply before naming the STag in work requests.
pub const REG_MR_AT: u16 = 0x0018;
/// The device's limits and settings (what `ibv_query_device` answers).
pub const QUERY_DEVICE: u16 = 0x0019;
/// The counters of the daemon's other services (its built-in remote-memory target).
pub const SERVICE_STATS: u16 = 0x001a;
/// A page of every queue pair the daemon holds, whoever's (`iwarpd stat --qps`).
pub const LIST_QPS: u16 = 0x001b;
/// Share a queue pair's socket with its client, for the push path that skips the daemon
/// (the socket comes with the reply; the transmit share is in the queue pair's segment).
pub const SHARE_TX: u16 = 0x001c;
/// Set in a reply's function code.
pub const REPLY: u16 = 0x8000;
/// Event: a connection request arrived on a listener.
pub const EVENT_INCOMING: u16 = 0x4001;
/// Event: a queue pair ended.
pub const EVENT_QP_ENDED: u16 = 0x4002;

/// A request's name, for messages (its constant's name).
pub fn name(func: u16) -> &'static str {
    match func & !REPLY {
        OPEN => "OPEN",
        ALLOC_PD => "ALLOC_PD",
        DEALLOC_PD => "DEALLOC_PD",
        REG_MR => "REG_MR",
        DEREG_MR => "DEREG_MR",
        LISTEN => "LISTEN",
        CLOSE_LISTENER => "CLOSE_LISTENER",
        CONNECT => "CONNECT",
        ACCEPT => "ACCEPT",
        REJECT => "REJECT",
        DISCONNECT => "DISCONNECT",
        DESTROY_QP => "DESTROY_QP",
        QUERY_QP => "QUERY_QP",
        STATS => "STATS",
        CREATE_SRQ => "CREATE_SRQ",
        DESTROY_SRQ => "DESTROY_SRQ",
        ALLOC_MW => "ALLOC_MW",
        DEALLOC_MW => "DEALLOC_MW",
        BIND_MW => "BIND_MW",
        INVALIDATE => "INVALIDATE",
        ALLOC_FAST_REG_MR => "ALLOC_FAST_REG_MR",
        MODIFY_QP => "MODIFY_QP",
        RESERVE_STAG => "RESERVE_STAG",
        REG_MR_AT => "REG_MR_AT",
        QUERY_DEVICE => "QUERY_DEVICE",
        SERVICE_STATS => "SERVICE_STATS",
        LIST_QPS => "LIST_QPS",
        SHARE_TX => "SHARE_TX",
        EVENT_INCOMING => "EVENT_INCOMING",
        EVENT_QP_ENDED => "EVENT_QP_ENDED",
        _ => "an unknown request",
    }
}
