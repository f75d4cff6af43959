//! Real servers on loopback for the tests: nginx with `limit_req`, and an axum server
//! that announces its budget in `RateLimit` headers.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether a missing tool fails the test (`CI` or `REQUIRE_NGINX` set to a non-empty
/// value) or skips it (a developer's machine): panics in the first case.
pub fn require(what: &str) -> bool {
    let required = ["CI", "REQUIRE_NGINX"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    assert!(
        !required,
        "{what} is required (CI or REQUIRE_NGINX is set) but was not found \
         (apt-get install -y nginx-light; .ci/run does)"
    );
    eprintln!("SKIP: {what} not found (set CI or REQUIRE_NGINX to fail instead)");
    false
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An nginx instance of its own: `rate` requests a second per server (no burst), 429 +
/// `Retry-After: 1` beyond it, static pages under `/item/`.
pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    pub fn binary() -> Option<PathBuf> {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    }

    pub fn start(rate: u32, burst: u32) -> Option<Nginx> {
        let Some(bin) = Self::binary() else {
            require("nginx");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("www");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("page"), "hello\n").unwrap();
        let port = free_port();
        let d = dir.path().display();
        let burst = if burst > 0 {
            format!(" burst={burst} nodelay")
        } else {
            String::new()
        };
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    limit_req_zone $server_port zone=site:1m rate={rate}r/s;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{
            limit_req zone=site{burst};
            limit_req_status 429;
            try_files /page =404;
        }}
        error_page 429 @limited;
        location @limited {{
            add_header Retry-After 1 always;
            return 429 "slow down\n";
        }}
    }}
}}
"#,
            root = root.display()
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
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Nginx { child, port, dir })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.dir;
    }
}

/// A server with a budget of `limit` requests per 1-second window that says so in
/// `RateLimit` headers (`limit=, remaining=, reset=` with whole seconds, rounded up) and
/// answers 429 beyond it. Counts what it answered.
pub struct Announcing {
    pub port: u16,
    pub answered: Arc<Mutex<Vec<u16>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Announcing {
    pub async fn start(limit: u32) -> Announcing {
        use axum::http::{HeaderValue, StatusCode};
        use axum::response::IntoResponse;
        struct Window {
            start: Instant,
            used: u32,
        }
        let state = Arc::new(Mutex::new(Window {
            start: Instant::now(),
            used: 0,
        }));
        let answered: Arc<Mutex<Vec<u16>>> = Arc::default();
        let log = answered.clone();
        let app = axum::Router::new().fallback(move || {
            let state = state.clone();
            let log = log.clone();
            async move {
                let (status, remaining, reset) = {
                    let mut w = state.lock().unwrap();
                    let now = Instant::now();
                    if now.duration_since(w.start) >= Duration::from_secs(1) {
                        w.start = now;
                        w.used = 0;
                    }
                    let left = (w.start + Duration::from_secs(1)).saturating_duration_since(now);
                    let reset = left.as_secs_f64().ceil().max(1.0) as u64;
                    if w.used < limit {
                        w.used += 1;
                        (StatusCode::OK, limit - w.used, reset)
                    } else {
                        (StatusCode::TOO_MANY_REQUESTS, 0, reset)
                    }
                };
                log.lock().unwrap().push(status.as_u16());
                let mut response = (status, "ok\n").into_response();
                let value = format!("limit={limit}, remaining={remaining}, reset={reset}");
                response
                    .headers_mut()
                    .insert("RateLimit", HeaderValue::from_str(&value).unwrap());
                response
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Announcing {
            port,
            answered,
            _task: task,
        }
    }
}
