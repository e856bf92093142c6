//! The daemon: one engine, an accept loop, the remote-memory target service per
//! connection (`remote_memory.rs`), the local service, and a clean shutdown on
//! SIGINT/SIGTERM or a handover to a successor.

use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use iwarpd::local::LocalService;
use offload_engine::{Engine, Listener};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

use crate::config::Config;
use crate::handover;
use crate::local_guard::{LocalGuard, serve_local};
use crate::remote_memory::{BUILT_IN_SERVICE, Resumed, Served};

/// What to do when no listen address was given.
pub(crate) const NO_LISTEN: &str = "no listen address: pass --listen IP:PORT (e.g. --listen \
     0.0.0.0:4791) or put `listen = \"IP:PORT\"` in the config file (or take a running daemon's \
     over with --take-over PATH)";

/// `metrics = ADDR`: serves the counters of the remote-memory service (`engine`) and of
/// the local applications (`local`) at ADDR/metrics.
async fn serve_metrics(
    addr: std::net::SocketAddr,
    engine: &Engine,
    local: Option<&LocalGuard>,
) -> Result<crate::metrics::Endpoint, String> {
    let engine = engine.clone();
    let local = local
        .and_then(LocalGuard::service)
        .map(LocalService::counters);
    let source: crate::metrics::Source = Arc::new(move || {
        let mut all = vec![(
            BUILT_IN_SERVICE,
            iwarpd::local::engine_counters(&engine.stats()),
        )];
        all.extend(local.as_ref().map(|l| ("local", l.read())));
        all
    });
    let endpoint = crate::metrics::serve(addr, source).await?;
    let bound = endpoint.addr;
    tracing::info!(%bound, "serving Prometheus metrics at http://{bound}/metrics");
    Ok(endpoint)
}

/// The settings of a successor: `cfg` (its keys `given` on its command line or in its
/// config file, with their origins), with the rest taken from the daemon before as the
/// handover's `prelude` carries them; what differs is logged, and a `log` filter taken
/// over applied (`set_log`).
fn inherit_settings(
    cfg: Config,
    given: &[(String, String)],
    prelude: &handover::Prelude,
    set_log: &dyn Fn(&str),
) -> Config {
    let theirs = match &prelude.settings {
        Some(Ok(theirs)) => theirs,
        Some(Err(e)) => {
            tracing::warn!(
                "the daemon before sent settings this daemon cannot read ({e}): running with this daemon's own"
            );
            return cfg;
        }
        None => {
            tracing::warn!(
                "the daemon before sent no settings (a release before they were handed over): \
                 running with this daemon's own"
            );
            return cfg;
        }
    };
    let log_before = cfg.log.clone();
    let (cfg, notes) = crate::inherit::take(cfg, given, theirs);
    for note in &notes {
        if note.is_warning() {
            tracing::warn!("setting {note}");
        } else {
            tracing::info!("setting {note}");
        }
    }
    if notes.is_empty() {
        tracing::info!("settings: the same as the daemon before's");
    }
    if cfg.log != log_before
        && let Some(log) = &cfg.log
    {
        set_log(log);
    }
    cfg
}

/// Runs the daemon until SIGINT or SIGTERM (or until it handed everything to a
/// successor); `Err` says why it could not. `given`: the keys given on the command line
/// or in the config file, which a successor keeps over the daemon before's;
/// `set_log`: applies a log filter taken over.
pub(crate) async fn run(
    cfg: Config,
    given: &[(String, String)],
    set_log: &dyn Fn(&str),
) -> Result<(), String> {
    let signals = Signals::catch()?;
    let Started {
        cfg,
        engine,
        listener,
        resumed,
        local,
        predecessor,
    } = start(cfg, given, set_log).await?;
    // `iwarpd stat` (asked on the control socket) shows the built-in service too, with
    // the numbers the metrics endpoint shows for it.
    if let Some(service) = local.as_ref().and_then(LocalGuard::service) {
        service.list_service(BUILT_IN_SERVICE, engine.clone());
    }
    let addr = listener.local_addr();
    let cfg = Arc::new(cfg);
    let (stop, stop_rx) = watch::channel(false);
    let mut served = Served::new(&cfg);
    let taken_over = resumed.len();
    served.resume(resumed, &stop_rx);
    // The daemon before holds the handover path and the metrics port until it closes
    // the link.
    if let Some(link) = predecessor {
        handover::await_release(link).await;
    }
    let mut daemon = Daemon {
        served,
        stop_rx,
        stop,
        cfg,
        local,
        engine,
        signals,
    };
    let metrics = match daemon.cfg.metrics {
        Some(addr) => Some(serve_metrics(addr, &daemon.engine, daemon.local.as_ref()).await?),
        None => None,
    };
    let mut handovers = match &daemon.cfg.handover {
        Some(path) => Some(handover::Offer::bind(path)?),
        None => None,
    };
    announce(&daemon.cfg, addr, taken_over);
    let (why, successor) = daemon.accept_loop(&listener, &mut handovers).await?;
    drop(handovers);
    // Closed before the successor is told it may bind the port.
    if let Some(metrics) = metrics {
        metrics.close().await;
    }
    if let Some((link, sessions_moved)) = successor {
        drop(link);
        daemon.serve_what_stayed(sessions_moved).await;
    }
    // Stop accepting, then disconnect every queue pair and let posted work finish or flush.
    drop(listener);
    daemon.shut_down(why).await
}

