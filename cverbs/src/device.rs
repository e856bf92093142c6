//! The one device, `iwarp0`: the device list, its open contexts (opening and closing one
//! is `open`), and its attributes, ports and GIDs, as `ibv_devices` and `ibv_devinfo`
//! read them; and each context's asynchronous events (`async_events`).
//!
//! The device stands for this host's iWARP stack on its primary interface (the first one
//! up, not loopback, with an IPv4 address; loopback if there is none, or the one
//! `IWARP_IFACE` names). Its GID is that address, IPv4-mapped (`::ffff:a.b.c.d`), and its
//! node GUID that interface's MAC address, as siw makes them.

use std::ffi::CStr;
use std::sync::{Arc, OnceLock};

use libc::{c_char, c_int, c_uint};

use crate::abi::*;
use crate::errors::{Errno, set_errno};
use crate::iface::Iface;
use crate::live::Live;

/// The device's name in the list.
pub const NAME: &str = "iwarp0";

/// The depth of every queue pair's send and receive queues (`max_qp_wr`): C programs
/// size their queues up front (perftest posts 512 receives at once).
pub const QUEUE_DEPTH: usize = 4096;

/// The device and what it was made from.
#[derive(Debug)]
pub(crate) struct Device {
    /// What C programs see (first, so that a pointer to it is a pointer to this).
    pub(crate) ibv: ibv_device,
    pub(crate) iface: Iface,
}

// SAFETY: the raw pointers in `ibv_device` are two unused slots, always null; nothing
// else in `Device` is tied to a thread.
unsafe impl Send for Device {}
// SAFETY: as above; the device is never written after it is made.
unsafe impl Sync for Device {}

/// The device, made on first use and never freed (rdma-core's devices live as long as
/// the library, too).
pub(crate) fn device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        if let Ok(filter) = std::env::var("IWARP_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let iface = Iface::primary();
        let mut ibv = ibv_device {
            _ops: _ibv_device_ops {
                _dummy1: std::ptr::null_mut(),
                _dummy2: std::ptr::null_mut(),
            },
            node_type: IBV_NODE_RNIC,
            transport_type: IBV_TRANSPORT_IWARP,
            name: [0; IBV_SYSFS_NAME_MAX],
            dev_name: [0; IBV_SYSFS_NAME_MAX],
            dev_path: [0; IBV_SYSFS_PATH_MAX],
            ibdev_path: [0; IBV_SYSFS_PATH_MAX],
        };
        copy_str(&mut ibv.name, NAME);
        copy_str(&mut ibv.dev_name, "uverbs-iwarp0");
        // No sysfs class device exists: these name where one would be, and
        // `ibv_read_sysfs_file` answers for them (see `sysfs`).
        copy_str(
            &mut ibv.dev_path,
            "/sys/class/infiniband_verbs/uverbs-iwarp0",
        );
        copy_str(&mut ibv.ibdev_path, "/sys/class/infiniband/iwarp0");
        Device { ibv, iface }
    })
}

/// Copies `s` into the C string `dst`, cut to fit with its NUL.
pub(crate) fn copy_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

/// The device behind `dev`, if it is this library's.
pub(crate) fn ours(dev: *const ibv_device) -> Option<&'static Device> {
    let d = device();
    std::ptr::eq(dev, &d.ibv).then_some(d)
}

/// The contexts open now.
pub(crate) static CONTEXTS: Live<Context> = Live::new();

/// An open device, as `ibv_open_device` returns it.
#[repr(C)]
pub(crate) struct Context {
    /// What C programs see (first, so that a pointer to it is a pointer to this).
    pub(crate) ibv: ibv_context,
    /// The stack: the engine in this process, or the local iwarpd `IWARP_DEVICE` names,
    /// as the Rust library chooses.
    pub(crate) device: verbs::Device,
    /// Protection domains allocated on it and not freed: it is not closed while any is.
    pub(crate) domains: std::sync::atomic::AtomicUsize,
    /// Its asynchronous events (`async_fd`).
    pub(crate) events: crate::async_events::AsyncEvents,
}

