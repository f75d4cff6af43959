#!/usr/bin/env python3
"""Generate Scrapy/w3lib ground-truth test vectors for the Rust fingerprint module.

Run with the shared venv (Scrapy 2.19, w3lib 2.5):

    ~/.cache/peers-venv/bin/python crates/frontier-core/tests/gen_fingerprint_vectors.py \
        > crates/frontier-core/tests/fingerprint_vectors.jsonl

Each output line is a JSON object:

    {"method": str, "url": str, "body_hex": str,
     "canonical": str | null,      # w3lib.url.canonicalize_url(url), null if it raises
     "fingerprint": str | null,    # scrapy.utils.request.fingerprint(Request(...)).hex(),
                                   # null if Request() or fingerprint() raises
     "known_difference": str}      # optional: why the Rust port is not expected to match

The file is pure ASCII (json.dumps with ensure_ascii=True) so the Rust tests can
parse it with a tiny hand-written reader.  Output is deterministic (seeded RNG).

`gen_vectors.py --idna2003-table` prints the `UNASSIGNED_IN_UNICODE_3_2` table
embedded in src/fingerprint.rs.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import warnings

warnings.simplefilter("ignore")

import scrapy  # noqa: E402
import w3lib  # noqa: E402
from scrapy import Request  # noqa: E402
from scrapy.utils.request import fingerprint as scrapy_fingerprint  # noqa: E402
from w3lib.url import canonicalize_url, safe_url_string  # noqa: E402

assert scrapy.__version__ == "2.19.0", scrapy.__version__
assert w3lib.__version__ == "2.5.0", w3lib.__version__

# Cases the Rust port deliberately does not reproduce.  Keyed by URL; the value
# is the reason written into the vector as "known_difference".
KNOWN_DIFFERENCES: dict[str, str] = {
    # w3lib rejects a non-ASCII netloc containing "\\" when NFKC changes any
    # other character of it (normalized netloc then contains a delimiter);
    # detecting "NFKC changes something" needs full NFKC tables, which the
    # no_std port does not carry.  Only reachable with non-special schemes.
    "foo://\uff21\\b/": "NFKC-change detection for a backslash in a non-ASCII netloc",
    "foo://\u00fc\uff0e\\@x/": "NFKC-change detection for a backslash in a non-ASCII netloc",
    "data://a\uff0e\\\u00e9/": "NFKC-change detection for a backslash in a non-ASCII netloc",
    # A ligature whose NFKC form contains spaces inside an Arabic label: IDNA
    # 2003 punycodes it, UTS 46's bidi rule rejects the space (class WS) in an
    # RTL label, so the port keeps the raw host.
    "http://\ufdfa.com/": "U+FDFA in an RTL label: IDNA2003 accepts, UTS46 bidi rule rejects",
    # U+1C89 (CYRILLIC CAPITAL LETTER TJE) is new in Unicode 16: Python 3.11
    # (Unicode 14) does not lower-case it, Rust's str::to_lowercase does.
    "http://\u1c89.com/": "Unicode version skew: upper-case letter added after Python's Unicode 14",
}


def vector(method: str, url: str, body: bytes = b"") -> dict:
    try:
        canonical = canonicalize_url(url)
    except Exception:  # noqa: BLE001 - any failure means "w3lib raises"
        canonical = None
    try:
        fp = scrapy_fingerprint(Request(url, method=method, body=body)).hex()
    except Exception:  # noqa: BLE001
        fp = None
    # Scrapy fingerprints canonicalize_url(safe_url_string(url)).  That differs
    # from canonicalize_url(url) only when safe_url_string(url) ends with a host
    # ending in a space/C0 control (the second pass strips it); the Rust
    # fingerprint() replays that.  Report such inputs for review.
    if fp is not None and canonical is not None:
        again = canonicalize_url(safe_url_string(url))
        if again != canonical:
            sys.stderr.write(f"note: Scrapy's double canonicalization differs: {url!r}\n")
    v = {
        "method": method,
        "url": url,
        "body_hex": body.hex(),
        "canonical": canonical,
        "fingerprint": fp,
    }
    if url in KNOWN_DIFFERENCES:
        v["known_difference"] = KNOWN_DIFFERENCES[url]
    return v


def handpicked() -> list[tuple[str, str, bytes]]:
    G = "GET"
    cases: list[tuple[str, str, bytes]] = []

    def get(*urls: str) -> None:
        cases.extend((G, u, b"") for u in urls)

    # The known vector and trivial variants.
    get(
        "http://www.example.com/",
        "http://www.example.com",
        "https://www.example.com/",
        "http://www.example.com/index.html",
        "http://www.example.com/a/b/c/",
    )

    # Query order permutations and duplicates.
    for perm in itertools.permutations(["a=1", "b=2", "c=3", "d=4"]):
        get("http://www.example.com/q?" + "&".join(perm))
    for perm in itertools.permutations(["a=2", "a=1", "a=10", "b="]):
        get("http://www.example.com/dup?" + "&".join(perm))
    get(
        "http://www.example.com/do?c=3&b=5&b=2&a=50",
        "http://www.example.com/query?id=111&cat=222",
        "http://www.example.com/query?cat=222&id=111",
        "http://www.example.com/x?a=1&a=1&a=1",
        "http://www.example.com/x?B=1&a=1&_=1&~=1&-=1&.=1&0=1",
        "http://www.example.com/x?a=%C3%A9&a=%C3%A8&a=e",
        "http://www.example.com/x?\u00e9=1&e=1&z=1",
    )

    # Blank values and empty fields.
    get(
        "http://www.example.com/x?a=&b",
        "http://www.example.com/x?a&b",
        "http://www.example.com/x?a&b=",
        "http://www.example.com/x?b&a",
        "http://www.example.com/x?=",
        "http://www.example.com/x?=a",
        "http://www.example.com/x?&",
        "http://www.example.com/x?&&&",
        "http://www.example.com/x?a=1&&b=2&",
        "http://www.example.com/x?",
        "http://www.example.com/?",
        "http://www.example.com?",
        "http://www.example.com?a=1",
        "http://www.example.com?b=2&a=1",
        "http://www.example.com/x?a==b",
        "http://www.example.com/x?a=b=c",
        "http://www.example.com/x?==",
    )

    # '+' vs %20 vs %2B and friends.
    get(
        "http://www.example.com/s?q=a+b",
        "http://www.example.com/s?q=a%20b",
        "http://www.example.com/s?q=a b",
        "http://www.example.com/s?q=a%2Bb",
        "http://www.example.com/s?q=a%2bb",
        "http://www.example.com/s?q+x=1",
        "http://www.example.com/s?q=%20",
        "http://www.example.com/s?q=++",
        "http://www.example.com/s?q=%2520",
        "http://www.example.com/a+b/c%20d",
        "http://www.example.com/a%2Bb",
    )

    # Percent-escape case and invalid escapes.
    get(
        "http://www.example.com/%7Euser",
        "http://www.example.com/%7euser",
        "http://www.example.com/~user",
        "http://www.example.com/a%2fb",
        "http://www.example.com/a%2Fb",
        "http://www.example.com/a%3bb",
        "http://www.example.com/a%3Bb",
        "http://www.example.com/a%3fb",
        "http://www.example.com/a%3Fb",
        "http://www.example.com/a%25b",
        "http://www.example.com/a%252Fb",
        "http://www.example.com/a%252fb",
        "http://www.example.com/a%25252fb",
        "http://www.example.com/a%2%2fb",
        "http://www.example.com/a%%2fb",
        "http://www.example.com/a%zzb",
        "http://www.example.com/a%",
        "http://www.example.com/a%2",
        "http://www.example.com/a%2g",
        "http://www.example.com/%41%42%43",
        "http://www.example.com/%61%62%63",
        "http://www.example.com/%2D%2E%5F%7E",
        "http://www.example.com/%21%24%26%27%28%29%2A%2B%2C%3D%3A%40",
        "http://www.example.com/%5B%5D%7C",
        "http://www.example.com/%23frag",
        "http://www.example.com/%20%22%3C%3E%5C%5E%60%7B%7D",
        "http://www.example.com/%00%01%1f%7f",
        "http://www.example.com/%e9",
        "http://www.example.com/%E9",
        "http://www.example.com/%c3%a9",
        "http://www.example.com/%C3%A9",
        "http://www.example.com/%ff%fe",
        "http://www.example.com/x?q=%e9",
        "http://www.example.com/x?q=%E9",
        "http://www.example.com/x?q=%c3%a9",
        "http://www.example.com/x?q=%zz",
        "http://www.example.com/x?q=%",
        "http://www.example.com/x?q=%2",
        "http://www.example.com/x?q=100%",
        "http://www.example.com/x?q=%25",
        "http://www.example.com/x?q=%2525",
        "http://www.example.com/x?%41=%42",
        "http://www.example.com/x?q=%26&r=%3D",
        "http://www.example.com/x?q=%00",
        "http://www.example.com/x?q=%7e%7E",
    )

    # Reserved and unusual characters in path and query.
    get(
        "http://www.example.com/a:b@c!d$e&f'g(h)i*j+k,l;m=n",
        "http://www.example.com/a|b",
        "http://www.example.com/[x]",
        "http://www.example.com/a\"b",
        "http://www.example.com/a<b>c",
        "http://www.example.com/a^b`c{d}e",
        "http://www.example.com/a\\b",
        "foo://www.example.com/a\\b",
        "http://www.example.com/a b",
        "http://www.example.com/a%20b",
        "http://www.example.com/a\x01b",
        "http://www.example.com/a\x7fb",
        "http://www.example.com/x?q=a:b/c?d@e!f$g'h(i)j*k,l;m",
        "http://www.example.com/x?q=a|b[c]d",
        "http://www.example.com/x?q=a\"b<c>d",
        "http://www.example.com/x?q=a^b`c{d}e",
        "http://www.example.com/x?q=a\\b",
        "http://www.example.com/x?q='",
        "foo://www.example.com/x?q='",
        "http://www.example.com/x?q=/?",
        "http://www.example.com/x?a=1;b=2",
        "http://www.example.com/x?a=1;b=2&c=3",
        "http://www.example.com/x?b=2;a=1",
        "http://www.example.com/x?;",
        "http://www.example.com/x?q=http://other.example/?a=1&b=2",
    )

    # ;params in the path.
    get(
        "http://www.example.com/a;b",
        "http://www.example.com/a;b=c",
        "http://www.example.com/a;b;c",
        "http://www.example.com/a;",
        "http://www.example.com/;",
        "http://www.example.com/;x",
        "http://www.example.com/a;b/c",
        "http://www.example.com/a;b/c;d",
        "http://www.example.com/a;B%2f%41",
        "http://www.example.com/a;b c",
        "http://www.example.com/a;p?q=1",
        "http://www.example.com/a;p#f",
        "http://www.example.com/a%3Bp;q",
        "foo://www.example.com/a;b",
        "sip://www.example.com/a;b",
        "ftp://ftp.example.com/pub/file.txt;type=i",
    )

    # Unicode paths and queries.
    get(
        "http://www.example.com/r\u00e9sum\u00e9",
        "http://www.example.com/r%C3%A9sum%C3%A9",
        "http://www.example.com/\u65e5\u672c\u8a9e/\u30c6\u30b9\u30c8",
        "http://www.example.com/\u043f\u0443\u0442\u044c?\u043a\u043b\u044e\u0447=\u0437\u043d\u0430\u0447\u0435\u043d\u0438\u0435",
        "http://www.example.com/?q=caf\u00e9",
        "http://www.example.com/?caf\u00e9=1",
        "http://www.example.com/\U0001f600?e=\U0001f600",
        "http://www.example.com/\u00a0x\u00a0",
        "http://www.example.com/\u2028",
        "http://www.example.com/\ufeff",
        "http://www.example.com/\u00e9#\u00e9",
        "http://www.example.com/a?b=\u00e9&a=\u00e8",
        "http://www.example.com/\u0130",
    )

    # IDN hosts.
    get(
        "http://b\u00fccher.example/",
        "http://B\u00dcCHER.example/",
        "http://xn--bcher-kva.example/",
        "http://XN--BCHER-KVA.example/",
        "http://b\u00fccher.example:8080/x?b=2&a=1",
        "http://user:pw@b\u00fccher.example/",
        "http://\u4f8b\u5b50.\u6d4b\u8bd5/",
        "http://\u4f8b\u5b50\u3002\u6d4b\u8bd5/",
        "http://\u4f8b\u5b50\uff0e\u6d4b\u8bd5/",
        "http://\u4f8b\u5b50\uff61\u6d4b\u8bd5/",
        "http://\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444/",
        "http://\u041f\u0420\u0418\u041c\u0415\u0420.\u0420\u0424/",
        "http://stra\u00dfe.de/",
        "http://STRA\u1e9eE.de/",
        "http://\u03b5\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac.gr/",
        "http://\u0395\u039b\u039b\u0397\u039d\u0399\u039a\u0386\u03a3.gr/",
        "http://\u03c3\u03bf\u03c6\u03bf\u03c2.gr/",
        "http://\u2603.net/",
        "http://\U0001f4a9.la/",
        "http://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/",
        "http://\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com/",
        "http://b\u00fccher.example./",
        "http://b\u00fccher..example/",
        "http://.b\u00fccher.example/",
        "http://b\u00fccher.example../",
        "http://" + "\u00fc" * 70 + ".example/",
        "http://" + "a" * 70 + ".b\u00fccher.example/",
        "http://" + "a" * 70 + ".example/",
        "http://\u0645\u062b\u0627\u0644.\u0625\u062e\u062a\u0628\u0627\u0631/",
        "http://\u05d3\u05d5\u05d2\u05de\u05d4.\u05d8\u05e2\u05e1\u05d8/",
        "http://\u0645\u062b\u0627\u0644" + "1.example/",
        "http://1\u0645\u062b\u0627\u0644.example/",
        "http://\u0645\u062b\u0627\u0644abc.example/",
        "http://\u212aelvin.example/",
        "http://\u0130stanbul.example/",
        "http://so\u00adft.example/",
        "http://zw\u200dj.example/",
        "http://zw\u200cnj.example/",
        "http://\u00e9xample.com/",
        "http://e\u0301xample.com/",
        "http://\u00e9x ample.com/",
        "http://\u00e9x%41mple.com/",
        "http://\u00e9xample.com\uff0fpath/",
        "http://\u00e9xample.com\uff1f/",
        "http://\u00e9xample.com\uff03/",
        "http://\u00e9xample.com\uff20x/",
        "http://\u00e9x\u2100ample.com/",
        "http://\u00e9xample\u2024com/",
        "http://\u00e9xample\u2025com/",
        "http://\u00e9xample.\u2488com/",
        "http://xn--n3h.net/",
        "http://\u00e9.xn--zz/",
        "http://xn--\u00e9.com/",
        "http://\uff58\uff4e\uff0d\uff0d\u00e9.com/",
        "http://\U000e0001\u00e9.com/",
        "http://\ue000\u00e9.com/",
        "http://\u200e\u00e9.com/",
        "http://\u3000\u00e9.com/",
        "http://\u00e9\u1680.com/",
        "http://\u00e9\u2061.com/",
        "http://\u00e9\u00a0x.com/",
        "http://\u0301\u00e9.com/",
        "http://\u10d0\u1c90.com/",
        "http://\u0663\u0664.example/",
        "http://a\u0663b.example/",
        "http://\u0645\u0663\u0645.example/",
        "http://\u13a0\u13a1.example/",
        "http://\uab70.example/",
        "http://a\u0378b.example/",
        "http://\U000e0100x\u0378.example/",
        "http://a\u3164b.example/",
        "http://a\u17b4b.example/",
        "http://a\u2603b.example/",
        "http://\u2603\u0378.example/",
        "http://a\ufdd0b.example/",
        "http://a\U0001fffeb.example/",
        "http://a\u05efb.example/",
        "http://a\u0600b.example/",
        "http://\u1c80.example/",
        "http://\ufdfa.com/",
        "http://\u1c89.com/",
        "http://\u33c7.example/",
        "http://xn--%!%41\u00df ",
        "https://a{  ,\u3002\txn--b\u00df",
        "http://xn--b\uff43her-kva.example/",
        "http://xn--\u00e9.example/",
        "foo://\u00fc\uff0e\\@x/",
        "data://a\uff0e\\\u00e9/",
        "http://a.\u00ad/",
        "http://\u00ad.b\u00fccher/",
        "http://b\u00fccher.\u00ad.de/",
        "http://b\u00fccher.de.\u200b/",
        "foo://\uff21\\b/",
        "foo://\u00e9\\b/",
        "http://\u00e9xample.com:8080/",
        "http://[::1]\u00e9/",
    )

    # Scheme and host case.
    get(
        "HTTP://WWW.EXAMPLE.COM/",
        "HtTpS://WwW.ExAmPlE.CoM/PaTh?QuErY=VaLuE",
        "http://www.example.com/CaseSensitivePath",
        "FTP://FTP.EXAMPLE.COM/",
        "ftp://ftp.example.com/pub",
        "file:///etc/passwd",
        "file://localhost/etc/passwd",
        "FILE:///C:/Windows/",
        "ws://ws.example.com/socket?b=1&a=2",
        "wss://ws.example.com/",
        "foo://bar/baz",
        "git+ssh://git@github.com/x/y.git",
        "svn+ssh://host/repo",
        "s3://bucket/key?x=1",
        "mailto:someone@example.com",
        "about:blank",
        "ABOUT:BLANK",
        "about:config?a=1",
        "data:text/plain,hello",
        "data:text/plain;base64,aGVsbG8=",
        "DATA:,X",
        "javascript:alert(1)",
        "tel:+1-555-0100",
        "urn:isbn:0451450523",
        "1http://example.com/",
        "ht%74p://example.com/",
        "h_t://example.com/",
        "a+b-c.d://example.com/",
    )

    # Ports.
    get(
        "http://www.example.com:80/",
        "http://www.example.com:8080/",
        "https://www.example.com:443/",
        "https://www.example.com:80/",
        "http://www.example.com:0/",
        "http://www.example.com:65535/",
        "http://www.example.com:65536/",
        "http://www.example.com:99999999999999999999/",
        "http://www.example.com:0080/",
        "http://www.example.com:00000/",
        "http://www.example.com:/",
        "http://www.example.com:",
        "http://www.example.com:abc/",
        "http://www.example.com:80:90/",
        "http://www.example.com:-1/",
        "http://www.example.com:+80/",
        "http://www.example.com: 80/",
        "http://www.example.com:\u0668\u0660/",
        "http://www.example.com:8\u00a0/",
        "ftp://ftp.example.com:21/",
        "foo://host:1234/",
    )

    # Userinfo.
    get(
        "http://user:password@www.example.com/",
        "http://User:PassWord@WWW.Example.com/",
        "http://user@www.example.com/",
        "http://user:@www.example.com/",
        "http://:password@www.example.com/",
        "http://:@www.example.com/",
        "http://@www.example.com/",
        "http://us%40er:pa%3Ass@www.example.com/",
        "http://us%40er:pa:ss@www.example.com/",
        "http://a@b@www.example.com/",
        "http://us er:p ss@www.example.com/",
        "http://\u00fcser:p\u00e4ss@www.example.com/",
        "http://u%zz:%@www.example.com/",
        "http://u;s=r:p;w=d@www.example.com/",
        "http://u!$&'()*+,:x@www.example.com/",
        "http://u%7e~:x@www.example.com/",
        "http://u[1]:x@www.example.com/",
        "http://user:pass@www.example.com:8080/p?b=1&a=2#f",
    )

    # Fragments (dropped).
    get(
        "http://www.example.com/#frag",
        "http://www.example.com/#",
        "http://www.example.com/p#a?b",
        "http://www.example.com/p?q=1#f",
        "http://www.example.com/p?b=2&a=1#section-2",
        "http://www.example.com#f",
        "http://www.example.com/p#f#g",
        "http://www.example.com/p#\u00e9 x",
        "http://www.example.com/p?q#",
        "http://www.example.com/#!/hashbang?x=1",
        "foo:x#a://b",
        "foo:x?a://b",
    )

    # IP literals.
    get(
        "http://127.0.0.1/",
        "http://127.0.0.1:8080/x?b=1&a=2",
        "http://192.168.000.001/",
        "http://0x7f.1/",
        "http://2130706433/",
        "http://[::1]/",
        "http://[::1]:8080/",
        "http://[::1]:/",
        "http://[::1]:80:90/",
        "http://[::1]x/",
        "http://[2001:DB8::1]/",
        "http://[2001:db8:0:0:0:0:0:1]/",
        "http://[2001:0db8:0000:0000:0000:0000:0000:0001]/",
        "http://[0:0:0:0:0:0:0:0]/",
        "http://[1:0:0:1:0:0:0:1]/",
        "http://[1:0:0:2:0:0:3:4]/",
        "http://[::0:1]/a/../b",
        "http://[::ffff:1.2.3.4]/",
        "http://[::FFFF:192.168.1.1]:443/",
        "http://[::1.2.3.04]/",
        "http://[fe80::1%25eth0]/",
        "http://[fe80::1%eth0]/",
        "http://[FE80::1%ETH0]/",
        "http://[fe80::1%]/",
        "http://[v1.fe]/",
        "http://[v1.fe:ab]/",
        "http://[V1.fe]/",
        "http://[vz.fe]/",
        "http://[1.2.3.4]/",
        "http://[::1/",
        "http://::1]/",
        "http://[zz]/",
        "http://[]/",
        "http://[1::2::3]/",
        "http://[1:2:3:4:5:6:7:8:9]/",
        "http://[12345::]/",
        "http://x[::1]/",
        "http://user@[::1]:99/",
        "http://www.example.com/[::1]",
        "http://www.example.com/?[::1]",
        "http://[::1]]/",
        "http://[[::1]/",
        "http://[v1.a[b]/",
        "http://[v1.a:[b]/",
        "http://[v1.\u00e9[]/",
        "http://[a]@v1.x/",
    )

    # Whitespace and control characters.
    get(
        " http://www.example.com/ ",
        "\thttp://www.example.com/\n",
        "\x00\x01http://www.example.com/\x1f",
        "\r\nhttp://www.example.com/a\r\nb\r\n",
        "http://www.ex\tample.com/",
        "http://www.ex\nample.com/",
        "http://www.example.com/a\tb?c\nd=e\rf",
        "ht\ttp://www.example.com/",
        "http://www.ex ample.com/",
        "http://www.example.com/ a ",
        "http://www.example.com/?q= a ",
        "\u00a0http://www.example.com/",
        "http://www.ex\x01ample.com/",
        "http://www.ex\x7fample.com/",
        "http://\u00e9x\x7fample.com/",
        "http://\u00e9x\x01ample..com/",
        "http://www.ex\"ample.com/",
        "http://www.ex<ample.com/",
        "http://www.ex\\ample.com/",
    )

    # safe_url_string(url) ending with a host that ends with a space/control:
    # Scrapy's second canonicalization pass strips it.
    get(
        "http://a :",
        "http://a \x01:",
        "http://%41b :",
        "foo://xn--\x01#",
        "http://a :#frag",
        "http://a :?",
        "http://a :/",
        "http://u@ :",
        "http://\u00e9 :",
        "http://\u00e9\u0378 :",
        "http://a.\u00e9 :",
        "http://A B :",
        "http://a :80",
    )

    # Backslashes.
    get(
        "http://www.example.com\\path\\to?q=a\\b#c\\d",
        "http:\\\\www.example.com\\a",
        "http:/\\www.example.com/",
        "https:\\\\evil.com\\@good.com/",
        "http://evil.com\\@good.com/",
        "foo://evil.com\\@good.com/",
        "file:\\\\\\C:\\x",
    )

    # Dot segments.
    get(
        "http://www.example.com/a/./b/../c",
        "http://www.example.com/a/b/..",
        "http://www.example.com/a/b/.",
        "http://www.example.com/..",
        "http://www.example.com/../../x",
        "http://www.example.com/./",
        "http://www.example.com/%2e%2e/x",
        "http://www.example.com/%2E/x",
        "http://www.example.com/a/.%2e/b",
        "http://www.example.com/a/%2e./b",
        "http://www.example.com/a/..b/c",
        "http://www.example.com/a/.b/c",
        "http://www.example.com/a/b/../../../c",
        "http://www.example.com//a//b//",
        "http://www.example.com//..//x",
        "http://www.example.com/a/..;p",
        "foo:/a/../b",
        "mailto:a/../b",
        "foo:/a://../b",
    )

    # Scheme-relative, relative and degenerate inputs.
    get(
        "www.example.com/x",
        "www.example.com/?u=http://x",
        "//www.example.com/path",
        "/path/only",
        "path/only?b=1&a=2",
        "",
        " ",
        "http:",
        "http:/",
        "http://",
        "http:///",
        "http:///x",
        "http:////x",
        "http:/x",
        "http:x",
        "foo:///x",
        "foo://",
        "foo:",
        "://x",
        "localhost:8080",
        "localhost:8080/x",
        "http://?q=1",
        "http://#f",
        "http://@",
        "http://:80",
        "?a=1",
        "#f",
        "http://host/a?b#c?d#e",
    )

    # Methods and bodies.
    url = "http://www.example.com/form?b=2&a=1"
    for m in ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "post", "Get", "M-SEARCH", "p\u00f6st", "stra\u00dfe", "\u00e9", "A\"B", "A\\B", "A\nB", "A\x7fB", "A\x00B", "A/B", "\U0001f600"]:
        cases.append((m, url, b""))
    for body in [b"a=1&b=2", b"b=2&a=1", b"{\"json\": true}", bytes(range(256)), b"\x00", b"x" * 10000]:
        cases.append(("POST", url, body))
        cases.append(("PUT", "http://www.example.com/", body))
    cases.append(("GET", "http://www.example.com/", b"body on GET"))

    # Long URLs.
    get(
        "http://www.example.com/" + "a" * 2000,
        "http://www.example.com/" + "/".join(f"seg{i}" for i in range(300)),
        "http://www.example.com/x?" + "&".join(f"k{i}=v{i}" for i in range(200)),
        "http://www.example.com/x?" + "&".join(f"k{i}=v{i}" for i in reversed(range(200))),
        "http://www.example.com/" + "\u00e9" * 500 + "?" + "q=" + "\u00e9" * 500,
        "http://" + ".".join(["label"] * 60) + "/",
    )
    return cases


def random_bench_shape(rng: random.Random, n: int) -> list[tuple[str, str, bytes]]:
    """URLs shaped like the benchmark: https://host{i}.example{j}.com/path/{k}?q={k}&b=x"""
    out = []
    for _ in range(n):
        i, j, k = rng.randrange(100), rng.randrange(10), rng.randrange(100000)
        params = [f"q={k}", "b=x"]
        if rng.random() < 0.5:
            params.append(f"z{rng.randrange(10)}={rng.randrange(1000)}")
        if rng.random() < 0.3:
            params.append("a=")
        rng.shuffle(params)
        url = f"https://host{i}.example{j}.com/path/{k}?" + "&".join(params)
        if rng.random() < 0.2:
            url += f"#frag{k}"
        out.append(("GET", url, b""))
    return out