/// SIGTERM and SIGINT, caught.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Catches both (from now on they no longer end the process at once).
    fn catch() -> Result<Self, String> {
        Ok(Self {
            term: signal(SignalKind::terminate())
                .map_err(|e| format!("cannot catch SIGTERM: {e}"))?,
            int: signal(SignalKind::interrupt())
                .map_err(|e| format!("cannot catch SIGINT: {e}"))?,
        })
    }

    /// The next of them to arrive, by name.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// What the daemon serves with, once it started: its settings (a successor's include
/// those it took over), the engine of the remote-memory service, the listening socket, and
/// what a successor took over.
struct Started {
    cfg: Config,
    engine: Engine,
    listener: Listener,
    /// Connections of the daemon before, to serve on.
    resumed: Vec<Resumed>,
    /// The local service, if it serves local applications.
    local: Option<LocalGuard>,
    /// The link to the daemon before, which closes once it let go of what this daemon
    /// binds next.
    predecessor: Option<UnixStream>,
}

/// Makes the engine and starts listening and the local service; a successor (`take_over`)
/// takes the settings, the listening socket, the control socket and the connections and
/// sessions of the daemon before instead.
async fn start(
    cfg: Config,
    given: &[(String, String)],
    set_log: &dyn Fn(&str),
) -> Result<Started, String> {
    // A successor takes the listening socket and the settings of the daemon before first:
    // its engines run with the settings it was not given itself.
    let (cfg, prelude) = match cfg.take_over.clone() {
        Some(path) => {
            let prelude = handover::begin_take_over(&path).await?;
            (
                inherit_settings(cfg, given, &prelude, set_log),
                Some(prelude),
            )
        }
        None => (cfg, None),
    };
    // One capture writer for every engine of the daemon (the remote-memory target's and
    // the local service's shards); a successor goes on with the file of the daemon before.
    let tap = cfg.capture(prelude.is_some())?;
    let engine = Engine::new(cfg.engine_with(tap.clone()));
    // A successor takes the connections of the daemon before.
    let (listener, resumed, local, predecessor) = match prelude {
        Some(prelude) => {
            let t = prelude
                .finish(&engine, |control| serve_local(&cfg, control, tap.clone()))
                .await?;
            (t.listener, t.resumed, t.local, Some(t.link))
        }
        None => {
            let addr = cfg.listen.ok_or_else(|| NO_LISTEN.to_owned())?;
            let listener = engine.listen(addr).await.map_err(|e| {
                format!(
                    "cannot listen on {addr}: {e} (is the port in use, or the address not local?)"
                )
            })?;
            (
                listener,
                Vec::new(),
                serve_local(&cfg, None, tap.clone())?,
                None,
            )
        }
    };
    Ok(Started {
        cfg,
        engine,
        listener,
        resumed,
        local,
        predecessor,
    })
}

/// Says the daemon serves (listening on `addr`, with `taken_over` connections of the
/// daemon before): the one line on stdout, which scripts and tests read the bound address
/// from, and the settings in the log.
fn announce(cfg: &Config, addr: std::net::SocketAddr, taken_over: usize) {
    crate::out::line(&format!("listening on {addr}"));
    tracing::info!(
        addr = %addr,
        buffer_size = cfg.buffer_size,
        recv_depth = cfg.recv_depth,
        recv_size = cfg.recv_size,
        max_qps = cfg.max_qps,
        crc = cfg.crc,
        markers = cfg.markers,
        large_fpdus = cfg.large_fpdus,
        mpa_revision = cfg.mpa_revision,
        ird = cfg.ird,
        ord = cfg.ord,
        taken_over,
        "iwarpd listening"
    );
}

/// The daemon serving: what the steps of [`run`] after the start share. (Fields drop in
/// this order.)
struct Daemon {
    /// The connections of the remote-memory service.
    served: Served,
    /// What each connection's task watches for the shutdown.
    stop_rx: watch::Receiver<bool>,
    /// Set at the shutdown: every connection's task disconnects its queue pair.
    stop: watch::Sender<bool>,
    cfg: Arc<Config>,
    local: Option<LocalGuard>,
    /// The remote-memory service's engine.
    engine: Engine,
    signals: Signals,
}

impl Daemon {
    /// Applications attached now.
    fn clients(&self) -> u32 {
        self.local.as_ref().map_or(0, LocalGuard::clients)
    }

