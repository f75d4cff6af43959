//! The on-disk format: file headers, record framing, record bodies and varints.
//!
//! Everything is little-endian. The crate documentation describes the layout for
//! readers of the files; this module is the one place that reads and writes it.

use polite_frontier_core::Fingerprint;

/// The format version written by this build and the newest it reads.
pub const FORMAT_VERSION: u16 = 1;

pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"PFSEGLOG";
pub(crate) const SEEN_MAGIC: [u8; 8] = *b"PFSSEEN\0";
pub(crate) const SCOPES_MAGIC: [u8; 8] = *b"PFSCOPES";

/// Bytes of a segment header: magic, version, flags, segment id, base seq, reserved, CRC.
pub(crate) const SEGMENT_HEADER_LEN: usize = 32;
/// Bytes of the seen-file header: magic, version, flags, CRC.
pub(crate) const SEEN_HEADER_LEN: usize = 16;
/// Bytes of the scope-state file header: magic, version, flags, body length, CRC.
pub(crate) const SCOPES_HEADER_LEN: usize = 20;

/// Largest record body accepted (a request with a huge body is refused, not stored).
pub(crate) const MAX_BODY: usize = 64 << 20;
/// Bytes of a fingerprint kept on disk: its first 64 bits, all a duplicate filter uses.
pub(crate) const FP_LEN: usize = 8;
/// Fingerprints per block of the seen file and per `FINGERPRINTS` record.
pub(crate) const FPS_PER_BLOCK: usize = 8192;

pub(crate) const KIND_MASK: u8 = 0x07;
pub(crate) const KIND_ENTRY: u8 = 1;
pub(crate) const KIND_LEASE: u8 = 2;
pub(crate) const KIND_ACK: u8 = 3;
pub(crate) const KIND_CALLBACK: u8 = 4;
pub(crate) const KIND_GROUP: u8 = 5;
pub(crate) const KIND_FINGERPRINTS: u8 = 6;
pub(crate) const KIND_UNLEASE: u8 = 7;

pub(crate) const F_START: u8 = 0x08;
pub(crate) const F_LEASED: u8 = 0x10;
pub(crate) const F_FP: u8 = 0x20;
pub(crate) const F_NOT_BEFORE: u8 = 0x40;
pub(crate) const F_REPLACES: u8 = 0x80;

/// Why a header could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// Fewer bytes than a header.
    Short,
    /// Not our magic number.
    BadMagic,
    /// A version this build cannot read.
    Version(u16),
    /// The header's checksum does not match.
    BadCrc,
}

fn crc(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Checks magic then version, the order in which a reader can trust them.
fn check_magic_version(b: &[u8], magic: &[u8; 8], len: usize) -> Result<(), HeaderError> {
    if b.len() < 10 {
        return Err(HeaderError::Short);
    }
    if &b[..8] != magic {
        return Err(HeaderError::BadMagic);
    }
    let version = u16_at(b, 8);
    if version == 0 || version > FORMAT_VERSION {
        return Err(HeaderError::Version(version));
    }
    if b.len() < len {
        return Err(HeaderError::Short);
    }
    Ok(())
}

/// The header of a log segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// The segment's number (also in its file name).
    pub(crate) id: u32,
    /// The store's next sequence number when the segment was created: every sequence
    /// number in older (possibly deleted) segments is below it.
    pub(crate) base_seq: u64,
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..24].copy_from_slice(&self.base_seq.to_le_bytes());
        let c = crc(&[&b[..28]]);
        b[28..32].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self, HeaderError> {
        check_magic_version(b, &SEGMENT_MAGIC, SEGMENT_HEADER_LEN)?;
        if crc(&[&b[..28]]) != u32_at(b, 28) {
            return Err(HeaderError::BadCrc);
        }
        Ok(SegmentHeader {
            id: u32_at(b, 12),
            base_seq: u64_at(b, 16),
        })
    }
}

pub(crate) fn seen_header() -> [u8; SEEN_HEADER_LEN] {
    let mut b = [0u8; SEEN_HEADER_LEN];
    b[..8].copy_from_slice(&SEEN_MAGIC);
    b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let c = crc(&[&b[..12]]);
    b[12..16].copy_from_slice(&c.to_le_bytes());
    b
}

pub(crate) fn check_seen_header(b: &[u8]) -> Result<(), HeaderError> {
    check_magic_version(b, &SEEN_MAGIC, SEEN_HEADER_LEN)?;
    if crc(&[&b[..12]]) != u32_at(b, 12) {
        return Err(HeaderError::BadCrc);
    }
    Ok(())
}

