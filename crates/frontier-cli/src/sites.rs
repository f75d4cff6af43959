//! A small web of local sites on loopback, for `frontier demo` and the end-to-end tests.
//!
//! One HTTP server on `127.0.0.1` answers for every host (routed by the `Host` header);
//! crawlers reach the hosts through a DNS override ([`DemoWeb::resolve`]), so URLs stay
//! `http://books.test/page/7` whatever port the server got, and a resumed crawl sees the
//! same URLs. Pages are generated deterministically: page `n` of a host links to `n + 1`
//! (so every page is reachable from page 0) and to a few others chosen by a hash, some on
//! other hosts. Each host can be slow, rate-limited (429, with or without `Retry-After`),
//! have a robots.txt (Crawl-delay, Disallow), or serve some links as redirects.
//!
//! The server records every arrival ([`WebLog`]): the tests check from it that no host saw
//! more concurrency or less spacing than configured and that disallowed pages were never
//! requested.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A host's server-side rate limit: at most `per_second` requests in any one second;
/// more are answered 429.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Requests accepted per sliding second.
    pub per_second: u32,
    /// The `Retry-After` value sent with a 429, in seconds (`None`: no header).
    pub retry_after: Option<u32>,
}

/// One site of the demo web.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    /// Its host name (resolved to the local server).
    pub host: String,
    /// Pages `/page/0` .. `/page/{pages - 1}`.
    pub pages: u32,
    /// Time the server takes per page.
    pub latency: Duration,
    /// Server-side rate limit.
    pub limit: Option<RateLimit>,
    /// robots.txt `Crawl-delay` in seconds (served when set, or when `private` is).
    pub crawl_delay: Option<f64>,
    /// Pages also link to `/private/{n}`, which robots.txt disallows.
    pub private: bool,
    /// Every other `n + 1` link is `/old/{n + 1}`, which answers 301 to `/page/{n + 1}`.
    pub redirects: bool,
    /// Links per page besides the `n + 1` chain.
    pub links: u32,
}

impl Site {
    /// A plain fast site with `pages` pages.
    pub fn new(host: impl Into<String>, pages: u32) -> Self {
        Site {
            host: host.into(),
            pages,
            latency: Duration::from_millis(2),
            limit: None,
            crawl_delay: None,
            private: false,
            redirects: false,
            links: 4,
        }
    }

    fn robots_txt(&self) -> Option<String> {
        if self.crawl_delay.is_none() && !self.private {
            return None;
        }
        let mut txt = String::from("User-agent: *\n");
        if self.private {
            txt.push_str("Disallow: /private/\n");
        }
        if let Some(d) = self.crawl_delay {
            txt.push_str(&format!("Crawl-delay: {d}\n"));
        }
        Some(txt)
    }
}

/// The standard demo web with about `pages` pages in all: a plain site, a site with a
/// robots.txt Crawl-delay and a disallowed area, a rate-limited API (429 + Retry-After
/// beyond 20 requests a second), a slow site, and a shop whose old links redirect.
pub fn demo_sites(pages: u32) -> Vec<Site> {
    let share = |percent: u32| (pages * percent / 100).max(1);
    vec![
        Site {
            links: 5,
            ..Site::new("books.test", share(30))
        },
        Site {
            crawl_delay: Some(0.1),
            private: true,
            ..Site::new("news.test", share(15))
        },
        Site {
            limit: Some(RateLimit {
                per_second: 20,
                retry_after: Some(1),
            }),
            ..Site::new("api.test", share(25))
        },
        Site {
            latency: Duration::from_millis(300),
            ..Site::new("slow.test", share(15))
        },
        Site {
            redirects: true,
            ..Site::new("shop.test", share(15))
        },
    ]
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// When it arrived.
    pub at: Instant,
    /// The path asked for.
    pub path: String,
    /// The status answered (0 while the answer is being prepared).
    pub status: u16,
}

