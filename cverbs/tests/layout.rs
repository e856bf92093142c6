//! The library's C structures against rdma-core's installed headers (libibverbs-dev):
//! a C program compiled here against `<infiniband/verbs.h>` prints the size of each
//! structure and the offset of each field, and each must equal this crate's.

use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::process::Command;

use cverbs::abi::*;

/// (C type, Rust size, [(field, Rust offset)]) for every structure the library shares.
macro_rules! layouts {
    ($($c:literal $t:ident { $($f:ident),* $(,)? })*) => {
        vec![$(($c, size_of::<$t>(), vec![$((stringify!($f), offset_of!($t, $f))),*])),*]
    };
}

#[test]
fn every_structure_matches_the_installed_headers() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        let fix = "apt-get install -y libibverbs-dev gcc";
        assert!(
            std::env::var_os("IWARP_RDMA_CORE_REQUIRED").is_none(),
            "no <infiniband/verbs.h>: {fix}"
        );
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED: no <infiniband/verbs.h>: {fix}");
        return;
    }
    let ours = layouts! {
        "struct _ibv_device_ops" _ibv_device_ops { _dummy1, _dummy2 }
        "struct ibv_device" ibv_device {
            _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
        }
        "struct ibv_context_ops" ibv_context_ops {
            _compat_query_device, alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq,
            post_srq_recv, post_send, post_recv, _compat_async_event,
        }
        "struct ibv_context" ibv_context {
            device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat,
        }
        "struct ibv_device_attr" ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge,
            max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
            max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee,
            max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp,
            max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr,
            max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys,
            local_ca_ack_delay, phys_port_cnt,
        }
        "struct ibv_port_attr" ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
            bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num,
            sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state,
            link_layer, flags, port_cap_flags2,
        }
        "union ibv_gid" ibv_gid { raw }
        "struct ibv_gid_entry" ibv_gid_entry {
            gid, gid_index, port_num, gid_type, ndev_ifindex,
        }
        "struct ibv_pd" ibv_pd { context, handle }
        "struct ibv_mr" ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        "struct ibv_comp_channel" ibv_comp_channel { context, fd, refcnt }
        "struct ibv_cq" ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed,
        }
        "struct ibv_srq_attr" ibv_srq_attr { max_wr, max_sge, srq_limit }
        "struct ibv_srq_init_attr" ibv_srq_init_attr { srq_context, attr }
        "struct ibv_srq" ibv_srq {
            context, srq_context, pd, handle, mutex, cond, events_completed,
        }
        "struct ibv_qp_cap" ibv_qp_cap {
            max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
        }
        "struct ibv_qp_init_attr" ibv_qp_init_attr {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
        }
        "struct ibv_qp_attr" ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
            dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, rate_limit,
        }
        "struct ibv_mw" ibv_mw { context, pd, rkey, handle }
        "struct ibv_mw_bind_info" ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        "struct ibv_mw_bind" ibv_mw_bind { wr_id, send_flags, bind_info }
        "struct ibv_send_wr" ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type, bind_mw,
        }
        "struct ibv_async_event" ibv_async_event { element, event_type }
        "struct ibv_wc" ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
            pkey_index, slid, sl, dlid_path_bits,
        }
    };

    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (ty, _, fields) in &ours {
        writeln!(c, "printf(\"{ty} %zu\\n\", sizeof({ty}));").unwrap();
        for (f, _) in fields {
            writeln!(c, "printf(\"{ty}.{f} %zu\\n\", offsetof({ty}, {f}));").unwrap();
        }
    }
    c.push_str("return 0; }\n");

    let dir = std::env::temp_dir().join(format!("cverbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, c).unwrap();
    let cc = Command::new("cc").arg(&src).arg("-o").arg(&exe).output();
    let cc = cc.expect("run cc (install a C compiler: apt-get install gcc)");
    assert!(
        cc.status.success(),
        "compiling against <infiniband/verbs.h> failed (install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let theirs = String::from_utf8(out.stdout).unwrap();
    std::fs::remove_dir_all(&dir).ok();

    let mut wrong = Vec::new();
    let mut lines = theirs.lines();
    for (ty, size, fields) in &ours {
        let expect = std::iter::once((ty.to_string(), *size))
            .chain(fields.iter().map(|(f, o)| (format!("{ty}.{f}"), *o)));
        for (name, value) in expect {
            let line = lines.next().unwrap_or_default();
            let c_value: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
            if c_value != value {
                wrong.push(format!("{name}: C {c_value}, Rust {value}"));
            }
        }
    }
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
}

/// The prefix the exported `ibv_query_port` writes ends where rdma-core's compatible
/// structure does, before `port_cap_flags2`.
#[test]
fn the_compatible_port_attributes_end_before_port_cap_flags2() {
    assert_eq!(COMPAT_PORT_ATTR_LEN, 48);
    assert_eq!(size_of::<ibv_port_attr>(), 52);
}
