//! The daemon's local service as the daemon holds it: started on the control socket, and
//! a guard that stops it and removes the socket file (unless a successor took it).

use iwarpd::local::{LocalConfig, LocalService};
use offload_engine::CaptureTap;

use crate::config::{Config, Control};

/// Starts serving local applications on the control socket (`handed`: the one a daemon
/// before handed over, else the `control` key's path), with engines of their own (the
/// remote-memory target's idle timeout does not apply to them) capturing to the daemon's
/// one `tap`. The task stops, and the socket file is removed, when the returned guard is
/// dropped.
pub(crate) fn serve_local(
    cfg: &Config,
    handed: Option<std::os::unix::net::UnixListener>,
    tap: Option<CaptureTap>,
) -> Result<Option<LocalGuard>, String> {
    let (path, explicit) = match &cfg.control {
        Control::Off => {
            if handed.is_some() {
                tracing::warn!(
                    "control = off: closing the control socket the daemon before handed over"
                );
            }
            return Ok(None);
        }
        Control::Default => (ipc::default_control_path(), false),
        Control::Path(p) => (p.clone(), true),
    };
    let mut ecfg = cfg.engine_with(tap);
    ecfg.timeouts.idle = None;
    let limits = LocalConfig {
        max_clients: cfg.max_local_clients,
        max_clients_per_user: cfg.max_local_clients_per_user,
        max_qps: cfg.max_local_qps,
        max_mrs: cfg.max_local_mrs,
        max_device_mrs: cfg.max_local_mrs_total,
        max_registered: cfg.max_registered,
        max_queue_depth: cfg.max_queue_depth,
        staging: cfg.staging_size,
        ..LocalConfig::default()
    };
    let threads = cfg.local_threads;
    let (started, path) = match handed {
        Some(control) => {
            // The socket's own path: the daemon before may have been configured apart.
            let bound = control
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(ToOwned::to_owned))
                .unwrap_or(path);
            (
                LocalService::start_on(control, ecfg, limits, threads),
                bound,
            )
        }
        None => (LocalService::start(&path, ecfg, limits, threads), path),
    };
    let service = match started {
        Ok(s) => s,
        Err(e) if !explicit => {
            tracing::warn!(error = %e, "not serving local applications");
            return Ok(None);
        }
        Err(e) => return Err(format!("cannot serve local applications: {e}")),
    };
    tracing::info!(control = %path.display(), threads, "serving local applications");
    Ok(Some(LocalGuard {
        service: Some(service),
        path,
        handed: false,
    }))
}

/// Stops the local service and removes its socket file.
pub(crate) struct LocalGuard {
    service: Option<LocalService>,
    /// The socket file, removed at the end unless it was handed to a successor.
    path: std::path::PathBuf,
    handed: bool,
}

impl LocalGuard {
    /// Applications attached now.
    pub(crate) fn clients(&self) -> u32 {
        self.service.as_ref().map_or(0, LocalService::clients)
    }

    /// The service, while it runs.
    pub(crate) fn service(&self) -> Option<&LocalService> {
        self.service.as_ref()
    }

    /// The control socket, to hand to a successor.
    pub(crate) fn socket(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.service.as_ref()?.socket())
    }

    /// The control socket went to a successor: accept nothing more, and leave its file
    /// alone; the applications attached are served on.
    pub(crate) fn handed_over(&mut self) {
        if let Some(s) = &self.service {
            s.stop_accepting();
        }
        self.handed = true;
    }

    /// The successor went away before it took anything: accept here again.
    pub(crate) fn taken_back(&mut self) {
        if let Some(s) = &self.service {
            s.resume_accepting();
        }
        self.handed = false;
    }
}

impl Drop for LocalGuard {
    fn drop(&mut self) {
        if let Some(s) = self.service.take() {
            s.stop();
        }
        if !self.handed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
