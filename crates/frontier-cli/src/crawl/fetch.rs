//! One HTTP exchange: the client, the fetch, and what the crawl reads from it.

use super::*;

pub(super) fn client(
    crawl: &CrawlSettings,
    options: &CrawlOptions,
) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &options.headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| crate::UsageError::new(format!("header {name:?}: {e}")))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|e| crate::UsageError::new(format!("header {name}: {e}")))?;
        headers.append(name, value);
    }
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs_f64(crawl.download_timeout))
        .connect_timeout(Duration::from_secs_f64(crawl.download_timeout.min(30.0)))
        .user_agent(&crawl.user_agent)
        .default_headers(headers)
        .cookie_store(options.cookies)
        .pool_max_idle_per_host(16);
    if options.warc.is_some() {
        // The archive keeps the bytes as the server sent them: ask for no compression.
        builder = builder.no_gzip().no_brotli();
    }
    if let Some(proxy) = &options.proxy {
        let proxy = reqwest::Proxy::all(proxy)
            .map_err(|e| crate::UsageError::new(format!("--proxy {proxy:?}: {e}")))?;
        builder = builder.proxy(proxy);
    }
    for (host, addr) in &options.resolve {
        builder = builder.resolve(host, *addr);
    }
    builder
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))
}

/// The error kind a failed exchange reports to backoff.
pub(super) fn error_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_body() || e.is_decode() {
        "data_loss"
    } else {
        "connection"
    }
}

/// An error with its causes, on one line.
pub(super) fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// How one exchange ended.
pub(super) enum Fetched {
    Response {
        status: u16,
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
        content_type: Option<String>,
        /// The body was cut at `download_maxsize`.
        truncated: bool,
        /// From sending the request to the body's end.
        elapsed: Duration,
        /// The server's address.
        ip: Option<std::net::IpAddr>,
        /// `HTTP/1.1`, `HTTP/2.0`, ...
        version: &'static str,
    },
    Failed {
        kind: &'static str,
        message: String,
    },
}

pub(super) fn sha256_hex(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(super) fn response_outcome(status: u16, headers: &[(String, Vec<u8>)]) -> Outcome<'static> {
    Outcome::response(
        status,
        headers.iter().map(|(k, v)| (k.as_bytes(), v.as_slice())),
        Some(unix_now()),
    )
}

pub(super) fn is_html(content_type: Option<&str>, body: &[u8]) -> bool {
    match content_type {
        Some(ct) => {
            let ct = ct.to_ascii_lowercase();
            ct.starts_with("text/html") || ct.starts_with("application/xhtml")
        }
        None => {
            let head = &body[..body.len().min(512)];
            let head = String::from_utf8_lossy(head).to_ascii_lowercase();
            head.contains("<html") || head.contains("<!doctype html")
        }
    }
}

impl<B> Ctx<B>
where
    B: CrawlFrontier,
    B::StoreError: std::error::Error + Send + Sync + 'static,
    B::Closed: Send + 'static,
{
    pub(super) async fn fetch(&self, url: &str) -> Fetched {
        let started = Instant::now();
        metrics::counter!("frontier_requests_sent_total").increment(1);
        let response = match self.client.get(url).send().await {
            Ok(r) => {
                let class = match r.status().as_u16() {
                    100..=199 => "1xx",
                    200..=299 => "2xx",
                    300..=399 => "3xx",
                    400..=499 => "4xx",
                    _ => "5xx",
                };
                metrics::counter!("frontier_responses_total", "class" => class).increment(1);
                if r.status() == 429 {
                    metrics::counter!("frontier_rate_limited_total").increment(1);
                }
                r
            }
            Err(e) => {
                metrics::counter!("frontier_transport_errors_total", "kind" => error_kind(&e))
                    .increment(1);
                return Fetched::Failed {
                    kind: error_kind(&e),
                    message: describe(&e),
                };
            }
        };
        let status = response.status().as_u16();
        let headers: Vec<(String, Vec<u8>)> = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
            .collect();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let ip = response.remote_addr().map(|a| a.ip());
        let version = match response.version() {
            reqwest::Version::HTTP_09 => "HTTP/0.9",
            reqwest::Version::HTTP_10 => "HTTP/1.0",
            reqwest::Version::HTTP_2 => "HTTP/2.0",
            reqwest::Version::HTTP_3 => "HTTP/3.0",
            _ => "HTTP/1.1",
        };
        let mut response = response;
        let mut body = Vec::new();
        let mut truncated = false;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = (self.crawl.download_maxsize as usize).saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if chunk.len() > room {
                        truncated = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Fetched::Failed {
                        kind: error_kind(&e),
                        message: describe(&e),
                    };
                }
            }
        }
        Fetched::Response {
            status,
            headers,
            body,
            content_type,
            truncated,
            elapsed: started.elapsed(),
            ip,
            version,
        }
    }
}
