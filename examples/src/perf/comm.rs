//! The side channel: perftest's first rdma_cm connection, over which every exchange
//! is one Send each way (the client sends first, the server answers).

use std::time::Duration;

use bytes::Bytes;
use verbs::{Access, Cq, Mr, Pd, Qp, QpConfig, RecvWr, WcStatus};

use super::{Error, step};

/// Receive slot size: the largest message is 56 octets.
const SLOT: usize = 64;
/// Receive slots kept posted.
const SLOTS: u64 = 2;

/// Which side of the exchange we are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Side {
    /// Sends first, then receives.
    Client,
    /// Receives first, then answers.
    Server,
}

/// The side channel's QP with its receive buffers.
#[derive(Debug)]
pub struct Comm {
    qp: Option<Qp>,
    cq: Cq,
    inbox: Mr,
    side: Side,
    timeout: Duration,
}

impl Comm {
    /// Allocates the receive buffers and returns the QP configuration to connect or
    /// accept with (receives pre-posted, as perftest does).
    pub fn prepare(
        pd: &Pd,
        cq: Cq,
        side: Side,
        timeout: Duration,
    ) -> Result<(Self, QpConfig), Error> {
        let inbox = pd.alloc_mr(SLOT * SLOTS as usize, Access::LOCAL_WRITE)?;
        let mut cfg = QpConfig::new(&cq);
        for slot in 0..SLOTS {
            cfg = cfg.recv(recv_wr(&inbox, slot));
        }
        let comm = Self {
            qp: None,
            cq,
            inbox,
            side,
            timeout,
        };
        Ok((comm, cfg))
    }

    /// Attaches the connected QP.
    pub fn attach(&mut self, qp: Qp) {
        self.qp = Some(qp);
    }

    /// The connected QP.
    pub fn qp(&self) -> Result<&Qp, Error> {
        self.qp
            .as_ref()
            .ok_or_else(|| "side channel not connected".into())
    }

    /// One exchange: sends `mine` and returns what the peer sent, in the side's order.
    pub async fn xchg(&self, mine: &[u8], what: &str) -> Result<Vec<u8>, Error> {
        self.xchg_within(mine, what, self.timeout).await
    }

    /// [`Self::xchg`] with its own receive timeout (the server waits for the end of
    /// the test this way).
    pub async fn xchg_within(
        &self,
        mine: &[u8],
        what: &str,
        timeout: Duration,
    ) -> Result<Vec<u8>, Error> {
        match self.side {
            Side::Client => {
                self.send(mine, what).await?;
                self.recv(what, timeout).await
            }
            Side::Server => {
                let got = self.recv(what, timeout).await?;
                self.send(mine, what).await?;
                Ok(got)
            }
        }
    }

    /// Sends one message (half of an exchange; the server's half after [`Self::recv`]).
    pub async fn send(&self, data: &[u8], what: &str) -> Result<(), Error> {
        let qp = self.qp()?;
        step(
            self.timeout,
            &format!("the {what} Send"),
            qp.send(Bytes::copy_from_slice(data)),
        )
        .await??;
        Ok(())
    }

    /// Receives one message, waiting at most `timeout` (half of an exchange).
    pub async fn recv(&self, what: &str, timeout: Duration) -> Result<Vec<u8>, Error> {
        let qp = self.qp()?;
        let wc = step(timeout, &format!("the peer's {what}"), self.cq.next()).await??;
        if wc.wc.status != WcStatus::Success {
            return Err(format!("{what}: receive completed with {:?}", wc.wc.status).into());
        }
        let slot = wc.wc.wr_id % SLOTS;
        let at = slot as usize * SLOT;
        let len = (wc.wc.byte_len as usize).min(SLOT);
        let data = self.inbox.read(at..at + len)?;
        qp.post_recv(recv_wr(&self.inbox, slot))?;
        Ok(data)
    }
}

fn recv_wr(inbox: &Mr, slot: u64) -> RecvWr {
    let at = slot as usize * SLOT;
    RecvWr {
        wr_id: slot,
        sgl: [inbox.local(at..at + SLOT)].into(),
    }
}
