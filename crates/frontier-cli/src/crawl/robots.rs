//! robots.txt per origin: fetched once through the frontier, cached, shared by workers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use url::Url;

/// What robots.txt allows on one origin.
#[derive(Clone)]
pub enum Rules {
    /// No usable robots.txt (404, other 4xx, or it could not be fetched): allow all.
    AllowAll,
    /// A parsed robots.txt.
    Parsed(Arc<texting_robots::Robot>),
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rules::AllowAll => f.write_str("AllowAll"),
            Rules::Parsed(r) => f.debug_struct("Parsed").field("delay", &r.delay).finish(),
        }
    }
}

impl Rules {
    /// Whether `url` may be fetched.
    pub fn allowed(&self, url: &str) -> bool {
        match self {
            Rules::AllowAll => true,
            Rules::Parsed(robot) => robot.allowed(url),
        }
    }

    /// The Crawl-delay, if any.
    pub fn crawl_delay(&self) -> Option<f64> {
        match self {
            Rules::AllowAll => None,
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
    origins: Mutex<HashMap<String, watch::Sender<Option<Rules>>>>,
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
    pub(crate) fn lookup(&self, origin: &str) -> Lookup {
        let mut origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = origins.get(origin) {
            let rx = tx.subscribe();
            return match rx.borrow().clone() {
                Some(rules) => Lookup::Ready(rules),
                None => Lookup::Pending(rx.clone()),
            };
        }
        origins.insert(origin.to_string(), watch::channel(None).0);
        Lookup::Unknown
    }

    /// Whether `origin`'s rules are known.
    pub(crate) fn is_ready(&self, origin: &str) -> bool {
        let origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        origins.get(origin).is_some_and(|tx| tx.borrow().is_some())
    }

    /// Records `origin`'s rules and wakes whoever waits for them.
    pub(crate) fn set(&self, origin: &str, rules: Rules) {
        let mut origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        let tx = origins
            .entry(origin.to_string())
            .or_insert_with(|| watch::channel(None).0);
        tx.send_replace(Some(rules));
    }
}

/// Waits until a pending origin's rules are known.
pub(crate) async fn wait(mut rx: watch::Receiver<Option<Rules>>) -> Option<Rules> {
    rx.wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|r| r.clone())
}

/// Parses a robots.txt body for `agent`; a body that cannot be parsed allows all.
pub fn parse(agent: &str, body: &[u8]) -> Rules {
    // robots.txt groups match on the product token, not the whole User-Agent string.
    let token = agent.split(['/', ' ']).next().unwrap_or(agent);
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
        cache.set("http://a.test", Rules::AllowAll);
        assert!(matches!(waiter.await.unwrap(), Some(Rules::AllowAll)));
        assert!(matches!(cache.lookup("http://a.test"), Lookup::Ready(_)));
        assert!(cache.is_ready("http://a.test"));
    }
}