/// What one host saw.
#[derive(Clone, Debug, Default)]
pub struct HostLog {
    /// Every request, in arrival order.
    pub arrivals: Vec<Arrival>,
    /// Requests being answered now.
    pub in_flight: u32,
    /// The most requests ever answered at once.
    pub max_in_flight: u32,
}

impl HostLog {
    /// Requests answered with `status`.
    pub fn count(&self, status: u16) -> usize {
        self.arrivals.iter().filter(|a| a.status == status).count()
    }

    /// How many times `path` was requested.
    pub fn hits(&self, path: &str) -> usize {
        self.arrivals.iter().filter(|a| a.path == path).count()
    }

    /// The smallest gap between two arrivals (of any path).
    pub fn min_spacing(&self) -> Option<Duration> {
        self.arrivals
            .windows(2)
            .map(|w| w[1].at.saturating_duration_since(w[0].at))
            .min()
    }
}

/// Every host's log.
#[derive(Clone, Debug, Default)]
pub struct WebLog {
    /// By host name.
    pub hosts: HashMap<String, HostLog>,
}

struct Web {
    sites: HashMap<String, Site>,
    log: Mutex<WebLog>,
}

/// The running web: stops when dropped.
pub struct DemoWeb {
    addr: SocketAddr,
    web: Arc<Web>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for DemoWeb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoWeb")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for DemoWeb {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl DemoWeb {
    /// Starts serving `sites` on an ephemeral loopback port (inside a tokio runtime).
    pub async fn start(sites: Vec<Site>) -> std::io::Result<DemoWeb> {
        let web = Arc::new(Web {
            sites: sites.into_iter().map(|s| (s.host.clone(), s)).collect(),
            log: Mutex::new(WebLog::default()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new().fallback(serve).with_state(web.clone());
        let server = tokio::spawn(async move {
            // Serving ends only with the runtime or `abort`.
            let _ = axum::serve(listener, app).await;
        });
        Ok(DemoWeb { addr, web, server })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// DNS overrides sending every host of the web to the server.
    pub fn resolve(&self) -> Vec<(String, SocketAddr)> {
        let mut hosts: Vec<_> = self.web.sites.keys().cloned().collect();
        hosts.sort();
        hosts.into_iter().map(|h| (h, self.addr)).collect()
    }

    /// The start URL of every site (`http://{host}/page/0`), sorted.
    pub fn seeds(&self) -> Vec<String> {
        let mut seeds: Vec<_> = self
            .web
            .sites
            .keys()
            .map(|h| format!("http://{h}/page/0"))
            .collect();
        seeds.sort();
        seeds
    }

    /// The sites served.
    pub fn sites(&self) -> Vec<Site> {
        let mut sites: Vec<_> = self.web.sites.values().cloned().collect();
        sites.sort_by(|a, b| a.host.cmp(&b.host));
        sites
    }

    /// A copy of what the server has seen so far.
    pub fn log(&self) -> WebLog {
        lock(&self.web.log).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// FNV-1a: a small stable hash so the generated link graph is the same on every run.
fn hash(host: &str, n: u32, k: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes().chain(n.to_le_bytes()).chain(k.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn page_html(web: &Web, site: &Site, n: u32) -> String {
    let mut links = Vec::new();
    if n + 1 < site.pages {
        if site.redirects && n.is_multiple_of(2) {
            links.push(format!("/old/{}", n + 1));
        } else {
            links.push(format!("/page/{}", n + 1));
        }
    }
    let mut others: Vec<&Site> = web.sites.values().filter(|s| s.host != site.host).collect();
    others.sort_by(|a, b| a.host.cmp(&b.host));
    for k in 0..site.links {
        let h = hash(&site.host, n, k);
        // One link in eight goes to another site (when there is one).
        if h.is_multiple_of(8) && !others.is_empty() {
            let other = others[(h >> 8) as usize % others.len()];
            let page = (h >> 20) as u32 % other.pages.max(1);
            links.push(format!("http://{}/page/{page}", other.host));
        } else {
            links.push(format!("/page/{}", (h >> 8) as u32 % site.pages.max(1)));
        }
    }
    if site.private {
        links.push(format!("/private/{n}"));
    }
    let anchors: String = links
        .iter()
        .map(|l| format!("<li><a href=\"{l}\">{l}</a></li>"))
        .collect();
    format!(
        "<!doctype html><html><head><title>{host} page {n}</title></head>\
         <body><h1>{host}, page {n}</h1><ul>{anchors}</ul></body></html>",
        host = site.host
    )
}

async fn serve(State(web): State<Arc<Web>>, request: Request) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| h.split(':').next().unwrap_or(h).to_ascii_lowercase())
        .unwrap_or_default();
    let path = request.uri().path().to_string();
    let Some(site) = web.sites.get(&host) else {
        return (StatusCode::NOT_FOUND, "unknown host").into_response();
    };
    let arrived = Instant::now();
    // Decide at arrival (rate limits count arrivals, including those still being
    // answered) and record the arrival at once, so the log is in arrival order.
    let (limited, index) = {
        let mut log = lock(&web.log);
        let host_log = log.hosts.entry(host.clone()).or_default();
        let limited = site.limit.is_some_and(|limit| {
            let window = Duration::from_secs(1);
            let recent = host_log
                .arrivals
                .iter()
                .rev()
                .take_while(|a| arrived.saturating_duration_since(a.at) < window)
                .filter(|a| a.status != 429)
                .count();
            recent >= limit.per_second as usize
        });
        host_log.in_flight += 1;
        host_log.max_in_flight = host_log.max_in_flight.max(host_log.in_flight);
        host_log.arrivals.push(Arrival {
            at: arrived,
            path: path.clone(),
            status: if limited { 429 } else { 0 },
        });
        (limited, host_log.arrivals.len() - 1)
    };
    let response = if limited {
        let limit = site.limit.expect("limited implies a limit");
        let mut response = (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
        if let Some(secs) = limit.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    } else {
        tokio::time::sleep(site.latency).await;
        answer(&web, site, &path)
    };
    let mut log = lock(&web.log);
    let host_log = log.hosts.entry(host).or_default();
    host_log.in_flight -= 1;
    host_log.arrivals[index].status = response.status().as_u16();
    response
}

fn answer(web: &Web, site: &Site, path: &str) -> Response {
    if path == "/robots.txt" {
        return match site.robots_txt() {
            Some(txt) => ([(header::CONTENT_TYPE, "text/plain")], txt).into_response(),
            None => (StatusCode::NOT_FOUND, "no robots.txt").into_response(),
        };
    }
    let number = |prefix: &str| -> Option<u32> {
        path.strip_prefix(prefix)
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|&n| n < site.pages)
    };
    if let Some(n) = number("/page/") {
        let html = page_html(web, site, n);
        return ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    }
    if site.redirects
        && let Some(n) = number("/old/")
    {
        return (
            StatusCode::MOVED_PERMANENTLY,
            [(header::LOCATION, format!("/page/{n}"))],
        )
            .into_response();
    }
    if site.private
        && let Some(n) = number("/private/")
    {
        return (
            [(header::CONTENT_TYPE, "text/html")],
            format!("<p>private {n}</p>"),
        )
            .into_response();
    }
    (StatusCode::NOT_FOUND, "no such page").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_is_reachable_from_page_zero() {
        let sites = demo_sites(400);
        let web = Web {
            sites: sites.iter().map(|s| (s.host.clone(), s.clone())).collect(),
            log: Mutex::new(WebLog::default()),
        };
        for site in &sites {
            let html = page_html(&web, site, 0);
            assert!(
                html.contains("/page/1") || html.contains("/old/1"),
                "{html}"
            );
        }
        let news = &web.sites["news.test"];
        assert!(news.robots_txt().unwrap().contains("Crawl-delay: 0.1"));
        assert!(page_html(&web, news, 3).contains("/private/3"));
        assert_eq!(page_html(&web, news, 3), page_html(&web, news, 3));
    }
}
