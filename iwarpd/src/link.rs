//! A connection to the daemon's control socket, opened as a local application's: what
//! `iwarpd stat` and `iwarpd stat --qps` ask the daemon through.

use std::os::unix::net::UnixStream;
use std::path::Path;

use ipc::channel::{Inbox, send_all};
use ipc::control::{Reply, Request, func, reply_fds};

/// A connection to the daemon's control socket, opened as a local application's.
pub(crate) struct Link<'a> {
    sock: UnixStream,
    path: &'a Path,
    txn: u64,
}

impl<'a> Link<'a> {
    /// Connects to the daemon at `path` and opens the device.
    pub(crate) fn open(path: &'a Path) -> Result<Self, String> {
        let sock = UnixStream::connect(path).map_err(|e| {
            format!(
                "cannot reach iwarpd at {}: {e}. Is it running with this control socket? \
                 Pass the one it serves with --control PATH",
                path.display()
            )
        })?;
        let mut link = Self { sock, path, txn: 0 };
        link.call(&Request::Open {
            pid: std::process::id(),
        })?;
        Ok(link)
    }

    /// Sends `req` and returns its reply; a reply that is an error is `Err` with its text.
    pub(crate) fn call(&mut self, req: &Request) -> Result<Reply, String> {
        match self.ask(req)? {
            Reply::Error { text, .. } => Err(self.failed(text)),
            r => Ok(r),
        }
    }

    /// Sends `req` and returns its reply, errors included.
    pub(crate) fn ask(&mut self, req: &Request) -> Result<Reply, String> {
        use std::os::fd::AsFd;
        self.txn += 1;
        let txn = self.txn;
        send_all(self.sock.as_fd(), &req.encode(txn), &[])
            .map_err(|e| self.failed(e.to_string()))?;
        let mut inbox = Inbox::new();
        loop {
            while let Some(msg) = inbox
                .next(|h, body| reply_fds(h.func, body))
                .map_err(|e| self.failed(format!("{e:?}")))?
            {
                let h = msg.header;
                if h.func & func::REPLY == 0 || h.txn != txn {
                    continue;
                }
                return Reply::decode(h.func & !func::REPLY, &msg.body).map_err(|m| {
                    self.failed(format!(
                        "a reply this iwarpd cannot read ({m}): is it another version?"
                    ))
                });
            }
            inbox
                .recv(&self.sock)
                .map_err(|e| self.failed(format!("{e:?}")))?;
        }
    }

    pub(crate) fn failed(&self, e: String) -> String {
        format!("iwarpd at {}: {e}", self.path.display())
    }
}
