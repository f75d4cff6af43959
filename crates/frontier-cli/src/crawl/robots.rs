//! robots.txt per origin (RFC 9309): fetched through the frontier, cached for a
//! lifetime, shared by workers.
//!
//! - 2xx: parsed (the first 500 KiB, the least RFC 9309 requires a parser to read);
//! - 3xx: followed, up to 5 hops (more: treated as unavailable, like a 4xx);
//! - 4xx ("unavailable"): allow all;
//! - 5xx, or no answer after the retries ("unreachable"): disallow all, and fetch it
//!   again when the cache entry ends (`crawl.robotstxt_unreachable_retry`, default 10
//!   minutes) instead of after the full lifetime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use url::Url;

/// What robots.txt allows on one origin.
#[derive(Clone)]
pub enum Rules {
    /// No usable robots.txt (404, other 4xx, too many redirects): allow all.
    AllowAll,
    /// robots.txt answered 5xx or could not be reached: nothing may be fetched (RFC 9309
    /// 2.3.1.4) until it is fetched again.
    DisallowAll,
    /// A parsed robots.txt.
    Parsed(Arc<texting_robots::Robot>),
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rules::AllowAll => f.write_str("AllowAll"),
            Rules::DisallowAll => f.write_str("DisallowAll"),
            Rules::Parsed(r) => f.debug_struct("Parsed").field("delay", &r.delay).finish(),
        }
    }
}

impl Rules {
    /// Whether `url` may be fetched.
    pub fn allowed(&self, url: &str) -> bool {
        match self {
            Rules::AllowAll => true,
            Rules::DisallowAll => false,
            Rules::Parsed(robot) => robot.allowed(url),
        }
    }

    /// The sitemaps it lists (`Sitemap:` lines).
    pub fn sitemaps(&self) -> Vec<String> {
        match self {
            Rules::Parsed(robot) => robot.sitemaps.clone(),
            _ => Vec::new(),
        }
    }

    /// The Crawl-delay, if any.
    pub fn crawl_delay(&self) -> Option<f64> {
        match self {
            Rules::AllowAll | Rules::DisallowAll => None,
            // The parser keeps an f32; go through its shortest decimal form so that
            // `Crawl-delay: 0.1` is 0.1 s, not 0.10000000149 s.
            Rules::Parsed(robot) => robot.delay.and_then(|d| d.to_string().parse::<f64>().ok()),
        }
    }
}

/// Where an origin's robots.txt stands.
pub(crate) enum Lookup {
    /// Known.
    Ready(Rules),
    /// Being fetched: wait on the receiver.
    Pending(watch::Receiver<Option<Rules>>),
    /// Never asked for: the caller now owns fetching it (the entry is marked pending).
    Unknown,
}

/// The robots.txt of every origin seen, shared by the workers.
#[derive(Default)]
pub(crate) struct RobotsCache {
    origins: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    rules: watch::Sender<Option<Rules>>,
    /// When the rules must be fetched again (unset while pending).
    expires: Option<Instant>,
}

impl std::fmt::Debug for RobotsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobotsCache").finish_non_exhaustive()
    }
}

/// `scheme://host[:port]` of `url`.
pub(crate) fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// The robots.txt URL of `url`'s origin.
pub(crate) fn robots_url(url: &Url) -> String {
    format!("{}/robots.txt", origin(url))
}

impl RobotsCache {
    /// Where `origin`'s robots.txt stands; `Unknown` marks it pending, so exactly one
    /// caller is told to fetch it.
    /// Rules past their lifetime count as unknown: the caller fetches them again.
    pub(crate) fn lookup(&self, origin: &str) -> Lookup {
        self.lookup_at(origin, Instant::now())
    }

    fn lookup_at(&self, origin: &str, now: Instant) -> Lookup {
        let mut origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = origins.get_mut(origin) {
            let rx = entry.rules.subscribe();
            let known = rx.borrow().clone();
            match known {
                Some(rules) if entry.expires.is_none_or(|e| now < e) => {
                    return Lookup::Ready(rules);
                }
                Some(_) => {
                    // Expired: pending again until the new copy arrives.
                    entry.rules.send_replace(None);
                    entry.expires = None;
                    return Lookup::Unknown;
                }
                None => return Lookup::Pending(rx),
            }
        }
        origins.insert(
            origin.to_string(),
            Entry {
                rules: watch::channel(None).0,
                expires: None,
            },
        );
        Lookup::Unknown
    }