/// Appends one block of the seen file: CRC, count, then `count` 8-byte prefixes.
pub(crate) fn encode_seen_block(out: &mut Vec<u8>, prefixes: &[u8]) {
    debug_assert_eq!(prefixes.len() % FP_LEN, 0);
    let count = (prefixes.len() / FP_LEN) as u32;
    let count_bytes = count.to_le_bytes();
    let c = crc(&[&count_bytes, prefixes]);
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&count_bytes);
    out.extend_from_slice(prefixes);
}

/// The scope-state file: header then the postcard body.
pub(crate) fn encode_scopes_file(body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(SCOPES_HEADER_LEN + body.len());
    b.extend_from_slice(&SCOPES_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let c = crc(&[&b[..16], body]);
    b.extend_from_slice(&c.to_le_bytes());
    b.extend_from_slice(body);
    b
}

/// The body of a scope-state file, or why it cannot be read (with the offset).
pub(crate) fn decode_scopes_file(b: &[u8]) -> Result<&[u8], (HeaderError, u64)> {
    check_magic_version(b, &SCOPES_MAGIC, SCOPES_HEADER_LEN).map_err(|e| (e, 0))?;
    let len = u32_at(b, 12) as usize;
    let body = b
        .get(SCOPES_HEADER_LEN..SCOPES_HEADER_LEN + len)
        .ok_or((HeaderError::Short, SCOPES_HEADER_LEN as u64))?;
    if crc(&[&b[..16], body]) != u32_at(b, 16) {
        return Err((HeaderError::BadCrc, 16));
    }
    Ok(body)
}

// ---------------------------------------------------------------------------------------
// Varints (LEB128) and zigzag.

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint from the front of `b`, advancing it. `None` if truncated or longer
/// than a `u64`.
pub(crate) fn get_varint(b: &mut &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let byte = *b.get(i)?;
        let bits = u64::from(byte & 0x7f);
        if i == 9 && byte > 1 {
            return None;
        }
        v |= bits << (7 * i);
        if byte & 0x80 == 0 {
            *b = &b[i + 1..];
            return Some(v);
        }
    }
    None
}

fn zigzag(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

fn unzigzag(v: u64) -> Option<i32> {
    let v = u32::try_from(v).ok()?;
    Some(((v >> 1) as i32) ^ -((v & 1) as i32))
}

// ---------------------------------------------------------------------------------------
// Record framing: CRC32 (over the length bytes and the body), varint length, body.

/// Appends a framed record to `out`.
pub(crate) fn frame(out: &mut Vec<u8>, body: &[u8]) {
    let mut len = [0u8; 10];
    let mut n = 0;
    let mut v = body.len() as u64;
    while v >= 0x80 {
        len[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    len[n] = v as u8;
    n += 1;
    let c = crc(&[&len[..n], body]);
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&len[..n]);
    out.extend_from_slice(body);
}

/// What is at the front of a byte slice holding (part of) a framed record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameParse {
    /// A whole record: the body's range within the slice, and the frame's length.
    Record {
        body: core::ops::Range<usize>,
        len: usize,
    },
    /// The slice ends inside the frame; `need` bytes would hold it (if known).
    Incomplete { need: Option<usize> },
    /// The length field is unreadable or too large.
    BadLength,
    /// The checksum does not match.
    BadCrc,
}

/// Parses the frame at the front of `b`.
pub(crate) fn parse_frame(b: &[u8]) -> FrameParse {
    if b.len() < 5 {
        // Four CRC bytes and at least one length byte.
        return FrameParse::Incomplete { need: None };
    }
    let stored = u32_at(b, 0);
    let mut rest = &b[4..];
    let before = rest.len();
    let len = match get_varint(&mut rest) {
        Some(l) => l,
        None if before < 10 && b[4..].iter().all(|x| x & 0x80 != 0) => {
            return FrameParse::Incomplete { need: None };
        }
        None => return FrameParse::BadLength,
    };
    if len == 0 || len > MAX_BODY as u64 {
        return FrameParse::BadLength;
    }
    let head = 4 + (before - rest.len());
    let total = head + len as usize;
    if b.len() < total {
        return FrameParse::Incomplete { need: Some(total) };
    }
    if crc(&[&b[4..head], &b[head..total]]) != stored {
        return FrameParse::BadCrc;
    }
    FrameParse::Record {
        body: head..total,
        len: total,
    }
}

/// Whether a well-formed record starts anywhere in `b` after its first byte: tells a
/// torn tail (nothing valid follows) from damage in the middle of a file.
pub(crate) fn valid_record_after(b: &[u8]) -> bool {
    (1..b.len()).any(|i| {
        let rest = &b[i..];
        matches!(parse_frame(rest), FrameParse::Record { ref body, .. } if parse_record(&rest[body.clone()]).is_ok())
    })
}

// ---------------------------------------------------------------------------------------
// Record bodies.

/// A queued request as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryRecord<'a> {
    pub(crate) seq: u64,
    /// The request this one replaces (a retry puts a leased request back as a new one).
    pub(crate) replaces: Option<u64>,
    pub(crate) group: u32,
    pub(crate) priority: i32,
    pub(crate) start: bool,
    /// Handed out and not acknowledged when this record was written (copies only).
    pub(crate) leased: bool,
    pub(crate) not_before: Option<u64>,
    /// The first 8 bytes of the fingerprint marked seen with this request.
    pub(crate) fingerprint: Option<[u8; FP_LEN]>,
    pub(crate) payload: &'a [u8],
}

