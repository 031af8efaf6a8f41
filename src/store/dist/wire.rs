//! The messages between workers and servers: a kind byte, fixed little-endian fields, then the
//! payload. Decoding borrows the payload from the received buffer.

use crate::error::Result;

/// A push carries the first value of a key: the server stores it (MXNet: the first push of
/// an unknown key is its init).
pub const PUSH_INIT: u8 = 1;
/// The pusher wants the updated part back (push-pull: one round trip).
pub const PUSH_PULL: u8 = 2;
/// The payload is 2-bit (or 1-bit) packed.
pub const PUSH_COMPRESSED: u8 = 4;
/// The payload is the sum of the sender's value and its partner's (workers 0 and 1, see
/// `pairs`): the push of both, which their round folds first.
pub const PUSH_PAIRED: u8 = 8;
/// The payload is the sender's partner's value alone, which the sender forwards (it has left
/// the pair): the partner's push.
pub const PUSH_FOR_PARTNER: u8 = 16;

/// A message.
#[derive(Debug, PartialEq)]
pub enum Msg<'a> {
    /// Worker to server: a part of a key's value (`len` elements), whole or one chunk of it:
    /// `data` holds the elements from `at` of the part pushed in chunks of `chunk` elements
    /// (`chunk` 0: the part is pushed whole, `at` is 0). A sync round of a part pushed in
    /// chunks is summed chunk by chunk, and each chunk answered as its round completes.
    Push { req: u64, key: i32, dtype: i32, flags: u8, len: u64, at: u64, chunk: u64, data: &'a [u8] },
    /// Worker to server: send the stored part back.
    Pull { req: u64, key: i32 },
    /// Worker to server: send the part back once this worker's push number `after` of the
    /// key (counted from 1, init pushes aside) has arrived and its sync round has been
    /// applied (at once after that push in async mode, or if it has been). The value is the
    /// one a `Pull` sent after that push's answer would get, without waiting for the answer:
    /// the pull leaves the server as soon as the round completes.
    /// `relay`: the worker forwards the value to its partner (`pairs`), so a server that holds
    /// the partner's pull of the same round too may answer both with one `Relay`.
    PullAfter { req: u64, key: i32, after: u64, relay: bool },
    /// Worker to server: a command (`Command` ids, or any other number).
    Command { req: u64, id: i32, body: &'a [u8] },
    /// Worker to server: answer 1 if an updater is set.
    HasUpdater { req: u64 },
    /// Server to worker: the answer to request `req`; `ok` false carries an error message.
    Reply { req: u64, ok: bool, data: &'a [u8] },
    /// Server to worker: a piece of the value answering pull `req`, from byte `at` of the
    /// part; the pull is answered once every byte of its part has come (or a `Reply` has).
    ReplyPart { req: u64, at: u64, data: &'a [u8] },
    /// Worker to server: rows of a row_sparse key's part (`part_rows` rows of `row_len`
    /// elements); `ids` are relative to the part's first row, `data` holds those rows.
    RspPush { req: u64, key: i32, dtype: i32, flags: u8, part_rows: u64, row_len: u64, ids: Vec<i64>, data: &'a [u8] },
    /// Worker to server: send these rows (relative ids, sorted, unique) of the part.
    RspPull { req: u64, key: i32, ids: Vec<i64> },
    /// Worker to server: this worker has finished (it is in its exit protocol); from now on
    /// sync rounds complete without it and its pushes are refused.
    Join { req: u64 },
    /// Worker to server 0: a worker barrier (`exit`: the exit barrier, after `Join`); the
    /// reply comes when the barrier is released.
    /// `placed`: the worker's key-placement fingerprint, which every worker at a barrier
    /// must share (0: unchecked; [`INIT_REFUSED`]: worker 0 refused the init before it).
    Barrier { req: u64, exit: bool, placed: u64 },
    /// Worker to its partner (`pairs`): its piece of a push, from element `offset` of the key,
    /// `n` the key's push number; the partner sums it with its own piece of that push and
    /// pushes the sum (`PUSH_PAIRED`) to world rank `server`, answering `req` with the server's
    /// answer.
    PairPush { req: u64, key: i32, dtype: i32, flags: u8, n: u64, offset: u64, server: u64, len: u64, at: u64, chunk: u64, data: &'a [u8] },
    /// Worker to its partner: it has left the pair (it is joining): its own pieces will not
    /// come, and the partner's still on their way are forwarded alone.
    PairLeave,
    /// Server to worker: the answer to pull `req` (a `Reply` if `whole`, else a `ReplyPart`
    /// from byte `at`) that also answers the worker's partner's pull `partner_req`: the worker
    /// forwards it.
    Relay { req: u64, at: u64, whole: bool, partner_req: u64, data: &'a [u8] },
}

/// The `placed` of worker 0 at the barrier of an init it refused (or could not send): every
/// worker's init then fails there, and none keeps the call's keys.
pub const INIT_REFUSED: u64 = u64::MAX;

const PUSH: u8 = 1;
const PULL: u8 = 2;
const COMMAND: u8 = 3;
const HAS_UPDATER: u8 = 4;
const REPLY: u8 = 5;
const RSP_PUSH: u8 = 6;
const RSP_PULL: u8 = 7;
const JOIN: u8 = 8;
const BARRIER: u8 = 9;
const PULL_AFTER: u8 = 10;
const REPLY_PART: u8 = 11;
const PAIR_PUSH: u8 = 12;
const PAIR_LEAVE: u8 = 13;
const RELAY: u8 = 14;

fn put_ids(m: &mut Vec<u8>, ids: &[i64]) {
    m.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    for id in ids {
        m.extend_from_slice(&id.to_le_bytes());
    }
}

/// A row_sparse push's header and row ids, before its rows: the sender appends the rows.
#[allow(clippy::too_many_arguments)]
pub fn rsp_push_header(req: u64, key: i32, dtype: i32, flags: u8, part_rows: u64, row_len: u64, ids: &[i64], payload: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(50 + ids.len() * 8 + payload);
    m.push(RSP_PUSH);
    m.extend_from_slice(&req.to_le_bytes());
    m.extend_from_slice(&key.to_le_bytes());
    m.extend_from_slice(&dtype.to_le_bytes());
    m.push(flags);
    m.extend_from_slice(&part_rows.to_le_bytes());
    m.extend_from_slice(&row_len.to_le_bytes());
    put_ids(&mut m, ids);
    m
}

/// Where a push's payload lies in its part: the part's `len` elements, the payload's first
/// element `at`, and the chunk size the part is pushed in (0: whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub len: u64,
    pub at: u64,
    pub chunk: u64,
}

impl Span {
    /// A whole part of `len` elements.
    pub fn whole(len: u64) -> Span {
        Span { len, at: 0, chunk: 0 }
    }
}

/// A push's header, before its payload: the sender appends the payload itself, or sends it
/// from where it lies as the message's second part (`Transport::send_parts`); `payload`
/// bytes of room are reserved for the first.
pub fn push_header(req: u64, key: i32, dtype: i32, flags: u8, span: Span, payload: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(42 + payload);
    m.push(PUSH);
    m.extend_from_slice(&req.to_le_bytes());
    m.extend_from_slice(&key.to_le_bytes());
    m.extend_from_slice(&dtype.to_le_bytes());
    m.push(flags);
    m.extend_from_slice(&span.len.to_le_bytes());
    m.extend_from_slice(&span.at.to_le_bytes());
    m.extend_from_slice(&span.chunk.to_le_bytes());
    m
}

/// A `ReplyPart`'s header, before its payload (`payload` bytes of room reserved, as in
/// [`push_header`]).
pub fn reply_part_header(req: u64, at: u64, payload: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(17 + payload);
    m.push(REPLY_PART);
    m.extend_from_slice(&req.to_le_bytes());
    m.extend_from_slice(&at.to_le_bytes());
    m
}

/// A `Reply`'s header, before its data (`payload` bytes of room reserved, as in
/// [`push_header`]).
pub fn reply_header(req: u64, ok: bool, payload: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(10 + payload);
    m.push(REPLY);
    m.extend_from_slice(&req.to_le_bytes());
    m.push(ok as u8);
    m
}

/// A `PairPush`'s header, before its payload (`payload` bytes of room reserved).
#[allow(clippy::too_many_arguments)]
pub fn pair_push_header(req: u64, key: i32, dtype: i32, flags: u8, n: u64, offset: u64, server: u64, span: Span, payload: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(66 + payload);
    m.push(PAIR_PUSH);
    m.extend_from_slice(&req.to_le_bytes());
    m.extend_from_slice(&key.to_le_bytes());
    m.extend_from_slice(&dtype.to_le_bytes());
    m.push(flags);
    m.extend_from_slice(&n.to_le_bytes());
    m.extend_from_slice(&offset.to_le_bytes());
    m.extend_from_slice(&server.to_le_bytes());
    m.extend_from_slice(&span.len.to_le_bytes());
    m.extend_from_slice(&span.at.to_le_bytes());
    m.extend_from_slice(&span.chunk.to_le_bytes());
    m
}

/// A `Relay`'s header, before its data.
pub fn relay_header(req: u64, at: u64, whole: bool, partner_req: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(26);
    m.push(RELAY);
    m.extend_from_slice(&req.to_le_bytes());
    m.extend_from_slice(&at.to_le_bytes());
    m.push(whole as u8);
    m.extend_from_slice(&partner_req.to_le_bytes());
    m
}

/// Encodes `msg`.
pub fn encode(msg: &Msg) -> Vec<u8> {
    match msg {
        Msg::Push { req, key, dtype, flags, len, at, chunk, data } => {
            let mut m = push_header(*req, *key, *dtype, *flags, Span { len: *len, at: *at, chunk: *chunk }, data.len());
            m.extend_from_slice(data);
            m
        }
        Msg::Pull { req, key } => {
            let mut m = vec![PULL];
            m.extend_from_slice(&req.to_le_bytes());
            m.extend_from_slice(&key.to_le_bytes());
            m
        }
        Msg::PullAfter { req, key, after, relay } => {
            let mut m = vec![PULL_AFTER];
            m.extend_from_slice(&req.to_le_bytes());
            m.extend_from_slice(&key.to_le_bytes());
            m.extend_from_slice(&after.to_le_bytes());
            m.push(*relay as u8);
            m
        }
        Msg::Command { req, id, body } => {
            let mut m = vec![COMMAND];
            m.extend_from_slice(&req.to_le_bytes());
            m.extend_from_slice(&id.to_le_bytes());
            m.extend_from_slice(body);
            m
        }
        Msg::HasUpdater { req } => {
            let mut m = vec![HAS_UPDATER];
            m.extend_from_slice(&req.to_le_bytes());
            m
        }
        Msg::Reply { req, ok, data } => {
            let mut m = reply_header(*req, *ok, data.len());
            m.extend_from_slice(data);
            m
        }
        Msg::ReplyPart { req, at, data } => {
            let mut m = reply_part_header(*req, *at, data.len());
            m.extend_from_slice(data);
            m
        }
        Msg::RspPush { req, key, dtype, flags, part_rows, row_len, ids, data } => {
            let mut m = rsp_push_header(*req, *key, *dtype, *flags, *part_rows, *row_len, ids, data.len());
            m.extend_from_slice(data);
            m
        }
        Msg::RspPull { req, key, ids } => {
            let mut m = vec![RSP_PULL];
            m.extend_from_slice(&req.to_le_bytes());
            m.extend_from_slice(&key.to_le_bytes());
            put_ids(&mut m, ids);
            m
        }
        Msg::Join { req } => {
            let mut m = vec![JOIN];
            m.extend_from_slice(&req.to_le_bytes());
            m
        }
        Msg::Barrier { req, exit, placed } => {
            let mut m = vec![BARRIER];
            m.extend_from_slice(&req.to_le_bytes());
            m.push(*exit as u8);
            m.extend_from_slice(&placed.to_le_bytes());
            m
        }
        Msg::PairPush { req, key, dtype, flags, n, offset, server, len, at, chunk, data } => {
            let mut m = pair_push_header(*req, *key, *dtype, *flags, *n, *offset, *server, Span { len: *len, at: *at, chunk: *chunk }, data.len());
            m.extend_from_slice(data);
            m
        }
        Msg::PairLeave => vec![PAIR_LEAVE],
        Msg::Relay { req, at, whole, partner_req, data } => {
            let mut m = relay_header(*req, *at, *whole, *partner_req);
            m.extend_from_slice(data);
            m
        }
    }
}

/// A cursor over a message's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        crate::ensure!(self.bytes.len() >= n, "truncated message");
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }
    fn i32(&mut self) -> Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn ids(&mut self) -> Result<Vec<i64>> {
        let n = usize::try_from(self.u64()?).map_err(|_| crate::Error::new("row count"))?;
        crate::ensure!(n <= self.bytes.len() / 8, "truncated message");
        (0..n).map(|_| self.u64().map(|v| v as i64)).collect()
    }
}

/// Decodes a message.
pub fn decode(bytes: &[u8]) -> Result<Msg<'_>> {
    let mut r = Reader { bytes };
    Ok(match r.u8()? {
        PUSH => {
            let (req, key, dtype, flags, len, at, chunk) = (r.u64()?, r.i32()?, r.i32()?, r.u8()?, r.u64()?, r.u64()?, r.u64()?);
            Msg::Push { req, key, dtype, flags, len, at, chunk, data: r.bytes }
        }
        PULL => Msg::Pull { req: r.u64()?, key: r.i32()? },
        PULL_AFTER => Msg::PullAfter { req: r.u64()?, key: r.i32()?, after: r.u64()?, relay: r.u8()? != 0 },
        COMMAND => {
            let (req, id) = (r.u64()?, r.i32()?);
            Msg::Command { req, id, body: r.bytes }
        }
        HAS_UPDATER => Msg::HasUpdater { req: r.u64()? },
        REPLY => {
            let (req, ok) = (r.u64()?, r.u8()? != 0);
            Msg::Reply { req, ok, data: r.bytes }
        }
        REPLY_PART => {
            let (req, at) = (r.u64()?, r.u64()?);
            Msg::ReplyPart { req, at, data: r.bytes }
        }
        RSP_PUSH => {
            let (req, key, dtype, flags, part_rows, row_len) = (r.u64()?, r.i32()?, r.i32()?, r.u8()?, r.u64()?, r.u64()?);
            let ids = r.ids()?;
            Msg::RspPush { req, key, dtype, flags, part_rows, row_len, ids, data: r.bytes }
        }
        RSP_PULL => {
            let (req, key) = (r.u64()?, r.i32()?);
            Msg::RspPull { req, key, ids: r.ids()? }
        }
        JOIN => Msg::Join { req: r.u64()? },
        BARRIER => Msg::Barrier { req: r.u64()?, exit: r.u8()? != 0, placed: r.u64()? },
        PAIR_PUSH => {
            let (req, key, dtype, flags, n, offset) = (r.u64()?, r.i32()?, r.i32()?, r.u8()?, r.u64()?, r.u64()?);
            let (server, len, at, chunk) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            Msg::PairPush { req, key, dtype, flags, n, offset, server, len, at, chunk, data: r.bytes }
        }
        PAIR_LEAVE => Msg::PairLeave,
        RELAY => {
            let (req, at, whole, partner_req) = (r.u64()?, r.u64()?, r.u8()? != 0, r.u64()?);
            Msg::Relay { req, at, whole, partner_req, data: r.bytes }
        }
        other => crate::bail!("unknown message kind {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let data = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let msgs = [
            Msg::Push { req: 7, key: -3, dtype: 2, flags: PUSH_INIT | PUSH_PULL, len: 4, at: 0, chunk: 0, data: &data },
            Msg::Push { req: 8, key: 3, dtype: 0, flags: 0, len: 10, at: 8, chunk: 4, data: &data },
            Msg::Pull { req: u64::MAX, key: 12 },
            Msg::PullAfter { req: 5, key: -7, after: 3, relay: false },
            Msg::PullAfter { req: 6, key: 7, after: 4, relay: true },
            Msg::PairPush { req: 3, key: 4, dtype: 0, flags: PUSH_PULL, n: 9, offset: 100, server: 3, len: 10, at: 8, chunk: 4, data: &data },
            Msg::PairLeave,
            Msg::Relay { req: 12, at: 64, whole: false, partner_req: 77, data: &data },
            Msg::Relay { req: 13, at: 0, whole: true, partner_req: 78, data: &[] },
            Msg::Command { req: 1, id: 0, body: b"hello" },
            Msg::HasUpdater { req: 9 },
            Msg::Reply { req: 3, ok: false, data: b"no" },
            Msg::Reply { req: 4, ok: true, data: &[] },
            Msg::ReplyPart { req: 5, at: 1 << 40, data: &data },
            Msg::RspPush { req: 5, key: 9, dtype: 0, flags: 0, part_rows: 6, row_len: 2, ids: vec![0, 5], data: &data },
            Msg::RspPull { req: 6, key: 9, ids: vec![] },
            Msg::RspPull { req: 7, key: 9, ids: vec![1, 3, 4] },
            Msg::Join { req: 8 },
            Msg::Barrier { req: 9, exit: false, placed: 0x1234_5678_9abc_def0 },
            Msg::Barrier { req: 10, exit: true, placed: 0 },
        ];
        for m in &msgs {
            assert_eq!(&decode(&encode(m)).unwrap(), m);
        }
        // A reply's head then its data, as a two-part message arrives whole.
        let mut reply = reply_header(11, true, data.len());
        reply.extend_from_slice(&data);
        assert_eq!(decode(&reply).unwrap(), Msg::Reply { req: 11, ok: true, data: &data });
        assert!(decode(&[]).is_err());
        assert!(decode(&[PULL, 1, 2]).is_err());
        assert!(decode(&[99]).is_err());
        // A row count larger than the message is refused, not allocated.
        let mut m = encode(&Msg::RspPull { req: 1, key: 2, ids: vec![7] });
        m[13..21].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&m).is_err());
    }
}
