//! Site models: servers that answer from a model (latency, rate limit, errors) and pages
//! that link to each other deterministically.
//!
//! Page `p` of a site with `pages` pages and `links_per_page = L` links to pages
//! `(p·L + 1 + i) mod pages` for `i` in `0..L`: a tree in which every page is reached
//! once from its parent, plus links that wrap around to pages already seen (duplicates
//! for the filter). With `cross_links = k`, it also links to `k` pages of other hosts
//! chosen by a hash of (seed, host, page, link), the same on every run.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use anyhow::anyhow;
use polite_frontier_core::{Lease, Request};
use polite_throttle_core::Timestamp;
use polite_throttle_core::headers::header_delay;
use polite_throttle_core::hooks::JitterRng;

use super::engine::{Dispatch, Fate, Sim, World};
use super::output::Answer;
use super::scenario::{RetryAfter, SimulationConfig, SiteModel};

/// Which page of which host a request is for.
pub(crate) type Page = (u32, u64);

/// The world of site models.
pub(crate) struct Sites<'s> {
    models: &'s [SiteModel],
    hosts: &'s [(Box<str>, u32)],
    by_host: HashMap<&'s str, u32>,
    /// Send times of the requests each rate-limited server accepted in its window.
    accepted: Vec<VecDeque<Timestamp>>,
    rng: JitterRng,
    seed: u64,
    retries: HashMap<Page, u32>,
    retry_times: u32,
    retry_codes: Vec<u16>,
    retry_adjust: i32,
    started: bool,
}

/// Mixes bits (splitmix64's finaliser): a deterministic hash for cross links.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The URL of page `page` of `host`.
pub(crate) fn page_url(host: &str, page: u64) -> String {
    // Built by hand: `format!` was a visible share of a million-page run.
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = page;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = std::str::from_utf8(&digits[at..]).expect("ASCII digits");
    let mut url = String::with_capacity(11 + host.len() + digits.len());
    url.push_str("https://");
    url.push_str(host);
    url.push_str("/p/");
    url.push_str(digits);
    url
}

impl<'s> Sites<'s> {
    /// The world of `models` over `hosts` (`(host, model index)`).
    pub(crate) fn new(
        models: &'s [SiteModel],
        hosts: &'s [(Box<str>, u32)],
        simulation: &SimulationConfig,
        seed: u64,
    ) -> Self {
        Sites {
            models,
            hosts,
            by_host: hosts
                .iter()
                .enumerate()
                .map(|(i, (h, _))| (&**h, i as u32))
                .collect(),
            accepted: (0..hosts.len()).map(|_| VecDeque::new()).collect(),
            // Its own stream: the throttler's jitter draws do not shift the models'.
            rng: JitterRng::new(mix(seed ^ 0x5349_5445_5321)),
            seed,
            retries: HashMap::new(),
            retry_times: simulation.retry_times,
            retry_codes: simulation.retry_http_codes.clone(),
            retry_adjust: simulation.retry_priority_adjust,
            started: false,
        }
    }

    fn model(&self, host: u32) -> &'s SiteModel {
        &self.models[self.hosts[host as usize].1 as usize]
    }

    fn page_of(&self, url: &str) -> Option<Page> {
        let rest = url.strip_prefix("https://")?;
        let (host, path) = rest.split_once('/')?;
        let h = *self.by_host.get(host)?;
        let page = path.strip_prefix("p/")?.parse().ok()?;
        Some((h, page))
    }

    fn latency(&mut self, (lo, hi): (u64, u64)) -> u64 {
        if lo == hi {
            lo
        } else {
            let span = (hi - lo) as f64;
            lo + (self.rng.uniform(0.0, span).round() as u64).min(hi - lo)
        }
    }

    /// What the server of `host` answers to a request arriving at `now`, and the
    /// `Retry-After` seconds it sends with a refusal.
    fn answer(&mut self, host: u32, now: Timestamp) -> (Answer, Option<u64>) {
        let model = self.model(host);
        let Some(limit) = model.rate_limit else {
            return (Answer::Status(200), None);
        };
        let window = Duration::from_nanos(limit.per);
        let accepted = &mut self.accepted[host as usize];
        while accepted.front().is_some_and(|&t| t + window <= now) {
            accepted.pop_front();
        }
        if accepted.len() < limit.requests as usize {
            accepted.push_back(now);
            return (Answer::Status(200), None);
        }
        let retry_after = limit.retry_after.map(|r| match r {
            RetryAfter::Fixed(secs) => secs,
            RetryAfter::Auto => {
                let oldest = *accepted.front().expect("a full window");
                let free_at = oldest + window;
                let wait = free_at.saturating_duration_since(now).as_nanos() as u64;
                wait.div_ceil(1_000_000_000).max(1)
            }
        });
        (Answer::Status(limit.status), retry_after)
    }

    fn push_links(
        &mut self,
        sim: &mut Sim<'_>,
        (host, page): Page,
        depth: u32,
        now: Timestamp,
    ) -> anyhow::Result<()> {
        let model = self.model(host);
        let name = &self.hosts[host as usize].0;
        let links = u128::from(model.links_per_page);
        for i in 0..links {
            let target = ((u128::from(page) * links + 1 + i) % u128::from(model.pages)) as u64;
            let request = Request::get(page_url(name, target)).depth(depth);
            sim.push(&request, &request.url, now)?;
        }
        let n = self.hosts.len() as u64;
        if n > 1 {
            for j in 0..u64::from(model.cross_links) {
                let x = mix(self.seed ^ mix((u64::from(host) << 32) ^ j) ^ page.rotate_left(17));
                let other = ((u64::from(host) + 1 + x % (n - 1)) % n) as u32;
                let target = mix(x) % self.model(other).pages;
                let request =
                    Request::get(page_url(&self.hosts[other as usize].0, target)).depth(depth);
                sim.push(&request, &request.url, now)?;
            }
        }
        Ok(())
    }
}