impl EntryRecord<'_> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut tag = KIND_ENTRY;
        if self.start {
            tag |= F_START;
        }
        if self.leased {
            tag |= F_LEASED;
        }
        if self.fingerprint.is_some() {
            tag |= F_FP;
        }
        if self.not_before.is_some() {
            tag |= F_NOT_BEFORE;
        }
        if self.replaces.is_some() {
            tag |= F_REPLACES;
        }
        out.push(tag);
        put_varint(out, self.seq);
        if let Some(r) = self.replaces {
            put_varint(out, r);
        }
        put_varint(out, u64::from(self.group));
        put_varint(out, zigzag(self.priority));
        if let Some(t) = self.not_before {
            put_varint(out, t);
        }
        if let Some(fp) = &self.fingerprint {
            out.extend_from_slice(fp);
        }
        out.extend_from_slice(self.payload);
    }
}

/// The first 8 bytes of a fingerprint, as stored.
pub(crate) fn fp_prefix(fp: &Fingerprint) -> [u8; FP_LEN] {
    let mut p = [0u8; FP_LEN];
    p.copy_from_slice(&fp.0[..FP_LEN]);
    p
}

/// A fingerprint rebuilt from its stored prefix (the rest zeroed).
pub(crate) fn fp_from_prefix(p: &[u8]) -> Fingerprint {
    let mut fp = [0u8; 20];
    fp[..FP_LEN].copy_from_slice(&p[..FP_LEN]);
    Fingerprint(fp)
}

/// One record of a segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    Entry(EntryRecord<'a>),
    Lease(u64),
    Ack(u64),
    Callback {
        id: u32,
        name: &'a str,
    },
    Group {
        id: u32,
        key: &'a str,
    },
    /// Concatenated 8-byte fingerprint prefixes.
    Fingerprints(&'a [u8]),
    /// Every lease before this point was reported on recovery and queued again.
    Unlease,
}

pub(crate) fn encode_seq_record(out: &mut Vec<u8>, kind: u8, seq: u64) {
    out.push(kind);
    put_varint(out, seq);
}

pub(crate) fn encode_named(out: &mut Vec<u8>, kind: u8, id: u32, name: &str) {
    out.push(kind);
    put_varint(out, u64::from(id));
    out.extend_from_slice(name.as_bytes());
}

