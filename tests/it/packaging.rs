//! The Debian package and the systemd unit: the package builds from the
//! repository, lists the expected files, and its extracted layout verifies
//! with `systemd-analyze` and starts (READY=1 on the notify socket).

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn build_package(out: &Path) -> PathBuf {
    let status = Command::new(repo().join("packaging/build.sh"))
        .arg("--bin")
        .arg(env!("CARGO_BIN_EXE_liftbridge"))
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .status()
        .expect("run packaging/build.sh");
    assert!(status.success(), "packaging/build.sh failed");
    std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb in the output directory")
}

#[test]
fn debian_package_layout_verifies_and_starts() {
    assert!(have("dpkg-deb"), "dpkg-deb is required");
    assert!(have("systemd-analyze"), "systemd-analyze is required");
    let tmp = tempfile::tempdir().unwrap();
    let deb = build_package(&tmp.path().join("out"));
    assert!(
        tmp.path().join("out").read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tar.gz")),
        "tarball built"
    );

    let listing = Command::new("dpkg").arg("-c").arg(&deb).output().unwrap();
    assert!(listing.status.success());
    let listing = String::from_utf8_lossy(&listing.stdout);
    for f in [
        "./usr/bin/liftbridge",
        "./lib/systemd/system/liftbridge.service",
        "./etc/liftbridge/liftbridge.yaml",
        "./usr/share/doc/liftbridge/README.md",
        "./usr/lib/liftbridge/bin/nats-server -> /usr/bin/liftbridge",
    ] {
        assert!(
            listing.contains(f),
            "{f} missing from the package:\n{listing}"
        );
    }

    let root = tmp.path().join("root");
    let st = Command::new("dpkg")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success());
    let info = Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.contains("postinst"),
        "maintainer scripts present:\n{info}"
    );

    // The unit, with its paths pointed into the scratch root, verifies.
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/liftbridge.service")).unwrap();
    let rooted = unit.replace(
        "/usr/bin/liftbridge",
        &root.join("usr/bin/liftbridge").to_string_lossy(),
    );
    let unit_path = tmp.path().join("liftbridge.service");
    std::fs::write(&unit_path, &rooted).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit_path)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&verify.stderr)
    );

    // The packaged binary starts with the packaged config, as ExecStart runs
    // it, and tells systemd it is ready. Ports are moved to free ones so the
    // test can run beside other servers.
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    assert!(
        exec.contains("-c /etc/liftbridge/liftbridge.yaml"),
        "{exec}"
    );
    let data = tmp.path().join("state");
    let sock_path = tmp.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let free = crate::support::free_port;
    let mut child = Command::new(root.join("usr/bin/liftbridge"))
        .arg("-c")
        .arg(root.join("etc/liftbridge/liftbridge.yaml"))
        .arg("-d")
        .arg(&data)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("LIFTBRIDGE_LISTEN", format!("127.0.0.1:{}", free()))
        .env("LIFTBRIDGE_NATS_LISTEN", format!("127.0.0.1:{}", free()))
        .env("LIFTBRIDGE_HTTP_LISTEN", format!("127.0.0.1:{}", free()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ready = false;
    let mut buf = [0u8; 512];
    while Instant::now() < deadline && !ready {
        if let Ok(n) = sock.recv(&mut buf) {
            ready = String::from_utf8_lossy(&buf[..n]).contains("READY=1");
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("server exited early ({status}): {err}");
        }
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert!(ready, "no READY=1 from the packaged server");
    assert!(status.success(), "graceful stop on SIGTERM, got {status}");
    assert!(data.exists(), "state directory used");
}