// SAFETY: the raw pointers in `ibv_context` are addresses handed to C (the device, which
// lives for good); Rust never writes through them, and `verbs::Device` is Send and Sync.
// The mutex is rdma-core's field for C; this library never locks it.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

/// The context behind `ctx`, if it is open.
pub(crate) fn context(ctx: *const ibv_context) -> Result<Arc<Context>, Errno> {
    CONTEXTS.get(ctx).ok_or(Errno::EINVAL)
}

/// The device's attributes: its limits are the stack's (`verbs::Device::query`); a limit
/// the stack does not have is reported as a large one.
fn attributes(d: &Device, stack: &verbs::DeviceAttr) -> ibv_device_attr {
    let mut fw_ver = [0; 64];
    copy_str(&mut fw_ver, stack.version);
    let guid = d.iface.guid();
    let int = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    let or = |v: Option<u32>, none: u32| int(v.unwrap_or(none));
    let sge = match (stack.max_send_sge, stack.max_recv_sge) {
        (Some(s), Some(r)) => Some(s.min(r)),
        (s, r) => s.or(r),
    };
    let sge = or(sge, 32);
    ibv_device_attr {
        fw_ver,
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: 4096,
        // "iwp": no vendor; siw reports "bmt" the same way.
        vendor_id: 0x0069_7770,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: or(stack.max_qp, 65536),
        max_qp_wr: int(stack.max_qp_wr),
        device_cap_flags: 0,
        max_sge: sge,
        max_sge_rd: sge,
        max_cq: or(stack.max_qp, 65536),
        max_cqe: 1 << 20,
        max_mr: or(stack.max_mr, 1 << 20),
        max_pd: or(stack.max_qp, 65536),
        max_qp_rd_atom: c_int::from(stack.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: c_int::from(stack.max_qp_rd_atom) * or(stack.max_qp, 65536).min(1024),
        max_qp_init_rd_atom: c_int::from(stack.max_qp_init_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: if stack.atomics { IBV_ATOMIC_HCA } else { 0 },
        max_ee: 0,
        max_rdd: 0,
        max_mw: or(stack.max_mr, 1 << 20),
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 0,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: or(stack.max_srq, 65536),
        max_srq_wr: int(stack.max_recv_wr),
        max_srq_sge: sge,
        max_pkeys: 1,
        local_ca_ack_delay: 0,
        phys_port_cnt: 1,
    }
}

/// Port 1's attributes.
fn port(d: &Device) -> ibv_port_attr {
    let mtu = mtu_enum(d.iface.mtu);
    ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: mtu,
        active_mtu: mtu,
        gid_tbl_len: 1,
        // IB_PORT_CM_SUP | IB_PORT_DEVICE_MGMT_SUP, as siw.
        port_cap_flags: (1 << 16) | (1 << 19),
        max_msg_sz: u32::MAX,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        active_width: 1,
        // IBV_SPEED_SDR: the speed of a software device is its processor's.
        active_speed: 1,
        // IB_PORT_PHYS_STATE_LINK_UP.
        phys_state: 5,
        link_layer: IBV_LINK_LAYER_ETHERNET,
        ..Default::default()
    }
}

/// `enum ibv_mtu` for an interface MTU (the largest IB MTU that fits, as siw reports).
pub(crate) fn mtu_enum(mtu: u32) -> c_int {
    match mtu {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        _ => 1,
    }
}

/// `ibv_get_device_list`: the one device. `num`, if not null, gets the count.
///
/// # Safety
/// `num` is null or points to an `int` the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let dev = &device().ibv as *const ibv_device as *mut ibv_device;
    // SAFETY: calloc of two pointers; the list is freed by `ibv_free_device_list` with
    // free(3), so a program that frees it with free(3) itself is not wrong either.
    let list = unsafe { libc::calloc(2, size_of::<*mut ibv_device>()) } as *mut *mut ibv_device;
    if list.is_null() {
        set_errno(Errno::ENOMEM);
        return list;
    }
    // SAFETY: `list` has room for two pointers (calloc above); the second stays null.
    unsafe { *list = dev };
    if !num.is_null() {
        // SAFETY: the caller's `int`, per this function's contract.
        unsafe { *num = 1 };
    }
    list
}

