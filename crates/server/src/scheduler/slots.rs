//! What the HTTP side may ask of the slots themselves (llama-server's `/slots` routes): their
//! state, and saving a slot's sequence to a file, restoring one into a slot, or emptying it.
//! A command on a busy slot waits until the slot's job ends, as llama-server defers it; the list
//! is answered at once.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::time::Instant;

use tokio::sync::oneshot;

use super::Slot;

pub enum SlotAction {
    List,
    Save(PathBuf),
    Restore(PathBuf),
    Erase,
}

pub struct SlotCommand {
    /// The slot (ignored by `List`).
    pub slot: usize,
    pub action: SlotAction,
    pub reply: oneshot::Sender<Result<SlotAnswer, SlotError>>,
}

#[derive(Debug, Clone)]
pub struct SlotInfo {
    pub id: usize,
    pub n_ctx: usize,
    pub is_processing: bool,
    /// Positions the slot's cache holds.
    pub n_past: usize,
}

#[derive(Debug)]
pub enum SlotAnswer {
    List(Vec<SlotInfo>),
    Saved {
        tokens: usize,
        bytes: usize,
        ms: f64,
    },
    Restored {
        tokens: usize,
        bytes: usize,
        ms: f64,
    },
    Erased {
        tokens: usize,
    },
}

/// Why a command failed: the request's fault (a missing or unfit file) or the server's (a
/// file that could not be written).
#[derive(Debug)]
pub enum SlotError {
    BadRequest(String),
    Server(String),
}

/// Runs `cmd`, or hands it back when its slot is busy.
pub(super) fn handle(slots: &mut [Slot<'_>], cmd: SlotCommand) -> Option<SlotCommand> {
    if let SlotAction::List = cmd.action {
        let list = slots
            .iter()
            .enumerate()
            .map(|(id, s)| SlotInfo {
                id,
                n_ctx: s.seq.n_ctx(),
                is_processing: s.active.is_some(),
                n_past: s.seq.n_past(),
            })
            .collect();
        let _ = cmd.reply.send(Ok(SlotAnswer::List(list)));
        return None;
    }
    let Some(slot) = slots.get_mut(cmd.slot) else {
        let _ = cmd
            .reply
            .send(Err(SlotError::BadRequest("Invalid slot ID".to_owned())));
        return None;
    };
    if slot.active.is_some() {
        return Some(cmd);
    }
    let started = Instant::now();
    let ms = || started.elapsed().as_secs_f64() * 1e3;
    let answer = match &cmd.action {
        SlotAction::List => unreachable!("answered above"),
        SlotAction::Save(path) => File::create(path)
            .map_err(|e| SlotError::Server(format!("Unable to save slot: {e}")))
            .and_then(|f| {
                slot.seq
                    .save_state(&mut BufWriter::new(f))
                    .map_err(|e| SlotError::Server(format!("Unable to save slot: {e}")))
            })
            .map(|bytes| SlotAnswer::Saved {
                tokens: slot.seq.n_past(),
                bytes,
                ms: ms(),
            }),
        SlotAction::Restore(path) => File::open(path)
            .map_err(|e| SlotError::BadRequest(format!("Unable to restore slot: {e}")))
            .and_then(|f| {
                slot.seq
                    .load_state(&mut BufReader::new(f))
                    .map_err(|e| SlotError::BadRequest(format!("Unable to restore slot: {e}")))
            })
            .map(|(tokens, bytes)| SlotAnswer::Restored {
                tokens,
                bytes,
                ms: ms(),
            }),
        SlotAction::Erase => {
            let tokens = slot.seq.n_past();
            slot.seq.clear();
            Ok(SlotAnswer::Erased { tokens })
        }
    };
    let _ = cmd.reply.send(answer);
    None
}
