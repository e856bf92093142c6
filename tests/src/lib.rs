//! Cross-crate integration tests live in `tests/tests/`; this library holds their shared
//! helpers: [`netns`], two hosts on one machine in network namespaces, [`hostile`], a
//! peer that frames every octet itself, [`siw_lab`], the Linux siw lab as the opt-in
//! interop tests drive it, and [`binary`] and [`rdma_core_library`], what a test runs,
//! built from this workspace.
#![forbid(unsafe_code)]

pub mod hostile;
pub mod netns;
pub mod siw_lab;

/// Builds binary `name` of package `package` and returns its path.
pub fn binary(package: &str, name: &str) -> std::path::PathBuf {
    build(&["-p", package, "--bin", name]).join(name)
}

/// Builds the C library (crate `cverbs`) and links it as rdma-core's
/// `libibverbs.so.1` and `librdmacm.so.1` (`scripts/rdma_core_lib.sh`); returns the
/// directory, for `LD_LIBRARY_PATH`.
pub fn rdma_core_library() -> std::path::PathBuf {
    let debug = build(&["-p", "cverbs"]);
    let out = debug.join("rdma-core");
    let status = std::process::Command::new(workspace().join("scripts/rdma_core_lib.sh"))
        .arg("--link-only")
        .arg(debug.join("libcverbs.a"))
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run rdma_core_lib.sh");
    assert!(status.success(), "linking the C library failed");
    out
}

/// The workspace's root.
fn workspace() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .to_path_buf()
}

/// `cargo build ARGS` in the workspace (its target directory, the dev profile); returns
/// the directory the artifacts are in.
fn build(args: &[&str]) -> std::path::PathBuf {
    let root = workspace();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = std::process::Command::new(cargo)
        .arg("build")
        .args(args)
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build {} failed", args.join(" "));
    target.join("debug")
}
