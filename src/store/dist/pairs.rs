//! Workers 0 and 1 as partners: where the servers' links carry the job's busiest traffic (at
//! least twice as many workers as servers), the two sum their pushes before the servers get
//! them and share their pulls' answers, so each server receives and sends one value fewer per
//! round. Each dense float32 part of a key has one of the two as its *owner*, alternating to
//! keep their bytes even ([`Owners`]). For a push of a sync round, the other sends its piece
//! (`Msg::PairPush`) to the owner, which adds it to its own and pushes the sum as both
//! workers' push (`wire::PUSH_PAIRED`) and forwards the server's answer. Rank order is kept:
//! a round's sum is `((w0 + w1) + w2) + ...` and `w0 + w1` is `w1 + w0` bit for bit, so the
//! paired sum is the fold's first step. A pull of the owner names itself the relay
//! (`PullAfter`'s `relay`): a server holding both partners' pulls of one round answers the
//! owner once (`Msg::Relay`), which forwards the value.
//!
//! A partner that joins (finishes early) leaves the pair first, before waiting for its last
//! pushes: it tells the other (`Msg::PairLeave`), and from then on no piece waits for another
//! on either side. Its own pieces go alone, the other's pieces held for it then go alone, and
//! the pieces it gets after leaving it forwards alone (`wire::PUSH_FOR_PARTNER`). Each worker has at most one push of a key in flight (the
//! next waits for its answer, which waits for the round), so a piece is matched by key,
//! offset and push number.

use super::transport::Body;
use super::wire::Span;
use crate::error::Result;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Whether this job's workers 0 and 1 pair: `KVSTORE_DIST_PAIRS` `auto` (the default: sync
/// stores with at least twice as many workers as servers, no server on either partner's host:
/// `apart`), `1` (sync stores with two workers or more) or `0`. On one host, where nothing
/// crosses a network link, the partners' extra hop and sums only cost.
pub fn enabled(sync: bool, workers: usize, servers: usize, apart: bool) -> Result<bool> {
    let auto = workers >= 2 && workers >= 2 * servers && apart;
    let chosen = match std::env::var("KVSTORE_DIST_PAIRS") {
        Err(_) => auto,
        Ok(v) => match v.trim() {
            "" | "auto" => auto,
            "1" => workers >= 2,
            "0" => false,
            other => crate::bail!("KVSTORE_DIST_PAIRS={other:?}: expected `auto` (the default), `1` or `0`"),
        },
    };
    Ok(sync && chosen)
}

/// Which of the two partners owns each part: the one with fewer bytes owned so far, keys in
/// the order they are inited (every worker inits the same keys in the same calls).
#[derive(Clone, Default)]
pub struct Owners {
    bytes: [u64; 2],
}

impl Owners {
    /// The owner (0 or 1) of a part of `bytes` bytes, counted.
    pub fn assign(&mut self, bytes: u64) -> usize {
        let owner = usize::from(self.bytes[1] < self.bytes[0]);
        self.bytes[owner] += bytes;
        owner
    }
}

/// `dst = a + b`, float32 elements in little-endian bytes at any alignment (a message's
/// payload follows its header): the same bits as the server's fold of `a` then `b`.
pub fn add_f32(dst: &mut [u8], a: &[u8], b: &[u8]) {
    for ((d, x), y) in dst.chunks_exact_mut(4).zip(a.chunks_exact(4)).zip(b.chunks_exact(4)) {
        let sum = f32::from_le_bytes([x[0], x[1], x[2], x[3]]) + f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        d.copy_from_slice(&sum.to_le_bytes());
    }
}

/// A piece of a push: what the server push of it needs.
pub struct Piece {
    /// The request the server's answer answers (the pusher's own).
    pub req: u64,
    pub key: i32,
    pub dtype: i32,
    /// `wire::PUSH_PULL` or 0.
    pub flags: u8,
    /// The key's push number (counted from 1, init pushes aside).
    pub n: u64,
    /// The piece's first element within the key.
    pub offset: u64,
    /// World rank of the part's server.
    pub server: usize,
    pub span: Span,
}

