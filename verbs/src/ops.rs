//! The async methods of [`Qp`]: one work request each, whose completion goes to the
//! returned future instead of a completion queue.
//!
//! Every method posts when its future is **first polled**, not when it is called. A
//! request, once posted, runs to completion whether or not the future is still there.

use std::ops::RangeBounds;

use bytes::Bytes;
use rdmap::{
    Access, Completion, Payload, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, Sgl,
    WcOpcode,
};

use crate::error::{MemError, WcError};
use crate::mr::Mr;
use crate::mw::Mw;
use crate::qp::Qp;

/// The outcome of a request whose completion was routed to `rx`.
async fn finish(rx: cq::CompletionFuture) -> Result<Completion, WcError> {
    let wc = rx.await;
    if wc.is_ok() {
        Ok(wc)
    } else {
        Err(WcError::Failed(Box::new(wc)))
    }
}

/// The original value an Atomic returned (a completion without one is a failure).
fn original(wc: Completion) -> Result<u64, WcError> {
    match wc.atomic_orig {
        Some(v) => Ok(v),
        None => Err(WcError::Failed(Box::new(wc))),
    }
}

impl Qp {
    /// Posts one send-queue operation with `flags` (made signaled) and waits for its
    /// completion: the general form of the methods below.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: once first polled, the request is posted and runs even if the
    /// future is dropped; its completion is then discarded (it does not go to the CQ).
    pub async fn exec(&self, op: SendOp, flags: SendFlags) -> Result<Completion, WcError> {
        let code = op.wc_opcode();
        let wr = SendWr {
            wr_id: 0,
            op,
            flags,
        };
        let rx = self
            .inner
            .qp
            .post_send_notify(wr)
            .map_err(|error| WcError::Post { op: code, error })?;
        finish(rx).await
    }

    /// Sends `data` into the peer's next posted receive buffer.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)): once first polled, the message goes out
    /// even if the future is dropped.
    pub async fn send(&self, data: Bytes) -> Result<Completion, WcError> {
        self.send_variant(Payload::Bytes(data), None, None).await
    }

