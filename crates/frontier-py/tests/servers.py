"""Local servers for the tests: nginx sites with `limit_req` (429 + Retry-After beyond
the rate) and a throwaway redis-server. Each starts on a free loopback port, with its
files in a temporary directory, and stops when the context ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

NGINX_CANDIDATES = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start on port {port}")
            time.sleep(0.02)


def nginx_binary() -> str | None:
    for path in NGINX_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("nginx")


def write_site(root: Path, pages: int, links_per_page: int = 3) -> list[str]:
    """A site of `pages` static pages: the index links to every page, each page to a few
    others (duplicates for the filter). Returns the paths."""
    root.mkdir(parents=True, exist_ok=True)
    paths = ["/"] + [f"/p/{i}.html" for i in range(pages)]
    links = "".join(f'<a href="/p/{i}.html">{i}</a>\n' for i in range(pages))
    (root / "index.html").write_text(f"<html><body>{links}</body></html>")
    (root / "p").mkdir(exist_ok=True)
    for i in range(pages):
        others = "".join(
            f'<a href="/p/{(i + k) % pages}.html">next</a>\n' for k in range(1, links_per_page + 1)
        )
        (root / "p" / f"{i}.html").write_text(f"<html><body><h1>{i}</h1>{others}</body></html>")
    return paths


@contextlib.contextmanager
def nginx_sites(count: int, pages: int, rate: int):
    """`count` sites of `pages` pages, each limited to `rate` requests a second (no
    burst): beyond it, 429 with `Retry-After: 1`. Yields (ports, paths, access logs)."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed (Debian: apt-get install nginx-light)")
    with tempfile.TemporaryDirectory(prefix="pf-nginx-") as d:
        d = Path(d)
        ports = [free_port() for _ in range(count)]
        servers = []
        paths = []
        for n, port in enumerate(ports):
            root = d / f"site{n}"
            paths = write_site(root, pages)
            servers.append(
                f"""
    server {{
        listen 127.0.0.1:{port};
        root {root};
        access_log {d}/access{n}.log timed;
        location / {{
            limit_req zone=site;
            limit_req_status 429;
            try_files $uri $uri/index.html =404;
        }}
        error_page 429 @limited;
        location @limited {{
            add_header Retry-After 1 always;
            return 429 "slow down\\n";
        }}
    }}"""
            )
        conf = f"""daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    log_format timed '$msec $status $request_uri';
    limit_req_zone $server_port zone=site:1m rate={rate}r/s;
    {''.join(servers)}
}}
"""
        (d / "nginx.conf").write_text(conf)
        proc = subprocess.Popen([binary, "-c", str(d / "nginx.conf"), "-p", str(d)], stdout=subprocess.DEVNULL)
        try:
            for port in ports:
                wait_for_port(port, "nginx")
            yield ports, paths, [d / f"access{n}.log" for n in range(count)]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def redis_server():
    """A throwaway redis-server; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="pf-redis-") as d:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, "redis-server")
            yield f"redis://127.0.0.1:{port}/"
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def read_access_log(path: Path) -> list[tuple[float, int, str]]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            out.append((float(parts[0]), int(parts[1]), parts[2]))
    return out