PIECES = [
    "a", "b", "Z", "0", "9", "-", ".", "_", "~", "%", "%2f", "%2F", "%25", "%41",
    "%e9", "%C3%A9", "%zz", "%3b", "%3F", "+", " ", "&", "=", ";", ":", "@", "!",
    "$", "'", "(", ")", "*", ",", "/", "?", "#", "[", "]", "|", "\"", "<", ">",
    "\\", "^", "`", "{", "}", "\t", "\x01", "\u00e9", "\u00fc", "\u65e5", "\u00df",
    "\u0130", "\U0001f600", "..", "./", "../", "xn--", "\u3002", "\uff0e",
]


def rand_piece(rng: random.Random, k: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(k + 1)))


def random_structured(rng: random.Random, n: int) -> list[tuple[str, str, bytes]]:
    """Structured fuzz: valid-ish skeletons with awkward characters in each part."""
    schemes = ["http", "https", "HTTP", "ftp", "ws", "file", "foo", "mailto", "about", "data"]
    hosts = [
        "www.example.com", "EXAMPLE.org", "b\u00fccher.example", "\u4f8b\u5b50.\u6d4b\u8bd5",
        "127.0.0.1", "[::1]", "[2001:db8::A]", "", "h", "xn--bcher-kva.example",
        "stra\u00dfe.de", "a..b", "host.", "ex ample.com",
    ]
    out = []
    for _ in range(n):
        s = rng.choice(schemes)
        url = s + ":"
        if rng.random() < 0.85:
            url += "//"
            if rng.random() < 0.15:
                url += rand_piece(rng, 3) + "@"
            url += rng.choice(hosts)
            if rng.random() < 0.2:
                url += ":" + rng.choice(["80", "443", "8080", "", "0", "00081", "x"])
        url += "/" + rand_piece(rng, 6)
        if rng.random() < 0.7:
            url += "?" + "&".join(rand_piece(rng, 3) + rng.choice(["=", "", "=="]) + rand_piece(rng, 3) for _ in range(rng.randrange(1, 5)))
        if rng.random() < 0.3:
            url += "#" + rand_piece(rng, 3)
        method = rng.choice(["GET", "GET", "POST", "put"])
        body = rng.choice([b"", b"", b"a=1", bytes(rng.randrange(256) for _ in range(rng.randrange(8)))])
        out.append((method, url, body))
    return out