    /// Sends the octets of a gather list of local regions (read with local-read access
    /// when the message is transmitted) as one message.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn send_sgl(&self, sgl: impl Into<Sgl>) -> Result<Completion, WcError> {
        self.send_variant(Payload::Sgl(sgl.into()), None, None)
            .await
    }

    /// Sends `data` and asks the peer to invalidate `invalidate`, one of its STags it
    /// handed to this side for one use: a type 2 window bound to the peer's queue pair, or
    /// a fast-registration region. The peer's receive completion names the STag
    /// ([`Completion::invalidated`]). A STag the peer may not invalidate this way ends the
    /// connection with a Terminate.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn send_with_invalidate(
        &self,
        data: Bytes,
        invalidate: STag,
    ) -> Result<Completion, WcError> {
        self.send_variant(Payload::Bytes(data), Some(invalidate), None)
            .await
    }

    /// Send with Immediate Data (this stack's extension, seed 003): `data` lands in the
    /// peer's next posted receive buffer and `imm` arrives with it in the receive
    /// completion ([`Completion::immediate`]), one message, one receive consumed even for
    /// empty `data`. Needs a peer that agreed ([`Qp::extensions`] has
    /// [`Extensions::SEND_IMMEDIATE`](crate::Extensions::SEND_IMMEDIATE)); on any other
    /// connection it fails with a [`LocalQpOperation`](rdmap::WcStatus::LocalQpOperation)
    /// completion and nothing is sent. For the solicited variants post
    /// [`SendOp::Send`] with [`SendFlags::SOLICITED`] through [`exec`](Self::exec).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn send_imm(&self, data: Bytes, imm: u32) -> Result<Completion, WcError> {
        self.send_variant(Payload::Bytes(data), None, Some(imm))
            .await
    }

    /// Send with Invalidate and Immediate Data: [`send_imm`](Self::send_imm) that also
    /// asks the peer to invalidate `invalidate`, as
    /// [`send_with_invalidate`](Self::send_with_invalidate) does; the peer's completion
    /// carries both.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn send_imm_with_invalidate(
        &self,
        data: Bytes,
        imm: u32,
        invalidate: STag,
    ) -> Result<Completion, WcError> {
        self.send_variant(Payload::Bytes(data), Some(invalidate), Some(imm))
            .await
    }

    /// Delay (seed 004): the requests posted after this one on this queue pair wait until
    /// `duration` has passed from the moment the Delay reached the head of the send queue,
    /// to meter what goes on the wire; other queue pairs carry on. Completes when the time
    /// has passed. Nothing goes on the wire, so any peer works. A Delay longer than the
    /// connection's stall timeout ([`DeviceConfig::stall_timeout`](crate::DeviceConfig::stall_timeout))
    /// ends the connection as stalled, since work is outstanding and nothing moves.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)): later requests are held all the same.
    pub async fn delay(&self, duration: std::time::Duration) -> Result<Completion, WcError> {
        self.exec(SendOp::Delay { duration }, SendFlags::NONE).await
    }

    /// Sends 8 octets of Immediate Data (RFC 7306): they arrive in the peer's receive
    /// completion ([`Completion::immediate`]), consuming a posted receive but placing
    /// nothing.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn send_immediate(&self, data: u64) -> Result<Completion, WcError> {
        self.exec(SendOp::Immediate { data }, SendFlags::NONE).await
    }

    /// RDMA Write of `data` to the peer's `dst` (at most `dst.len` octets). Completes once
    /// the socket took the octets; a later Read or Send on this queue pair reaches the peer
    /// after them.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn write(&self, data: Bytes, dst: RemoteBuf) -> Result<Completion, WcError> {
        self.exec(
            SendOp::Write {
                data: Payload::Bytes(data),
                dst,
            },
            SendFlags::NONE,
        )
        .await
    }

    /// RDMA Read of the peer's `src` into local memory `dst` (a region with
    /// [`Access::LOCAL_WRITE`], at least `src.len` octets): `qp.read(src, &mr)` or
    /// `qp.read(src, mr.local(0..n))`. Completes once the data has been placed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)): the data still lands in `dst`.
    pub async fn read(&self, src: RemoteBuf, dst: impl Into<Sge>) -> Result<Completion, WcError> {
        let dst = dst.into();
        self.exec(SendOp::Read { src, dst }, SendFlags::NONE).await
    }

    /// RDMA Read V2 of the peer's `src` into a scatter list of local memory, filled in
    /// order: `qp.read_sgl(src, [a.local(..100), b.local(..))])`. The sink never goes on
    /// the wire, so it may span regions. Needs a peer that agreed to Read V2
    /// ([`Qp::extensions`]); on any other connection it fails with
    /// [`LocalQpOperation`](rdmap::WcStatus::LocalQpOperation) and nothing is sent.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)): the data still lands in `dst`.
    pub async fn read_sgl(
        &self,
        src: RemoteBuf,
        dst: impl Into<Sgl>,
    ) -> Result<Completion, WcError> {
        let dst = dst.into();
        self.exec(SendOp::ReadSgl { src, dst }, SendFlags::NONE)
            .await
    }

    /// Atomic Fetch-and-Add (RFC 7306) on the peer's 8-aligned 8 octets at `dst`
    /// (little-endian in its memory): adds `add` and returns the original value.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)): the peer's value is changed all the
    /// same.
    pub async fn fetch_add(&self, dst: RemoteBuf, add: u64) -> Result<u64, WcError> {
        let op = WcOpcode::FetchAdd;
        let result = self.scratch(op)?;
        let wc = self
            .exec(
                SendOp::FetchAdd {
                    dst,
                    add,
                    mask: 0,
                    result,
                },
                SendFlags::NONE,
            )
            .await?;
        original(wc)
    }

    /// Atomic Compare-and-Swap (RFC 7306) on the peer's 8-aligned 8 octets at `dst`:
    /// writes `swap` if they equal `compare`, and returns the original value (equal to
    /// `compare` when the swap happened).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn cmp_swap(&self, dst: RemoteBuf, compare: u64, swap: u64) -> Result<u64, WcError> {
        let op = WcOpcode::CmpSwap;
        let result = self.scratch(op)?;
        let wc = self
            .exec(
                SendOp::CmpSwap {
                    dst,
                    compare,
                    compare_mask: u64::MAX,
                    swap,
                    swap_mask: u64::MAX,
                    result,
                },
                SendFlags::NONE,
            )
            .await?;
        original(wc)
    }

    /// Posts a receive buffer `dst` (a region with [`Access::LOCAL_WRITE`]) and waits for
    /// the message that lands in it: `qp.recv(&mr)` or `qp.recv(mr.local(0..n))`. The
    /// completion gives its length ([`Completion::byte_len`]); read the octets with
    /// [`Mr::read`].
    ///
    /// # Cancel safety
    ///
    /// **Not cancel safe**: once first polled, the buffer is posted and cannot be taken
    /// back. If the future is dropped, the next message still lands in the buffer, but
    /// its completion is discarded, so the application never learns of it.
    pub async fn recv(&self, dst: impl Into<Sge>) -> Result<Completion, WcError> {
        self.recv_sgl(dst.into()).await
    }

    /// Posts a receive that scatters one message over `sgl`, in order, and waits for it.
    ///
    /// # Cancel safety
    ///
    /// **Not cancel safe** (see [`recv`](Self::recv)).
    pub async fn recv_sgl(&self, sgl: impl Into<Sgl>) -> Result<Completion, WcError> {
        let op = WcOpcode::Recv;
        let sgl = sgl.into();
        let rx = self
            .inner
            .qp
            .post_recv_notify(RecvWr { wr_id: 0, sgl })
            .map_err(|error| WcError::Post { op, error })?;
        finish(rx).await
    }

    /// Binds the **type 2** window `mw` to octets `range` of `mr` with `access`, on this
    /// queue pair, and returns the window as the peer names it. Only this queue pair (and
    /// so only its peer) can use the window; the peer may invalidate it with a Send with
    /// Invalidate ([`send_with_invalidate`](Self::send_with_invalidate)).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)): the window is bound all the same.
    pub async fn bind_mw(
        &self,
        mw: &Mw,
        mr: &Mr,
        range: impl RangeBounds<usize>,
        access: Access,
    ) -> Result<RemoteBuf, WcError> {
        let (op, remote) = self
            .check_pd(WcOpcode::Bind, mw.pd(), mw.stag())
            .and_then(|()| {
                mw.bind_op(mr, range, access).map_err(|error| WcError::Mem {
                    op: WcOpcode::Bind,
                    error,
                })
            })?;
        self.exec(op, SendFlags::NONE).await?;
        Ok(remote)
    }

    /// Fast-registers `mr` (from [`Pd::alloc_fast_reg_mr`](crate::Pd::alloc_fast_reg_mr))
    /// for tagged offsets `[to, to + len)` with `access`, on this queue pair, and returns
    /// it as the peer names it (see [`Mr::fast_reg_op`]).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)): the region is registered all the same.
    pub async fn fast_register(
        &self,
        mr: &Mr,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<RemoteBuf, WcError> {
        let (reg, remote) = self.fast_reg(WcOpcode::FastRegister, mr, to, len, access)?;
        self.exec(SendOp::FastRegister(reg), SendFlags::NONE)
            .await?;
        Ok(remote)
    }

    /// Seed 001's combined register-and-send: fast-registers `[to, to + len)` of `mr`
    /// with `access` and sends the message `message` builds from the new
    /// [`RemoteBuf`] (usually its [`encode`](RemoteBuf::encode)d form), as one request
    /// with one completion. The peer gives the region back with
    /// [`send_with_invalidate`](Self::send_with_invalidate), which invalidates it here.
    /// A registration that fails sends nothing: the request fails with a
    /// [`LocalProtection`](rdmap::WcStatus::LocalProtection) completion, and the queue
    /// pair ends or drains its send queue as
    /// [`set_drain_on_local_failure`](Self::set_drain_on_local_failure) says.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn register_and_send(
        &self,
        mr: &Mr,
        to: u64,
        len: usize,
        access: Access,
        message: impl FnOnce(&RemoteBuf) -> Bytes,
    ) -> Result<RemoteBuf, WcError> {
        let (reg, remote) = self.fast_reg(WcOpcode::Send, mr, to, len, access)?;
        let data = Payload::Bytes(message(&remote));
        self.exec(SendOp::RegisterSend { reg, data }, SendFlags::NONE)
            .await?;
        Ok(remote)
    }

    /// Local Invalidate of `stag` (a fast-registration region or a type 2 window of this
    /// queue pair), ordered with the other requests of the send queue.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (see [`exec`](Self::exec)).
    pub async fn local_invalidate(&self, stag: STag) -> Result<Completion, WcError> {
        self.exec(SendOp::LocalInvalidate { stag }, SendFlags::NONE)
            .await
    }

    /// A Send of `data`, the variant `invalidate` and `immediate` choose.
    async fn send_variant(
        &self,
        data: Payload,
        invalidate: Option<STag>,
        immediate: Option<u32>,
    ) -> Result<Completion, WcError> {
        let op = SendOp::Send {
            data,
            invalidate,
            immediate,
        };
        self.exec(op, SendFlags::NONE).await
    }

    /// The fast registration of `[to, to + len)` of `mr` (of this queue pair's domain)
    /// for a request reporting `op`, and the region as the peer will name it.
    fn fast_reg(
        &self,
        op: WcOpcode,
        mr: &Mr,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<(rdmap::FastReg, RemoteBuf), WcError> {
        self.check_pd(op, mr.pd(), mr.stag())?;
        mr.fast_reg(to, len, access)
            .map_err(|error| WcError::Mem { op, error })
    }

    /// The 8-octet sink for Atomic results, allocated on first use.
    fn scratch(&self, op: WcOpcode) -> Result<Sge, WcError> {
        if let Some(mr) = self.inner.scratch.get() {
            return Ok(mr.local(..));
        }
        let mr = self
            .inner
            .pd
            .alloc_mr(8, Access::LOCAL_WRITE)
            .map_err(|error| WcError::Mem { op, error })?;
        Ok(self.inner.scratch.get_or_init(|| mr).local(..))
    }

    fn check_pd(&self, op: WcOpcode, pd: &crate::Pd, stag: STag) -> Result<(), WcError> {
        if pd.same(&self.inner.pd) {
            Ok(())
        } else {
            Err(WcError::Mem {
                op,
                error: MemError::WrongDomain { stag },
            })
        }
    }
}