impl<'s> World for Sites<'s> {
    type Tag = Page;

    fn next_input(&self) -> Option<Timestamp> {
        (!self.started).then_some(Timestamp::ZERO)
    }

    fn apply_inputs(&mut self, sim: &mut Sim<'_>, now: Timestamp) -> anyhow::Result<()> {
        self.started = true;
        // robots.txt is read before anything else is fetched.
        for (host, model) in self.hosts {
            if let Some(delay) = self.models[*model as usize].crawl_delay {
                sim.frontier()
                    .handle_crawl_delay(host, delay, now)
                    .map_err(|e| anyhow!("Crawl-delay of {host}: {e}"))?;
            }
        }
        for (host, _) in self.hosts {
            let request = Request::get(page_url(host, 0)).start();
            sim.push(&request, &request.url, now)?;
        }
        Ok(())
    }

    fn send(&mut self, lease: Lease, now: Timestamp) -> anyhow::Result<Dispatch<Page>> {
        let url = lease.request.url;
        let page = self
            .page_of(&url)
            .ok_or_else(|| anyhow!("internal error: {url} is not a modelled page"))?;
        let model = self.model(page.0);
        if model.error_rate > 0.0 && self.rng.next_f64() < model.error_rate {
            return Ok(Dispatch {
                label: url,
                latency: model.timeout,
                answer: Answer::Error(model.error.clone()),
                header_delay: None,
                tag: page,
            });
        }
        let (answer, retry_after) = self.answer(page.0, now);
        let latency = self.latency(model.latency);
        let header_delay = retry_after.and_then(|secs| {
            let value = secs.to_string();
            header_delay([("Retry-After", value.as_str())], None)
        });
        Ok(Dispatch {
            label: url,
            latency,
            answer,
            header_delay,
            tag: page,
        })
    }

    fn fate(&mut self, page: &Page, answer: &Answer) -> Fate {
        let retryable = match answer {
            Answer::Status(s) => self.retry_codes.contains(s),
            Answer::Error(_) => true,
        };
        if retryable && self.retry_times > 0 {
            let tries = self.retries.entry(*page).or_insert(0);
            if *tries < self.retry_times {
                *tries += 1;
                return Fate::Retry(self.retry_adjust);
            }
        }
        if !self.retries.is_empty() {
            self.retries.remove(page);
        }
        Fate::Complete
    }

    fn arrived(
        &mut self,
        sim: &mut Sim<'_>,
        page: Page,
        depth: u32,
        answer: &Answer,
        fate: Fate,
        now: Timestamp,
    ) -> anyhow::Result<()> {
        match (fate, answer) {
            (Fate::Complete, Answer::Status(s)) if (200..300).contains(s) => {
                self.push_links(sim, page, depth.saturating_add(1), now)
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_urls() {
        assert_eq!(page_url("a.example", 0), "https://a.example/p/0");
        assert_eq!(page_url("a.example", 907), "https://a.example/p/907");
        assert_eq!(
            page_url("b.example", u64::MAX),
            format!("https://b.example/p/{}", u64::MAX)
        );
    }

    #[test]
    fn mixing_is_stable() {
        // Cross links must not change between builds or platforms.
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_ne!(mix(1), mix(2));
    }
}
