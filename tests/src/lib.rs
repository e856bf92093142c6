//! Cross-crate integration tests live in `tests/tests/`; this library holds their shared
//! helpers: [`netns`], two hosts on one machine in network namespaces, [`hostile`], a
//! peer that frames every octet itself, and [`binary`], a workspace binary built for a
//! test to run.
#![forbid(unsafe_code)]

pub mod hostile;
pub mod netns;

/// Builds binary `name` of package `package` and returns its path.
pub fn binary(package: &str, name: &str) -> std::path::PathBuf {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .to_path_buf();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = std::process::Command::new(cargo)
        .args(["build", "-p", package, "--bin", name])
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo build");
    assert!(
        status.success(),
        "cargo build -p {package} --bin {name} failed"
    );
    target.join("debug").join(name)
}
