//! `frontier crawl` as a user meets it: exit statuses (0 all good, 1 failed pages, 2
//! usage or configuration), `--out -`, files named after the crawl, `--fresh`, `-s`,
//! include/exclude patterns, headers, and warnings that reach standard error.

use std::path::Path;
use std::process::{Command, Output};

use axum::http::HeaderMap;

fn frontier(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_frontier"));
    cmd.current_dir(dir)
        .env_remove("FRONTIER_CONFIG")
        .env_remove("FRONTIER_STORE")
        .env_remove("RUST_LOG");
    cmd
}

fn crawl(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = frontier(dir);
    cmd.args(["crawl", "--progress", "quiet"]).args(args);
    cmd.output().unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// A small site: `/` links to /a, /b, /skip/c; every page answers 200 and records the
/// `X-Test` header it got.
async fn site() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::routing::get;
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    let page = move |uri: axum::http::Uri, headers: HeaderMap| {
        let log = log.clone();
        async move {
            let h = headers
                .get("x-test")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string();
            log.lock().unwrap().push(format!("{} {h}", uri.path()));
            axum::response::Html(r#"<a href="/a">a</a> <a href="/b">b</a> <a href="/skip/c">c</a>"#)
        }
    };
    let app = axum::Router::new()
        .route(
            "/robots.txt",
            get(|| async { (axum::http::StatusCode::NOT_FOUND, "") }),
        )
        .fallback(get(page));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[test]
fn usage_and_configuration_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = crawl(dir.path(), &["not-a-url"]);
    assert_eq!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
    let out = crawl(
        dir.path(),
        &["-s", "download_delay=-1", "http://127.0.0.1:9/"],
    );
    assert_eq!(code(&out), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-s download_delay=-1") && err.contains("download_delay"),
        "{err}"
    );
    let out = crawl(dir.path(), &["--include", "(", "http://127.0.0.1:9/"]);
    assert_eq!(code(&out), 2);
    let out = crawl(dir.path(), &["--bogus-flag", "http://127.0.0.1:9/"]);
    assert_eq!(code(&out), 2);
    // Nothing was created by the refused runs.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_crawl_whose_pages_all_fail_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 9 (discard) on loopback: connection refused.
    let out = crawl(
        dir.path(),
        &[
            "-s",
            "crawl.retry_times=0",
            "-s",
            "crawl.robotstxt_obey=false",
            "http://127.0.0.1:9/x",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        code(&out),
        1,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 pages failed"), "{stdout}");
    // Files named after the crawl (its first seed's host), not one shared file.
    assert!(dir.path().join("127.0.0.1.frontier.sqlite").exists());
    assert!(dir.path().join("127.0.0.1.pages.jsonl").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_to_stdout_patterns_headers_and_fresh() {
    let (url, seen) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let u = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        crawl(
            &d,
            &[
                "--out",
                "-",
                "--exclude",
                "/skip/",
                "-H",
                "X-Test: yes",
                "--name",
                "t",
                &u,
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    // Standard output holds the JSON lines only (the summary went to stderr).
    let stdout = String::from_utf8_lossy(&out.stdout);
    let urls: Vec<String> = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            v["url"].as_str().unwrap().to_string()
        })
        .collect();
    let mut paths: Vec<&str> = urls.iter().map(|u| &u[url.len() - 1..]).collect();
    paths.sort();
    assert_eq!(paths, ["/", "/a", "/b"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("finished"));
    assert!(!dir.path().join("-").exists());
    assert!(dir.path().join("t.frontier.sqlite").exists());
    let seen_now = seen.lock().unwrap().clone();
    assert!(
        seen_now
            .iter()
            .filter(|l| !l.starts_with("/robots"))
            .all(|l| l.ends_with(" yes")),
        "{seen_now:?}"
    );

    // Again: nothing left. With --fresh: everything again.
    let (d, u) = (dir.path().to_path_buf(), url.clone());
    let again = tokio::task::spawn_blocking(move || crawl(&d, &["--out", "-", "--name", "t", &u]))
        .await
        .unwrap();
    assert_eq!(code(&again), 0);
    assert!(
        again.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let (d, u) = (dir.path().to_path_buf(), url.clone());
    let fresh = tokio::task::spawn_blocking(move || {
        crawl(
            &d,
            &[
                "--fresh",
                "--out",
                "-",
                "--name",
                "t",
                "--include",
                "/a$|/$",
                &u,
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(code(&fresh), 0);
    assert_eq!(String::from_utf8_lossy(&fresh.stdout).lines().count(), 2);
}

/// A site whose robots.txt answers `robots_status` (with a redirect first when
/// `redirect`); records every path requested.
async fn robots_site(
    robots_status: u16,
    redirect: bool,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let log = log.clone();
        async move {
            let path = uri.path().to_string();
            log.lock().unwrap().push(path.clone());
            match path.as_str() {
                "/robots.txt" if redirect => (
                    StatusCode::MOVED_PERMANENTLY,
                    [("location", "/real-robots.txt")],
                    "",
                )
                    .into_response(),
                "/robots.txt" | "/real-robots.txt" => (
                    StatusCode::from_u16(robots_status).unwrap(),
                    "User-agent: *\nDisallow: /private\n",
                )
                    .into_response(),
                _ => axum::response::Html(r#"<a href="/private/x">p</a> <a href="/y">y</a>"#)
                    .into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

async fn crawl_async(dir: &Path, args: Vec<String>) -> Output {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crawl(&dir, &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_follows_rfc_9309() {
    let fast = [
        "-s",
        "backoff_min_delay=0.05",
        "-s",
        "backoff_max_delay=0.2",
    ]
    .map(String::from);
    // 503: unreachable, so the whole origin is disallowed: no page is requested.
    let (url, seen) = robots_site(503, false).await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = fast.to_vec();
    args.extend(["--out".into(), "-".into(), url.clone()]);
    let out = crawl_async(dir.path(), args).await;
    let seen_now = seen.lock().unwrap().clone();
    assert!(seen_now.iter().all(|p| p == "/robots.txt"), "{seen_now:?}");
    assert_eq!(
        seen_now.len(),
        3,
        "robots.txt tried 1 + 2 retries: {seen_now:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("robots.txt unreachable"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("robots.txt unreachable"));

    // A redirect is followed to the real file, whose rules then apply.
    let (url, seen) = robots_site(200, true).await;
    let dir = tempfile::tempdir().unwrap();
    let out = crawl_async(dir.path(), vec![url.clone()]).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let seen_now = seen.lock().unwrap().clone();
    assert!(
        seen_now.contains(&"/real-robots.txt".to_string()),
        "{seen_now:?}"
    );
    assert!(seen_now.contains(&"/y".to_string()), "{seen_now:?}");
    assert!(
        !seen_now.iter().any(|p| p.starts_with("/private")),
        "{seen_now:?}"
    );

    // 404: unavailable, so everything is allowed.
    let (url, seen) = robots_site(404, false).await;
    let dir = tempfile::tempdir().unwrap();
    let out = crawl_async(dir.path(), vec![url.clone()]).await;
    assert_eq!(code(&out), 0);
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|p| p.starts_with("/private"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_in_prometheus_text_while_crawling() {
    let (url, _seen) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Slow enough (1 s between pages) to be scraped mid-crawl.
    let mut child = frontier(dir.path())
        .args(["crawl", "--progress", "quiet", "-s", "download_delay=1"])
        .args(["-s", "randomize_download_delay=false", "--metrics"])
        .arg(format!("127.0.0.1:{port}"))
        .arg(&url)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut text = String::new();
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        if let Ok(r) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await {
            text = r.text().await.unwrap_or_default();
            if text.contains("frontier_scope_delay_seconds") && text.contains("class=\"2xx\"") {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    for needle in [
        "# HELP frontier_requests_sent_total",
        "frontier_responses_total{class=\"2xx\"}",
        "frontier_queue_length",
        "frontier_scope_delay_seconds{scope=\"127.0.0.1:",
        "frontier_scope_backoff_level",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

/// `/` links to /a (rel=nofollow) and /b; /b says nofollow in its robots meta and links
/// to /c; robots.txt lists a sitemap (gzip is read too) naming /orphan, linked from
/// nowhere; /latin is Latin-1 and links to /caf%C3%A9 (its link text is "café").
async fn directives_site() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::http::header::CONTENT_TYPE;
    use axum::response::IntoResponse;
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: HeaderMap| {
            let log = log.clone();
            async move {
                let host = headers.get("host").unwrap().to_str().unwrap().to_string();
                let path = uri.path().to_string();
                log.lock().unwrap().push(path.clone());
                let html = |b: &str| ([(CONTENT_TYPE, "text/html")], b.to_string()).into_response();
                match path.as_str() {
                    "/robots.txt" => format!("User-agent: *\nAllow: /\nSitemap: http://{host}/sitemap.xml\n")
                        .into_response(),
                    "/sitemap.xml" => format!(
                        r#"<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://{host}/orphan</loc></url><url><loc>http://{host}/latin</loc></url></urlset>"#
                    )
                    .into_response(),
                    "/" => html(r#"<a rel="nofollow" href="/a">a</a> <a href="/b">b</a>"#),
                    "/b" => html(r#"<meta name="robots" content="nofollow"><a href="/c">c</a>"#),
                    "/latin" => (
                        [(CONTENT_TYPE, "text/html; charset=iso-8859-1")],
                        b"<a href=\"/caf\xe9\">caf\xe9</a>".to_vec(),
                    )
                        .into_response(),
                    _ => html("leaf"),
                }
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sitemaps_nofollow_and_charsets() {
    let (url, seen) = directives_site().await;
    let dir = tempfile::tempdir().unwrap();
    let out = crawl_async(dir.path(), vec![url.clone()]).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let mut paths = seen.lock().unwrap().clone();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/",
            "/b",
            "/caf%C3%A9",
            "/latin",
            "/orphan",
            "/robots.txt",
            "/sitemap.xml"
        ],
        "nofollow links skipped, the sitemap's pages crawled, the Latin-1 link decoded"
    );

    // Told to ignore the directives: /a and /c too.
    let (url, seen) = directives_site().await;
    let dir = tempfile::tempdir().unwrap();
    let out = crawl_async(dir.path(), vec!["--ignore-robots-meta".into(), url]).await;
    assert_eq!(code(&out), 0);
    let paths = seen.lock().unwrap().clone();
    assert!(
        paths.contains(&"/a".to_string()) && paths.contains(&"/c".to_string()),
        "{paths:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_through_the_proxy() {
    // The local site plays an HTTP proxy: requests for a host that does not resolve
    // reach it only through --proxy.
    let (proxy, seen) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let out = crawl_async(
        dir.path(),
        vec!["--proxy".into(), proxy, "http://example.invalid/".into()],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let paths = seen.lock().unwrap().clone();
    assert!(paths.iter().any(|p| p.starts_with("/a ")), "{paths:?}");
}
