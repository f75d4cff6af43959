//! A crawler without tokio: the async-io driver (async-std, smol or any executor; here
//! async-executor, smol's), a crash-safe queue in a directory (the `fs` store), and a
//! minimal HTTP/1.0 client over `async_io::Async<TcpStream>` (plain `http://` only).
//!
//!     cargo run -p polite-frontier --features async-std,fs --example smol_crawler -- http://127.0.0.1:8000/
#![allow(clippy::print_stdout)] // examples print what they do
use std::net::TcpStream;

use async_io::Async;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use polite_frontier::async_std::{Clock, Driver};
use polite_frontier::fs::{FsConfig, FsStore};
use polite_frontier::{Frontier, FrontierConfig, Outcome, Request, Settings};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let seed = std::env::args()
        .nth(1)
        .unwrap_or("http://127.0.0.1:8000/".into());
    let settings = Settings::default().download_delay(0.1);
    let store = FsStore::open("crawl.frontier", FsConfig::default())?;
    let clock = Clock::wall();
    let frontier = Frontier::open(settings, FrontierConfig::default(), store, clock.now())?;
    let driver = Driver::new(frontier, clock);

    let ex = async_executor::Executor::new();
    futures_lite::future::block_on(ex.run(async {
        driver.push(Request::get(seed.as_str()).start()).await?;
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (driver, seed) = (driver.clone(), seed.clone());
                ex.spawn(async move {
                    while let Some(lease) = driver.next().await {
                        let lease = lease?;
                        let outcome = match get(&lease.request.url).await {
                            Ok((status, body)) => {
                                println!("{status} {}", lease.request.url);
                                for link in links(&body, &seed) {
                                    driver
                                        .push(Request::get(link).child_of(&lease.request))
                                        .await?;
                                }
                                Outcome::status(status)
                            }
                            Err(_) => Outcome::error("connection"),
                        };
                        driver.complete(lease.id(), outcome).await?;
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for worker in workers {
            worker.await?;
        }
        driver.close().await?;
        Ok(())
    }))
}

/// `GET url` over HTTP/1.0: the status and the body.
async fn get(url: &str) -> std::io::Result<(u16, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or(std::io::ErrorKind::InvalidInput)?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)?
        .next()
        .ok_or(std::io::ErrorKind::NotFound)?;
    let mut stream = Async::<TcpStream>::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// Absolute and root-relative `href`s that stay under the seed URL.
fn links(html: &str, seed: &str) -> Vec<String> {
    let origin = seed
        .find("//")
        .and_then(|i| seed[i + 2..].find('/').map(|j| &seed[..i + 2 + j]))
        .unwrap_or(seed);
    html.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split(['"', '#']).next())
        .map(|href| {
            if href.starts_with('/') {
                format!("{origin}{href}")
            } else {
                href.to_string()
            }
        })
        .filter(|url| url.starts_with(seed))
        .collect()
}