/// `ibv_free_device_list`.
///
/// # Safety
/// `list` is null or was returned by [`ibv_get_device_list`] and not freed since.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: calloc'd by `ibv_get_device_list` (or null, which free ignores).
    unsafe { libc::free(list.cast()) };
}

/// `ibv_get_device_name`: `iwarp0`, or null for a device that is not this library's.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    match ours(dev) {
        Some(d) => d.ibv.name.as_ptr(),
        None => {
            set_errno(Errno::EINVAL);
            std::ptr::null()
        }
    }
}

/// `ibv_get_device_guid`: the node GUID, big-endian (0 for a device not this library's).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    ours(dev).map_or(0, |d| d.iface.guid())
}

/// `ibv_query_device`.
///
/// # Safety
/// `attr` points to a `struct ibv_device_attr` the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    let Ok(c) = context(ctx) else {
        return Errno::EINVAL.code();
    };
    if attr.is_null() {
        return Errno::EINVAL.code();
    }
    let stack = match c.device.query() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("iwarp verbs: ibv_query_device: {e}");
            return Errno::EIO.code();
        }
    };
    // SAFETY: the caller's struct, per this function's contract.
    unsafe { attr.write(attributes(device(), &stack)) };
    0
}

/// `ibv_query_port` (rdma-core's exported one, which writes the compatible prefix of
/// `struct ibv_port_attr`).
///
/// # Safety
/// `attr` points to at least [`COMPAT_PORT_ATTR_LEN`] writable octets.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    if context(ctx).is_err() || port_num != 1 || attr.is_null() {
        return Errno::EINVAL.code();
    }
    let p = port(device());
    // SAFETY: `p` is a whole `ibv_port_attr`, of which the first COMPAT_PORT_ATTR_LEN
    // octets are copied into the caller's buffer of at least that many (the contract).
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&p as *const ibv_port_attr).cast::<u8>(),
            attr.cast::<u8>(),
            COMPAT_PORT_ATTR_LEN,
        )
    };
    0
}

/// `ibv_query_gid`: index 0 of port 1, the interface's address.
///
/// # Safety
/// `gid` points to a `union ibv_gid` the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    if context(ctx).is_err() || port_num != 1 || index != 0 || gid.is_null() {
        return Errno::EINVAL.fail();
    }
    // SAFETY: the caller's union, per this function's contract.
    unsafe { gid.write(device().iface.gid()) };
    0
}

/// `_ibv_query_gid_ex` (behind the headers' inline `ibv_query_gid_ex`).
///
/// # Safety
/// `entry` points to `entry_size` writable octets.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    if context(ctx).is_err() || port_num != 1 || flags != 0 || entry.is_null() {
        return Errno::EINVAL.code();
    }
    if gid_index != 0 {
        return Errno::ENODATA.code();
    }
    if entry_size < size_of::<ibv_gid_entry>() {
        return Errno::EINVAL.code();
    }
    let d = device();
    let e = ibv_gid_entry {
        gid: d.iface.gid(),
        gid_index: 0,
        port_num: 1,
        gid_type: IBV_GID_TYPE_IB,
        ndev_ifindex: d.iface.index,
    };
    // SAFETY: the caller's entry of at least `size_of::<ibv_gid_entry>()` octets (checked).
    unsafe { entry.write(e) };
    0
}