def random_garbage(rng: random.Random, n: int) -> list[tuple[str, str, bytes]]:
    """Unstructured fuzz: arbitrary pieces, sometimes behind a scheme."""
    out = []
    for _ in range(n):
        prefix = rng.choice(["", "http://", "https://", "foo://", "http:"])
        out.append(("GET", prefix + rand_piece(rng, 12), b""))
    return out


def print_idna2003_table() -> None:
    """Print the Rust table `UNASSIGNED_IN_UNICODE_3_2` used by fingerprint.rs.

    Code points that Python's IDNA 2003 codec (nameprep, Unicode 3.2 tables,
    AllowUnassigned) passes through unchanged: unassigned in Unicode 3.2, stable
    under w3lib's NFKC (Python's Unicode version), and not prohibited by nameprep.
    """
    import stringprep
    import unicodedata
    from unicodedata import ucd_3_2_0 as u32

    tables = (stringprep.in_table_c12, stringprep.in_table_c22, stringprep.in_table_c3,
              stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6,
              stringprep.in_table_c7, stringprep.in_table_c8, stringprep.in_table_c9)

    def passthrough(cp: int) -> bool:
        if 0xD800 <= cp < 0xE000:
            return False
        c = chr(cp)
        return (u32.category(c) == "Cn" and unicodedata.normalize("NFKC", c) == c
                and not any(t(c) for t in tables))

    ranges, start = [], None
    for cp in range(0x110001):
        ok = cp < 0x110000 and passthrough(cp)
        if ok and start is None:
            start = cp
        if not ok and start is not None:
            ranges.append((start, cp - 1))
            start = None
    print(f"// {len(ranges)} ranges, Python {sys.version.split()[0]}, Unicode {unicodedata.unidata_version}")
    line = "   "
    for a, b in ranges:
        item = f" (0x{a:X}, 0x{b:X}),"
        if len(line) + len(item) > 100:
            print(line)
            line = "   "
        line += item
    print(line)