/// The owner's own piece, read from the pushed value.
pub struct OwnPiece {
    pub piece: Piece,
    pub body: Body,
}

/// The partner's piece, as received.
pub struct TheirPiece {
    pub piece: Piece,
    pub data: Vec<u8>,
}

/// What to do with a piece.
pub enum Step {
    /// Nothing yet: it waits for the other's.
    Hold,
    /// Push their sum.
    Pair(OwnPiece, TheirPiece),
    /// Push the own piece alone (the partner has left).
    Alone(OwnPiece),
    /// Push the partner's piece alone, for it (this worker has left).
    Forward(TheirPiece),
}

#[derive(Default)]
struct Held {
    own: HashMap<(i32, u64, u64), OwnPiece>,
    theirs: HashMap<(i32, u64, u64), TheirPiece>,
    /// This worker has left the pair.
    left: bool,
    /// The partner has.
    partner_left: bool,
}

impl Held {
    /// Either partner has left: a piece whose match is not here goes alone (and since nothing
    /// is held from then on, none is).
    fn broken(&self) -> bool {
        self.left || self.partner_left
    }

    /// Every piece waiting for its match, to go alone: own pieces pushed, the partner's
    /// forwarded.
    fn drain(&mut self) -> Vec<Step> {
        let mut steps: Vec<Step> = self.own.drain().map(|(_, p)| Step::Alone(p)).collect();
        steps.extend(self.theirs.drain().map(|(_, p)| Step::Forward(p)));
        steps
    }
}

/// One partner's side of the pair.
pub struct Pairing {
    /// The partner's world rank.
    pub partner: usize,
    /// This worker's index in the pair (its worker rank, 0 or 1).
    pub index: usize,
    held: Mutex<Held>,
}

fn id(p: &Piece) -> (i32, u64, u64) {
    (p.key, p.offset, p.n)
}

impl Pairing {
    /// Worker `index` (0 or 1) of the pair, its partner at world rank `partner`.
    pub fn new(index: usize, partner: usize) -> Pairing {
        Pairing { partner, index, held: Mutex::new(Held::default()) }
    }

    /// An own piece of a part this worker owns.
    pub fn own(&self, own: OwnPiece) -> Step {
        let mut held = self.held.lock();
        match held.theirs.remove(&id(&own.piece)) {
            Some(theirs) => Step::Pair(own, theirs),
            None if held.broken() => Step::Alone(own),
            None => {
                held.own.insert(id(&own.piece), own);
                Step::Hold
            }
        }
    }

    /// The partner's piece of a part this worker owns.
    pub fn theirs(&self, theirs: TheirPiece) -> Step {
        let mut held = self.held.lock();
        match held.own.remove(&id(&theirs.piece)) {
            Some(own) => Step::Pair(own, theirs),
            None if held.broken() => Step::Forward(theirs),
            None => {
                held.theirs.insert(id(&theirs.piece), theirs);
                Step::Hold
            }
        }
    }

    /// The partner has left the pair (its push ops already running may still send pieces):
    /// from now on no piece waits for another. Returns the steps for what was waiting.
    pub fn partner_left(&self) -> Vec<Step> {
        let mut held = self.held.lock();
        held.partner_left = true;
        held.drain()
    }

    /// Whether either partner has left (new pieces go straight to their servers).
    pub fn partner_gone(&self) -> bool {
        self.held.lock().broken()
    }

    /// This worker leaves the pair (its push ops already running may still make pieces): from
    /// now on no piece waits for another. Returns the steps for what was waiting.
    pub fn leave(&self) -> Vec<Step> {
        let mut held = self.held.lock();
        held.left = true;
        held.drain()
    }