/// `ibv_query_gid_type` (rdma-core's private symbol, which `ibv_devinfo` calls).
///
/// # Safety
/// `kind` points to an `enum ibv_gid_type_sysfs` the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    kind: *mut c_int,
) -> c_int {
    if context(ctx).is_err() || port_num != 1 || index != 0 || kind.is_null() {
        return Errno::EINVAL.fail();
    }
    // SAFETY: the caller's enum, per this function's contract.
    unsafe { kind.write(IBV_GID_TYPE_SYSFS_IB_ROCE_V1) };
    0
}

/// `ibv_query_pkey`: the one default P_Key.
///
/// # Safety
/// `pkey` points to a `__be16` the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if context(ctx).is_err() || port_num != 1 || index != 0 || pkey.is_null() {
        return Errno::EINVAL.fail();
    }
    // SAFETY: the caller's `__be16`, per this function's contract.
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

/// `ibv_read_sysfs_file`: what the device's sysfs files would hold (`node_type`,
/// `board_id`, ...), for programs that read them; -1 for anything else, as for a file
/// that does not exist.
///
/// # Safety
/// `dir` and `file` are C strings; `buf` has `size` writable octets.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        return -1;
    }
    // SAFETY: C strings, per this function's contract.
    let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    let (Ok(dir), Ok(file)) = (dir.to_str(), file.to_str()) else {
        return -1;
    };
    let d = device();
    let ours = [&d.ibv.ibdev_path, &d.ibv.dev_path]
        .iter()
        // SAFETY: the device's paths are NUL-terminated (copy_str).
        .any(|p| unsafe { CStr::from_ptr(p.as_ptr()) }.to_str() == Ok(dir));
    let value = match (ours, file) {
        (true, "node_type") => "4: RNIC".to_owned(),
        (true, "board_id") => "iWARP over TCP (software)".to_owned(),
        (true, "fw_ver") => env!("CARGO_PKG_VERSION").to_owned(),
        (true, "ibdev") => NAME.to_owned(),
        (true, "abi_version") => "1".to_owned(),
        // The network device behind GID 0, as rdma-core looks it up.
        (true, "ports/1/gid_attrs/ndevs/0") => d.iface.name.clone(),
        _ => return -1,
    };
    // SAFETY: the caller's buffer of `size` octets; at most size - 1 and a NUL go in.
    let out = unsafe { std::slice::from_raw_parts_mut(buf, size) };
    copy_str(out, &value);
    value.len().min(size - 1) as c_int
}

/// `ibv_get_async_event`: the context's oldest event, waiting for one unless its
/// `async_fd` is non-blocking (then -1 and `EAGAIN`).
///
/// # Safety
/// `event` points to the caller's structure.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    let Ok(c) = context(ctx) else {
        return Errno::EINVAL.fail();
    };
    if event.is_null() {
        return Errno::EINVAL.fail();
    }
    let Some(ev) = c.events.take() else {
        return -1; // errno set: read(2)'s (EAGAIN, EINTR), or EINVAL
    };
    // SAFETY: the caller's structure, per this function's contract.
    unsafe { event.write(ev) };
    0
}

/// `ibv_ack_async_event`: an event here owns nothing, and destroying the object it names
/// does not wait for its acknowledgement (the object lives while the library uses it).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}

impl Iface {
    /// The GID: the address, IPv4-mapped.
    pub(crate) fn gid(&self) -> ibv_gid {
        ibv_gid {
            raw: self.addr.to_ipv6_mapped().octets(),
        }
    }

    /// The node GUID, big-endian: the MAC address in the low six octets (siw's form), or
    /// for an interface without one (loopback) the address.
    pub(crate) fn guid(&self) -> u64 {
        let mut g = [0u8; 8];
        match self.mac {
            Some(mac) => g[2..].copy_from_slice(&mac),
            None => g[4..].copy_from_slice(&self.addr.octets()),
        }
        u64::from_ne_bytes(g)
    }
}
