//! The verbs and connection-manager calls that Debian's perftest, rping, ucmatose and
//! ibv_devinfo link against, and that this library does not carry out: each one is
//! exported (so those programs load), tells the user once which call it is and why, and
//! fails as rdma-core documents failure for it (a null pointer or an error number, with
//! errno `EOPNOTSUPP`). None of them takes an argument here: under the C calling
//! convention the caller's arguments are simply not read.

use libc::{c_int, c_void};

use crate::errors::unsupported;

/// Why, in a user's words.
const NOT_YET: &str = "this iWARP library does not carry it out yet (issue 34): it runs \
    queue pairs made by rdma_create_qp or rdma_create_ep, connected by the connection \
    manager";
/// Why, for a queue pair made outside the connection manager.
const CM_ONLY: &str = "an iWARP queue pair connects through the connection manager: make \
    it with rdma_create_qp on an rdma_cm_id";
/// Why, for what a connected transport does not have.
const NO_AH: &str = "iWARP is connected: it has no address handles or multicast";
/// Why, for rdma_xserver's shared receive queue (XRC).
const NO_XRC: &str = "it makes an XRC shared receive queue, which iWARP does not have: \
    make a shared receive queue with ibv_create_srq and pass it in rdma_create_qp's \
    attributes";
/// Why, for rsockets (rstream, riostream, rcopy, udpong).
const NO_RSOCKETS: &str = "rsockets (librdmacm's socket API over RDMA) are not carried \
    out by this library: use the verbs and the connection manager, or plain sockets";
/// Why, for a vendor's extension.
const NOT_OURS: &str = "it is a Mellanox ConnectX extension, not on this device";
/// Why, for Amazon's.
const NOT_EFA: &str = "it is an AWS EFA extension, not on this device";

/// Defines exported calls that fail: `null` for those returning a pointer, `code` for
/// those returning an error number, `minus` for those returning -1, `nothing` for void.
macro_rules! fail {
    (null: $($name:ident => $why:expr),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not supported (null, errno EOPNOTSUPP).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> *mut c_void {
            unsupported(stringify!($name), $why);
            std::ptr::null_mut()
        }
    )*};
    (code: $($name:ident => $why:expr),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not supported (EOPNOTSUPP).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> c_int {
            unsupported(stringify!($name), $why).0
        }
    )*};
    (minus: $($name:ident => $why:expr),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not supported (-1, errno EOPNOTSUPP).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> c_int {
            unsupported(stringify!($name), $why);
            -1
        }
    )*};
    (minus_long: $($name:ident => $why:expr),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not supported (-1, errno EOPNOTSUPP).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> isize {
            unsupported(stringify!($name), $why);
            -1
        }
    )*};
    (nothing: $($name:ident => $why:expr),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not supported (does nothing).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() {
            unsupported(stringify!($name), $why);
        }
    )*};
}

fail!(null:
    ibv_create_qp => CM_ONLY,
    ibv_qp_to_qp_ex => NOT_YET,
    ibv_create_ah => NO_AH,
    ibv_create_ah_from_wc => NO_AH,
    mlx5dv_qp_ex_from_ibv_qp_ex => NOT_OURS,
    mlx5dv_open_device => NOT_OURS,
    mlx5dv_create_qp => NOT_OURS,
    mlx5dv_create_mkey => NOT_OURS,
    mlx5dv_dek_create => NOT_OURS,
    efadv_create_qp_ex => NOT_EFA,
);

fail!(code:
    ibv_destroy_ah => NO_AH,
    ibv_attach_mcast => NO_AH,
    ibv_detach_mcast => NO_AH,
    mlx5dv_destroy_mkey => NOT_OURS,
    mlx5dv_devx_general_cmd => NOT_OURS,
    mlx5dv_crypto_login => NOT_OURS,
    mlx5dv_dek_destroy => NOT_OURS,
    efadv_query_device => NOT_EFA,
);

fail!(nothing:
    rdma_destroy_srq => NO_XRC,
);

fail!(minus:
    rdma_establish => CM_ONLY,
    rdma_create_qp_ex => NOT_YET,
    rdma_init_qp_attr => CM_ONLY,
    rdma_migrate_id => NOT_YET,
    rdma_create_srq => NO_XRC,
    rdma_join_multicast_ex => NO_AH,
    rdma_leave_multicast => NO_AH,
    rsocket => NO_RSOCKETS,
    rbind => NO_RSOCKETS,
    rlisten => NO_RSOCKETS,
    raccept => NO_RSOCKETS,
    rconnect => NO_RSOCKETS,
    rshutdown => NO_RSOCKETS,
    rclose => NO_RSOCKETS,
    rsetsockopt => NO_RSOCKETS,
    rgetsockopt => NO_RSOCKETS,
    rfcntl => NO_RSOCKETS,
    riounmap => NO_RSOCKETS,
);

// Those whose result is a length or an offset (ssize_t, size_t, off_t): -1 in all 64 bits.
fail!(minus_long:
    rrecv => NO_RSOCKETS,
    rsend => NO_RSOCKETS,
    rrecvfrom => NO_RSOCKETS,
    rsendto => NO_RSOCKETS,
    riomap => NO_RSOCKETS,
    riowrite => NO_RSOCKETS,
);