    /// Whether `origin`'s rules are known (and current).
    pub(crate) fn is_ready(&self, origin: &str) -> bool {
        let origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        origins.get(origin).is_some_and(|e| {
            e.rules.borrow().is_some() && e.expires.is_none_or(|x| Instant::now() < x)
        })
    }

    /// Records `origin`'s rules for `lifetime` and wakes whoever waits for them.
    pub(crate) fn set(&self, origin: &str, rules: Rules, lifetime: Duration) {
        let mut origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        let entry = origins.entry(origin.to_string()).or_insert_with(|| Entry {
            rules: watch::channel(None).0,
            expires: None,
        });
        entry.expires = Instant::now().checked_add(lifetime);
        entry.rules.send_replace(Some(rules));
    }
}

/// Waits until a pending origin's rules are known.
pub(crate) async fn wait(mut rx: watch::Receiver<Option<Rules>>) -> Option<Rules> {
    rx.wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|r| r.clone())
}

/// The most of a robots.txt body that is parsed (RFC 9309 2.5: at least 500 KiB).
pub(crate) const PARSE_LIMIT: usize = 500 * 1024;

/// Parses a robots.txt body for `agent` (its first 500 KiB); a body that
/// cannot be parsed allows all.
pub fn parse(agent: &str, body: &[u8]) -> Rules {
    // robots.txt groups match on the product token, not the whole User-Agent string.
    let token = agent.split(['/', ' ']).next().unwrap_or(agent);
    let body = &body[..body.len().min(PARSE_LIMIT)];
    match texting_robots::Robot::new(token, body) {
        Ok(robot) => Rules::Parsed(Arc::new(robot)),
        Err(_) => Rules::AllowAll,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_and_delay() {
        let rules = parse(
            "mybot/1.0 (+https://x)",
            b"User-agent: *\nDisallow: /private/\nCrawl-delay: 0.5\n",
        );
        assert!(rules.allowed("http://a.test/page/1"));
        assert!(!rules.allowed("http://a.test/private/1"));
        assert_eq!(rules.crawl_delay(), Some(0.5));
        let rules = parse("bot", b"User-agent: *\nCrawl-delay: 0.1\n");
        assert_eq!(rules.crawl_delay(), Some(0.1));
        assert!(Rules::AllowAll.allowed("http://a.test/private/1"));
    }

    #[tokio::test]
    async fn one_fetcher_many_waiters() {
        let cache = RobotsCache::default();
        assert!(matches!(cache.lookup("http://a.test"), Lookup::Unknown));
        let Lookup::Pending(rx) = cache.lookup("http://a.test") else {
            panic!("second lookup must wait")
        };
        let waiter = tokio::spawn(wait(rx));
        cache.set("http://a.test", Rules::AllowAll, Duration::from_secs(60));
        assert!(matches!(waiter.await.unwrap(), Some(Rules::AllowAll)));
        assert!(matches!(cache.lookup("http://a.test"), Lookup::Ready(_)));
        assert!(cache.is_ready("http://a.test"));
        // Past its lifetime, the next lookup fetches it again (once).
        let later = Instant::now() + Duration::from_secs(61);
        assert!(matches!(
            cache.lookup_at("http://a.test", later),
            Lookup::Unknown
        ));
        assert!(matches!(
            cache.lookup_at("http://a.test", later),
            Lookup::Pending(_)
        ));
    }

    #[test]
    fn disallow_all_and_the_parse_limit() {
        assert!(!Rules::DisallowAll.allowed("http://a.test/"));
        assert_eq!(Rules::DisallowAll.crawl_delay(), None);
        // A rule beyond 500 KiB is not read.
        let mut body = b"User-agent: *\n".to_vec();
        while body.len() < PARSE_LIMIT {
            body.extend_from_slice(b"# padding padding padding padding padding\n");
        }
        body.extend_from_slice(b"Disallow: /late/\n");
        assert!(parse("bot", &body).allowed("http://a.test/late/x"));
        let short = b"User-agent: *\nDisallow: /late/\n";
        assert!(!parse("bot", short).allowed("http://a.test/late/x"));
    }
}