IDN_POOLS = [
    "abcxyz019-", "\u00e9\u00fc\u00f1\u00e7", "\u0301\u0308\u0323", "\u0645\u062b\u0627\u0644\u0625",
    "\u0660\u0663\u06f1", "\u05d0\u05d1\u05d2", "\u4f8b\u5b50\u6d4b", "\U0001f600\u2603\u2764",
    "\u00ad\u200b\u200c\u200d\ufe0f", "\u00df\u03c2\u03a3\u1e9e", ".\u3002\uff0e\uff61\u2024",
    "\uff21\uff42\uff43", "\u0378\U00030000\u0530", "\u3164\u115f\u17b4", "\u0130\u212a\u13a0\uab70",
    "\u0391\u0392\u03b1", "\u0410\u0411\u0430", "\u00c0\u00c9", "\u0e01\u0e02\u0e31", "\u0915\u094d\u0937",
]


def random_idn_hosts(rng: random.Random, n: int) -> list[tuple[str, str, bytes]]:
    """Hosts mixing scripts, bidi classes, combining marks, ignorables, dots."""
    out = []
    for _ in range(n):
        host = "".join(rng.choice(rng.choice(IDN_POOLS)) for _ in range(rng.randrange(1, 12)))
        if rng.random() < 0.5:
            host += rng.choice([".com", ".\u6d4b\u8bd5", ".de.", ""])
        out.append(("GET", "http://" + host + "/", b""))
    return out


