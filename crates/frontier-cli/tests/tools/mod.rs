//! Tools the crawl tests borrow from the machine: Python's warcio in a virtualenv of
//! its own (an independent WARC reader), and nginx with `limit_req`.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The warcio release the tests install.
const WARCIO: &str = "warcio==1.8.1";

/// The virtualenv's python with warcio installed, or `None` (after printing SKIP) when
/// it cannot be had and neither `CI` nor `REQUIRE_PYTHON` is set.
pub fn warcio_python() -> Option<PathBuf> {
    let venv = target_dir().join("warcio-venv");
    let python = venv.join("bin").join("python");
    let has_warcio = |python: &Path| {
        Command::new(python)
            .args(["-c", "import warcio"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has_warcio(&python) {
        return Some(python);
    }
    if !python.exists() {
        match Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return skip(&format!(
                    "python3 -m venv failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
            Err(e) => return skip(&format!("python3 not runnable: {e}")),
        }
    }
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--retries", "1", "--timeout", "30", WARCIO])
        .output();
    match pip {
        Ok(o) if o.status.success() && has_warcio(&python) => Some(python),
        Ok(o) => skip(&format!(
            "pip install {WARCIO} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => skip(&format!("pip not runnable: {e}")),
    }
}

fn skip(why: &str) -> Option<PathBuf> {
    let required = ["CI", "REQUIRE_PYTHON"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    assert!(
        !required,
        "warcio is required (CI or REQUIRE_PYTHON is set): {why}"
    );
    eprintln!("SKIP: {why}");
    None
}

/// The target directory this test was built in (`target/debug/deps/<test>` is the
/// executable).
pub fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Whether a missing tool fails the test (under CI) or skips it.
pub fn required(var: &str) -> bool {
    ["CI", var]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// nginx serving `sites` static sites, each on its own loopback port with its own
/// `limit_req` zone (`rate` requests a second, no burst, 429 + `Retry-After: 1`
/// beyond it) and an access log with the time of each request in milliseconds.
pub struct Nginx {
    child: Child,
    pub ports: Vec<u16>,
    pub dir: tempfile::TempDir,
}

impl Nginx {
    /// `None` (after printing SKIP) when nginx is missing, unless REQUIRE_NGINX or CI.
    pub fn start(roots: &[PathBuf], rate: u32) -> Option<Nginx> {
        let bin = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists());
        let Some(bin) = bin else {
            assert!(
                !required("REQUIRE_NGINX"),
                "nginx is required (install nginx-light)"
            );
            eprintln!("SKIP: nginx not found");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let mut servers = String::new();
        let mut ports = Vec::new();
        for (i, root) in roots.iter().enumerate() {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            ports.push(port);
            servers.push_str(&format!(
                r#"
    limit_req_zone $server_port zone=site{i}:1m rate={rate}r/s;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        access_log {d}/access.log timed;
        location / {{
            limit_req zone=site{i};
            limit_req_status 429;
            try_files $uri =404;
        }}
        error_page 429 @limited;
        location @limited {{
            add_header Retry-After 1 always;
            return 429 "slow down\n";
        }}
    }}"#,
                root = root.display()
            ));
        }
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log error;
events {{ worker_connections 1024; }}
http {{
    log_format timed '$msec $server_port $status $request_uri';
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    types {{ text/html html; text/plain txt; }}
{servers}
}}
"#
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx");
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in &ports {
            while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
                assert!(Instant::now() < deadline, "nginx did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Some(Nginx { child, ports, dir })
    }

    /// The access log: (time in seconds, port, status, URI) per request.
    pub fn log(&self) -> Vec<(f64, u16, u16, String)> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                Some((
                    f.next()?.parse().ok()?,
                    f.next()?.parse().ok()?,
                    f.next()?.parse().ok()?,
                    f.next()?.to_string(),
                ))
            })
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
