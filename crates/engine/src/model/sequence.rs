//! A running sequence: its tokens, each layer's state ([`LayerState`]), the checkpoints of its
//! recurrent layers, and the operations that change its past — all methods here, never an
//! assignment to a counter elsewhere. A KV cache can be cut back to any position; a recurrent
//! state only to a checkpoint, from which the rest is computed again (and reported, so a caller
//! can count what a rewind cost).

use std::ops::Range;

use crate::backend::Backend;
use crate::error::EngineError;
use crate::model::{HiddenRows, Logits, Model, Workspace};
use crate::state::{CheckpointPolicy, Checkpoints, LayerState};

/// Everything that belongs to one sequence, and scratch buffers reused from call to call.
pub struct Sequence<B: Backend> {
    pub(crate) layers: Vec<LayerState>,
    pub(crate) n_ctx: usize,
    /// The token at each position the state holds (`n_past` of them).
    pub(crate) tokens: Vec<u32>,
    pub(crate) checkpoints: Checkpoints,
    pub(crate) policy: CheckpointPolicy,
    /// Whether any layer is recurrent (checkpoints are kept only then).
    pub(crate) recurrent: bool,
    pub(crate) work: Workspace<B>,
    /// With [`Sequence::keep_hidden`]: the trunk's last hidden state at each position.
    pub(crate) hidden: Option<HiddenRows>,
}

/// How a sequence reached the position asked of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restore {
    /// The position it now holds.
    pub position: usize,
    /// Positions computed again from a checkpoint (or from the start) to get there.
    pub recomputed: usize,
}

impl<B: Backend> Sequence<B> {
    /// Positions the sequence holds.
    pub fn n_past(&self) -> usize {
        self.tokens.len()
    }

    /// Positions it can hold.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The token at each position it holds.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Each layer's state (a KV cache or a recurrent state).
    pub fn layers(&self) -> &[LayerState] {
        &self.layers
    }

    /// Bytes of state this sequence holds: layers plus checkpoints.
    pub fn state_bytes(&self) -> usize {
        self.layers.iter().map(LayerState::bytes).sum::<usize>() + self.checkpoints.bytes()
    }

    /// The positions of the saved checkpoints, oldest first.
    pub fn checkpoint_positions(&self) -> Vec<usize> {
        self.checkpoints.positions().collect()
    }

    pub fn checkpoint_policy(&self) -> CheckpointPolicy {
        self.policy
    }

    /// How often recurrent states are saved and how many are kept (see [`CheckpointPolicy`]).
    pub fn set_checkpoint_policy(&mut self, policy: CheckpointPolicy) {
        self.policy = CheckpointPolicy {
            interval: policy.interval.max(1),
            max: policy.max,
        };
        while self.checkpoints.len() > self.policy.max {
            // Shrinking: keep the newest ones.
            let keep: Vec<usize> = self.checkpoints.positions().collect();
            self.checkpoints.truncate(keep[keep.len() - 2]);
        }
    }

    /// Keeps, from now on, the trunk's last hidden state (the output norm applied) at each
    /// position it computes, which a multi-token-prediction head reads
    /// ([`crate::speculative::MtpDrafter`]), from the current position on. The kept states
    /// follow the sequence's past: cut back with it, copied with its positions by
    /// [`Sequence::extend_from`]; where none can be had for a past position (a state loaded
    /// from a file, a source that does not keep them) they are kept again from the current
    /// position on.
    pub fn keep_hidden(&mut self) {
        if self.hidden.is_none() {
            self.hidden = Some(HiddenRows {
                first: self.n_past(),
                rows: Vec::new(),
            });
        }
    }

    /// The kept hidden states: the first position kept and `n_embd` values per position from
    /// there to the current one (see [`Sequence::keep_hidden`]); `None` when not kept.
    pub fn hidden(&self) -> Option<(usize, &[f32])> {
        self.hidden.as_ref().map(|h| (h.first, &h.rows[..]))
    }

    /// The kept hidden states of `range` (positions held), when every one of them is kept.
    fn hidden_of(&self, range: Range<usize>) -> Option<&[f32]> {
        let h = self.hidden.as_ref()?;
        let held = self.n_past().checked_sub(h.first)?;
        if range.start < h.first || range.end > self.n_past() || held == 0 {
            return None;
        }
        let width = h.rows.len() / held;
        Some(&h.rows[(range.start - h.first) * width..(range.end - h.first) * width])
    }