    /// Accepts connections on `listener` and successors on `handovers` until a signal, or
    /// until everything was handed to a successor. Returns why it stopped, and after a
    /// handover the link to the successor (closed once this daemon let go of what it binds
    /// next) with the number of sessions that moved.
    async fn accept_loop(
        &mut self,
        listener: &Listener,
        handovers: &mut Option<handover::Offer>,
    ) -> Result<(&'static str, Option<(UnixStream, u32)>), String> {
        loop {
            tokio::select! {
                inc = listener.accept() => {
                    let inc = inc.map_err(|e| format!("the listener failed: {e}"))?;
                    self.served.admit(inc, &self.engine, &self.cfg, &self.stop_rx);
                }
                Some(done) = self.served.join_next() => {
                    if let Err(e) = done {
                        tracing::error!(error = %e, "connection task panicked");
                    }
                }
                Some(sock) = async { handovers.as_mut()?.next().await } => {
                    if let Some(successor) = self.hand_over(sock, listener).await {
                        return Ok(("handover", Some(successor)));
                    }
                }
                why = self.signals.next() => return Ok((why, None)),
            }
        }
    }

    /// Hands the listening socket, the control socket, every connection and every session
    /// that can move to the successor on `sock`. Returns the link to it and the number of
    /// sessions that moved; `None` if it went away (what it was handed is taken back, and
    /// this daemon serves on).
    async fn hand_over(
        &mut self,
        sock: UnixStream,
        listener: &Listener,
    ) -> Option<(UnixStream, u32)> {
        let control = self.local.as_ref().and_then(LocalGuard::socket);
        let settings = crate::inherit::encode(&self.cfg);
        let moving = match handover::Handover::begin(sock, listener, control, settings).await {
            Ok(h) => {
                // The successor accepts local applications from now on.
                if let Some(local) = self.local.as_mut() {
                    local.handed_over();
                }
                // Requests whose MPA Request was still arriving are answered here
                // and move with the rest.
                let drained = tokio::time::timeout(handover::DRAIN, async {
                    while let Ok(inc) = listener.accept().await {
                        self.served
                            .admit(inc, &self.engine, &self.cfg, &self.stop_rx);
                    }
                });
                let _ = drained.await;
                let sessions = self
                    .local
                    .as_ref()
                    .and_then(LocalGuard::service)
                    .map(LocalService::sessions)
                    .unwrap_or_default();
                h.finish(self.served.movers(), sessions).await
            }
            Err(e) => Err(e),
        };
        match moving {
            Ok((moved, sock)) => {
                tracing::info!(
                    connections = moved.connections,
                    sessions = moved.sessions,
                    "handed over to a successor"
                );
                Some((sock, moved.sessions as u32))
            }
            Err(e) => {
                // The successor went away: what it was handed is taken back.
                listener.resume_accepting();
                if let Some(local) = self.local.as_mut() {
                    local.taken_back();
                }
                tracing::warn!(error = %e, "handover failed: serving on");
                None
            }
        }
    }

    /// After a handover, once the successor was let go: serves what stayed here until it
    /// ends, or until a signal (`sessions_moved`: how many sessions went to the
    /// successor).
    async fn serve_what_stayed(&mut self, sessions_moved: u32) {
        // What did not move stays here and is served until it ends: local applications
        // whose sessions were between states or that the successor refused, and any
        // connection the successor refused (new applications attach to the successor).
        // SIGTERM ends it at once.
        // Sessions that moved end here a moment later.
        let stayed = self.clients().saturating_sub(sessions_moved);
        if stayed > 0 || !self.served.is_empty() {
            tracing::info!(
                clients = stayed,
                connections = self.served.len(),
                "handed over; serving what stayed here until it ends (SIGTERM ends it now)"
            );
        }
        while self.clients() > 0 || !self.served.is_empty() {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                Some(_) = self.served.join_next() => {}
                _ = self.signals.next() => break,
            }
        }
    }

    /// The shutdown (`why`: the signal, or "handover"), once the listener is closed:
    /// disconnects every queue pair and lets posted work finish or flush. A second signal
    /// meanwhile ends it at once.
    async fn shut_down(mut self, why: &'static str) -> Result<(), String> {
        let open = self.engine.qps().len();
        tracing::info!(
            signal = why,
            open_qps = open,
            "shutting down: stopped accepting, disconnecting queue pairs"
        );
        let _ = self.stop.send(true);
        let (engine, served) = (&self.engine, &mut self.served);
        tokio::select! {
            () = async {
                engine.shutdown().await;
                served.join_all().await;
            } => {}
            _ = self.signals.next() => return Err("second signal during shutdown: exiting at once".into()),
        }
        tracing::info!(
            disconnected_qps = open,
            connections_served = self.served.count(),
            "shutdown complete"
        );
        Ok(())
    }
}
