//! Daemon mode's server side (seed 002's I/O-unit module driver): `iwarpd` serving local
//! applications over a Unix socket, with the [`ipc`] ABI.
//!
//! - [`serve`] accepts clients; each gets a session (`session.rs`): its control channel (requests in
//!   order, replies and events through one writer) and the objects it created, which are
//!   its alone: protection domains, regions (the client's memory files, mapped here),
//!   listeners, connection requests and queue pairs. Every id a request names is checked
//!   against the client's own objects, so a client reaches only its own domains' memory.
//! - Each connected queue pair gets a servant (`servant.rs`): the task that moves work requests from
//!   the client's rings into the engine and completions back (push-push: completions and
//!   received payloads land in the client's memory without the client asking). Before
//!   the send queue it scans its domain's push region (`push.rs`) (seed 000).
//! - A client that goes away (exit, crash, SIGKILL) ends its session: its queue pairs
//!   close (the peers see a clean close), its listeners stop and its memory is released.

mod push;
mod servant;
mod session;

pub use push::PushConfig;

use std::io;
use std::path::Path;

use tokio::net::UnixListener;

use crate::Engine;

/// Settings of the local service: limits on what one client may hold, and the push
/// path's resources.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Seed 000's push path.
    pub push: PushConfig,
    /// Queue pairs (connected or connecting).
    pub max_qps: usize,
    /// Registered regions.
    pub max_mrs: usize,
    /// Connection requests waiting for accept or reject; more are rejected.
    pub max_pending_incoming: usize,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            push: PushConfig::default(),
            max_qps: 4096,
            max_mrs: 65536,
            max_pending_incoming: 64,
        }
    }
}

/// Binds the control socket at `path`, replacing a stale socket file left by a daemon
/// that died (but not a socket a live daemon still answers on).
pub async fn bind(path: &Path) -> io::Result<UnixListener> {
    match UnixListener::bind(path) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{}: another iwarpd already serves this control socket; stop it or \
                         choose another path with --control",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path)?;
            UnixListener::bind(path)
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

/// Serves local clients at `path` from a thread of its own with its own runtime and an
/// engine configured by `engine` (a daemon inside a process: tests, tools); returns once
/// the socket is bound. The thread runs until the process exits.
pub fn serve_on_thread(
    path: &Path,
    engine: crate::EngineConfig,
    cfg: LocalConfig,
) -> io::Result<std::thread::JoinHandle<()>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_owned();
    let thread = std::thread::Builder::new()
        .name("iwarpd-local".into())
        .spawn(move || {
            let rt = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => return drop(tx.send(Err(e))),
            };
            rt.block_on(async move {
                match bind(&path).await {
                    Ok(listener) => {
                        let _ = tx.send(Ok(()));
                        serve(Engine::new(engine), listener, cfg).await;
                    }
                    Err(e) => drop(tx.send(Err(e))),
                }
            });
        })?;
    rx.recv()
        .map_err(|_| io::Error::other("the local service's thread ended"))??;
    Ok(thread)
}

/// Serves local clients on `listener` until the task is dropped.
pub async fn serve(engine: Engine, listener: UnixListener, cfg: LocalConfig) {
    let share = std::sync::Arc::new(push::PushShare::new(cfg.push.clone()));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let engine = engine.clone();
                let cfg = cfg.clone();
                tokio::spawn(session::run(engine, stream, cfg, share.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}