    /// The keys of the own pieces waiting for the partner's.
    pub fn waiting(&self) -> Vec<i32> {
        self.held.try_lock().map(|h| h.own.keys().map(|k| k.0).collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndarray::{Context, DType, NDArray};

    fn piece(req: u64, n: u64, offset: u64) -> Piece {
        Piece { req, key: 3, dtype: 0, flags: 0, n, offset, server: 5, span: Span::whole(4) }
    }

    fn own(req: u64, n: u64, offset: u64) -> OwnPiece {
        let a = NDArray::zeros(&[4], Context::cpu(0), DType::Float32).unwrap();
        OwnPiece { piece: piece(req, n, offset), body: Body::new(&a, 0..16) }
    }

    fn theirs(req: u64, n: u64, offset: u64) -> TheirPiece {
        TheirPiece { piece: piece(req, n, offset), data: vec![0; 16] }
    }

    #[test]
    fn pieces_pair_by_key_offset_and_push_whichever_comes_first() {
        let p = Pairing::new(0, 9);
        assert!(matches!(p.own(own(1, 1, 0)), Step::Hold));
        assert!(matches!(p.theirs(theirs(7, 1, 4)), Step::Hold), "another offset waits");
        assert!(matches!(p.theirs(theirs(8, 2, 0)), Step::Hold), "another push waits");
        assert_eq!(p.waiting(), vec![3]);
        match p.theirs(theirs(6, 1, 0)) {
            Step::Pair(o, t) => assert_eq!((o.piece.req, t.piece.req), (1, 6)),
            _ => panic!("the partner's piece of the held push pairs"),
        }
        match p.own(own(2, 1, 4)) {
            Step::Pair(o, t) => assert_eq!((o.piece.req, t.piece.req), (2, 7)),
            _ => panic!("an own piece pairs with the held one"),
        }
    }

    #[test]
    fn leaving_hands_the_held_pieces_back_and_later_ones_go_alone() {
        for partner_leaves in [true, false] {
            let p = Pairing::new(0, 2);
            let leave = |p: &Pairing| if partner_leaves { p.partner_left() } else { p.leave() };
            assert!(matches!(p.own(own(1, 1, 0)), Step::Hold));
            assert!(matches!(p.theirs(theirs(4, 1, 4)), Step::Hold));
            assert!(!p.partner_gone());
            let steps = leave(&p);
            assert!(matches!(steps[..], [Step::Alone(_), Step::Forward(_)]), "nothing waits once a partner leaves");
            assert!(p.partner_gone() && p.waiting().is_empty());
            // Pieces of push ops that were already running, on either side: each alone.
            assert!(matches!(p.own(own(2, 2, 0)), Step::Alone(_)));
            assert!(matches!(p.theirs(theirs(5, 2, 0)), Step::Forward(_)));
            assert!(p.waiting().is_empty());
        }
        // Two pieces that met before the leave have paired already.
        let q = Pairing::new(1, 3);
        assert!(matches!(q.theirs(theirs(6, 1, 0)), Step::Hold));
        assert!(matches!(q.own(own(7, 1, 0)), Step::Pair(..)));
        assert!(q.leave().is_empty());
    }

    #[test]
    fn a_paired_sum_is_the_folds_first_step_at_any_alignment() {
        let a = [1.5f32, -0.0, f32::MAX, 1e-45, 3.25];
        let b = [2.25f32, -0.0, f32::MAX, 2e-45, -3.25];
        let (ab, bb): (&[u8], &[u8]) = (bytemuck::cast_slice(&a), bytemuck::cast_slice(&b));
        // Each operand one byte past an element boundary, the sum three.
        let shifted = |bytes: &[u8]| [&[0u8][..], bytes].concat();
        let (a1, b1) = (shifted(ab), shifted(bb));
        let mut msg = vec![0u8; 3 + ab.len()];
        add_f32(&mut msg[3..], &a1[1..], &b1[1..]);
        let got: Vec<f32> = msg[3..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        assert!(got[1].is_sign_negative() && got[2].is_infinite());
    }

    #[test]
    fn owners_alternate_to_keep_the_partners_bytes_even() {
        let mut o = Owners::default();
        let owners: Vec<usize> = [100, 40, 40, 30, 10].iter().map(|&b| o.assign(b)).collect();
        assert_eq!(owners, vec![0, 1, 1, 1, 0]);
        assert_eq!(o.bytes, [110, 110]);
    }
}
