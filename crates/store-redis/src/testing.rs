//! A throwaway `redis-server` for tests and benchmarks.
//!
//! [`RedisServer::start`] runs the `redis-server` binary (from `$REDIS_SERVER`, else the
//! `PATH`) on a free loopback port without persistence (`--save '' --appendonly no`) and
//! stops it, by its process id, when dropped. When the binary is missing it prints a
//! visible `SKIP` line and returns `None`, unless `REQUIRE_REDIS=1` or `CI` (any non-empty
//! value) is set, where a missing server is an error: no test passes by skipping in CI.
//!
//! ```no_run
//! use polite_store_redis::testing::RedisServer;
//!
//! let Some(server) = RedisServer::start("my_test").unwrap() else { return };
//! let url = server.url(); // redis://127.0.0.1:PORT/
//! # let _ = url;
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A function library holding `code` in place of this build's script, under this build's
/// function name: loaded with `FUNCTION LOAD REPLACE`, it makes an unchanged client run a
/// changed script (to measure a change without a rebuild; `code` must read and write
/// the same key layout).
pub fn replacement_library(code: &str) -> String {
    crate::frontier::function_library(&crate::frontier::ServerCode::function_name(), code)
}

/// A running `redis-server` child process, killed on drop, and also when the process
/// that started it ends without dropping it (a server in a `static`, a test binary
/// killed mid-run): a watchdog shell waits on a pipe that only this process holds open.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    watchdog: Option<(Child, ChildStdin)>,
}

/// A `sh` that kills `pid` once its standard input reaches end of file: when the
/// returned pipe end is dropped, or the process holding it exits.
fn watchdog(pid: u32) -> Option<(Child, ChildStdin)> {
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(format!("read _ignored; kill {pid} 2>/dev/null"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let stdin = sh.stdin.take()?;
    Some((sh, stdin))
}

/// Whether a missing server must fail the test: `REQUIRE_REDIS=1` is set, or `CI` is set
/// to any non-empty value.
pub fn redis_required() -> bool {
    std::env::var("REQUIRE_REDIS").is_ok_and(|v| v == "1")
        || std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDIS_SERVER") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

/// Where [`binary`] looked, for the message when it found nothing.
fn where_looked() -> String {
    match std::env::var_os("REDIS_SERVER") {
        Some(p) => format!("REDIS_SERVER={} is not a file", PathBuf::from(p).display()),
        None => "not on the PATH".to_owned(),
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl RedisServer {
    /// Starts a server for the test `name` (used in the SKIP line and its scratch
    /// folder). `Ok(None)`: no binary and neither `REQUIRE_REDIS` nor `CI` is set (a SKIP
    /// line was printed). `Err`: the binary is missing while required (see
    /// [`redis_required`]), or the server did not come up.
    pub fn start(name: &str) -> Result<Option<RedisServer>, String> {
        Self::start_with(name, &[])
    }

    /// [`start`](Self::start) with more `redis-server` arguments (after the defaults).
    pub fn start_with(name: &str, extra: &[&str]) -> Result<Option<RedisServer>, String> {
        let Some(bin) = binary() else {
            if redis_required() {
                return Err(format!(
                    "{name}: redis-server is required (REQUIRE_REDIS=1 or CI is set) but was \
                     not found: {} (apt-get install -y redis-server)",
                    where_looked()
                ));
            }
            // Straight to the process's stderr: the test harness captures eprintln!.
            let _ = writeln!(
                std::io::stderr(),
                "SKIP {name}: redis-server not found: {} (set REQUIRE_REDIS=1 or CI to fail \
                 instead)",
                where_looked()
            );
            return Ok(None);
        };
        let mut last_err = String::new();
        for _attempt in 0..5 {
            // A free port: bind port 0, read it, release it for the server.
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free port: {e}"))?
                .port();
            let dir = std::env::temp_dir().join(format!(
                "store-redis-{}-{}-{port}",
                name.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut child = Command::new(&bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {}: {e}", bin.display()))?;
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if ping(port) {
                    let watchdog = watchdog(child.id());
                    return Ok(Some(RedisServer {
                        child,
                        port,
                        dir,
                        watchdog,
                    }));
                }
                if let Ok(Some(status)) = child.try_wait() {
                    last_err = format!("redis-server exited with {status} (port {port} taken?)");
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            if last_err.is_empty() {
                last_err = format!("redis-server on port {port} did not answer PING");
            }
        }
        Err(last_err)
    }

    /// Starts a server or panics (see [`start`](Self::start)); `None` means skipped,
    /// which never happens when [`redis_required`].
    pub fn start_or_skip(name: &str) -> Option<RedisServer> {
        match Self::start(name) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A throwaway Redis Cluster: `masters` servers started with `--cluster-enabled yes`
/// and joined by `redis-cli --cluster create` (no replicas), stopped when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    servers: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the cluster for the test `name`; `Ok(None)` and a SKIP line as
    /// [`RedisServer::start`] (also when `redis-cli` is missing).
    pub fn start(name: &str, masters: usize) -> Result<Option<RedisCluster>, String> {
        let mut servers = Vec::with_capacity(masters);
        for _ in 0..masters {
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            ];
            match RedisServer::start_with(name, &args)? {
                Some(s) => servers.push(s),
                None => return Ok(None),
            }
        }
        let cli = binary()
            .map(|b| b.with_file_name("redis-cli"))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("redis-cli"));
        let out = Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(servers.iter().map(|s| format!("127.0.0.1:{}", s.port())))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) if !redis_required() => {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIP {name}: {} cannot run: {e}",
                    cli.display()
                );
                return Ok(None);
            }
            Err(e) => return Err(format!("{name}: {} cannot run: {e}", cli.display())),
        };
        if !out.status.success() {
            return Err(format!(
                "{name}: redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let cluster = RedisCluster { servers };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.servers.iter().all(|s| cluster_ok(s.port())) {
            if Instant::now() > deadline {
                return Err(format!(
                    "{name}: the cluster did not reach cluster_state:ok"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Some(cluster))
    }

    /// Starts a cluster or panics (see [`start`](Self::start)).
    pub fn start_or_skip(name: &str, masters: usize) -> Option<RedisCluster> {
        match Self::start(name, masters) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Every node's URL (`redis://127.0.0.1:PORT/`), in start order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The nodes.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }
}

/// Whether the node on `port` says `cluster_state:ok` and knows every slot.
fn cluster_ok(port: u16) -> bool {
    let info = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c));
    info.is_ok_and(|t| t.contains("cluster_state:ok") && t.contains("cluster_slots_ok:16384"))
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some((mut sh, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = sh.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server goes when the pipe closes, as it does when the test process exits
    /// with the server still in a `static`.
    #[test]
    fn the_server_dies_with_its_owner() {
        let Some(mut server) = RedisServer::start_or_skip("watchdog") else {
            return;
        };
        assert!(ping(server.port()));
        let (mut sh, stdin) = server.watchdog.take().expect("a watchdog");
        drop(stdin);
        let _ = sh.wait();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ping(server.port()) {
            assert!(Instant::now() < deadline, "the server outlived its owner");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