    /// Keeps hidden states from the current position on only (those of the past are unknown).
    pub(super) fn restart_hidden(&mut self) {
        let n_past = self.n_past();
        if let Some(h) = self.hidden.as_mut() {
            h.first = n_past;
            h.rows.clear();
        }
    }

    fn truncate_hidden(&mut self, n: usize) {
        let n_past = self.n_past();
        if let Some(h) = self.hidden.as_mut() {
            let held = n_past.saturating_sub(h.first);
            let width = h.rows.len().checked_div(held).unwrap_or(0);
            h.first = h.first.min(n);
            h.rows.truncate((n - h.first) * width);
        }
    }

    /// Forgets every position: the next forward pass starts at position 0 (memory is kept).
    pub fn clear(&mut self) {
        if let Some(h) = self.hidden.as_mut() {
            h.rows.clear();
            h.first = 0;
        }
        self.tokens.clear();
        self.checkpoints.clear();
        self.reset_recurrent();
    }

    /// Saves the recurrent layers' state at the current position (a no-op for a model without
    /// recurrent layers, whose KV caches keep every position anyway).
    pub fn checkpoint(&mut self) {
        if self.recurrent {
            let (position, max) = (self.n_past(), self.policy.max);
            self.checkpoints.push(&self.layers, position, max);
        }
    }

    /// Records `fed`, just computed, and saves a checkpoint where the policy says: the sequence
    /// passed a multiple of the interval, or `prompt_end` (a batch of more than one token ended).
    pub(crate) fn advance(&mut self, fed: &[u32], prompt_end: bool) {
        let before = self.n_past();
        self.tokens.extend_from_slice(fed);
        let interval = self.policy.interval.max(1);
        if self.recurrent && (prompt_end || before / interval != self.n_past() / interval) {
            self.checkpoint();
        }
    }

    fn reset_recurrent(&mut self) {
        for layer in &mut self.layers {
            if let LayerState::Recurrent(state) = layer {
                state.reset();
            }
        }
    }

    /// The latest position at or before `n` that this sequence can return to without computing:
    /// `n` itself for KV caches, the latest checkpoint for recurrent layers (or `n` when it is the
    /// current position, or 0).
    pub fn restorable(&self, n: usize) -> usize {
        let n = n.min(self.n_past());
        if !self.recurrent || n == self.n_past() {
            return n;
        }
        self.checkpoints.at_or_before(n).map_or(0, |c| c.position)
    }

    /// Cuts the sequence back to [`Self::restorable`]`(n)` and returns that position; nothing is
    /// computed — the caller feeds the tokens from there on (a chat turn or a server slot feeds
    /// its prompt's rest anyway, so a rewind costs no separate pass).
    pub fn truncate(&mut self, n: usize) -> usize {
        let target = self.restorable(n);
        if target == self.n_past() {
            return target;
        }
        self.truncate_hidden(target);
        self.tokens.truncate(target);
        if self.recurrent {
            self.checkpoints.truncate(target);
            match self.checkpoints.at_or_before(target) {
                Some(c) if c.position == target => c.restore(&mut self.layers),
                _ => self.reset_recurrent(), // target is 0
            }
        }
        target
    }

    /// Returns to exactly position `n` (at most the current one): cut back to the latest
    /// restorable position, then the tokens from there to `n` computed again.
    pub fn rewind(&mut self, model: &Model<B>, n: usize) -> Result<Restore, EngineError> {
        let n = n.min(self.n_past());
        let replay = self.tokens[..n].to_vec();
        let reached = self.truncate(n);
        self.replay(model, &replay[reached..])?;
        Ok(Restore {
            position: n,
            recomputed: n - reached,
        })
    }

    fn replay(&mut self, model: &Model<B>, tokens: &[u32]) -> Result<(), EngineError> {
        if !tokens.is_empty() {
            model.forward(self, tokens, Logits::Last)?;
        }
        Ok(())
    }