AUTH_PIECES = ["0", "1", "f", "F", "ff", "ffff", "FFFF", "12345", ":", "::", ".", "1.2.3.4",
               "192.168.0.1", "01.2.3.4", "%", "%25", "eth0", "v", "V", "[", "]", "@", "a", "x",
               ":80", "::1", "fe80", "0:0", "g", " ", "\u00e9"]


def random_authority(rng: random.Random, n: int) -> list[tuple[str, str, bytes]]:
    """IPv6 / IPvFuture / bracket / userinfo / port combinations."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.6:
            host = "[" + "".join(rng.choice(AUTH_PIECES) for _ in range(rng.randrange(1, 9))) + "]"
        elif r < 0.8:
            host = "".join(rng.choice(AUTH_PIECES) for _ in range(rng.randrange(1, 6)))
        else:
            host = rng.choice(["[::1]", "[2001:db8::1]", "[::ffff:1.2.3.4]", "[fe80::1%eth0]", "[v1.a]"])
        userinfo = rng.choice(["", "", "u@", "u:p@", "%41:%@", "[x]@", "a@b@"])
        port = rng.choice(["", "", ":", ":80", ":0080", ":65536", ":x", ":1:2"])
        url = (rng.choice(["http://", "foo://", "https://"]) + userinfo + host + port
               + rng.choice(["/", "", "/p?q=1", "#f", "?"]))
        out.append(("GET", url, b""))
    return out


def main() -> None:
    if sys.argv[1:] == ["--idna2003-table"]:
        print_idna2003_table()
        return
    rng = random.Random(20240531)
    cases = handpicked()
    cases += random_bench_shape(rng, 300)
    cases += random_structured(rng, 300)
    cases += random_garbage(rng, 150)
    cases += random_idn_hosts(rng, 250)
    cases += random_authority(rng, 250)
    seen = set()
    n = 0
    for method, url, body in cases:
        key = (method, url, body)
        if key in seen:
            continue
        seen.add(key)
        sys.stdout.write(json.dumps(vector(method, url, body), ensure_ascii=True, sort_keys=True) + "\n")
        n += 1
    sys.stderr.write(f"{n} vectors\n")


if __name__ == "__main__":
    main()
