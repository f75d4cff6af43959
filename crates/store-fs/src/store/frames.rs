//! Reading the records of a segment back in order, through a buffered positional reader.

use std::fs::File;
use std::io::{self, BufReader};

use super::Next;
use crate::files::{PosReader, read_full};
use crate::format::MAX_BODY;

/// Reads the records of `file[start..end]` in order.
pub(super) struct FrameReader<'f> {
    pub(super) r: BufReader<PosReader<'f>>,
    pub(super) at: u64,
    pub(super) end: u64,
    pub(super) body: Vec<u8>,
}

impl<'f> FrameReader<'f> {
    pub(super) fn new(file: &'f File, start: u64, end: u64) -> Self {
        FrameReader {
            r: BufReader::with_capacity(
                1 << 18,
                PosReader {
                    file,
                    pos: start,
                    end,
                },
            ),
            at: start,
            end,
            body: Vec::new(),
        }
    }

    pub(super) fn next(&mut self) -> io::Result<Next> {
        let start = self.at;
        let bad = |reason| {
            Ok(Next::Bad {
                offset: start,
                reason,
            })
        };
        let mut head = [0u8; 4 + 10];
        let got = read_full(&mut self.r, &mut head[..4])?;
        if got == 0 {
            return Ok(Next::End);
        }
        if got < 4 {
            return bad("truncated record header");
        }
        let mut n = 0;
        let mut len: u64 = 0;
        loop {
            if n == 10 {
                return bad("unreadable record length");
            }
            let mut b = [0u8; 1];
            if read_full(&mut self.r, &mut b)? == 0 {
                return bad("truncated record header");
            }
            head[4 + n] = b[0];
            len |= u64::from(b[0] & 0x7f)
                .checked_shl(7 * n as u32)
                .unwrap_or(0);
            n += 1;
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        if n == 10 && head[13] > 1 || len == 0 || len > MAX_BODY as u64 {
            return bad("unreadable record length");
        }
        let body_at = start + 4 + n as u64;
        if len > self.end.saturating_sub(body_at) {
            return bad("record runs past the end of the file");
        }
        self.body.resize(len as usize, 0);
        if read_full(&mut self.r, &mut self.body)? < len as usize {
            return bad("truncated record");
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&head[4..4 + n]);
        h.update(&self.body);
        if h.finalize() != u32::from_le_bytes([head[0], head[1], head[2], head[3]]) {
            return bad("record checksum mismatch");
        }
        self.at = body_at + len;
        Ok(Next::Record(start))
    }

    pub(super) fn body(&self) -> &[u8] {
        &self.body
    }

    /// Bytes of the record just read (framing included).
    pub(super) fn frame_len(&self, offset: u64) -> u64 {
        self.at - offset
    }
}