    /// Continues from the state `src` holds after its first `n` tokens, sharing with this
    /// sequence the positions where their tokens agree (a shared prompt prefix: the server's
    /// prefix cache, a chat forked at a turn): KV positions are copied from `src`, a recurrent
    /// state is taken from whichever of the two sequences has one saved closest to `n`. Nothing
    /// is computed: returns the position reached (`n`, or less when `src`'s recurrent state at
    /// `n` is not saved — the caller feeds the tokens from there, as after [`Self::truncate`]).
    pub fn extend_from(&mut self, src: &Sequence<B>, n: usize) -> Result<usize, EngineError> {
        let own = common_prefix(&self.tokens, &src.tokens[..n.min(src.n_past())]);
        let refuse = |reason: String| EngineError::KvCopy {
            start: own,
            end: n,
            reason,
        };
        if n > src.n_past() {
            return Err(refuse(format!(
                "the source sequence holds {} positions",
                src.n_past()
            )));
        }
        if n > self.n_ctx {
            return Err(refuse(format!(
                "this sequence holds at most {} positions",
                self.n_ctx
            )));
        }
        self.check_same_shape(src).map_err(refuse)?;
        // Where the recurrent layers can start from: the state src holds at n, or the latest
        // checkpoint of either sequence at or before n (this sequence's only within `own`).
        let (reached, from_src) = if self.recurrent {
            let mine = self.restorable(own);
            let theirs = src.restorable(n);
            if theirs > mine {
                (theirs, true)
            } else {
                (mine, false)
            }
        } else {
            (n, false)
        };
        let kept = own.min(reached);
        if from_src {
            self.truncate_hidden(kept);
            self.tokens.truncate(kept);
            self.checkpoints.truncate(kept);
            if reached == src.n_past() {
                for (dst, s) in self.layers.iter_mut().zip(&src.layers) {
                    if let (LayerState::Recurrent(d), LayerState::Recurrent(s)) = (dst, s) {
                        d.conv.copy_from_slice(&s.conv);
                        d.ssm.copy_from_slice(&s.ssm);
                    }
                }
            } else if let Some(c) = src.checkpoints.at_or_before(reached) {
                c.restore(&mut self.layers);
            }
        } else {
            self.truncate(kept);
        }
        // KV positions from where this sequence's own tokens end to the position reached.
        for (dst, s) in self.layers.iter_mut().zip(&src.layers) {
            if let (LayerState::Kv(d), LayerState::Kv(s)) = (dst, s) {
                d.copy_positions(s, kept..reached);
            }
        }
        self.tokens.extend_from_slice(&src.tokens[kept..reached]);
        // A hidden state depends only on the tokens up to its position: src's are as good.
        if self.hidden.is_some() && kept < reached {
            match src.hidden_of(kept..reached) {
                Some(rows) => {
                    if let Some(h) = self.hidden.as_mut() {
                        h.rows.extend_from_slice(rows);
                    }
                }
                None => self.restart_hidden(),
            }
        }
        if from_src {
            self.checkpoint();
        }
        Ok(reached)
    }

    /// A new sequence (of `n_ctx` positions) holding exactly the first `n` positions of this one,
    /// computing what no checkpoint covers.
    pub fn fork_prefix(
        &self,
        model: &Model<B>,
        n: usize,
        n_ctx: usize,
    ) -> Result<(Sequence<B>, Restore), EngineError> {
        let mut fork = model.new_sequence(n_ctx)?;
        fork.set_checkpoint_policy(self.policy);
        let reached = fork.extend_from(self, n)?;
        fork.replay(model, &self.tokens[reached..n])?;
        Ok((
            fork,
            Restore {
                position: n,
                recomputed: n - reached,
            },
        ))
    }

    fn check_same_shape(&self, src: &Sequence<B>) -> Result<(), String> {
        if self.layers.len() != src.layers.len() {
            return Err(format!(
                "the sequences have {} and {} layers",
                src.layers.len(),
                self.layers.len()
            ));
        }
        for (i, (dst, s)) in self.layers.iter().zip(&src.layers).enumerate() {
            let same = match (dst, s) {
                (LayerState::Kv(d), LayerState::Kv(s)) => d.shape() == s.shape(),
                (LayerState::Recurrent(d), LayerState::Recurrent(s)) => {
                    d.conv.len() == s.conv.len() && d.ssm.len() == s.ssm.len()
                }
                _ => false,
            };
            if !same {
                let shape = |l: &LayerState| match l {
                    LayerState::Kv(c) => format!(
                        "a KV cache of (KV heads, key dim, value dim, types) {:?}",
                        c.shape()
                    ),
                    LayerState::Recurrent(r) => {
                        format!(
                            "a recurrent state of {} + {} floats",
                            r.conv.len(),
                            r.ssm.len()
                        )
                    }
                };
                return Err(format!(
                    "layer {i} has {} in the source and {} here",
                    shape(s),
                    shape(dst)
                ));
            }
        }
        Ok(())
    }
}