/// Parses a record body. Errors say what is wrong (the caller adds file and offset).
pub(crate) fn parse_record(body: &[u8]) -> Result<Record<'_>, &'static str> {
    let (&tag, mut b) = body.split_first().ok_or("empty record")?;
    let kind = tag & KIND_MASK;
    let flags = tag & !KIND_MASK;
    if kind != KIND_ENTRY && flags != 0 {
        return Err("flags on a record kind that has none");
    }
    let varint = |b: &mut &[u8]| get_varint(b).ok_or("truncated or oversized number");
    let id32 = |v: u64| u32::try_from(v).map_err(|_| "identifier out of range");
    fn text(b: &[u8]) -> Result<&str, &'static str> {
        core::str::from_utf8(b).map_err(|_| "name is not UTF-8")
    }
    match kind {
        KIND_ENTRY => {
            let seq = varint(&mut b)?;
            let replaces = if flags & F_REPLACES != 0 {
                Some(varint(&mut b)?)
            } else {
                None
            };
            let group = id32(varint(&mut b)?)?;
            let priority = unzigzag(varint(&mut b)?).ok_or("priority out of range")?;
            let not_before = if flags & F_NOT_BEFORE != 0 {
                Some(varint(&mut b)?)
            } else {
                None
            };
            let fingerprint = if flags & F_FP != 0 {
                let (fp, rest) = b
                    .split_first_chunk::<FP_LEN>()
                    .ok_or("truncated fingerprint")?;
                b = rest;
                Some(*fp)
            } else {
                None
            };
            Ok(Record::Entry(EntryRecord {
                seq,
                replaces,
                group,
                priority,
                start: flags & F_START != 0,
                leased: flags & F_LEASED != 0,
                not_before,
                fingerprint,
                payload: b,
            }))
        }
        KIND_LEASE | KIND_ACK => {
            let seq = varint(&mut b)?;
            if !b.is_empty() {
                return Err("trailing bytes");
            }
            Ok(if kind == KIND_LEASE {
                Record::Lease(seq)
            } else {
                Record::Ack(seq)
            })
        }
        KIND_CALLBACK => {
            let id = id32(varint(&mut b)?)?;
            Ok(Record::Callback { id, name: text(b)? })
        }
        KIND_GROUP => {
            let id = id32(varint(&mut b)?)?;
            Ok(Record::Group { id, key: text(b)? })
        }
        KIND_FINGERPRINTS => {
            if b.len() % FP_LEN != 0 {
                return Err("fingerprint list of a partial length");
            }
            Ok(Record::Fingerprints(b))
        }
        KIND_UNLEASE => {
            if !b.is_empty() {
                return Err("trailing bytes");
            }
            Ok(Record::Unlease)
        }
        _ => Err("unknown record kind"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = vec![];
            put_varint(&mut out, v);
            let mut s = &out[..];
            assert_eq!(get_varint(&mut s), Some(v));
            assert!(s.is_empty());
            assert_eq!(get_varint(&mut &out[..out.len() - 1]), None);
        }
        assert_eq!(get_varint(&mut &[0xff; 11][..]), None);
        for p in [0, 1, -1, 5, -5, i32::MAX, i32::MIN] {
            assert_eq!(unzigzag(zigzag(p)), Some(p));
        }
    }

    #[test]
    fn records_round_trip() {
        let e = EntryRecord {
            seq: 123_456,
            replaces: Some(7),
            group: 42,
            priority: -3,
            start: true,
            leased: true,
            not_before: Some(99),
            fingerprint: Some([1, 2, 3, 4, 5, 6, 7, 8]),
            payload: b"payload",
        };
        let mut body = vec![];
        e.encode(&mut body);
        assert_eq!(parse_record(&body), Ok(Record::Entry(e)));
        let mut framed = vec![];
        frame(&mut framed, &body);
        let FrameParse::Record { body: r, len } = parse_frame(&framed) else {
            panic!("frame")
        };
        assert_eq!(len, framed.len());
        assert_eq!(&framed[r], &body[..]);
        for cut in 0..framed.len() {
            assert!(matches!(
                parse_frame(&framed[..cut]),
                FrameParse::Incomplete { .. }
            ));
        }
        framed[7] ^= 1;
        assert_eq!(parse_frame(&framed), FrameParse::BadCrc);

        let mut b = vec![];
        encode_named(&mut b, KIND_GROUP, 3, "a.example.com");
        assert_eq!(
            parse_record(&b),
            Ok(Record::Group {
                id: 3,
                key: "a.example.com"
            })
        );
        let mut b = vec![];
        encode_seq_record(&mut b, KIND_ACK, 9);
        assert_eq!(parse_record(&b), Ok(Record::Ack(9)));
        assert!(parse_record(&[KIND_ACK | F_START, 1]).is_err());
        assert!(parse_record(&[0]).is_err());
        assert!(parse_record(&[KIND_ENTRY | F_FP, 1, 1, 1, 9]).is_err());
    }

    #[test]
    fn headers_check_magic_version_and_crc() {
        let h = SegmentHeader {
            id: 7,
            base_seq: 1 << 40,
        };
        let mut b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        assert_eq!(SegmentHeader::decode(&b[..20]), Err(HeaderError::Short));
        b[20] ^= 1;
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::BadCrc));
        b[8] = 9;
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::Version(9)));
        b[0] = b'X';
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::BadMagic));
        assert_eq!(check_seen_header(&seen_header()), Ok(()));
        let f = encode_scopes_file(b"abc");
        assert_eq!(decode_scopes_file(&f), Ok(&b"abc"[..]));
    }

    #[test]
    fn resync_tells_torn_from_damaged() {
        let mut log = vec![];
        let mut last = 0;
        for i in 0..5u64 {
            last = log.len();
            let mut body = vec![];
            encode_seq_record(&mut body, KIND_LEASE, i * 1000);
            frame(&mut log, &body);
        }
        // Damage in the first record: valid records follow.
        assert!(valid_record_after(&log));
        // A torn last record: nothing valid follows its start.
        assert!(!valid_record_after(&log[last..log.len() - 2]));
    }
}