/// How many leading tokens `a` and `b` share.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;
    use crate::config::{Architecture, LayerKind, ModelConfig, SsmConfig};
    use crate::state::{new_layer_states, CheckpointPolicy, Checkpoints};
    use crate::CpuBackend;

    fn config(layers: &[LayerKind], head_dim: usize) -> ModelConfig {
        ModelConfig {
            arch: Architecture::Qwen3,
            n_vocab: 100,
            n_embd: 16,
            n_layer: layers.len(),
            n_ff: 32,
            n_head: 2,
            n_head_kv: 1,
            head_dim,
            head_dim_v: head_dim,
            n_rot: head_dim,
            rope_freq_base: 1e4,
            rms_norm_eps: 1e-6,
            n_ctx_train: 64,
            layers: layers.to_vec(),
            ssm: Some(SsmConfig {
                d_conv: 3,
                d_state: 2,
                n_group: 1,
                n_v_head: 2,
            }),
            rope_sections: None,
            n_nextn: 0,
        }
    }

    fn sequence(
        config: &ModelConfig,
        n_ctx: usize,
        policy: CheckpointPolicy,
    ) -> Sequence<CpuBackend> {
        Sequence {
            layers: new_layer_states(config, n_ctx, Default::default()).unwrap(),
            n_ctx,
            tokens: Vec::new(),
            checkpoints: Checkpoints::default(),
            policy,
            recurrent: config.has_recurrent_layers(),
            work: Workspace::default(),
            hidden: None,
        }
    }

    /// What a recurrent layer `l` holds after `tokens` in these tests: a value no other token list
    /// gives, so a restored state shows which past it belongs to.
    fn fingerprint(tokens: &[u32], l: usize) -> f32 {
        tokens
            .iter()
            .fold(l as f32 + 1.0, |acc, &t| (acc * 31.0 + t as f32) % 65_521.0)
    }

    /// Stands for the forward pass: appends the tokens one by one, writes each attention layer's
    /// KV (the token's value) and each recurrent state (its fingerprint), then records it through
    /// the sequence's own `advance`, as `Model::forward` does.
    fn feed(seq: &mut Sequence<CpuBackend>, tokens: &[u32]) {
        for &t in tokens {
            let pos = seq.n_past();
            let mut past = seq.tokens.clone();
            past.push(t);
            for (l, layer) in seq.layers.iter_mut().enumerate() {
                match layer {
                    LayerState::Kv(c) => {
                        for h in 0..c.n_head_kv {
                            c.key_row_mut(h, pos)[..2]
                                .copy_from_slice(&f16::from_f32(t as f32).to_le_bytes());
                        }
                    }
                    LayerState::Recurrent(r) => {
                        let v = fingerprint(&past, l);
                        r.conv.fill(v);
                        r.ssm.fill(v);
                    }
                }
            }
            // Stands for the trunk's hidden state: a function of the tokens so far.
            if let Some(h) = seq.hidden.as_mut() {
                h.rows.extend_from_slice(&hidden_row(&past));
            }
            // One token a batch: checkpoints come only from the interval.
            seq.advance(&[t], false);
        }
    }

    /// What `feed` keeps as the hidden state after `past` (its last token included).
    fn hidden_row(past: &[u32]) -> [f32; 2] {
        [fingerprint(past, 7), past.len() as f32]
    }

    /// The hidden states `feed` keeps for `tokens` from position `from` on.
    fn hidden_rows(tokens: &[u32], from: usize) -> Vec<f32> {
        (from..tokens.len())
            .flat_map(|p| hidden_row(&tokens[..=p]))
            .collect()
    }

    /// Asserts that every layer holds the state of exactly `seq.tokens()`.
    fn assert_consistent(seq: &Sequence<CpuBackend>) {
        for (l, layer) in seq.layers.iter().enumerate() {
            match layer {
                LayerState::Kv(c) => {
                    for (pos, &t) in seq.tokens.iter().enumerate() {
                        assert_eq!(
                            c.keys_f16(0)[pos * c.head_dim].to_f32(),
                            t as f32,
                            "layer {l} pos {pos}"
                        );
                    }
                }
                LayerState::Recurrent(r) => {
                    let want = if seq.tokens.is_empty() {
                        0.0
                    } else {
                        fingerprint(&seq.tokens, l)
                    };
                    assert!(r.ssm.iter().chain(&r.conv).all(|&v| v == want), "layer {l}");
                }
            }
        }
    }

    const HYBRID: [LayerKind; 3] = [
        LayerKind::GatedDeltaNet,
        LayerKind::Attention,
        LayerKind::GatedDeltaNet,
    ];

    #[test]
    fn truncate_returns_to_the_latest_checkpoint_and_its_state() {
        let c = config(&HYBRID, 4);
        let policy = CheckpointPolicy {
            interval: 4,
            max: 8,
        };
        let mut seq = sequence(&c, 64, policy);
        let tokens: Vec<u32> = (0..18).map(|i| (i * 7 + 3) % 100).collect();
        feed(&mut seq, &tokens);
        assert_eq!(seq.checkpoint_positions(), [4, 8, 12, 16]);
        // The current position needs nothing; a position between checkpoints goes back to one.
        assert_eq!(seq.restorable(18), 18);
        assert_eq!(seq.restorable(11), 8);
        assert_eq!(seq.truncate(11), 8);
        assert_eq!(seq.tokens(), &tokens[..8]);
        assert_eq!(seq.checkpoint_positions(), [4, 8]);
        assert_consistent(&seq);
        // Continuing on other tokens, then back before every checkpoint: the start.
        feed(&mut seq, &[1, 2, 3, 4, 5]);
        assert_consistent(&seq);
        assert_eq!(seq.checkpoint_positions(), [4, 8, 12]);
        assert_eq!(seq.truncate(3), 0);
        assert_consistent(&seq);
        assert!(seq.checkpoint_positions().is_empty());
    }

    #[test]
    fn attention_only_sequences_cut_back_anywhere_and_keep_no_checkpoints() {
        let c = config(&[LayerKind::Attention; 2], 4);
        let mut seq = sequence(
            &c,
            32,
            CheckpointPolicy {
                interval: 2,
                max: 8,
            },
        );
        feed(&mut seq, &[5, 6, 7, 8, 9]);
        assert!(seq.checkpoint_positions().is_empty());
        assert_eq!(seq.truncate(3), 3);
        assert_eq!(seq.tokens(), &[5, 6, 7]);
        assert_consistent(&seq);
    }

    #[test]
    fn checkpoints_past_the_limit_thin_out_and_the_newest_stays() {
        let c = config(&HYBRID, 4);
        let mut seq = sequence(
            &c,
            256,
            CheckpointPolicy {
                interval: 4,
                max: 4,
            },
        );
        let tokens: Vec<u32> = (0..100).map(|i| i % 97).collect();
        feed(&mut seq, &tokens);
        let kept = seq.checkpoint_positions();
        assert_eq!(kept.len(), 4, "{kept:?}");
        assert_eq!(kept.last(), Some(&100));
        // Spread over the sequence rather than bunched at its end.
        assert!(kept[0] <= 40, "{kept:?}");
        for &p in &kept {
            let mut probe = sequence(&c, 256, seq.policy);
            feed(&mut probe, &tokens[..p]);
            let mut restored = sequence(&c, 256, seq.policy);
            feed(&mut restored, &tokens);
            // Rebuild the same checkpoints, then cut back to p: the state is probe's.
            restored.checkpoints = seq.checkpoints.clone();
            assert_eq!(restored.truncate(p), p);
            assert_consistent(&restored);
        }
        // Checkpoints off: every cut goes to the start.
        let mut off = sequence(
            &c,
            256,
            CheckpointPolicy {
                interval: 4,
                max: 0,
            },
        );
        feed(&mut off, &tokens[..20]);
        assert!(off.checkpoint_positions().is_empty());
        assert_eq!(off.truncate(19), 0);
    }

    #[test]
    fn extend_from_takes_the_latest_saved_state_of_either_sequence() {
        let c = config(&HYBRID, 4);
        let policy = CheckpointPolicy {
            interval: 4,
            max: 8,
        };
        let prefix: Vec<u32> = (10..30).collect();
        let mut donor = sequence(&c, 64, policy);
        feed(&mut donor, &prefix);
        feed(&mut donor, &[90, 91, 92]);

        // The receiver shares 6 tokens; the donor has a checkpoint at 16 within the 18 asked.
        let mut receiver = sequence(&c, 64, policy);
        feed(&mut receiver, &prefix[..6]);
        feed(&mut receiver, &[1, 1, 1, 1, 1, 1]);
        assert_eq!(receiver.extend_from(&donor, 18).unwrap(), 16);
        assert_eq!(receiver.tokens(), &prefix[..16]);
        assert_consistent(&receiver);
        assert_eq!(receiver.checkpoint_positions().last(), Some(&16));

        // The donor's current position is its state itself.
        let mut receiver = sequence(&c, 64, policy);
        assert_eq!(receiver.extend_from(&donor, 23).unwrap(), 23);
        assert_eq!(receiver.tokens(), donor.tokens());
        assert_consistent(&receiver);

        // The receiver's own checkpoint beats an earlier one of the donor's.
        let mut receiver = sequence(&c, 64, policy);
        feed(&mut receiver, &prefix[..9]);
        let mut short = sequence(&c, 64, policy);
        feed(&mut short, &prefix[..7]);
        feed(&mut short, &[5, 5, 5]);
        assert_eq!(receiver.extend_from(&short, 7).unwrap(), 4);
        assert_consistent(&receiver);
    }

    #[test]
    fn kept_hidden_states_follow_copies_cuts_and_loads() {
        let empty: &[f32] = &[];
        for layers in [&HYBRID[..], &[LayerKind::Attention; 2]] {
            let c = config(layers, 4);
            let policy = CheckpointPolicy {
                interval: 4,
                max: 8,
            };
            let prefix: Vec<u32> = (10..30).collect();
            let mut donor = sequence(&c, 64, policy);
            donor.keep_hidden();
            feed(&mut donor, &prefix);

            // Copied positions bring the donor's states; later ones are computed as usual.
            let mut receiver = sequence(&c, 64, policy);
            receiver.keep_hidden();
            feed(&mut receiver, &prefix[..6]);
            feed(&mut receiver, &[1; 6]);
            let reached = receiver.extend_from(&donor, 18).unwrap();
            assert_eq!(receiver.tokens(), &prefix[..reached]);
            let mut want = prefix[..reached].to_vec();
            assert_eq!(
                receiver.hidden(),
                Some((0, &hidden_rows(&want, 0)[..])),
                "{layers:?}"
            );
            feed(&mut receiver, &[7, 8]);
            want.extend([7, 8]);
            assert_eq!(receiver.hidden(), Some((0, &hidden_rows(&want, 0)[..])));
            let back = receiver.truncate(5);
            assert_eq!(
                receiver.hidden(),
                Some((0, &hidden_rows(&want[..back], 0)[..]))
            );

            // A donor that keeps none: kept again from the position reached.
            let mut plain = sequence(&c, 64, policy);
            feed(&mut plain, &prefix);
            let mut receiver = sequence(&c, 64, policy);
            receiver.keep_hidden();
            feed(&mut receiver, &[3, 3]);
            assert_eq!(receiver.extend_from(&plain, 20).unwrap(), 20);
            assert_eq!(receiver.hidden(), Some((20, empty)));
            feed(&mut receiver, &[5]);
            let mut want = prefix.clone();
            want.push(5);
            assert_eq!(receiver.hidden(), Some((20, &hidden_rows(&want, 20)[..])));

            // A state loaded from a file holds none either.
            let mut file = Vec::new();
            donor.save_state(&mut file).unwrap();
            let mut loaded = sequence(&c, 64, policy);
            loaded.keep_hidden();
            feed(&mut loaded, &[4, 4, 4]);
            assert_eq!(loaded.load_state(&mut &file[..]).unwrap().0, 20);
            assert_eq!(loaded.hidden(), Some((20, empty)));
            // A sequence that does not keep them is left so.
            let mut other = sequence(&c, 64, policy);
            other.extend_from(&donor, 20).unwrap();
            assert_eq!(other.hidden(), None);
        }
    }

    #[test]
    fn sequences_of_other_shapes_are_refused_naming_the_layer() {
        let policy = CheckpointPolicy::default();
        let mut donor = sequence(&config(&HYBRID, 4), 32, policy);
        feed(&mut donor, &[1, 2, 3]);
        let mut wider = sequence(&config(&HYBRID, 8), 32, policy);
        let err = wider.extend_from(&donor, 2).unwrap_err().to_string();
        assert!(
            err.contains("layer 1") && err.contains("(1, 4, 4, CacheTypes { k: F16, v: F16 })"),
            "{err}"
        );
        let swapped = [
            LayerKind::Attention,
            LayerKind::GatedDeltaNet,
            LayerKind::GatedDeltaNet,
        ];
        let mut other = sequence(&config(&swapped, 4), 32, policy);
        let err = other.extend_from(&donor, 2).unwrap_err().to_string();
        assert!(
            err.contains("layer 0") && err.contains("recurrent state"),
            "{err}"
        );
        let mut fewer = sequence(&config(&HYBRID[..2], 4), 32, policy);
        let err = fewer.extend_from(&donor, 2).unwrap_err().to_string();
        assert!(err.contains("3 and 2 layers"), "{err}");
        assert_eq!(fewer.n_past(), 0);
    }
}
